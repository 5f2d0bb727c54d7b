"""Type OIDs and text/binary value codecs.

``encode(oid, value, fmt)`` turns a Python value (int, float, Decimal, str, bool,
date, None) into wire bytes; ``decode(oid, fmt, data)`` turns a Bind parameter into
a Python value. Unknown OIDs are handled as text.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import struct
from collections.abc import Sequence
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from . import arrays
from .api import SqlError

BOOL, CHAR, NAME, INT8, INT2, INT4, TEXT, OID = 16, 18, 19, 20, 21, 23, 25, 26
FLOAT4, FLOAT8, UNKNOWN, VARCHAR, DATE, NUMERIC = 700, 701, 705, 1043, 1082, 1700
UNSPECIFIED = 0
TIMESTAMP = 1114
INTERVAL = 1186

TEXT_LIKE = {TEXT, VARCHAR, NAME, CHAR, UNKNOWN, UNSPECIFIED}
# one-dimensional array types -> element type (catalog answers hold lists: current_schemas(), indkey …)
ARRAY_ELEMENTS = {
    1000: BOOL,
    1002: CHAR,
    1003: NAME,
    1005: INT2,
    1007: INT4,
    1009: TEXT,
    1015: VARCHAR,
    1016: INT8,
    1021: FLOAT4,
    1022: FLOAT8,
    1028: OID,
    1182: DATE,
    1231: NUMERIC,
}
TYPE_NAMES = {
    BOOL: "boolean",
    CHAR: '"char"',
    NAME: "name",
    INT8: "bigint",
    INT2: "smallint",
    INT4: "integer",
    TEXT: "text",
    OID: "oid",
    FLOAT4: "real",
    FLOAT8: "double precision",
    UNKNOWN: "unknown",
    VARCHAR: "character varying",
    DATE: "date",
    NUMERIC: "numeric",
    TIMESTAMP: "timestamp without time zone",
}
TYPE_SIZES = {
    BOOL: 1,
    CHAR: 1,
    NAME: 64,
    INT8: 8,
    INT2: 2,
    INT4: 4,
    OID: 4,
    FLOAT4: 4,
    FLOAT8: 8,
    DATE: 4,
    UNKNOWN: -2,
    TIMESTAMP: 8,
}
_INT_STRUCT = {INT2: "!h", INT4: "!i", INT8: "!q", OID: "!I"}
_EPOCH = _dt.date(2000, 1, 1)

NUMERIC_POS, NUMERIC_NEG, NUMERIC_NAN = 0x0000, 0x4000, 0xC000
NUMERIC_PINF, NUMERIC_NINF = 0xD000, 0xF000


def type_size(oid: int) -> int:
    return TYPE_SIZES.get(oid, -1)


# --------------------------------------------------------------------------- encoding


def _float_text(v: float, oid: int) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if oid == FLOAT4:  # shortest representation that round-trips through float32
        f32 = struct.unpack("!f", struct.pack("!f", v))[0]
        for p in range(1, 10):
            s = f"{f32:.{p}g}"
            if struct.unpack("!f", struct.pack("!f", float(s)))[0] == f32:
                break
        v = float(s)
    r = repr(float(v))
    return r[:-2] if r.endswith(".0") else r


def _numeric_text(v: Any) -> str:
    d = _to_decimal(v)
    if d.is_nan():
        return "NaN"
    if d.is_infinite():
        return "Infinity" if d > 0 else "-Infinity"
    return format(d, "f")


def _array_text(elem: int, values: Sequence[Any]) -> str:
    """Postgres array literal: {a,"b c",NULL}."""
    parts = []
    for v in values:
        if v is None:
            parts.append("NULL")
        elif isinstance(v, (list, tuple)):
            parts.append(_array_text(elem, v))
        else:
            t = encode_text(elem, v)
            if t == "" or t.upper() == "NULL" or any(c in '{}",\\' or c.isspace() for c in t):
                t = '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'
            parts.append(t)
    return "{" + ",".join(parts) + "}"


def _array_binary(elem: int, values: Sequence[Any]) -> bytes:
    """One-dimensional array in the binary format: ndim, hasnull, element oid, (length, lower bound), items."""
    if any(isinstance(v, (list, tuple)) for v in values):
        raise SqlError("0A000", "multidimensional arrays are not supported in binary format")
    head = struct.pack("!iiI", 1 if values else 0, int(any(v is None for v in values)), elem)
    if values:
        head += struct.pack("!ii", len(values), 1)
    items = []
    for v in values:
        if v is None:
            items.append(struct.pack("!i", -1))
        else:
            b = encode_binary(elem, v)
            items.append(struct.pack("!i", len(b)) + b)
    return head + b"".join(items)


def encode_text(oid: int, value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return _array_text(ARRAY_ELEMENTS.get(oid, TEXT), value)
    if oid == BOOL:
        return "t" if value else "f"
    if oid in _INT_STRUCT:
        return str(int(value))
    if oid in (FLOAT4, FLOAT8):
        return _float_text(float(value), oid)
    if oid == NUMERIC:
        return _numeric_text(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _float_text(value, FLOAT8)
    if isinstance(value, _dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, _dt.date):
        return value.isoformat()
    return str(value)


def _to_decimal(value: Any) -> Decimal:
    return (
        value if isinstance(value, Decimal) else Decimal(repr(value) if isinstance(value, float) else value)
    )


def encode_numeric_binary(value: Any) -> bytes:
    """Postgres base-10000 numeric: ndigits, weight, sign, dscale, then int16 digits."""
    d = _to_decimal(value)
    if d.is_nan():
        return struct.pack("!hhHh", 0, 0, NUMERIC_NAN, 0)
    if d.is_infinite():
        return struct.pack("!hhHh", 0, 0, NUMERIC_PINF if d > 0 else NUMERIC_NINF, 0)
    sign, digits, exp = d.as_tuple()
    assert isinstance(exp, int)  # a finite Decimal's exponent
    dscale = max(0, -exp)
    low = exp // 4  # weight of the least significant base-10000 group
    mag = int("".join(map(str, digits)) or "0") * 10 ** (exp - 4 * low)
    groups: list[int] = []
    while mag:
        mag, g = divmod(mag, 10000)
        groups.append(g)
    groups.reverse()
    weight = low + len(groups) - 1 if groups else 0
    while groups and groups[-1] == 0:
        groups.pop()
    return struct.pack(
        f"!hhHh{len(groups)}h",
        len(groups),
        weight,
        NUMERIC_NEG if sign and groups else NUMERIC_POS,
        dscale,
        *groups,
    )


def encode_binary(oid: int, value: Any) -> bytes:
    if isinstance(value, (list, tuple)) and oid in ARRAY_ELEMENTS:
        return _array_binary(ARRAY_ELEMENTS[oid], value)
    if oid == BOOL:
        return b"\x01" if value else b"\x00"
    if oid in _INT_STRUCT:
        try:
            return struct.pack(_INT_STRUCT[oid], int(value))
        except struct.error:
            raise SqlError("22003", f"value out of range for type {TYPE_NAMES[oid]}") from None
    if oid == FLOAT4:
        return struct.pack("!f", float(value))
    if oid == FLOAT8:
        return struct.pack("!d", float(value))
    if oid == NUMERIC:
        return encode_numeric_binary(value)
    if oid == DATE:
        return struct.pack("!i", (value - _EPOCH).days)
    if oid == TIMESTAMP and isinstance(value, _dt.datetime):  # µs since 2000-01-01
        d = value - _dt.datetime(2000, 1, 1)
        return struct.pack("!q", (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds)
    return encode_text(oid, value).encode("utf-8")


def encode(oid: int, value: Any, fmt: int = 0) -> bytes | None:
    """Encode one value for a DataRow; None -> SQL NULL."""
    if value is None:
        return None
    if fmt == 1:
        return encode_binary(oid, value)
    return encode_text(oid, value).encode("utf-8")


# --------------------------------------------------------------------------- decoding


def _bad_text(oid: int, s: str) -> SqlError:
    return SqlError("22P02", f'invalid input syntax for type {TYPE_NAMES.get(oid, oid)}: "{s}"')


_PG_SPACE = " \t\n\r\v\f"  # isspace() in Postgres's C locale
_PG_INT = re.compile(r"[+-]?[0-9]+")  # int2/4/8in: sign, ASCII digits (PG <= 15)


def _pg_number_text(s: str) -> str:
    """``s`` without surrounding whitespace, refused (ValueError) where Python's parsers are
    looser than Postgres's: digit separators (``int('41_0') == 410``), non-ASCII digits."""
    t = s.strip(_PG_SPACE)
    if "_" in t or not t.isascii():
        raise ValueError(s)
    return t


def decode_text(oid: int, s: str) -> Any:
    if oid in TEXT_LIKE:
        return s
    try:
        if oid in _INT_STRUCT:
            t = s.strip(_PG_SPACE)
            if not _PG_INT.fullmatch(t):
                raise ValueError(s)
            if len(t) > 40:  # beyond int8 (and int()'s digit limit)
                raise struct.error
            v = int(t)
            fmt = _INT_STRUCT[oid]
            struct.pack(fmt, v)  # range check
            return v
        if oid in (FLOAT4, FLOAT8):
            t = _pg_number_text(s).lower()
            specials = {
                "nan": math.nan,
                "infinity": math.inf,
                "+infinity": math.inf,
                "-infinity": -math.inf,
                "inf": math.inf,
                "-inf": -math.inf,
            }
            return specials[t] if t in specials else float(t)
        if oid == NUMERIC:
            t = _pg_number_text(s)
            if t.lower().lstrip("+-").startswith("snan"):  # Python-only signalling NaN
                raise ValueError(s)
            d = Decimal(t)
            return d
        if oid == BOOL:
            t = s.strip().lower()
            if t in ("t", "true", "y", "yes", "on", "1"):
                return True
            if t in ("f", "false", "n", "no", "off", "0"):
                return False
            raise ValueError
        if oid == DATE:
            return _dt.date.fromisoformat(s.strip())
        if oid == TIMESTAMP:
            return _dt.datetime.fromisoformat(s.strip())
    except struct.error:
        raise SqlError("22003", f'value "{s}" is out of range for type {TYPE_NAMES[oid]}') from None
    except (ValueError, InvalidOperation):
        raise _bad_text(oid, s) from None
    return s


def decode_numeric_binary(data: bytes) -> Decimal:
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHh", data)
    if len(data) != 8 + 2 * ndigits or ndigits < 0:
        raise ValueError("bad numeric")
    if sign == NUMERIC_NAN:
        return Decimal("NaN")
    if sign in (NUMERIC_PINF, NUMERIC_NINF):
        return Decimal("Infinity" if sign == NUMERIC_PINF else "-Infinity")
    if sign not in (NUMERIC_POS, NUMERIC_NEG):
        raise ValueError("bad numeric sign")
    groups = struct.unpack_from(f"!{ndigits}h", data, 8)
    if any(g < 0 or g > 9999 for g in groups):
        raise ValueError("bad numeric digit")
    value = 0
    for g in groups:
        value = value * 10000 + g
    exp = 4 * (weight - ndigits + 1)
    d = Decimal((1 if sign == NUMERIC_NEG else 0, tuple(int(c) for c in str(value)), exp))
    if dscale < 0:
        raise ValueError("bad numeric scale")
    return d.quantize(Decimal(1).scaleb(-dscale), context=Context(prec=max(28, ndigits * 4 + dscale + 8)))


def interval_text(micros: int, days: int, months: int) -> str:
    """A binary interval (µs, days, months) as Postgres prints it (``1 year 2 mons 3 days
    04:05:06``): a bound interval reaches the planner as the text a client could have sent."""
    parts = []
    years, mons = divmod(abs(months), 12)
    sign = "-" if months < 0 else ""
    if years:
        parts.append(f"{sign}{years} year{'s' if years != 1 else ''}")
    if mons:
        parts.append(f"{sign}{mons} mon{'s' if mons != 1 else ''}")
    if days:
        parts.append(f"{days} day{'s' if abs(days) != 1 else ''}")
    if micros or not parts:
        secs, us = divmod(abs(micros), 1_000_000)
        h, rest = divmod(secs, 3600)
        t = f"{'-' if micros < 0 else ''}{h:02d}:{rest // 60:02d}:{rest % 60:02d}"
        parts.append(t + (f".{us:06d}" if us else ""))
    return " ".join(parts)


def decode_binary(oid: int, data: bytes) -> Any:
    try:
        if oid in _INT_STRUCT:
            fmt = _INT_STRUCT[oid]
            if len(data) != struct.calcsize(fmt):
                raise ValueError
            return struct.unpack(fmt, data)[0]
        if oid == FLOAT4:
            return struct.unpack("!f", data)[0]
        if oid == FLOAT8:
            return struct.unpack("!d", data)[0]
        if oid == BOOL:
            if len(data) != 1:
                raise ValueError
            return data != b"\x00"
        if oid == NUMERIC:
            return decode_numeric_binary(data)
        if oid == DATE:
            return _EPOCH + _dt.timedelta(days=struct.unpack("!i", data)[0])
        if oid == TIMESTAMP:  # µs since 2000-01-01
            return _dt.datetime(2000, 1, 1) + _dt.timedelta(microseconds=struct.unpack("!q", data)[0])
        if oid == INTERVAL:
            return interval_text(*struct.unpack("!qii", data))
        return data.decode("utf-8")
    except (ValueError, struct.error, OverflowError, UnicodeDecodeError, InvalidOperation):
        raise SqlError("22P03", "incorrect binary data format in bind parameter") from None


def decode(oid: int, fmt: int, data: bytes | None) -> Any:
    """Decode one Bind parameter; None (NULL) stays None."""
    if data is None:
        return None
    if oid in ARRAY_ELEMENTS:  # a list parameter (``= ANY($1)``)
        if fmt == 1:
            return arrays.decode_binary(oid, ARRAY_ELEMENTS[oid], data, decode_binary)
        try:
            s = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SqlError("22021", 'invalid byte sequence for encoding "UTF8"') from None
        return arrays.decode_text(oid, ARRAY_ELEMENTS[oid], s, decode_text)
    if fmt == 1:
        return decode_binary(oid, data)
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SqlError("22021", 'invalid byte sequence for encoding "UTF8"') from None
    return decode_text(oid, s)
