"""Privacy audit of MAX / MIN and percentiles with a privacy unit: neighbouring databases that differ by ONE
unit and all of its rows, through the real histogram scan (rewriter/extreme.py on DuckDB) and
the mechanism the proxy chooses (proxy/pipeline/extreme.py ``extreme_mechanism``; the capped
rank and the shifted rank both checked; for a percentile ``quantile_mechanism``, the plain
exponential mechanism and the protected quantile).

1. Sensitivity, exactly: the kept histograms of D and D' differ in L1 by at most
   k = min(G, cells)·R rows (:func:`rewriter.unit.factor`).
2. The release is ε-DP per unit, exactly: each mechanism runs at ε/k with a score of
   sensitivity 1 per row, so its output probabilities (its exact pmf over the grid) on D and D'
   differ by a factor ≤ e^ε at every grid point (group privacy over the k rows).
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import duckdb
import numpy as np
import pytest

import rewriter
from config import parse_config
from mechanisms.extreme import CappedRankExtreme, ExtremeGrid, ShiftedRankExtreme
from mechanisms.quantile import ExpMechQuantile, ProtectedQuantile
from proxy.pipeline.extreme import BETA, extreme_mechanism, quantile_mechanism
from rewriter.extreme import build_extreme_plan, histogram_sql
from rewriter.unit import factor
from support.bound import duck_rows

EPS, LO, HI = 1.0, 0, 100


def _config(G: int, R: int):
    return parse_config(
        {
            "tiers": {"default": {"epsilon": EPS, "budget": 10}},
            "roles": {"a": {"tier": "default"}},
            "server": {"auth": "trust"},
            "tables": {
                "t": {
                    "privacy_unit": "u",
                    "max_groups_per_unit": G,
                    "max_rows_per_unit": R,
                    "columns": {
                        "u": {"type": "int"},
                        "a": {"type": "int", "lower": LO, "upper": HI},
                    },
                }
            },
        }
    )


def _rows(seed: int = 3) -> list[tuple]:
    """The audit's case: about 40 kept rows with values 20..60 of [0, 100], from 16 units."""
    rnd = random.Random(seed)
    return [(u, rnd.randint(20, 60)) for u in range(16) for _ in range(rnd.randint(1, 4))]


ROWS = _rows()


def neighbours():
    yield "add a unit with 50 rows at the upper bound", ROWS + [(999, HI)] * 50
    yield "add a unit with 50 rows at the lower bound", ROWS + [(999, LO)] * 50
    yield "add a unit with one row above the data", ROWS + [(998, 90)]
    yield (
        "remove the heaviest unit",
        [r for r in ROWS if r[0] != max(ROWS, key=lambda r: sum(x[0] == r[0] for x in ROWS))[0]],
    )
    yield "remove a unit", [r for r in ROWS if r[0] != 5]


def _hist(rows, sql: str, G: int, R: int):
    con = duckdb.connect()
    con.execute("CREATE TABLE t (u INTEGER, a INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?)", rows)
    xp = build_extreme_plan(rewriter.parse(sql), _config(G, R))
    out = duck_rows(con, histogram_sql(xp, LO, 1.0, HI - LO, True, "duckdb", "5eed"))
    con.close()
    return xp, [(int(v), int(n)) for v, n in out]


@pytest.mark.parametrize("G,R", [(2, 3), (1, 1), (3, 5)])
@pytest.mark.parametrize("func", ["max", "min"])
@pytest.mark.parametrize("name,other", list(neighbours()), ids=lambda v: v if isinstance(v, str) else "")
def test_extreme_release_ratio_between_unit_neighbours(G, R, func, name, other):
    sql = f"SELECT {func.upper()}(a) FROM t"
    xp, a = _hist(ROWS, sql, G, R)
    _, b = _hist(other, sql, G, R)
    k = factor(xp.plan)
    assert k == min(G, 1) * R
    da, db = dict(a), dict(b)
    assert sum(abs(da.get(i, 0) - db.get(i, 0)) for i in set(da) | set(db)) <= k, name
    grid = ExtremeGrid.for_column("int", LO, HI)
    chosen = extreme_mechanism(EPS / k, grid, func)
    for m in (
        chosen,
        ShiftedRankExtreme(EPS / k, grid, func, BETA),
        CappedRankExtreme(EPS / k, grid, func, BETA),
    ):
        p, q = m.pmf(a), m.pmf(b)
        assert float(np.max(np.abs(np.log(p / q)))) <= EPS + 1e-9, (m.name, name)


@pytest.mark.parametrize("G,R", [(2, 3), (3, 5)])
@pytest.mark.parametrize("q", ["0.9", "0.1", "0.5"])
@pytest.mark.parametrize("name,other", list(neighbours()), ids=lambda v: v if isinstance(v, str) else "")
def test_percentile_release_ratio_between_unit_neighbours(G, R, q, name, other):
    """The same for percentile_cont(q): the mechanism the proxy chooses, the plain exponential
    mechanism and the protected quantile, exact pmf ratio ≤ e^ε between unit neighbours."""
    sql = f"SELECT percentile_cont({q}) WITHIN GROUP (ORDER BY a) FROM t"
    xp, a = _hist(ROWS, sql, G, R)
    _, b = _hist(other, sql, G, R)
    k = factor(xp.plan)
    grid = ExtremeGrid.for_column("int", LO, HI)
    qf = Fraction(q)
    for m in (
        quantile_mechanism(EPS / k, grid, qf),
        ExpMechQuantile(EPS / k, grid, qf, BETA),
        ProtectedQuantile(EPS / k, grid, qf, BETA, Fraction(1, 2)),
    ):
        p, r = m.pmf(a), m.pmf(b)
        assert float(np.max(np.abs(np.log(p / r)))) <= EPS + 1e-9, (m.name, name)


def test_the_audit_case_is_the_small_group_the_choice_is_for():
    """G 2, R 3, ε 1: k = 3, and the group is smaller than the shifted rank's k0 (46)."""
    xp, a = _hist(ROWS, "SELECT MAX(a) FROM t", 2, 3)
    m = ShiftedRankExtreme(EPS / factor(xp.plan), ExtremeGrid.for_column("int", LO, HI))
    assert sum(n for _, n in a) < m.k0 == math.ceil(6 * math.log(101 / BETA))
