"""DataRow messages for a whole result at once, encoded column by column.

A column whose non-NULL values are all of the type it usually holds (``int`` in an integer
column, ``float`` in a float8 one, ``str`` in a text one) is encoded by a short path over
the whole column that gives exactly the bytes :func:`~.types.encode` gives value by value;
any other column goes through :func:`~.types.encode` itself. The messages are framed
straight into one ``bytes``: no message object per row. The cost is per column, not per
value, because a large answer's encoding holds the GIL that every session's loop needs
(``bench.cells`` measures it).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any, cast

from .api import ColumnRows, EncodedRows, SqlError
from .types import FLOAT8, INT2, INT4, INT8, OID, TEXT, VARCHAR, encode

_NULL = b"\xff\xff\xff\xff"
_RANGES = {INT2: (-(2**15), 2**15), INT4: (-(2**31), 2**31), INT8: (-(2**63), 2**63), OID: (0, 2**32)}
_PACKERS = {
    INT2: struct.Struct("!h").pack,
    INT4: struct.Struct("!i").pack,
    INT8: struct.Struct("!q").pack,
    OID: struct.Struct("!I").pack,
}
_pack_d = struct.Struct("!d").pack


def _encoded(oid: int, fmt: int, values: list[Any]) -> list[bytes]:
    """The wire bytes of ``values`` (none of them None) in column type ``oid``, format ``fmt``."""
    kinds = set(map(type, values))
    if fmt == 0:
        if kinds == {int} and oid in _RANGES:
            return list(map(str.encode, map(str, values)))
        if kinds == {str} and oid in (TEXT, VARCHAR):
            return list(map(str.encode, values))
        if kinds == {float} and oid == FLOAT8 and all(map(math.isfinite, values)):
            return [r[:-2].encode() if r.endswith(".0") else r.encode() for r in map(repr, values)]
    elif fmt == 1:
        if (
            kinds == {int}
            and oid in _RANGES
            and _RANGES[oid][0] <= min(values)
            and max(values) < _RANGES[oid][1]
        ):
            return list(map(_PACKERS[oid], values))
        if kinds == {float} and oid == FLOAT8:
            return list(map(_pack_d, values))
    return cast("list[bytes]", [encode(oid, v, fmt) for v in values])  # no value is None


def _fields(oid: int, fmt: int, col: Sequence[Any]) -> list[bytes]:
    """One column's fields: each value's length word and bytes, or the NULL word."""
    if None not in col:
        return [len(b).to_bytes(4, "big") + b for b in _encoded(oid, fmt, list(col))]
    values = iter(_encoded(oid, fmt, [v for v in col if v is not None]))
    return [_NULL if v is None else (len(b := next(values)).to_bytes(4, "big") + b) for v in col]


def data_rows(type_oids: list[int], formats: list[int], rows: Sequence[Sequence[Any]]) -> bytes:
    """The DataRow messages of ``rows`` (tuples of values, None for NULL; or
    :class:`~.api.ColumnRows`, read column by column; or :class:`~.api.EncodedRows`, their
    bytes when encoded for ``formats``), framed."""
    n = len(type_oids)
    if not rows:
        return b""
    if isinstance(rows, EncodedRows):  # encoded where they were released
        done = rows.encoded_for(formats)
        if done is not None:
            return done
        rows = rows.rows()
    given = rows.columns if isinstance(rows, ColumnRows) else None  # no row tuples to make
    if given is not None and len(given) != n or given is None and any(len(r) != n for r in rows):
        raise SqlError("XX000", "internal error", detail="row width does not match columns")
    head = n.to_bytes(2, "big")
    columns = given if given is not None else zip(*rows)
    cols = [_fields(oid, f, col) for oid, f, col in zip(type_oids, formats, columns)] if n else []
    payloads = [head + b"".join(fields) for fields in zip(*cols)] if n else [head] * len(rows)
    return b"".join([b"D" + (len(p) + 4).to_bytes(4, "big") + p for p in payloads])
