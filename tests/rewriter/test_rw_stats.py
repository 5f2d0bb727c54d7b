"""VAR/STDDEV and COUNT(DISTINCT): plans, refusals, and the emitted moments on both backends."""

from __future__ import annotations

import math

import pytest
from rw_data import ROWS

import rewriter
from rewriter.errors import Refusal
from rewriter.plan import Measure

COLS = ("age", "sex", "educ", "race", "income", "married", "name", "state", "big", "flag", "hours", "score")


def plan(config, sql, params=None):
    return rewriter.build_plan(rewriter.parse(sql), config, params)


def test_variance_plan_shares_count_and_moments(config):
    p = plan(
        config,
        "SELECT VAR_POP(age), variance(age), STDDEV(age) AS s, stddev_pop(age), "
        "stddev_samp(age), COUNT(age), ROUND(STDDEV(income), 1) FROM pums",
    )
    assert [a.label for a in p.aggregates] == [
        "var_pop(age)",
        "var_samp(age)",
        "stddev_samp(age)",
        "stddev_pop(age)",
        "count(age)",
        "stddev_samp(income)",
    ]
    assert p.measures[:3] == (
        Measure("count", "age"),
        Measure("csum", "age", "int", 0, 100),
        Measure("csumsq", "age", "int", 0, 100),
    )
    assert p.aggregates[0].measures == (0, 1, 2) == p.aggregates[4].measures[:1] + (1, 2)
    assert p.aggregates[5].type == "float"
    assert [o.type for o in p.outputs] == ["float"] * 5 + ["int", "numeric"]
    assert p.outputs[2].name == "s"


def test_count_distinct_plan(config):
    p = plan(config, "SELECT COUNT(DISTINCT educ) AS k, sex FROM pums GROUP BY sex")
    assert p.measures == (Measure("count_distinct", "educ"),)
    assert p.aggregates[0].label == "count(distinct educ)"
    assert p.outputs[0].type == "int"


@pytest.mark.parametrize(
    "sql, words",
    [
        ("SELECT COUNT(DISTINCT name) FROM pums", "public domain"),
        ("SELECT COUNT(DISTINCT age) FROM pums", "public domain"),
        ("SELECT COUNT(DISTINCT educ, sex) FROM pums", "one declared column"),
        ("SELECT VAR_POP(name) FROM pums", "numeric"),
        ("SELECT STDDEV(educ) FROM pums", "bounds"),
        ("SELECT VAR_POP(age + 1) FROM pums", "declared column"),
        ("SELECT sex FROM pums GROUP BY sex HAVING corr(age, income) > 0", "VAR_POP"),
        ("SELECT corr(age, income) FROM pums", "VAR_POP"),
    ],
)
def test_refusals_say_what_to_write(config, sql, words):
    with pytest.raises(Refusal) as e:
        plan(config, sql)
    assert words in e.value.message


def _moments(col, lo, hi, integer):
    vals = [r[COLS.index(col)] for r in ROWS if r[COLS.index(col)] is not None]
    c = [lo if v < lo else hi if (v > hi or math.isnan(v)) else v for v in vals]
    if integer:
        ys = [2 * v - (lo + hi) for v in c]
        return len(c), sum(ys), sum(y * y for y in ys)
    m = (lo + hi) / 2
    return len(c), math.fsum(v - m for v in c), math.fsum((v - m) ** 2 for v in c)


SQL = (
    "SELECT VAR_POP(age), STDDEV(score), VAR_SAMP(income), STDDEV_POP(hours), "
    "COUNT(DISTINCT educ), COUNT(DISTINCT state) FROM pums"
)


def _check(rows, p):
    (row,) = rows
    got = dict(zip(p.measures, [float(v) for v in row]))
    for col, lo, hi, integer in [
        ("age", 0, 100, True),
        ("score", 10, 20, True),
        ("income", 0, 500000, False),
        ("hours", 10, 60, False),
    ]:
        want = _moments(col, lo, hi, integer)
        kinds = (
            Measure("count", col),
            Measure("csum", col, "int" if integer else "float", lo, hi),
            Measure("csumsq", col, "int" if integer else "float", lo, hi),
        )
        for k, w in zip(kinds, want):
            assert got[k] == pytest.approx(w, rel=1e-12, abs=1e-6), (k, w)
    assert got[Measure("count_distinct", "educ")] == 5  # 12, 16, 9, 1, 3
    assert got[Measure("count_distinct", "state")] == 4  # ca, ny, tx, zz: every value counts


def test_duckdb_moments(config, duck):
    p = plan(config, SQL)
    _check(rewriter.complete(p, duck.execute(rewriter.to_sql(p, "duckdb")).fetchall()), p)


def test_postgres_moments(config, pg):
    p = plan(config, SQL)
    _check(rewriter.complete(p, pg.execute(rewriter.to_sql(p, "postgres")).fetchall()), p)


def test_grouped_moments_every_cell(config, duck):
    p = plan(config, "SELECT sex, VAR_POP(age), COUNT(DISTINCT educ) FROM pums GROUP BY sex")
    rows = rewriter.complete(p, duck.execute(rewriter.to_sql(p, "duckdb")).fetchall())
    assert [r[0] for r in rows] == [0, 1]
    assert all(v is not None for r in rows for v in r)


@pytest.mark.parametrize(
    "tail, params, want",
    [
        ("FETCH FIRST 3 ROWS ONLY", None, (3, 0)),
        ("FETCH NEXT 1 ROW ONLY", None, (1, 0)),
        ("FETCH FIRST ROW ONLY", None, (1, 0)),
        ("OFFSET 2 ROWS FETCH NEXT $1 ROWS ONLY", [4], (4, 2)),
        ("LIMIT 3", None, (3, 0)),
    ],
)
def test_fetch_first_is_limit(config, tail, params, want):
    p = plan(config, f"SELECT educ, COUNT(*) FROM pums GROUP BY educ ORDER BY 1 {tail}", params)
    assert (p.limit, p.offset) == want
    assert p.canonical() == plan(config, "SELECT educ, COUNT(*) FROM pums GROUP BY educ").canonical()


@pytest.mark.parametrize("tail", ["FETCH FIRST 3 ROWS WITH TIES", "FETCH FIRST 10 PERCENT ROWS ONLY"])
def test_fetch_ties_and_percent_refused(config, tail):
    with pytest.raises(Refusal) as e:
        plan(config, f"SELECT educ, COUNT(*) FROM pums GROUP BY educ ORDER BY 2 {tail}")
    assert "FETCH FIRST n ROWS ONLY" in e.value.message


def test_fetch_first_is_a_top_c(config):
    a = plan(
        config, "SELECT educ, COUNT(*) FROM pums GROUP BY educ ORDER BY COUNT(*) DESC FETCH FIRST 3 ROWS ONLY"
    )
    b = plan(config, "SELECT educ, COUNT(*) FROM pums GROUP BY educ ORDER BY COUNT(*) DESC LIMIT 3")
    assert a.canonical() == b.canonical() and a.selection is not None
