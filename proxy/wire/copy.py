"""A result sent as ``COPY … TO STDOUT``: CopyOutResponse, one CopyData per row, CopyDone.

The three formats are PostgreSQL's (``src/backend/commands/copyto.c``; the protocol's
"COPY Operations" and the COPY command's "File Formats"):

- text: each value in its text output form with backslash escapes (``\\\\``, ``\\n``,
  ``\\r``, ``\\t``, ``\\b``, ``\\f``, ``\\v`` and the delimiter), NULL as ``\\N`` (or the
  NULL option), columns separated by a tab (or DELIMITER), one line per row;
- CSV: a value is quoted when FORCE_QUOTE names its column, or it contains the
  delimiter, the quote character, a CR or LF, or equals the NULL string (so an empty
  string and NULL differ), or is ``\\.`` alone on a line; inside quotes the quote and
  escape characters are escaped by ESCAPE (default: the quote, i.e. doubled);
- binary: the 11-byte signature ``PGCOPY\\n\\377\\r\\n\\0``, flags and header-extension
  length (both 0), then per row the field count (int16) and each field as an int32
  length and the value's binary send form (-1 for NULL), and the trailer int16 -1.
  As PostgreSQL does, the header travels with the first row's CopyData and the trailer
  in its own.

Values are encoded by :mod:`.types` (the same encoders as DataRow). Sans-IO: bytes out.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from .api import Column, CopyFormat
from .messages import frame
from .types import encode, encode_text


class Line(Protocol):
    """One COPY line from its fields (None: NULL); ``header=True`` for the header line."""

    def __call__(self, values: list[str | None], header: bool = False) -> bytes: ...


SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_TEXT_ESCAPES = {"\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def copy_out(cols: list[Column], fmt: CopyFormat, rows: Iterable[Sequence[Any]]) -> tuple[bytes, int]:
    """The framed CopyOutResponse, CopyData and CopyDone messages for ``rows`` of ``cols``
    in ``fmt``, and the number of rows (for the ``COPY n`` tag)."""
    binary = fmt.kind == "binary"
    n = len(cols)
    out = [frame(b"H", struct.pack(f"!bH{n}H", 1 if binary else 0, n, *([1 if binary else 0] * n)))]
    oids = [c.type_oid for c in cols]
    count = 0
    if binary:
        head = SIGNATURE + struct.pack("!ii", 0, 0)
        for row in rows:
            fields = [
                b"\xff\xff\xff\xff" if (b := encode(oid, v, 1)) is None else struct.pack("!i", len(b)) + b
                for oid, v in zip(oids, row)
            ]
            out.append(frame(b"d", head + struct.pack("!h", n) + b"".join(fields)))
            head, count = b"", count + 1
        out.append(frame(b"d", head + struct.pack("!h", -1)))
    else:
        line = _csv_line(fmt, n) if fmt.kind == "csv" else _text_line(fmt)
        if fmt.header:
            out.append(frame(b"d", line([c.name for c in cols], header=True)))
        for row in rows:
            out.append(
                frame(b"d", line([None if v is None else encode_text(oid, v) for oid, v in zip(oids, row)]))
            )
            count += 1
    out.append(frame(b"c"))
    return b"".join(out), count


def _text_line(fmt: CopyFormat) -> Line:
    delim = fmt.delimiter if fmt.delimiter is not None else "\t"
    null = fmt.null if fmt.null is not None else "\\N"
    escapes = {delim: "\\" + delim, **_TEXT_ESCAPES}  # a control character keeps its mnemonic
    table = str.maketrans(escapes)

    def line(values: list[str | None], header: bool = False) -> bytes:
        return (delim.join(null if v is None else v.translate(table) for v in values) + "\n").encode("utf-8")

    return line


def _csv_line(fmt: CopyFormat, n: int) -> Line:
    delim = fmt.delimiter if fmt.delimiter is not None else ","
    null = fmt.null if fmt.null is not None else ""
    quote = fmt.quote if fmt.quote is not None else '"'
    escape = fmt.escape if fmt.escape is not None else quote
    special = {delim, quote, "\n", "\r"}
    table = str.maketrans({quote: escape + quote, escape: escape + escape})

    def field(v: str, force: bool) -> str:
        if force or v == null or (n == 1 and v == "\\.") or any(c in special for c in v):
            return quote + v.translate(table) + quote
        return v

    def line(values: list[str | None], header: bool = False) -> bytes:
        return (
            delim.join(
                null if v is None else field(v, not header and i in fmt.force_quote)
                for i, v in enumerate(values)
            )
            + "\n"
        ).encode("utf-8")

    return line
