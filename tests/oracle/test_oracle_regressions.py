"""Regression cases the oracle (or a review) found, checked the oracle's way on both backends."""

from __future__ import annotations

import pytest
from test_oracle import Oracle

import rewriter

# (analyst SQL with the same WHERE on both backends, group columns, aggregates)
CASES = [
    # the negation of IS NOT / NOT LIKE / NOT ILIKE was dropped
    ("SELECT COUNT(*) FROM fx WHERE t NOT LIKE 'a%'", "t NOT LIKE 'a%'", [], ["COUNT(*)"]),
    ("SELECT COUNT(*) FROM fx WHERE t NOT ILIKE 'a%'", "t NOT ILIKE 'a%'", [], ["COUNT(*)"]),
    ("SELECT COUNT(*) FROM fx WHERE f IS NOT NULL", "f IS NOT NULL", [], ["COUNT(*)"]),
    ("SELECT s, AVG(f) FROM fx WHERE b IS NOT UNKNOWN GROUP BY s", "b IS NOT NULL", ["s"], ["AVG(f)"]),
    # Postgres: integer / integer truncates toward zero (was computed in float8)
    ("SELECT COUNT(*) FROM fx WHERE i / 2 = 1", None, [], ["COUNT(*)"]),
    ("SELECT COUNT(*) FROM fx WHERE (i * 3 - 1) / (-4) < 0", None, [], ["COUNT(*)"]),
    ("SELECT COUNT(*) FROM fx WHERE i / 2.0 = 1.5", "i / 2.0 = 1.5", [], ["COUNT(*)"]),
    # round(NULL, n) crashed the planner
    ("SELECT AVG(f) FROM fx WHERE round(NULL, 0) IS NULL", "round(NULL, 0) IS NULL", [], ["AVG(f)"]),
    # ±Infinity and NaN were clamped to ±1e300 before arithmetic (f = i + f is true for
    # f = Infinity and f = NaN, as in Postgres)
    ("SELECT AVG(f) FROM fx WHERE f = i + f", "f = i + f", [], ["AVG(f)"]),
    (
        "SELECT COUNT(*) FROM fx WHERE f * 2 > 1000 OR f - 1 < -1000",
        "f * 2 > 1000 OR f - 1 < -1000",
        [],
        ["COUNT(*)"],
    ),
    # round(numeric) rounds half away from zero, round(float8) half to even (rint) — on
    # both backends (DuckDB's own ROUND(double) rounds half away)
    ("SELECT COUNT(*) FROM fx WHERE round(i / 2.0) = 3", "round(i / 2.0) = 3", [], ["COUNT(*)"]),
    ("SELECT COUNT(*) FROM fx WHERE round(f) = 2", None, [], ["COUNT(*)"]),
    ("SELECT COUNT(*) FROM fx WHERE round(CAST(2.5 AS double precision)) = 2", None, [], ["COUNT(*)"]),
    (
        "SELECT COUNT(*) FROM fx WHERE floor(i / 10.0) = 0 AND i / 10.0 <> 0.3",
        "floor(i / 10.0) = 0 AND i / 10.0 <> 0.3",
        [],
        ["COUNT(*)"],
    ),
    # coalesce(NULL, NULL) and -(NULL) made the backend SQL fail (untyped NULL)
    (
        "SELECT COUNT(*) FROM fx WHERE i = coalesce(NULL, NULL) OR i = -(NULL) OR i IS NULL",
        "i = coalesce(NULL, NULL) OR i = -(NULL) OR i IS NULL",
        [],
        ["COUNT(*)"],
    ),
    (
        "SELECT g, COUNT(i) FROM fx WHERE i BETWEEN SYMMETRIC 10 AND 3 GROUP BY g",
        "(i BETWEEN 10 AND 3) OR (i BETWEEN 3 AND 10)",
        ["g"],
        ["COUNT(i)"],
    ),
    # SUM/AVG of arithmetic over bounded columns (bounds by interval arithmetic)
    (
        "SELECT g, SUM(i + 1), AVG(i - 10), SUM(i + f) FROM fx WHERE f > 0 GROUP BY g",
        "f > 0",
        ["g"],
        ["SUM(i + 1)", "AVG(i - 10)", "SUM(i + f)"],
    ),
    (
        "SELECT s, SUM(2 * i), SUM(i * i - 3), SUM(f * 2.5), AVG(-f), SUM(f / 2.0) FROM fx WHERE i IS NOT NULL "
        "GROUP BY s",
        "i IS NOT NULL",
        ["s"],
        ["SUM(2 * i)", "SUM(i * i - 3)", "SUM(f * 2.5)", "AVG(-f)", "SUM(f / 2.0)"],
    ),
]
DUCK_WHERE = {
    "i / 2 = 1": "i // 2 = 1",
    "(i * 3 - 1) / (-4) < 0": "(i * 3 - 1) // (-4) < 0",
    "round(f) = 2": "round_even(f, 0) = 2",
    "round(CAST(2.5 AS double precision)) = 2": "round_even(2.5::double, 0) = 2",
}


def _case(sql, duck_where, groups, aggs):
    pg_where = sql.split(" WHERE ", 1)[1].split(" GROUP BY")[0]
    duck = duck_where or DUCK_WHERE[pg_where]
    if " LIKE " in duck:
        duck += " ESCAPE '\\'"
    return sql, (duck, pg_where), groups, aggs


@pytest.mark.parametrize("case", CASES, ids=[c[0][25:70] for c in CASES])
def test_duckdb(oracle_config, oracle_duck, case):
    o = Oracle(oracle_config, lambda q: oracle_duck.execute(q).fetchall(), "duckdb")
    o.check(_case(*case))
    assert o.stats["accepted"] + o.stats["reference_error"] == 1  # planned, and the rewrite ran


@pytest.mark.parametrize("case", CASES, ids=[c[0][25:70] for c in CASES])
def test_postgres(oracle_config, oracle_pg, case):
    o = Oracle(oracle_config, lambda q: oracle_pg.execute(q).fetchall(), "postgres")
    o.check(_case(*case))
    assert o.stats["accepted"] + o.stats["reference_error"] == 1  # planned, and the rewrite ran


@pytest.mark.parametrize(
    "where",
    [
        "i * 0.1 = 0.3",
        "i / 3.0 > 1",
        "(i / 10.0) * 3 = 0.3",
        "round(i / 10.0, 1) = 0.3",
        "CAST(2.5 AS text) = '2.5'",
    ],
)
def test_inexact_numeric_refused(oracle_config, where):
    """Postgres computes these exactly (numeric); dpgate's float8 cannot match: refused."""
    with pytest.raises(rewriter.Refusal) as err:
        rewriter.build_plan(rewriter.parse(f"SELECT COUNT(*) FROM fx WHERE {where}"), oracle_config)
    assert err.value.sqlstate == "0A000"


def test_arithmetic_bounds_by_intervals(oracle_config):
    """The interval bounds of SUM/AVG arguments (i in [0, 10], f in [-1.5, 2.5]) are the
    aggregates' clamping bounds: the sensitivity of each sum."""
    plan = rewriter.build_plan(
        rewriter.parse(
            "SELECT SUM(i + 1), SUM(2 * i), SUM(i * i - 3), SUM(i + f), AVG(-f), SUM(i - f) FROM fx"
        ),
        oracle_config,
    )
    assert [(a.lower, a.upper) for a in plan.aggregates] == [
        (1, 11),
        (0, 20),
        (-3, 97),
        (-1.5, 12.5),
        (-2.5, 1.5),
        (-2.5, 11.5),
    ]
    assert [a.type for a in plan.aggregates] == ["int", "int", "int", "float", "float", "float"]
    for sql in (
        "SELECT SUM(f * 1e200 * 1e200 * 0) FROM fx",  # inf · 0 = NaN would be no bound at all
        "SELECT SUM(i * 1e200 * 1e200 - i * 1e200 * 1e200) FROM fx",
    ):
        with pytest.raises(rewriter.Refusal) as err:
            rewriter.build_plan(rewriter.parse(sql), oracle_config)
        assert err.value.sqlstate == "54000"


def test_is_null_and_is_not_null_have_different_release_keys(oracle_config):
    keys = {
        rewriter.build_plan(rewriter.parse(f"SELECT COUNT(*) FROM fx WHERE {w}"), oracle_config).canonical()
        for w in (
            "f IS NULL",
            "f IS NOT NULL",
            "t LIKE 'a%'",
            "t NOT LIKE 'a%'",
            "t ILIKE 'a%'",
            "t NOT ILIKE 'a%'",
            "i / 2 = 1",
            "i / 2.0 = 1",
        )
    }
    assert len(keys) == 8


def test_untyped_coalesce_parameters_keep_their_values(oracle_config):
    """coalesce($1, $2) with no typed argument took int and refused text values; now the
    values keep their own type (as the literal spelling does), with the same release key."""
    sql = "SELECT COUNT(*) FROM fx WHERE s = coalesce($1, $2) OR 'X' IS DISTINCT FROM coalesce(NULL, $3)"
    lit = sql.replace("$1", "'x'").replace("$2", "'z'").replace("$3", "'z'")
    p = rewriter.build_plan(rewriter.parse(sql), oracle_config, ["x", "z", "z"])
    assert p.canonical() == rewriter.build_plan(rewriter.parse(lit), oracle_config).canonical()
