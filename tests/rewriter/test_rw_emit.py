"""to_sql: the emitted SQL runs on DuckDB (and Postgres when DPGATE_TEST_PG_DSN is set)
and equals a straightforward reference computed in Python from the same rows."""

from __future__ import annotations

import itertools
import math

import pytest
import sqlglot
from rw_data import ROWS

import rewriter

COLS = ["age", "sex", "educ", "race", "income", "married", "name", "state", "big", "flag", "hours", "score"]


def R(row):
    return dict(zip(COLS, row))


# (sql, python predicate over a row dict) — the predicate is the reference WHERE.
CASES = [
    ("SELECT COUNT(*) FROM pums", lambda r: True),
    ("SELECT COUNT(*) AS n, COUNT(age), SUM(age), AVG(income) FROM pums", lambda r: True),
    ("SELECT sex, COUNT(*), SUM(age), AVG(age) FROM pums GROUP BY sex", lambda r: True),
    (
        "SELECT sex, educ, COUNT(*) FROM pums WHERE age > 30 GROUP BY sex, educ",
        lambda r: r["age"] is not None and r["age"] > 30,
    ),
    (
        "SELECT state, SUM(income) FROM pums WHERE name LIKE 'a%' GROUP BY state",
        lambda r: r["name"] is not None and r["name"].startswith("a"),
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE name LIKE 'a\\_b%'",
        lambda r: r["name"] is not None and r["name"].startswith("a_b"),
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE name ILIKE 'A%'",
        lambda r: r["name"] is not None and r["name"].lower().startswith("a"),
    ),
    ("SELECT flag, COUNT(*) FROM pums GROUP BY flag", lambda r: True),
    (
        "SELECT big, SUM(age) FROM pums WHERE age BETWEEN 0 AND 65 GROUP BY big",
        lambda r: r["age"] is not None and 0 <= r["age"] <= 65,
    ),
    (
        "SELECT race, COUNT(*) FROM pums WHERE educ IN (12, 16) OR income IS NULL GROUP BY race",
        lambda r: r["educ"] in (12, 16) or r["income"] is None,
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE NOT (age % 2 = 0)",
        lambda r: r["age"] is not None and math.fmod(r["age"], 2) != 0,
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE age * 1e18 > 5",
        lambda r: r["age"] is not None and r["age"] * 1e18 > 5,
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE age * age * age * age * age * age > 1e9",
        lambda r: r["age"] is not None and float(r["age"]) ** 6 > 1e9,
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE income * 1e10 > 5",
        lambda r: r["income"] is not None and min(r["income"], 1e290) * 1e10 > 5,
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE income * income > 1",
        lambda r: r["income"] is not None and r["income"] * r["income"] > 1,
    ),
    ("SELECT COUNT(*) FROM pums WHERE income * 1e-300 * 1e-10 >= 0", lambda r: r["income"] is not None),
    (
        "SELECT COUNT(*) FROM pums WHERE income / 3 + age - 1 > 20",
        lambda r: None not in (r["income"], r["age"]) and r["income"] / 3 + r["age"] - 1 > 20,
    ),
    ("SELECT COUNT(*) FROM pums WHERE -age < -30", lambda r: r["age"] is not None and r["age"] > 30),
    (
        "SELECT COUNT(*) FROM pums WHERE abs(age) > 4 AND length(name) = 4",
        lambda r: (
            r["age"] is not None and abs(r["age"]) > 4 and r["name"] is not None and len(r["name"]) == 4
        ),
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE coalesce(age, 0) < 30 AND greatest(age, 20) = 20",
        lambda r: (r["age"] or 0) < 30 and max(a for a in (r["age"], 20) if a is not None) == 20,
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE upper(state) = 'CA' OR lower(name) = 'bob'",
        lambda r: r["state"] == "ca" or r["name"] == "bob",
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE round(income / 1000) = 30 OR floor(age / 10.0) = 4 "
        "OR ceil(age / 10.0) = 2",
        lambda r: (
            (r["income"] is not None and round(r["income"] / 1000) == 30)
            or (r["age"] is not None and (r["age"] // 10 == 4 or math.ceil(r["age"] / 10) == 2))
        ),
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE round(income, 2) > 85000.4",
        lambda r: r["income"] is not None and round(r["income"], 2) > 85000.4,
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE age::float / 2 > 20 AND age::text <> '40'",
        lambda r: r["age"] is not None and r["age"] / 2 > 20 and r["age"] != 40,
    ),
    ("SELECT COUNT(*) FROM pums WHERE flag IS TRUE AND NOT flag IS NULL", lambda r: r["flag"] is True),
    ("SELECT COUNT(*) FROM pums WHERE age IS DISTINCT FROM 25", lambda r: r["age"] != 25),
    ("SELECT COUNT(*) FROM pums WHERE age > '30'", lambda r: r["age"] is not None and r["age"] > 30),
    ("SELECT COUNT(*) FROM pums WHERE age = NULL", lambda r: False),
    ("SELECT sex, SUM(hours), AVG(score), SUM(score), COUNT(hours) FROM pums GROUP BY sex", lambda r: True),
    (
        "SELECT COUNT(*) FROM pums WHERE hours * 2 > 50 OR hours + 1e300 > 1e300",
        lambda r: (
            r["hours"] is not None
            and (
                r["hours"] != r["hours"]
                or (  # NaN > all
                    min(r["hours"], 5e299) * 2 > 50 or min(r["hours"], 1e300) + 1e300 > 1e300
                )
            )
        ),
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE age / 7 > 2 AND 2 + 3 * 4 = 14",
        lambda r: r["age"] is not None and int(r["age"] / 7) > 2,
    ),  # Postgres: int / int truncates
    (
        "SELECT married, sex, COUNT(*), SUM(income), SUM(age) FROM pums WHERE race <> 6 "
        "GROUP BY married, sex",
        lambda r: r["race"] is not None and r["race"] != 6,
    ),
]


def _clamp(v, lo, hi):
    """SQL orders NaN above every number, so NaN clamps to the upper bound."""
    return hi if v != v else min(max(v, lo), hi)


def reference(plan, pred):
    rows = [R(r) for r in ROWS if pred(R(r))]
    cells = list(itertools.product(*[sorted(g.domain) for g in plan.group_by])) or [()]
    out = []
    for cell in cells:
        sel = [
            r
            for r in rows
            if all(
                r[g.column] is not None and r[g.column] == v and type(r[g.column]) is type(v)
                for g, v in zip(plan.group_by, cell)
            )
        ]
        vals = []
        for m in plan.measures:
            if m.kind == "count_rows":
                vals.append(len(sel))
            elif m.kind == "count":
                vals.append(sum(r[m.column] is not None for r in sel))
            else:
                vals.append(
                    sum(_clamp(r[m.column], m.lower, m.upper) for r in sel if r[m.column] is not None)
                )
        out.append((*cell, *vals))
    return out


def _check(got, want, plan):
    assert len(got) == len(want)
    k = len(plan.group_by)
    for g, w in zip(got, want):
        assert tuple(g[:k]) == tuple(w[:k])
        for j, (a, b) in enumerate(zip(g[k:], w[k:])):
            m = plan.measures[j]
            if m.kind == "sum" and m.type == "float":
                assert float(a) == pytest.approx(b, rel=1e-12)
            else:
                assert a == b and not isinstance(a, float)


@pytest.mark.parametrize("sql,pred", CASES, ids=[c[0][:70] for c in CASES])
def test_duckdb_matches_reference(config, duck, sql, pred):
    plan = rewriter.build_plan(rewriter.parse(sql), config)
    text = rewriter.to_sql(plan, "duckdb")
    got = rewriter.complete(plan, duck.execute(text).fetchall())
    _check(got, reference(plan, pred), plan)
    sqlglot.parse_one(rewriter.to_sql(plan, "postgres"), read="postgres")


def test_one_row_per_cell_even_when_empty(config, duck):
    plan = rewriter.build_plan(
        rewriter.parse(
            "SELECT educ, race, COUNT(*), SUM(income) FROM pums WHERE age > 1000 GROUP BY educ, race"
        ),
        config,
    )
    got = rewriter.complete(plan, duck.execute(rewriter.to_sql(plan, "duckdb")).fetchall())
    assert len(got) == 16 * 6 == plan.n_cells
    assert all(r[2] == 0 and r[3] == 0 for r in got)


def test_long_integer_domain_is_completed_by_the_proxy(config, duck):
    """The scan returns the groups the data has; the proxy completes the 100 public cells
    (no VALUES relation or generate_series of the domain in the backend SQL)."""
    plan = rewriter.build_plan(rewriter.parse("SELECT big, COUNT(*) FROM pums GROUP BY big"), config)
    text = rewriter.to_sql(plan, "duckdb")
    assert (
        "GENERATE_SERIES" not in text.upper() and "VALUES" not in text.upper() and "JOIN" not in text.upper()
    )
    got = rewriter.complete(plan, duck.execute(text).fetchall())
    assert [r[0] for r in got] == list(range(100))
    _check(got, reference(plan, lambda r: True), plan)


@pytest.mark.parametrize("sql,pred", CASES, ids=[c[0][:70] for c in CASES])
def test_postgres_matches_reference(config, pg, sql, pred):
    plan = rewriter.build_plan(rewriter.parse(sql), config)
    got = rewriter.complete(plan, pg.execute(rewriter.to_sql(plan, "postgres")).fetchall())
    _check(got, reference(plan, pred), plan)
