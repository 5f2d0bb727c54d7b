"""The per-record levels' boundary points (Chen et al. 2025): where the float-exact level CASE
and Python's level choice must agree — used by the DuckDB/Postgres and the Spark tests."""

from __future__ import annotations

import numpy as np

from mechanisms.per_record import Levels


def boundary_budgets(lv: Levels) -> np.ndarray:
    """ε_min, ε_max and every level edge with its two float neighbours, within range."""
    e = [lv.eps_min, lv.eps_max]
    for x in list(lv.hi) + list(lv.lo):
        e += [x, np.nextafter(x, 0), np.nextafter(x, np.inf)]
    e = np.array(e)
    return e[(e >= lv.eps_min) & (e <= lv.eps_max)]


def boundary_values(pf) -> list:
    """Values around each level edge's largest value (and small ones), float-exact."""
    lv = Levels.for_function(pf)
    vals = {0, 1, 2, pf.U - 1, pf.U, pf.U + 1, 2 * pf.U}
    for x in list(lv.hi) + list(lv.lo):
        V = pf.max_value(x)
        vals |= {V - 1, V, V + 1, -V}
    return sorted(v for v in vals if abs(v) < 2**53)
