"""Which planner plans a central statement is read from its parse (rewriter.planner): the
SELECT whose aggregates are released asks for MAX, MIN, median or a percentile — not a MAX
over released rows, in a window, a FILTER or a nested query."""

from __future__ import annotations

import tomllib

import pytest

import rewriter
import rewriter.errors
from config import parse_config
from proxy.demo import demo_config_path
from rewriter.planner import planner_of

EXTREME = [
    "SELECT MAX(age) FROM pums",
    "SELECT sex, MIN(income) FROM pums GROUP BY sex",
    "SELECT ROUND(MAX(income), 1) FROM pums",
    "SELECT median(income) FROM pums",
    "SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY age) FROM pums",
    "SELECT sex, COUNT(*) FROM pums GROUP BY sex HAVING MAX(age) > 50",
    "SELECT sex, COUNT(*) FROM pums GROUP BY sex ORDER BY MIN(age)",
    "SELECT MAX(age) FROM (SELECT * FROM pums WHERE sex = 1) AS s",  # a filter table: inlined
    "WITH w AS (SELECT age FROM pums WHERE income > 0) SELECT MAX(age) FROM w",
]
CELLS = [
    "SELECT sex, COUNT(*) FROM pums GROUP BY sex",
    "SELECT MAX(n) FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) AS s",  # over released rows
    "SELECT MAX(age) FILTER (WHERE sex = 1) FROM pums",  # refused by the cells' FILTER rule
    "SELECT MAX(age) OVER () FROM pums",  # a window: refused as a window
    "SELECT COUNT(*) FROM pums WHERE age = (SELECT MAX(age) FROM pums)",  # a nested query
]


@pytest.mark.parametrize("sql", EXTREME)
def test_extreme_statements(sql):
    assert planner_of(rewriter.parse(sql)) == "extreme"


@pytest.mark.parametrize("sql", CELLS)
def test_cells_statements(sql):
    tree = rewriter.parse(sql)
    before = tree.sql()
    assert planner_of(tree) == "central"
    assert tree.sql() == before  # the parse is the planner's next: left as it was


@pytest.fixture(scope="module")
def demo():
    raw = tomllib.loads(demo_config_path().read_text())
    raw["server"] = {"auth": "trust"}
    for r in raw["roles"].values():
        r.pop("scram", None)
    return parse_config(raw)


@pytest.mark.parametrize("sql", EXTREME + CELLS)
def test_the_parse_agrees_with_the_cells_rules(demo, sql):
    """The cells' rules meet a MAX/MIN/percentile of their own exactly where the parse names the
    other planner (they refuse it with ExtremeAggregate: fail closed, never a reroute)."""
    try:
        rewriter.build_plan(rewriter.parse(sql), demo)
        met = False
    except rewriter.errors.ExtremeAggregate:
        met = True
    except rewriter.Refusal:
        met = False
    assert met == (planner_of(rewriter.parse(sql)) == "extreme")
