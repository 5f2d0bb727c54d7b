"""The joint scan (:func:`rewriter.extreme.joint_sql`) on DuckDB, Postgres and Spark: each
tagged part of the one statement is exactly what its own scan returns — the cells
(:func:`rewriter.to_sql`) and each column's histogram (:func:`rewriter.extreme.histogram_sql`),
bounded by the privacy unit as alone — over public keys and over keys chosen by partition
selection (the first histogram with its units and floor)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import rewriter
from config import parse_config
from rewriter.extreme import GridSql, build_extreme_plan, histogram_sql, joint_sql

from .engines import engine

GRIDS = {"a": GridSql(0.0, 1.0, 20, True), "b": GridSql(-5.0, 0.25, 100, False)}


def _config(c_domain: bool):
    c = {"type": "text", "domain": ["k1", "k2", "k3"]} if c_domain else {"type": "text"}
    return parse_config(
        {
            "tiers": {"default": {"epsilon": 1, "budget": 10, "delta": 1e-6, "delta_budget": 1e-5}},
            "roles": {"r": {"tier": "default"}},
            "server": {"auth": "trust"},
            "tables": {
                "t": {
                    "privacy_unit": "u",
                    "max_groups_per_unit": 2,
                    "max_rows_per_unit": 3,
                    "columns": {
                        "u": {"type": "int"},
                        "c": c,
                        "a": {"type": "int", "lower": 0, "upper": 20},
                        "b": {"type": "float", "lower": -5, "upper": 20},
                    },
                }
            },
        }
    )


def _rows() -> list[tuple]:
    rnd = random.Random(5)
    out = []
    for u in range(1, 40):
        for _ in range(rnd.randint(1, 7)):
            out.append((u, rnd.choice(["k1", "k2", "k3", "k4"]), rnd.randint(-2, 24), rnd.uniform(-7, 22)))
    out += [(None, "k1", 3, 1.0), (7, "k2", None, None), (8, None, 4, 2.5)]
    return out


@pytest.fixture(scope="module", params=["duckdb", "postgres", "spark"])
def run(request):
    with engine(request, "unit_joint_scan") as e:
        e.run("CREATE TABLE t (u INTEGER, c TEXT, a INTEGER, b DOUBLE PRECISION)")
        e.insert("t", _rows())
        yield e.dialect, e.run


def _norm(row) -> tuple:
    return tuple(round(float(v), 6) if isinstance(v, float) else v for v in row)


def test_public_keys_each_part_is_its_own_scan(run):
    dialect, go = run
    cfg = _config(True)
    xp = build_extreme_plan(
        rewriter.parse("SELECT c, COUNT(*), SUM(b), MAX(a), median(b), MIN(a) FROM t GROUP BY c"), cfg
    )
    assert xp.columns == ["a", "b"] and xp.central is not None
    got = Counter(_norm(r) for r in go(joint_sql(xp, GRIDS, dialect, "0a1b")))
    want = Counter(
        _norm((-1, k, None, None, *m)) for k, *m in go(rewriter.to_sql(xp.central, dialect, "0a1b"))
    )
    for i, col in enumerate(xp.columns):
        g = GRIDS[col]
        one = build_extreme_plan(rewriter.parse(f"SELECT c, MAX({col}) FROM t GROUP BY c"), cfg)
        hist = go(histogram_sql(one, g.lower, g.step, g.U, g.integral_step, dialect, "0a1b"))
        want.update(_norm((i, k, v, n, None, None)) for k, v, n in hist)
    assert got == want and sum(1 for r in got if r[0] == -1) >= 3


def test_selected_keys_units_on_the_first_histogram_only(run):
    dialect, go = run
    cfg = _config(False)
    xp = build_extreme_plan(rewriter.parse("SELECT c, MAX(a), MIN(b) FROM t GROUP BY c"), cfg)
    assert xp.plan.selected and xp.central is None
    rows = go(joint_sql(xp, GRIDS, dialect, "0a1b", floor=3))
    first = build_extreme_plan(rewriter.parse("SELECT c, MAX(a) FROM t GROUP BY c"), cfg)
    g = GRIDS["a"]
    want0 = Counter(
        _norm((0, *r)) for r in go(histogram_sql(first, g.lower, g.step, g.U, True, dialect, "0a1b", floor=3))
    )
    other = build_extreme_plan(rewriter.parse("SELECT c, MIN(b) FROM t GROUP BY c"), cfg)
    g = GRIDS["b"]
    want1 = Counter(
        _norm((1, k, v, n, None))
        for k, v, n in go(histogram_sql(other, g.lower, g.step, g.U, False, dialect, "0a1b"))
    )
    assert Counter(_norm(r) for r in rows) == want0 + want1
    assert all(r[-1] is not None and r[-1] >= 3 for r in rows if r[0] == 0)
