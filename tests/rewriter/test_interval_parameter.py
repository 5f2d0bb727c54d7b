"""``$1::interval`` and ``'…'::interval`` where an interval literal is allowed (rewriter.dates):
the bound text is read in Postgres's interval form before the plan decides anything, so the
plan is the literal's; Describe types the parameter ``interval``."""

from __future__ import annotations

import pytest

from config import parse_config
from rewriter import build_plan, param_types, to_sql
from rewriter.dates import interval_steps
from rewriter.errors import Refusal
from rewriter.parsing import parse
from support.service import make_config

CONFIG = parse_config(make_config())
SQL = "SELECT COUNT(*) FROM purchases WHERE ts >= TIMESTAMP '2025-12-31' - {}"


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        ("3 months", [(3, "month")]),
        ("1 year 2 mons", [(1, "year"), (2, "month")]),
        ("90 days 0:00:00", [(90, "day")]),  # what psycopg sends for timedelta(days=90)
        ("2 days 03:00:00", [(2, "day"), (3, "hour")]),
        ("-05:00:00", [(-5, "hour")]),
        ("4 hours 1 week", [(1, "week"), (4, "hour")]),  # Postgres's order: months, days, time
    ],
)
def test_interval_text(text, steps):
    assert interval_steps(text, "interval") == steps


@pytest.mark.parametrize("text", ["5 minutes", "00:05:00", "soon", "3", "1 fortnight", ""])
def test_interval_text_it_cannot_read_is_refused(text):
    with pytest.raises(Refusal) as e:
        interval_steps(text, "interval")
    assert e.value.sqlstate == "0A000"


@pytest.mark.parametrize(
    ("spelling", "params"),
    [("'3 months'::interval", None), ("$1::interval", ["3 months"]), ("CAST($1 AS INTERVAL)", ["3 mons"])],
)
def test_interval_parameter_plans_as_the_literal(spelling, params):
    want = to_sql(build_plan(parse(SQL.format("INTERVAL '3 months'")), CONFIG), "duckdb")
    assert to_sql(build_plan(parse(SQL.format(spelling)), CONFIG, params), "duckdb") == want


def test_interval_parameter_is_described_as_interval():
    sql = "SELECT COUNT(*) FROM purchases WHERE ts >= $1::timestamp - $2::interval"
    assert param_types(parse(sql), CONFIG) == ["timestamp", "interval"]
    with pytest.raises(Refusal):  # an interval is text in Postgres's form, not a number
        build_plan(parse(SQL.format("$1::interval")), CONFIG, [90])
