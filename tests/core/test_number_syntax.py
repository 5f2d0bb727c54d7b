"""Numbers are read in Postgres's syntax only: digit separators, non-ASCII digits, hex and
Python's other extensions are 22P02 / a refusal (Python's int('41_0') is 410), and a digit
string too long for its type is out of range (22003), never an internal error."""

from __future__ import annotations

from decimal import Decimal

import pytest

from proxy.wire import types as t
from proxy.wire.api import SqlError
from rewriter.errors import Refusal
from rewriter.values import coerce, number


@pytest.mark.parametrize("text,value", [("41", 41), (" 42\t", 42), ("+7", 7), ("-0", 0), ("\n-12 ", -12)])
def test_int_text_in_postgres_syntax(text, value):
    for oid in (t.INT2, t.INT4, t.INT8):
        assert t.decode(oid, 0, text.encode()) == value


@pytest.mark.parametrize(
    "text", ["41_0", "1_000", "_1", "1_", "٣", "4 2", "", " ", "+", "0x1F", "1e3", "1.0", "\u00a042", "--1"]
)
def test_int_text_outside_postgres_syntax_is_22p02(text):
    with pytest.raises(SqlError) as e:
        t.decode(t.INT8, 0, text.encode())
    assert e.value.sqlstate == "22P02"


@pytest.mark.parametrize(
    "oid,text",
    [
        (t.FLOAT8, "1_0.5"),
        (t.FLOAT8, "٣.5"),
        (t.NUMERIC, "41_0"),
        (t.NUMERIC, "sNaN"),
        (t.NUMERIC, "1_000.5"),
    ],
)
def test_float_and_numeric_text_without_python_extensions(oid, text):
    with pytest.raises(SqlError) as e:
        t.decode(oid, 0, text.encode())
    assert e.value.sqlstate == "22P02"
    assert t.decode(t.NUMERIC, 0, b" 12.50 ") == Decimal("12.50")
    assert t.decode(t.FLOAT8, 0, b"-2.5e3") == -2500.0


def test_untyped_parameter_and_literal_numbers():
    assert number("41") == 41 and number(" -7 ") == -7 and number("2.5e1") == 25.0 and number(".5") == 0.5
    for bad in ("41_0", "٣", "1__0", "0x10", "4 1"):
        with pytest.raises(Refusal):
            number(bad)
        with pytest.raises(Refusal) as e:  # a text parameter bound to an int column
            coerce(bad, "int", "parameter $1")
        assert e.value.sqlstate == "22023"
    assert coerce("410", "int") == 410 and coerce(" 41 ", "int") == 41


def test_very_long_digit_strings_are_out_of_range_not_internal_errors():
    with pytest.raises(SqlError) as e:
        t.decode(t.INT8, 0, b"9" * 5000)
    assert e.value.sqlstate == "22003"
    with pytest.raises(Refusal) as r:
        number("9" * 5000)
    assert r.value.sqlstate == "22003"
