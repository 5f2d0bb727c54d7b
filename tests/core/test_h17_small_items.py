"""Issue 17's small items: a non-finite top-c threshold is refused (22023) when SET and at
use; numbers are read in Postgres's syntax only (Python's int('41_0') is 410)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from proxy.pipeline.statements import SessionState
from proxy.wire import types as t
from proxy.wire.api import SqlError
from rewriter.errors import Refusal
from rewriter.values import coerce, number


@pytest.mark.parametrize(
    "value", ["'nan'", "'NaN'", "'-inf'", "'inf'", "'Infinity'", "'-Infinity'", "'abc'", "'1e999'"]
)
def test_set_topc_threshold_refuses_non_finite(value):
    s = SessionState("u", "demo", {})
    s.match("SET dpgate.topc_threshold = 20")
    with pytest.raises(Refusal) as e:
        s.match(f"SET dpgate.topc_threshold = {value}")
    assert e.value.sqlstate == "22023" and "dpgate.topc_threshold" in e.value.message
    assert s.settings["dpgate.topc_threshold"] == "20"  # a refused SET changes nothing


def test_set_topc_threshold_accepts_numbers():
    s = SessionState("u", "demo", {})
    for v in ("20", "'2.5'", "-3", "'1e3'"):
        assert s.match(f"SET dpgate.topc_threshold = {v}")[0] == "SET"
    assert s.match("SET dpgate.topc_threshold = DEFAULT")[0] == "SET"  # back to unset


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
