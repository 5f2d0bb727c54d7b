"""A SUM over a column stored as DECIMAL(w ≤ 18, s), clamped and summed in that type
(``rewriter.fixed_point``): used only where the declared bounds are exact decimals of the
column's scale, it clamps each value to the same bound as the double-precision scan does and
returns the exact sum of the clamped values, rounded once; the backend reports a frozen base
table's DECIMAL columns (``Backend.decimals``) and the pipeline passes them to the scan
(``proxy.pipeline.central.held``)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from decimal import Decimal
from types import SimpleNamespace

import duckdb
import pytest
import sqlglot

import rewriter
from config import parse_config
from proxy.backends.duckdb import DuckDBBackend
from proxy.pipeline.central import held
from rewriter import fixed_point
from rewriter.plan import Measure

LO, HI = Decimal("-5.25"), Decimal("1000.50")  # exact doubles: exact decimals of scale 2
U = 2.0**-53  # the unit roundoff of a double


def _config(unit: bool):
    table = {
        "columns": {
            "u": {"type": "int"},
            "g": {"type": "int", "domain": [0, 1, 2]},
            "p": {"type": "float", "lower": float(LO), "upper": float(HI)},
            "w": {"type": "float", "lower": float(LO), "upper": float(HI)},
        }
    }
    if unit:
        table |= {
            "privacy_unit": "u",
            "max_rows_per_unit": 3,
            "max_groups_per_unit": 3,
            "max_rows_scope": "total",
        }
    return parse_config(
        {
            "tiers": {"default": {"epsilon": 1, "budget": 10}},
            "roles": {"a": {"tier": "default"}},
            "server": {"auth": "trust"},
            "tables": {"t": table},
        }
    )


def _values() -> list[tuple[int, int, Decimal | None]]:
    """(u, g, p): prices of two decimals across the bounds, NULLs among them."""
    out = []
    for i in range(3000):
        p = None if i % 17 == 0 else (Decimal(i * 7919 % 250_000) - Decimal(4000)) / 100
        out.append((i % 40, i % 3, p))
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("fixed") / "prices.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (u INTEGER, g INTEGER, p DECIMAL(15, 2), w DECIMAL(20, 2))")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(u, g, p, p) for u, g, p in _values()])
    con.execute("CREATE VIEW v AS SELECT * FROM t")
    con.close()
    return path


def test_a_sum_is_in_its_fixed_point_type_only_where_its_bounds_are_exact_decimals_of_it():
    def m(lo, hi, kind="sum", type_="float", column="p"):
        return Measure(kind, column, type_, lo, hi)

    stored = {"p": (15, 2), "wide": (19, 2), "q": (18, 0)}
    assert fixed_point.scale_for(m(0.0, 800000.0), stored) == 2
    assert fixed_point.scale_for(m(-5.25, 0.125), stored) is None  # 0.125 needs a third decimal
    assert fixed_point.scale_for(m(0.0, 0.1), stored) is None  # 0.1's double is not a decimal
    assert fixed_point.scale_for(m(0.0, 1e16), stored) is None  # 19 digits at scale 2
    assert fixed_point.scale_for(m(0.0, 1e17), stored) is None  # 20 digits at scale 2
    assert fixed_point.scale_for(m(0.0, 1e17, column="q"), stored) == 0
    assert (
        fixed_point.scale_for(m(0.0, 1.0, column="wide"), stored) is None
    )  # 19 digits: a 128-bit sum could overflow
    assert fixed_point.scale_for(m(0.0, 1.0, column="other"), stored) is None  # not a DECIMAL
    assert fixed_point.scale_for(m(0.0, 1.0, kind="csum"), stored) is None  # a moment: in double precision
    assert fixed_point.scale_for(m(0.0, 1.0, type_="int"), stored) is None  # exact bigints already
    assert fixed_point.scale_for(m(0.0, 1.0, column="P"), stored) == 2  # DuckDB's names are case-blind


def test_only_a_plan_over_its_source_s_own_columns_takes_the_source_s_types():
    """A join or a per-unit relation may name a column like the source's and hold another type (a
    FLOAT would compare with a DECIMAL bound in single precision): such a plan stays in double."""
    plan = rewriter.build_plan(rewriter.parse("SELECT SUM(p) FROM t"), _config(False))
    assert fixed_point.fixed_point(plan, {"p": (15, 2)}).measures[0].scale == 2
    joined = dataclasses.replace(plan, relation=sqlglot.exp.to_table("other"))
    assert fixed_point.fixed_point(joined, {"p": (15, 2)}) is joined
    assert "DECIMAL(18" not in str(rewriter.to_sql(joined, "duckdb", decimals={"p": (15, 2)}))


def _run(path, sql: str, params: dict | None = None):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return sorted(con.execute(sql, params).fetchall() if params else con.execute(sql).fetchall())
    finally:
        con.close()


def test_the_fixed_point_sum_is_the_exact_sum_of_the_values_clamped_to_the_same_bounds(data):
    plan = rewriter.build_plan(
        rewriter.parse("SELECT g, SUM(p), AVG(p), SUM(w) FROM t GROUP BY g"), _config(False)
    )
    fixed = rewriter.to_sql(plan, "duckdb", decimals={"p": (15, 2), "w": (20, 2)})
    plain = rewriter.to_sql(plan, "duckdb")
    assert "DECIMAL(18, 2)" in str(fixed) and "DECIMAL(18, 2)" not in str(plain)
    got, dbl = _run(data, str(fixed)), _run(data, str(plain))
    clamped = {
        g: [min(max(p, LO), HI) for _, gg, p in _values() if gg == g and p is not None] for g in range(3)
    }
    for row, drow in zip(got, dbl):
        g = row[0]
        exact = sum(clamped[g], Decimal(0))
        bound = (len(clamped[g]) - 1) * U * float(sum(abs(x) for x in clamped[g]))  # Higham §4.2
        sums = [v for v in row[1:] if isinstance(v, float)]
        dsums = [v for v in drow[1:] if isinstance(v, float)]
        assert sums[0] == float(exact)  # the fixed-point sum: exact, rounded once
        assert abs(dsums[0] - float(exact)) <= bound  # the double sum: within the recursive-summation bound
        assert sums[-1] == dsums[-1]  # w (20 digits): in double precision either way, the same text
        assert [v for v in row[1:] if isinstance(v, int)] == [v for v in drow[1:] if isinstance(v, int)]


def test_a_per_unit_scan_in_the_fixed_point_type_gives_the_double_scan_s_cells(data):
    """The privacy unit's bounded scan (pseudo-rows at a unit's mean, :mod:`rewriter.unit`) reads
    the per-(unit, cell) sums as doubles either way: counts equal, sums within the summation bound."""
    plan = rewriter.build_plan(
        rewriter.parse("SELECT g, COUNT(*), SUM(p), AVG(p) FROM t GROUP BY g"), _config(True)
    )
    salt = "0a1b"
    fixed = rewriter.to_sql(plan, "duckdb", salt, decimals={"p": (15, 2)})
    plain = rewriter.to_sql(plan, "duckdb", salt)
    assert "DECIMAL(18, 2)" in fixed.template and "DECIMAL(18, 2)" not in plain.template
    got, want = _run(data, fixed.template, fixed.params), _run(data, plain.template, plain.params)
    # every sum of the two scans within (n − 1)·u·Σ|x| of the exact one (Higham §4.2), n ≤ the rows
    rows = [min(max(p, LO), HI) for _, _, p in _values() if p is not None]
    tol = 2 * len(rows) * U * float(sum(abs(x) for x in rows))
    assert len(got) == len(want) == 3
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            if isinstance(y, int):
                assert x == y
            else:
                assert math.isclose(x, y, rel_tol=0, abs_tol=tol)


def test_a_frozen_base_table_s_decimals_reach_the_scan(data):
    """``Backend.decimals``: a base table of a file held read-only reports its DECIMAL columns
    (a view, or a file a role may write, none); ``held`` passes them to the scan, which answers
    the exact sum."""
    writable = DuckDBBackend(data)
    try:
        assert writable.decimals("t") == {}
    finally:
        writable.discard()
    frozen = DuckDBBackend(data, read_only=True)
    try:
        assert frozen.decimals("t") == {"p": (15, 2), "w": (20, 2)}
        assert frozen.decimals("v") == {}
        cfg = _config(False)
        gw = SimpleNamespace(backend=frozen, config=cfg)
        plan = rewriter.build_plan(rewriter.parse("SELECT SUM(p) FROM t"), cfg)
        facts = held(gw, plan)
        assert facts["decimals"] == {"p": (15, 2), "w": (20, 2)}
        [(total,)] = asyncio.run(frozen.fetch(rewriter.to_sql(plan, frozen.dialect, **facts), 30))
        exact = sum((min(max(p, LO), HI) for _, _, p in _values() if p is not None), Decimal(0))
        assert total == float(exact)
        count = rewriter.build_plan(rewriter.parse("SELECT COUNT(*) FROM t"), cfg)
        assert held(gw, count)["decimals"] == {}  # no sum: not asked
    finally:
        frozen.discard()
