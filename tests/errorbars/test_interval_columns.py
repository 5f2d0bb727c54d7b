"""``SET dpgate.intervals``: which items get ``<name>_low`` / ``<name>_high`` (from the parse), the
setting's values, and a statement given its columns once (the heavy lane answers the text it
is sent with the session's settings: no second pair)."""

from __future__ import annotations

import pytest

from rewriter.errorbars import interval_level, with_interval_columns
from rewriter.parsing import parse


def _names(sql: str, level: float = 0.95) -> list[str] | None:
    out = with_interval_columns(parse(sql), level)
    return None if out is None else [e.alias or "·" for e in out.expressions]  # ·: an item as written


@pytest.mark.parametrize(
    ("sql", "names"),
    [
        ("SELECT COUNT(*) FROM t", ["·", "count_low", "count_high"]),
        ("SELECT g, AVG(x) AS m FROM t GROUP BY g", ["·", "m", "m_low", "m_high"]),
        ("SELECT ROUND(AVG(x), 2) FROM t", ["·", "round_low", "round_high"]),
        (
            "SELECT STDDEV(x), VAR_POP(x) FROM t",
            ["·", "stddev_low", "stddev_high", "·", "var_pop_low", "var_pop_high"],
        ),
        ("SELECT SUM(x) FILTER (WHERE y > 1) FROM t", ["·", "sum_low", "sum_high"]),
        ("SELECT COUNT(*), MAX(x) FROM t", ["·", "count_low", "count_high", "·"]),
        ("SELECT SUM(x) / COUNT(*) AS r FROM t", None),  # an expression: no interval of its own
        ("SELECT SUM(CASE WHEN y > 1 THEN 5 ELSE 0 END) FROM t", None),  # 5 × a count
        ("SELECT COUNT(*) FROM (SELECT g, COUNT(*) AS c FROM t GROUP BY g) s", None),
        ("WITH s AS (SELECT * FROM t) SELECT COUNT(*) FROM s", None),
        ("SELECT COUNT(*), dp_interval_low(COUNT(*)) FROM t", None),
    ],
)
def test_which_items_get_columns(sql, names):
    assert _names(sql) == names


def test_given_once_and_the_level_is_written():
    once = with_interval_columns(parse("SELECT COUNT(*) FROM t"), 0.8)
    assert once is not None and "0.8" in once.sql("postgres")
    assert with_interval_columns(parse(once.sql("postgres")), 0.8) is None


@pytest.mark.parametrize(
    ("value", "level"),
    [("on", 0.95), ("ON", 0.95), ("true", 0.95), ("off", None), ("", None), ("0.9", 0.9), ("1", 0.95)],
)
def test_setting_values(value, level):
    assert interval_level(value) == level


@pytest.mark.parametrize("value", ["1.5", "-0.2", "maybe"])
def test_bad_setting_values(value):
    with pytest.raises(ValueError):
        interval_level(value)
