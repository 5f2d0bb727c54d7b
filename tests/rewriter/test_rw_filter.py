"""Aggregate ``FILTER (WHERE cond)`` on COUNT, SUM and AVG: the aggregate sees only the rows
where ``cond`` is true; each row still contributes within the column's bounds, so the release
is the plain aggregate's (same sensitivity and mechanism) over ``CASE WHEN cond THEN clamp(x)
END``. Plans, release keys and the emitted scan (its exact measures equal the analyst's own
FILTER SQL over the clamped column, on DuckDB and Postgres); FILTER on anything else refuses."""

from __future__ import annotations

import pytest

import rewriter
from rewriter.errors import Refusal


def plan(config, sql, params=None):
    return rewriter.build_plan(rewriter.parse(sql), config, params)


def refused(config, sql) -> Refusal:
    with pytest.raises(Refusal) as e:
        plan(config, sql)
    return e.value


def test_filtered_aggregates_carry_the_condition_on_their_measures(config):
    p = plan(
        config,
        "SELECT SUM(age) FILTER (WHERE sex = 1) AS s, AVG(income) FILTER (WHERE age > 30) AS a, "
        "COUNT(income) FILTER (WHERE age > 30) AS n, SUM(age) FROM pums",
    )
    assert p.where is None  # a condition on aggregates, not on the rows
    s, a, n, plain = p.aggregates
    assert (s.func, s.column, s.lower, s.upper) == ("sum", "age", 0, 100)  # the plain SUM's bounds
    assert (a.func, a.column, a.mechanism) == ("avg", "income", plain.mechanism or a.mechanism)
    assert plain.filter is None and s.filter is not None
    # AVG's sum and count both over the filtered rows; COUNT(income) FILTER is AVG's count
    avg_sum, avg_count = (p.measures[i] for i in a.measures)
    assert avg_sum.kind == "sum" and avg_count.kind == "count"
    assert avg_sum.filter == avg_count.filter == a.filter
    assert n.measures == (a.measures[1],)
    assert [o.name for o in p.outputs] == ["s", "a", "n", "sum"]


def test_release_key_differs_from_the_unfiltered_and_is_equal_for_equal_conditions(config):
    base = plan(config, "SELECT SUM(age) FROM pums")
    f = plan(config, "SELECT SUM(age) FILTER (WHERE sex = 1) FROM pums")
    same = plan(config, "select sum(age) filter (where (SEX = 1)) as total from pums")
    other = plan(config, "SELECT SUM(age) FILTER (WHERE sex = 0) FROM pums")
    where = plan(config, "SELECT SUM(age) FROM pums WHERE sex = 1")
    assert f.canonical() == same.canonical()
    assert len({base.canonical(), f.canonical(), other.canonical(), where.canonical()}) == 4
    avg = plan(config, "SELECT AVG(age) FILTER (WHERE sex = 1) FROM pums")
    assert avg.canonical() not in (f.canonical(), plan(config, "SELECT AVG(age) FROM pums").canonical())
    # COUNT(*) FILTER spelled as an aggregate or as a conditional count: one release
    assert (
        plan(config, "SELECT COUNT(*) FILTER (WHERE sex = 1) FROM pums").canonical()
        == plan(config, "SELECT SUM(CASE WHEN sex = 1 THEN 1 ELSE 0 END) FROM pums").canonical()
    )


def test_display_steps_order_by_and_expressions_over_filtered_aggregates(config):
    p = plan(
        config,
        "SELECT sex, ROUND(AVG(age) FILTER (WHERE educ > 3), 2) AS a FROM pums GROUP BY sex "
        "ORDER BY AVG(age) FILTER (WHERE educ > 3) DESC",
    )
    assert len(p.aggregates) == 1 and p.outputs[1].post == (("round", 2),)  # the sort reads the same release
    q = plan(
        config,
        "SELECT sex, AVG(age) FILTER (WHERE educ > 3) AS a FROM pums GROUP BY sex "
        "ORDER BY AVG(age) FILTER (WHERE educ > 3) DESC",
    )
    assert (q.order_by[0].output, q.order_by[0].desc) == (1, True)
    e = plan(config, "SELECT SUM(income) FILTER (WHERE age > 30) / COUNT(*) FROM pums")
    assert [a.filter is not None for a in e.aggregates] == [True, False]


def test_emitted_scan_spells_the_condition_as_case_on_every_backend(config):
    p = plan(config, "SELECT SUM(age) FILTER (WHERE sex = 1), COUNT(age) FILTER (WHERE sex = 1) FROM pums")
    for dialect in ("duckdb", "postgres", "spark"):
        sql = rewriter.to_sql(p, dialect)
        assert "FILTER" not in sql.upper()
        assert sql.upper().count("CASE WHEN (") == 2, sql


def clamp(x: str, lo, hi) -> str:
    """``x`` clamped to [lo, hi], NULL kept (GREATEST/LEAST would turn a NULL into a bound)."""
    return f"(CASE WHEN {x} < {lo} THEN {lo} WHEN {x} > {hi} THEN {hi} ELSE {x} END)"


# the analyst's own SQL, with the column clamped to its declared bounds as the release does
EXACT = [
    (
        "SELECT SUM(age) FILTER (WHERE sex = 1), COUNT(age) FILTER (WHERE sex = 1), COUNT(*) FILTER (WHERE sex = 1), "
        "SUM(age) FROM pums",
        f"SELECT SUM({clamp('age', 0, 100)}) FILTER (WHERE sex = 1), COUNT(age) FILTER (WHERE sex = 1), "
        f"COUNT(*) FILTER (WHERE sex = 1), SUM({clamp('age', 0, 100)}) FROM pums",
    ),
    (
        "SELECT state, SUM(score) FILTER (WHERE name LIKE '%a%' OR age IS NULL), COUNT(score) FILTER (WHERE flag) "
        "FROM pums GROUP BY state ORDER BY state",
        f"SELECT state, SUM({clamp('score', 10, 20)}) FILTER (WHERE name LIKE '%a%' OR age IS NULL), "
        "COUNT(score) FILTER (WHERE flag) FROM pums WHERE state IN ('ca', 'ny', 'tx') GROUP BY state ORDER BY state",
    ),
    (
        "SELECT SUM(age + 1) FILTER (WHERE educ > 10) FROM pums",
        f"SELECT SUM({clamp('age', 0, 100)} + 1) FILTER (WHERE educ > 10) FROM pums",
    ),
]


@pytest.mark.parametrize("ours, theirs", EXACT)
def test_scan_measures_equal_the_filter_sql(config, duck, pg, ours, theirs):
    p = plan(config, ours)
    for con, dialect in ((duck, "duckdb"), (pg, "postgres")):
        got = rewriter.complete(p, con.execute(rewriter.to_sql(p, dialect)).fetchall())
        want = con.execute(theirs).fetchall()
        norm = lambda rows: [
            tuple(0 if v is None else int(v) if not isinstance(v, str) else v for v in r) for r in rows
        ]
        assert norm(got) == norm(want), dialect


@pytest.mark.parametrize(
    "agg",
    [
        "MAX(age)",
        "MIN(income)",
        "COUNT(DISTINCT age)",
        "VAR_POP(age)",
        "STDDEV_SAMP(age)",
        "MEDIAN(age)",
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY age)",
    ],
)
def test_filter_on_other_aggregates_refuses_with_a_hint(config, agg):
    r = refused(config, f"SELECT {agg} FILTER (WHERE sex = 1) FROM pums")
    assert r.sqlstate == "0A000" and "FILTER" in r.message and "put the condition in WHERE" in r.message


@pytest.mark.parametrize(
    "cond",
    ["nosuch = 1", "age", "md5(name) = 'x'", "age IN (SELECT age FROM pums)", "name::regclass IS NULL"],
)
def test_the_condition_is_checked_by_the_where_rules(config, cond):
    r = refused(config, f"SELECT SUM(age) FILTER (WHERE {cond}) FROM pums")
    w = refused(config, f"SELECT SUM(age) FROM pums WHERE {cond}")
    assert (r.sqlstate, r.message) == (w.sqlstate, w.message)


def test_the_cost_caps_apply_to_the_condition(config):
    r = refused(config, f"SELECT SUM(age) FILTER (WHERE name = '{'x' * 300}') FROM pums")
    assert r.sqlstate == "54000"
