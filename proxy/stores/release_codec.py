"""Compact storage of released answers (the ledger's write ordering is
:mod:`proxy.stores.ledger`'s).

A released answer (``proxy.pipeline.release``: ``keys`` and ``values``, one list per cell,
beside small metadata: half-widths, mechanisms, ε shares, labels, ``svt``, ``ladder``,
``per_record``) as plain JSON text costs tens of bytes per cell and value, in the ledger's
pages and WAL, and is decoded with one ``json.loads`` that holds the GIL for the whole
document.

Format 2 (written for answers of :data:`PACK_MIN_CELLS` cells or more) keeps the column
``releases.answer`` a JSON text, so the ledger's own JSON reads keep working on SQLite and
Postgres alike (``ladder_store.ladder_summaries``: ``json_extract(answer, '$.ladder.id')``)
and no schema changes: the metadata stays plain JSON and the cells move, column by column,
into one binary member, :data:`PACKED`::

    {"half_width": [...], "mechanism": [...], ..., "~packed": "2:<base64 of u32 len(z), z, raw>"}

    z = zlib(payload), raw = the byte planes stored as they are (below), one after another
    payload = u32 header length, header JSON {"n": cells, "widths": [k, m], "types": [...],
              "raw": [mask per column]} (no "raw": none),
              then per column (keys' k columns, then values' m columns) u32 length + bytes:
      "iW" every value a Python int: the values as W-byte signed little-endian integers
           (W = 1, 2, 4 or 8: the narrowest that holds them), byte planes transposed (all
           byte 0s, then all byte 1s, …)
      "DW" the same over first differences (the first against 0), chosen when they are
           smaller than the values (sorted keys: 1, 2, 3, … is stored as 1, 1, 1, …)
      "d"  every value a Python float: IEEE-754 binary64 bits, byte planes transposed
      "j"  anything else (text, bool, None, big ints, mixed): the column's JSON list

Integers and floats come back exactly (bit for bit, NaN and -0.0 included) and with their
Python type, so a decoded answer equals ``json.loads(json.dumps(answer))``. Transposed
byte planes put the constant high bytes of counts, sorted keys and similar floats next to
each other, where zlib removes them. A payload of packed numbers only is compressed with
zlib's run-length strategy (``Z_RLE``: for such planes as small as the default's matching
and faster), one with a JSON column with the
default strategy; either is the same zlib format to the reader. A byte plane that looks
uniformly random (:func:`_raw_planes`: low mantissa bytes of a noisy AVG's floats) is not
compressed at all: bit ``i`` of its column's ``raw`` mask is set, the plane is left out of
the column's bytes in ``payload`` and appended, in column and plane order, to ``raw``.
zlib would spend much of the encoding time on those planes and gain nothing (``bench.cells``
measures the encoding).

Older formats are still read: format 1 (``"1:<base64 of zlib(payload)>"``, nothing raw)
and plain JSON with no :data:`PACKED` member (written before format 1), so an old
release is still served as a repeat.
"""

from __future__ import annotations

import base64
import itertools
import json
import struct
import sys
import zlib
from array import array
from typing import Any

import numpy as np

from . import json_pieces
from .answer import ColumnarAnswer

PACKED = "~packed"  # the member holding the packed cells (never an answer's own key)
VERSION = 2  # written; format 1 (everything compressed) is still read
PACK_MIN_CELLS = 64  # smaller answers stay plain JSON (a few hundred bytes: nothing to gain)
RAW_BITS = 7.9  # a byte plane this random (bits per byte) is stored, not compressed
RAW_MIN_CELLS = 1024  # below this many cells every plane is compressed (a sample too small to tell)
_U32 = struct.Struct("<I")
_LITTLE = sys.byteorder == "little"


def encode_answer(answer: dict) -> str:
    """The text stored in ``releases.answer`` for ``answer`` (format 1 when it is large)."""
    if (
        isinstance(answer, ColumnarAnswer)
        and answer.columns is not None
        and answer.n >= PACK_MIN_CELLS
        and not dict.__contains__(answer, PACKED)
    ):  # its columns as they are (the same bytes)
        n, (kcols, vcols) = answer.n, answer.columns
        widths, columns = (len(kcols), len(vcols)), [*kcols, *vcols]
    else:
        keys, values = answer.get("keys"), answer.get("values")
        regular = _widths(keys, values)
        if regular is None or keys is None or values is None or PACKED in answer:
            return json.dumps(answer)
        widths = regular
        n = len(keys)
        columns = [[row[i] for row in keys] for i in range(widths[0])] + [
            [row[i] for row in values] for i in range(widths[1])
        ]
    types, blobs = [], []
    for col in columns:
        t, blob = _pack_column(col)
        types.append(t)
        blobs.append(blob)
    raw = [_raw_planes(t, blob, n) for t, blob in zip(types, blobs)]
    kept: list[bytes] = []
    tail: list[bytes] = []
    for t, blob, mask in zip(types, blobs, raw):
        w = _plane_width(t)
        kept.append(
            b"".join(blob[i * n : (i + 1) * n] for i in range(w) if not mask >> i & 1) if mask else blob
        )
        tail.extend(blob[i * n : (i + 1) * n] for i in range(w) if mask >> i & 1)
    head = {"n": n, "widths": list(widths), "types": types}
    if any(raw):
        head["raw"] = raw
    header = json.dumps(head).encode()
    payload = b"".join([_U32.pack(len(header)), header, *(_U32.pack(len(b)) + b for b in kept)])
    z = _compress(payload, "j" not in types)
    meta = json.dumps({k: v for k, v in dict.items(answer) if k not in ("keys", "values")})
    packed = base64.b64encode(b"".join([_U32.pack(len(z)), z, *tail])).decode("ascii")
    # the member spliced in as json.dumps writes it (base64 needs no escaping): dumping the
    # long string would only copy it
    return f'{meta[:-1]}{", " if len(meta) > 2 else ""}"{PACKED}": "{VERSION}:{packed}"}}'


def _compress(payload: bytes, numbers_only: bool) -> bytes:
    """zlib at level 1; run-length matching only for a payload of packed numbers (module doc)."""
    z = zlib.compressobj(1, zlib.DEFLATED, 15, 8, zlib.Z_RLE if numbers_only else zlib.Z_DEFAULT_STRATEGY)
    return z.compress(payload) + z.flush()


def _plane_width(t: str) -> int:
    """Byte planes of a packed column of type ``t`` (0: not in planes, ``j``)."""
    return 8 if t == "d" else int(t[1:]) if t[:1] in ("i", "D") else 0


def _raw_planes(t: str, blob: bytes, n: int) -> int:
    """Bit ``i`` set: byte plane ``i`` of the column is stored as it is, not compressed (its
    bytes look uniformly random: ≥ :data:`RAW_BITS` bits per byte of order-0 entropy on a
    sample of up to 4,096 of them — the low mantissa bytes of noisy floats, where zlib spends
    time to gain nothing)."""
    w = _plane_width(t)
    if w == 0 or n < RAW_MIN_CELLS:
        return 0
    planes = np.frombuffer(blob, dtype=np.uint8).reshape(w, n)[:, :: max(1, n // 4096)]
    mask = 0
    for i, plane in enumerate(planes):
        counts = np.bincount(plane, minlength=256)
        p = counts[counts > 0] / len(plane)
        if -float(np.dot(p, np.log2(p))) >= RAW_BITS:
            mask |= 1 << i
    return mask


def decode_answer(text: str | bytes) -> dict:
    """The answer stored as ``text`` (format 2 or 1, or the plain JSON written before them);
    ValueError for a format it does not know or a packed member that does not add up."""
    if isinstance(text, bytes):  # the stored text as UTF-8
        text = text.decode()
    doc = json_pieces.loads(text)  # (an old plain answer: in pieces, see json_pieces)
    packed = doc.pop(PACKED, None) if isinstance(doc, dict) else None
    if packed is None:
        return doc
    version, _, body = packed.partition(":")
    if version not in ("1", "2"):
        raise ValueError(f"stored answer in unknown format {version!r}")
    data = base64.b64decode(body)
    tail: bytes | memoryview
    if version == "1":
        payload, tail = zlib.decompress(data), b""
    else:
        (zlen,) = _U32.unpack_from(data, 0)
        payload, tail = zlib.decompress(data[4 : 4 + zlen]), memoryview(data)[4 + zlen :]
    (hlen,) = _U32.unpack_from(payload, 0)
    header = json.loads(payload[4 : 4 + hlen])
    n, (k, m), types = header["n"], header["widths"], header["types"]
    if k + m != len(types):
        raise ValueError("stored answer: its key and value widths do not match its columns")
    raw = header.get("raw") or [0] * len(types)
    if len(raw) != len(types):
        raise ValueError("stored answer: its raw-plane masks do not match its columns")
    pos, at, columns = 4 + hlen, 0, []
    for t, mask in zip(types, raw):
        (size,) = _U32.unpack_from(payload, pos)
        data = payload[pos + 4 : pos + 4 + size]
        pos += 4 + size
        if mask:  # format 2: some planes stored after the compressed part
            planes, kept = [], 0
            for i in range(_plane_width(t)):
                if mask >> i & 1:
                    planes.append(bytes(tail[at : at + n]))
                    at += n
                else:
                    planes.append(data[kept : kept + n])
                    kept += n
            if any(len(p) != n for p in planes):
                raise ValueError("stored answer: a byte plane is cut short")
            data = b"".join(planes)
        columns.append(_unpack_column(t, data, n))
    if at != len(tail):
        raise ValueError("stored answer: bytes left over after its raw planes")
    return ColumnarAnswer(columns[:k], columns[k:], n, **doc)  # rows made only if something reads them


def _widths(keys, values) -> tuple[int, int] | None:
    """(k, m) when ``keys`` and ``values`` are equally long lists of lists of one width each
    and long enough to pack; else None (stored as plain JSON)."""
    if not isinstance(keys, list) or not isinstance(values, list) or len(keys) != len(values):
        return None
    if len(keys) < PACK_MIN_CELLS:
        return None
    out = []
    for rows in (keys, values):
        if set(map(type, rows)) != {list}:
            return None
        w = set(map(len, rows))
        if len(w) != 1:
            return None
        out.append(w.pop())
    return out[0], out[1]


def _unplanes(data: bytes, width: int) -> bytes:
    n = len(data) // width
    out = bytearray(len(data))
    for i in range(width):
        out[i::width] = data[i * n : (i + 1) * n]
    return bytes(out)


_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}  # signed array typecodes by width in bytes
for _w, _c in _CODES.items():
    assert array(_c).itemsize == _w


def _width(lo: int, hi: int) -> int | None:
    """The narrowest signed width (bytes) holding ``lo`` … ``hi``; None beyond int64."""
    for w in (1, 2, 4, 8):
        if -(1 << (8 * w - 1)) <= lo and hi < (1 << (8 * w - 1)):
            return w
    return None


def _pack_column(col) -> tuple[str, bytes]:
    """One column's type tag and bytes (module docstring). Integer columns are packed with
    numpy where the first differences cannot overflow int64 (every value within int32);
    else in Python ints, as exactly. A numpy column (a :class:`~.answer.ColumnarAnswer`'s)
    is packed as its ``tolist()`` would be: int64 as Python ints, float64 as floats."""
    if isinstance(col, np.ndarray) and not (
        col.ndim == 1 and len(col) and col.dtype in (np.int64, np.float64)
    ):
        col = col.tolist()
    kinds = (
        ({int} if col.dtype == np.int64 else {float}) if isinstance(col, np.ndarray) else set(map(type, col))
    )
    if kinds == {int}:
        try:
            v = np.array(col, dtype=np.int64)
        except OverflowError:  # beyond int64: no width holds it
            return "j", json.dumps(list(col)).encode()
        lo, hi = int(v.min()), int(v.max())
        fits: list[tuple[int, int, str, Any]]  # (width, rank, tag, values)
        if -(1 << 31) <= lo and hi < (1 << 31):
            d = np.empty_like(v)
            d[0] = v[0]
            np.subtract(v[1:], v[:-1], out=d[1:])
            fits = [
                (w, rank, tag, x)
                for rank, (tag, x, a, b) in enumerate(
                    (("i", v, lo, hi), ("D", d, int(d.min()), int(d.max())))
                )
                if (w := _width(a, b)) is not None
            ]
        else:
            col = col.tolist() if isinstance(col, np.ndarray) else col
            deltas = [col[0], *map(int.__sub__, col[1:], col[:-1])]
            forms: tuple[tuple[str, Any], ...] = (("i", v), ("D", deltas))
            fits = [
                (w, rank, tag, x)
                for rank, (tag, x) in enumerate(forms)
                if (w := _width(min(x), max(x))) is not None
            ]
        w, _, tag, x = min(fits, key=lambda f: f[:2])  # the narrower; the values themselves on a tie
        return f"{tag}{w}", _np_planes(np.asarray(x, dtype=f"<i{w}"), w)
    if kinds == {float}:
        return "d", _np_planes(np.array(col, dtype="<f8"), 8)
    return "j", json.dumps(list(col)).encode()


def _np_planes(a: np.ndarray, width: int) -> bytes:
    """Byte planes of a little-endian array's ``width``-byte items: every item's byte 0,
    then every byte 1, … (:func:`_unplanes` reverses it)."""
    return a.view(np.uint8).reshape(len(a), width).T.tobytes()


def _unpack_column(t: str, data: bytes, n: int) -> list:
    if t == "d":
        return _native(array("d", _unplanes(data, 8))).tolist()
    if t == "j":
        return json.loads(data)
    if t[:1] in ("i", "D") and t[1:] in ("1", "2", "4", "8"):
        w = int(t[1:])
        v = _native(array(_CODES[w], _unplanes(data, w))).tolist()
        return v if t[0] == "i" else list(itertools.accumulate(v))
    raise ValueError(f"stored answer column of unknown type {t!r}")


def _native(a: array) -> array:
    if not _LITTLE:
        a.byteswap()
    return a
