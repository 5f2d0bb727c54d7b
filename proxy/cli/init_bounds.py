"""Bounds for ``dpgate init``: drawn ε-DP (the default), or exact, rounded out to a public grid.

A bound read from the private data is a disclosure (an exact MAX is one person's value), so by
default each is drawn with differential privacy — per privacy unit when the table reaches one
(a person's rows move the statistics by one unit's worth), else per row:

* **clamp bounds** (``lower``/``upper`` of a numeric or date column), as Google's ApproxBounds
  does: the public grid's cells (the 1-2-5 series of powers of ten, …, 0.5, 1, 2, 5, 10, …,
  their negatives and 0, for numbers; whole years 1900 … 2099 for dates) each count the units
  whose largest value lies in it (for ``upper``) or whose smallest does (for ``lower``), plus
  exact discrete Laplace noise of scale 1/ε_b (one unit moves one cell by one: sensitivity 1);
  the bound is the outermost cell whose noisy count reaches t = ⌈ln(k/β)/ε_b⌉ (k cells). By the
  union bound over the k cells (P[DLap(1/ε_b) ≥ t] ≤ e^{−ε_b t}), w.p. ≥ 1 − β no cell without
  units passes, so the bound is never beyond the data's range rounded out to the grid; a cell
  with 2t units or more passes w.p. ≥ 1 − β/k, so the values clamped lie in cells of fewer than
  2t units each. ε_b = ε/2 per bound (sequential composition: ε per column).
* **contribution bounds** (``max_rows_per_unit``): the same noisy, thresholded histogram over
  each unit's number of rows in the table, on a public grid of integers (1, 2, 3, 4, 5, 6, 8,
  10, 12, 15, 20, 25, 30, 40, 50, 60, 80 × powers of ten); its 95% quantile, read from the
  cells that pass (post-processing), is the bound: a unit's rows beyond it are left out of each
  answer (chosen by a keyed hash), so a few units lose some rows and every answer's noise,
  which grows with the bound, is that of the many.

``--exact-bounds`` writes the smallest and largest value instead (marked READ FROM THE PRIVATE
DATA), ``--round`` widened outward to the same grid (still read from the data: it says in which
grid cell the extreme lies, only coarser).
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from mechanisms.rng import RandomSource
from mechanisms.samplers import discrete_laplace

__all__ = [
    "BETA",
    "CONTRIBUTION_GRID",
    "CONTRIBUTION_QUANTILE",
    "DEFAULT_EPSILON",
    "DpBound",
    "YEARS",
    "dp_contribution_bound",
    "dp_date_bounds",
    "dp_numeric_bounds",
    "grid_125",
    "month_ceil",
    "month_floor",
    "noisy_cells",
    "noisy_outermost",
    "round_down",
    "round_up",
    "threshold",
    "year_index",
]

BOUNDS_PER_FILE = 64
"""The bounds one file may draw (32 columns' lower and upper)."""
BETA = 0.05 / BOUNDS_PER_FILE
"""Each bound's failure probability: by the union bound over the file's bounds, w.p. ≥ 95% NO bound
of the file lies in a cell without units (a bound far beyond the data makes every answer's noise
as wide as it is)."""
CONTRIBUTION_QUANTILE = 0.95  # max_rows_per_unit: this quantile of the units' row counts
DEFAULT_EPSILON = 0.1  # ε of each DP proposal (a column's bounds, a table's contribution bound)
FIRST_YEAR, LAST_YEAR = 1900, 2099
YEARS = LAST_YEAR - FIRST_YEAR + 1
CONTRIBUTION_GRID = (
    (1, 2, 3, 4, 5, 6, 8)
    + tuple(m * 10**k // 10 for k in range(1, 5) for m in (10, 12, 15, 20, 25, 30, 40, 50, 60, 80))
    + (100_000,)  # the largest max_rows_per_unit the config takes
)


def grid_125(integral: bool) -> tuple[float, ...]:
    """The public 1-2-5 grid: 0, ±{1, 2, 5}·10^k, k = −3 … 12 (integers: k = 0 … 12)."""
    pos = [float(f"{m}e{k}") for k in range(0 if integral else -3, 13) for m in (1, 2, 5)]
    return tuple([-p for p in reversed(pos)] + [0.0] + pos)


def _num(x: float, integral: bool) -> float | int:
    return int(x) if integral and float(x).is_integer() else x


def round_down(x: float, integral: bool = False) -> float | int:
    """The largest grid point <= x (x itself beyond the grid)."""
    g = grid_125(integral)
    i = bisect.bisect_right(g, x) - 1
    return _num(g[i], integral) if i >= 0 else x


def round_up(x: float, integral: bool = False) -> float | int:
    """The smallest grid point >= x (x itself beyond the grid)."""
    g = grid_125(integral)
    i = bisect.bisect_left(g, x)
    return _num(g[i], integral) if i < len(g) else x


def month_floor(v: dt.date | dt.datetime, timestamp: bool) -> str:
    """The first moment of v's month, as an ISO bound."""
    first = dt.date(v.year, v.month, 1)
    return f"{first} 00:00:00" if timestamp else str(first)


def month_ceil(v: dt.date | dt.datetime, timestamp: bool) -> str:
    """The last day (moment) of v's month, as an ISO bound."""
    nxt = dt.date(v.year + v.month // 12, v.month % 12 + 1, 1)
    last = nxt - dt.timedelta(days=1)
    return f"{last} 23:59:59" if timestamp else str(last)


def year_index(year: int) -> int:
    """A year's cell on the public grid of years 1900 … 2099 (clamped)."""
    return min(max(int(year) - FIRST_YEAR, 0), YEARS - 1)


@dataclass(frozen=True)
class DpBound:
    lower: object  # None: no cell passed (too few units for this ε)
    upper: object
    epsilon: float  # spent (ε/2 per bound)
    units: int  # 2t: w.p. >= 1 - β each cell beyond a bound holds fewer than this many units


def threshold(eps_bound: float, k: int) -> int:
    """t = ⌈ln(k/β)/ε_b⌉: P[DLap(1/ε_b) ≥ t] ≤ e^{−ε_b t} ≤ β/k, so w.p. ≥ 1 − β none of k
    empty cells passes (union bound)."""
    return math.ceil(math.log(k / BETA) / eps_bound)


def noisy_cells(counts: list[int], eps_bound: float, source: RandomSource) -> list[int | None]:
    """Each cell's count plus discrete Laplace noise of scale 1/ε_b, or None where that falls
    below :func:`threshold` (ε_b-DP for counts that one unit moves by one in total: each unit
    counted in one cell; every cell is noised, whichever pass)."""
    t = threshold(eps_bound, len(counts))
    scale = 1 / Fraction(eps_bound)
    noisy = [c + discrete_laplace(scale, source) for c in counts]
    return [v if v >= t else None for v in noisy]


def noisy_outermost(counts: list[int], eps_bound: float, source: RandomSource, top: bool) -> int | None:
    """The index of the outermost cell (the last if ``top``, else the first) that passes
    :func:`noisy_cells` (None: none does)."""
    passed = [i for i, v in enumerate(noisy_cells(counts, eps_bound, source)) if v is not None]
    if not passed:
        return None
    return passed[-1] if top else passed[0]


def dp_numeric_bounds(
    n: int, above: list[int], below: list[int], integral: bool, eps: float, source: RandomSource
) -> DpBound:
    """``n`` units (or rows) with a value; ``above[i]`` = how many have their largest value >
    g_i, ``below[i]`` = how many have their smallest value < g_i, over the 1-2-5 grid g.

    The bounds always hold 0 (a clamp range that holds 0 changes no SUM of the values inside
    it, and most columns are not negative): ``upper`` is the top of the outermost positive
    cell (g_{i−1}, g_i] that passes, counting the units' largest values (those beyond the grid
    in its top cell), else 0; ``lower`` the bottom of the outermost negative cell [g_i,
    g_{i+1}) that passes, counting their smallest values, else 0."""
    g = grid_125(integral)
    zero = g.index(0.0)
    up = [above[i - 1] - above[i] for i in range(zero + 1, len(g))]  # cells (g_{i−1}, g_i], g_i > 0
    up[-1] += above[-1]
    low = [below[i + 1] - below[i] for i in range(zero)]  # cells [g_i, g_{i+1}), g_{i+1} ≤ 0
    low[0] += below[0]
    hi = noisy_outermost(up, eps / 2, source, top=True)
    lo = noisy_outermost(low, eps / 2, source, top=False)
    units = 2 * threshold(eps / 2, len(up))
    if hi is None and lo is None:
        return DpBound(None, None, eps, units)
    upper = 0.0 if hi is None else g[zero + 1 + hi]
    lower = 0.0 if lo is None else g[lo]
    return DpBound(_num(lower, integral), _num(upper, integral), eps, units)


def dp_date_bounds(
    max_years: Mapping[int, int],
    min_years: Mapping[int, int],
    timestamp: bool,
    eps: float,
    source: RandomSource,
) -> DpBound:
    """``max_years[y]`` = units whose latest value is in year y, ``min_years[y]`` = units whose
    earliest is; bounds on whole years (the first moment of the lower's, the last of the
    upper's)."""
    up, low = [0] * YEARS, [0] * YEARS
    for y, c in max_years.items():
        up[year_index(y)] += int(c)
    for y, c in min_years.items():
        low[year_index(y)] += int(c)
    hi = noisy_outermost(up, eps / 2, source, top=True)
    lo = noisy_outermost(low, eps / 2, source, top=False)
    units = 2 * threshold(eps / 2, YEARS)
    if hi is None or lo is None:
        return DpBound(None, None, eps, units)
    lo, hi = min(lo, hi), max(lo, hi)
    first, last = dt.date(FIRST_YEAR + lo, 1, 1), dt.date(FIRST_YEAR + hi, 12, 31)
    if timestamp:
        return DpBound(f"{first} 00:00:00", f"{last} 23:59:59", eps, units)
    return DpBound(str(first), str(last), eps, units)


def dp_contribution_bound(
    rows_per_unit: Mapping[int, int], eps: float, source: RandomSource, q: float = CONTRIBUTION_QUANTILE
) -> int | None:
    """``rows_per_unit[r]`` = how many units have r rows: the ``q``-quantile of the units' row
    counts on :data:`CONTRIBUTION_GRID`, read from the cells that pass :func:`noisy_cells`
    (ε-DP; the quantile of the passing noisy counts is post-processing): the smallest grid
    point with at most (1 − q) of the passing units' noisy count above it (None: no cell
    passes)."""
    g = CONTRIBUTION_GRID
    cells = [0] * len(g)
    for r, c in rows_per_unit.items():
        cells[min(bisect.bisect_left(g, int(r)), len(g) - 1)] += int(c)
    kept = [v or 0 for v in noisy_cells(cells, eps, source)]
    total = sum(kept)
    if total == 0:
        return None
    above = total
    for i, v in enumerate(kept):
        above -= v
        if v and above <= (1 - q) * total:
            return g[i]
    return g[-1]
