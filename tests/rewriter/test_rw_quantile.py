"""Quantiles on the extreme path (rewriter/extreme.py): what is read, what is refused, and
fail-closed on every node the quantile rules interpret (a node given an argument the rule does not know is refused)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from sqlglot import exp

import rewriter
from rewriter.args import ALLOWED
from rewriter.errors import Refusal
from rewriter.extreme import build_extreme_plan


@pytest.mark.parametrize(
    "sql, func, q, name",
    [
        ("SELECT median(age) FROM pums", "median", Fraction(1, 2), "median"),
        (
            "SELECT percentile_cont(0.9) WITHIN GROUP (ORDER BY income) FROM pums",
            "percentile_cont",
            Fraction(9, 10),
            "percentile_cont",
        ),
        (
            "SELECT sex, percentile_disc(0.25) WITHIN GROUP (ORDER BY age DESC) AS p FROM pums GROUP BY sex",
            "percentile_disc",
            Fraction(3, 4),
            "p",
        ),
        ("SELECT ROUND(median(income), 1) FROM pums WHERE age > 30", "median", Fraction(1, 2), "round"),
    ],
)
def test_read_as_one_quantile(config, sql, func, q, name):
    xp = build_extreme_plan(rewriter.parse(sql), config)
    assert (xp.func, xp.q) == (func, q) and xp.plan.outputs[-1].name == name
    assert f"q={q}" in xp.canonical()


@pytest.mark.parametrize(
    "sql, state",
    [
        ("SELECT percentile_cont(0.1234567) WITHIN GROUP (ORDER BY age) FROM pums", "0A000"),
        ("SELECT percentile_cont(-0.1) WITHIN GROUP (ORDER BY age) FROM pums", "0A000"),
        ("SELECT percentile_cont(2) WITHIN GROUP (ORDER BY age) FROM pums", "22023"),
        ("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY age, income) FROM pums", "0A000"),
        ("SELECT sex, median(age), MAX(age) FROM pums GROUP BY ROLLUP(sex)", "0A000"),
        ("SELECT median(age) FILTER (WHERE sex = 1), COUNT(*) FROM pums", "0A000"),
        ("SELECT MAX(age), MIN(age) FROM pums WHERE '__dpgate_x0' = '__dpgate_x0' OR age > 1", "0A000"),
        (  # 33 percentiles: more shares of ε than one statement splits into
            "SELECT "
            + ", ".join(f"percentile_disc(0.{i:02d}) WITHIN GROUP (ORDER BY age)" for i in range(1, 34))
            + " FROM pums",
            "0A000",
        ),
    ],
)
def test_refused(config, sql, state):
    with pytest.raises(Refusal) as err:
        build_extreme_plan(rewriter.parse(sql), config)
    assert err.value.sqlstate == state and err.value.hint


@pytest.mark.parametrize(
    "sql, kind",
    [
        ("SELECT median(age) FROM pums", exp.Median),
        ("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY age) FROM pums", exp.PercentileCont),
        ("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY age) FROM pums", exp.PercentileDisc),
    ],
)
def test_unknown_argument_refused(config, sql, kind):
    """Each argument outside the allow-list, set on the node, is refused 0A000 (never dropped)."""
    for key in ["dpgate_unknown_arg"] + sorted(set(kind.arg_types) - ALLOWED[kind]):
        tree = rewriter.parse(sql)
        next(n for n in tree.walk() if type(n) is kind).set(key, exp.Literal.number(1))
        with pytest.raises(Refusal) as err:
            build_extreme_plan(tree, config)
        assert err.value.sqlstate == "0A000", key


def test_joint_parts_each_fill_their_own_aggregate(config):
    """MAX and MIN of one column, and a SUM of it, are planned as the same SUM: each part gets
    an aggregate of its own (and the SUM goes to the cells), a repeated one shares its part."""
    xp = build_extreme_plan(
        rewriter.parse(
            "SELECT sex, MAX(income) AS hi, SUM(income), MIN(income), MAX(income) AS hi2, "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY income), median(income) FROM pums GROUP BY sex"
        ),
        config,
    )
    assert [(p.func, p.q, p.index) for p in xp.parts] == [
        ("max", None, 0),
        ("min", None, 2),
        ("percentile_cont", Fraction(1, 2), 3),
    ]
    assert [o.index for o in xp.plan.outputs[1:]] == [0, 1, 2, 0, 3, 3]
    assert xp.central is not None and xp.central_index == (None, 0, None, None)
    assert [a.label for a in xp.central.aggregates] == ["sum(income)"]
    assert xp.columns == ["income"] and xp.joint


def test_expressions_and_order_by_read_the_parts(config):
    """An expression over extremes (post-processing) and ORDER BY an extreme spelled out read
    the parts' own aggregates, by position in the expression, not by the SUM each is planned as."""
    xp = build_extreme_plan(
        rewriter.parse(
            "SELECT sex, MAX(income) - MIN(income) AS spread, MAX(income) / AVG(income) AS r FROM pums "
            "GROUP BY sex ORDER BY MIN(income) DESC"
        ),
        config,
    )
    assert [(p.func, p.index) for p in xp.parts] == [("max", 0), ("min", 1)]
    assert xp.plan.outputs[1].post == ("op", "-", ("agg", 0), ("agg", 1))
    assert xp.plan.outputs[2].post == ("op", "/", ("agg", 0), ("agg", 2))
    assert xp.plan.order_by[0].tree == ("agg", 1) and xp.central_index == (None, None, 0)
    assert [a.label for a in xp.central.aggregates] == ["avg(income)"]


def test_having_is_a_filter_on_released_values(config):
    """HAVING beside MAX/MIN/percentiles is evaluated on every released cell (post-processing):
    no sparse vector; an aggregate only HAVING reads is released with the cells."""
    xp = build_extreme_plan(
        rewriter.parse(
            "SELECT educ, MAX(income), COUNT(*) FROM pums GROUP BY educ HAVING SUM(age) > 100 AND MAX(income) > 5 "
            "ORDER BY COUNT(*) DESC LIMIT 3"
        ),
        config,
    )
    assert xp.plan.selection is None and xp.central_index == (None, 0, 1)
    assert xp.plan.row_filter == (
        "op",
        "and",
        ("op", ">", ("agg", 2), ("lit", 100, "int")),
        ("op", ">", ("agg", 0), ("lit", 5, "int")),
    )
    assert [a.label for a in xp.central.aggregates] == ["count(*)", "sum(age)"]
