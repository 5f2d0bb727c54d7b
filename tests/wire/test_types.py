import datetime as dt
import math
import struct
from decimal import Decimal

import pytest

from proxy.wire import types as t
from proxy.wire.api import SqlError


@pytest.mark.parametrize(
    "oid,value,text",
    [
        (t.INT2, 7, "7"),
        (t.INT4, -5, "-5"),
        (t.INT8, 10**15, "1000000000000000"),
        (t.FLOAT8, 0.1, "0.1"),
        (t.FLOAT8, 3.0, "3"),
        (t.FLOAT8, math.inf, "Infinity"),
        (t.FLOAT8, math.nan, "NaN"),
        (t.FLOAT4, 0.1, "0.1"),
        (t.NUMERIC, Decimal("1.50"), "1.50"),
        (t.NUMERIC, 2, "2"),
        (t.BOOL, True, "t"),
        (t.BOOL, False, "f"),
        (t.TEXT, "héllo", "héllo"),
        (t.VARCHAR, "v", "v"),
        (t.NAME, "n", "n"),
        (t.OID, 26, "26"),
        (t.DATE, dt.date(2024, 2, 29), "2024-02-29"),
    ],
)
def test_text_roundtrip(oid, value, text):
    assert t.encode(oid, value, 0) == text.encode()
    back = t.decode(oid, 0, text.encode())
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(back)
    elif oid == t.FLOAT4:
        assert back == pytest.approx(value)
    else:
        assert back == value


@pytest.mark.parametrize(
    "oid,value",
    [
        (t.INT2, -32768),
        (t.INT4, 2**31 - 1),
        (t.INT8, -(2**63)),
        (t.FLOAT8, 1.25),
        (t.FLOAT4, 1.5),
        (t.BOOL, True),
        (t.TEXT, "ü"),
        (t.VARCHAR, ""),
        (t.DATE, dt.date(1999, 12, 31)),
        (t.OID, 4000000000),
    ],
)
def test_binary_roundtrip(oid, value):
    assert t.decode(oid, 1, t.encode(oid, value, 1)) == value


@pytest.mark.parametrize(
    "v",
    [
        "0",
        "1",
        "-1",
        "12345.678",
        "0.0001",
        "0.00001",
        "10000",
        "1E+10",
        "123456789012345678901234567890.123456789",
        "-0.5",
        "1.10",
        "0.000",
        "NaN",
        "Infinity",
        "-Infinity",
    ],
)
def test_numeric_binary(v):
    d = Decimal(v)
    back = t.decode(t.NUMERIC, 1, t.encode(t.NUMERIC, d, 1))
    assert (back.is_nan() and d.is_nan()) or (
        back == d and str(back) == str(d) if "E" not in v else back == d
    )


def test_numeric_binary_known_layout():
    # 12345.678 -> digits [1, 2345, 6780], weight 1, dscale 3 (as PostgreSQL sends it)
    assert t.encode(t.NUMERIC, Decimal("12345.678"), 1) == struct.pack("!hhHh3h", 3, 1, 0, 3, 1, 2345, 6780)
    assert t.encode(t.NUMERIC, Decimal("-0.5"), 1) == struct.pack("!hhHhh", 1, -1, 0x4000, 1, 5000)
    assert t.encode(t.NUMERIC, 0.5, 1) == t.encode(t.NUMERIC, Decimal("0.5"), 1)


def test_null_and_unknown():
    assert t.encode(t.INT4, None) is None
    assert t.decode(t.INT4, 0, None) is None
    assert t.decode(0, 0, b"abc") == "abc"
    assert t.decode(t.UNKNOWN, 0, b"abc") == "abc"
    assert t.decode(t.BOOL, 0, b"true") is True


@pytest.mark.parametrize(
    "oid,fmt,data,code",
    [
        (t.INT4, 0, b"x", "22P02"),
        (t.INT2, 0, b"99999", "22003"),
        (t.INT4, 1, b"\0\0", "22P03"),
        (t.BOOL, 0, b"maybe", "22P02"),
        (t.NUMERIC, 1, b"\0\x05", "22P03"),
        (t.TEXT, 0, b"\xff", "22021"),
        (t.FLOAT8, 0, b"abc", "22P02"),
    ],
)
def test_decode_errors(oid, fmt, data, code):
    with pytest.raises(SqlError) as ei:
        t.decode(oid, fmt, data)
    assert ei.value.sqlstate == code
