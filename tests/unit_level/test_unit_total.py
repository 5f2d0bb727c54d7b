"""``max_rows_scope = "total"`` (rewriter/unit.py ``per_unit_scan``): R rows per
unit in the whole statement, on DuckDB, Postgres and Spark (its keyed integer and window
spelled per dialect), with bounds that BIND.

The fixture (test_unit_bounds.py's rows: every row of one (unit, cell) carries the same
amount, so a share of r rows sums to exactly r·amount) lets each expectation be computed
independently in Python:
* a unit with N ≤ R rows keeps them all; with N > R its cells keep shares r_c with
  Σ_c r_c = R exactly and r_c ∈ {⌊n_c·R/N⌋, ⌈n_c·R/N⌉} (keyed running-sum rounding);
* so COUNT(*) over all cells = Σ_u min(N_u, R) exactly, and each cell's COUNT and SUM
  lie between the floor and ceiling totals;
* COUNT(DISTINCT u) counts a unit only where r_c ≥ 1: at most min(R, cells_u) cells each;
* the group-privacy factor is k = R (COUNT(DISTINCT u) alone: min(R, G, cells));
* with R above every unit's rows (binds nothing) the answers equal the analyst's query;
* between neighbours that differ by one unit, the exact measures move by at most k = R
  rows' worth (the audit's sensitivity step, test_unit_audit.py).
"""

from __future__ import annotations

import math

import duckdb
import pytest

import rewriter
from config import parse_config
from proxy.pipeline.explain import single_tier_lines
from proxy.pipeline.notice import unit_text
from rewriter.unit import factor
from support.bound import duck_rows

from .engines import engine
from .test_unit_audit import neighbours
from .test_unit_bounds import CELLS, ROWS

SQL = "SELECT g, COUNT(*), SUM(a), COUNT(DISTINCT u) FROM t GROUP BY g"


def _raw_config(R: int, G: int = 6) -> dict:
    return {
        "tiers": {"default": {"epsilon": 1, "budget": 10}},
        "roles": {"a": {"tier": "default"}},
        "server": {"auth": "trust"},
        "tables": {
            "t": {
                "privacy_unit": "u",
                "max_groups_per_unit": G,
                "max_rows_per_unit": R,
                "max_rows_scope": "total",
                "columns": {
                    "u": {"type": "int"},
                    "g": {"type": "int", "domain": CELLS},
                    "a": {"type": "float", "lower": 0, "upper": 10},
                },
            }
        },
    }


def _config(R: int, G: int = 6):
    return parse_config(_raw_config(R, G))


@pytest.fixture(scope="module", params=["duckdb", "postgres", "spark"])
def run(request):
    with engine(request, "unit_total") as e:
        e.run("CREATE TABLE t (u INTEGER, g INTEGER, a DOUBLE PRECISION)")
        e.insert("t", ROWS)
        yield e.dialect, e.run


def _scan(run, sql: str, R: int, salt: str = "0a1b", G: int = 6):
    dialect, go = run
    plan = rewriter.build_plan(rewriter.parse(sql), _config(R, G))
    return rewriter.complete(plan, go(rewriter.to_sql(plan, dialect, salt)))


def _units(where=lambda g: True) -> dict[int, dict[int, tuple[int, float]]]:
    """unit -> cell -> (rows, amount)."""
    out: dict[int, dict] = {}
    for u, g, a in ROWS:
        if u is not None and where(g):
            n, _ = out.setdefault(u, {}).get(g, (0, a))
            out[u][g] = (n + 1, a)
    return out


@pytest.mark.parametrize("R", [1, 5, 40])
def test_total_bound_keeps_exactly_r_rows_in_proportion(run, R):
    got = {int(g): (int(c), float(s), int(d)) for g, c, s, d in _scan(run, SQL, R)}
    lo = {g: [0, 0.0] for g in CELLS}
    hi = {g: [0, 0.0] for g in CELLS}
    kept = 0
    for cells in _units().values():
        N = sum(n for n, _ in cells.values())
        kept += min(N, R)
        for g, (n, a) in cells.items():
            f, c = (n, n) if N <= R else (n * R // N, math.ceil(n * R / N))
            lo[g][0] += f
            lo[g][1] += f * a
            hi[g][0] += c
            hi[g][1] += c * a
    assert sum(c for c, _, _ in got.values()) == kept  # Σ shares = min(N, R) exactly
    for g in CELLS:
        c, s, _ = got[g]
        assert lo[g][0] <= c <= hi[g][0], (g, c, lo[g], hi[g])
        assert lo[g][1] - 1e-9 <= s <= hi[g][1] + 1e-9, (g, s, lo[g], hi[g])
    assert _scan(run, SQL, R) == _scan(run, SQL, R)  # deterministic per salt
    other = {int(g): int(c) for g, c, _, _ in _scan(run, SQL, R, salt="ffee")}
    assert sum(other.values()) == kept  # another salt: same invariant


@pytest.mark.parametrize("R", [1, 3])
def test_units_counted_only_where_they_keep_rows(run, R):
    got = _scan(run, SQL, R)
    units = _units()
    most = sum(min(R, len(cells)) for cells in units.values())
    least = sum(
        sum(
            1
            for n, _ in cells.values()
            if sum(m for m, _ in cells.values()) <= R or n * R >= sum(m for m, _ in cells.values())
        )
        for cells in units.values()
    )
    assert least <= sum(int(r[3]) for r in got) <= most


def test_no_group_by(run):
    ((c, s),) = _scan(run, "SELECT COUNT(*), SUM(a) FROM t WHERE g <> 3", R=4)
    units = _units(lambda g: g != 3)
    assert int(c) == sum(min(sum(n for n, _ in cells.values()), 4) for cells in units.values())
    lo = hi = 0.0
    for cells in units.values():
        vals = sorted(a for n, a in cells.values() for _ in range(n))
        lo += sum(vals[:4]) if len(vals) > 4 else sum(vals)
        hi += sum(vals[-4:]) if len(vals) > 4 else sum(vals)
    assert lo - 1e-9 <= float(s) <= hi + 1e-9


def test_loose_bound_is_the_analysts_answer(run):
    dialect, go = run
    raw = {
        int(r[0]): (int(r[1]), float(r[2]), int(r[3]))
        for r in go(SQL.replace("FROM t", "FROM t WHERE u IS NOT NULL"))
    }
    got = {int(g): (int(c), float(s), int(d)) for g, c, s, d in _scan(run, SQL, R=100_000)}
    assert got == raw  # integral amounts: the sums are exact


def test_factor_is_r():
    for sql, k in [
        (SQL, 7),
        ("SELECT COUNT(*) FROM t", 7),
        ("SELECT g, COUNT(DISTINCT u) FROM t GROUP BY g", 6),
        ("SELECT COUNT(DISTINCT u) FROM t", 1),
    ]:
        assert factor(rewriter.build_plan(rewriter.parse(sql), _config(7))) == k, sql
    plan = rewriter.build_plan(rewriter.parse("SELECT g, COUNT(DISTINCT u) FROM t GROUP BY g"), _config(2))
    assert factor(plan) == 2  # min(R, G, cells)


def test_ranked_rows_path_keeps_r_rows_in_all(run):
    """COUNT(DISTINCT g) ranks the rows themselves (``kept_rows``): in total mode within
    the unit, so R = 1 keeps one row of a unit in all (one cell), where per cell R = 1
    keeps one in each of its cells; a loose R is the raw answer."""
    units = _units()
    heavy = next(u for u, cells in units.items() if len(cells) >= 4)
    sql = f"SELECT COUNT(DISTINCT g) FROM t WHERE u = {heavy}"
    assert int(_scan(run, sql, R=1)[0][0]) == 1
    assert int(_scan(run, sql, R=100_000)[0][0]) == len(units[heavy])


@pytest.mark.parametrize("R", [1, 7, 60])
@pytest.mark.parametrize("name,other", list(neighbours()), ids=lambda v: v if isinstance(v, str) else "")
def test_total_mode_sensitivity_between_unit_neighbours(R, name, other):
    """The audit's step 1 (test_unit_audit.py) for total mode: between databases that
    differ by one unit and all its rows, the exact measure vectors differ in L1 by at most
    k = R rows' worth (COUNT ≤ R, clamped SUM ≤ R·10, COUNT(a) ≤ R) and COUNT(DISTINCT u)
    by ≤ min(R, cells): the other units' shares depend on their own rows only."""
    sql = "SELECT g, COUNT(*), SUM(a), COUNT(a), COUNT(DISTINCT u) FROM t GROUP BY g"

    def scan(rows):
        con = duckdb.connect()
        con.execute("CREATE TABLE t (u INTEGER, g INTEGER, a DOUBLE)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
        plan = rewriter.build_plan(rewriter.parse(sql), _config(R))
        out = rewriter.complete(plan, duck_rows(con, rewriter.to_sql(plan, "duckdb", "5eed")))
        con.close()
        return plan, out

    plan, a = scan(ROWS)
    _, b = scan(other)
    assert factor(plan) == R
    l1 = [sum(abs(float(x[j]) - float(y[j])) for x, y in zip(a, b)) for j in (1, 2, 3, 4)]
    assert l1[0] <= R and l1[1] <= R * 10 + 1e-9 and l1[2] <= R and l1[3] <= min(R, len(CELLS)), (name, l1)


def test_notice_and_explain_say_the_bound_is_in_all():
    plan = rewriter.build_plan(rewriter.parse(SQL), _config(7))
    text = unit_text(plan)
    assert "at most 7 row(s) in all" in text and "in proportion" in text and "ε/7" in text
    lines = "\n".join(single_tier_lines(plan, parse_config(_raw_config(7)).tiers["default"]))
    assert "more than 7 row(s) in all" in lines
