"""Bounds for ``dpgate init``: exact, rounded outward to a public grid, or DP.

A bound read from the private data is a disclosure (an exact MAX is one person's value).
Two ways to publish less:

* ``--round``: outward to a PUBLIC grid fixed before looking at the data — the 1-2-5
  series of powers of ten (…, 0.5, 1, 2, 5, 10, 20, 50, …, and their negatives, and 0)
  for numbers, whole months for dates. Still read from the data (it says in which grid
  cell the extreme lies), only coarser.
* ``--dp-bounds EPS``: ε-DP bounds by AboveThreshold (the sparse vector technique, exact
  discrete Laplace noise) over the same public grid (numbers) or over the months 1900-01 …
  2099-12 (dates), ε/2 per bound (sequential composition: ε per column): scanning inward from
  the grid's end, the bound is the last cell before the count of rows beyond it passes a noisy
  threshold T. W.p. >= 1 − β fewer than 2T rows lie beyond it (:func:`threshold`); they are
  clamped by SUM/AVG, not lost. (An exponential mechanism over the cells, as MAX uses, would
  tie every cell above the data — all clamp 0 rows — and draw the bound uniformly among
  them on a coarse grid.)
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

from mechanisms.rng import RandomSource
from mechanisms.samplers import discrete_laplace

__all__ = [
    "BETA",
    "MONTHS",
    "DpBound",
    "above_threshold",
    "dp_date_bounds",
    "dp_numeric_bounds",
    "grid_125",
    "month_ceil",
    "month_floor",
    "month_index",
    "month_value",
    "round_down",
    "round_up",
    "threshold",
]

BETA = 0.05  # rank-error statements hold with probability 1 − β = 95%
FIRST_YEAR, LAST_YEAR = 1900, 2099
MONTHS = (LAST_YEAR - FIRST_YEAR + 1) * 12


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


def month_index(v: dt.date | dt.datetime) -> int:
    """v's month on the public grid of months 1900-01 … 2099-12 (clamped)."""
    return min(max((v.year - FIRST_YEAR) * 12 + v.month - 1, 0), MONTHS - 1)


def month_value(i: int) -> dt.date:
    return dt.date(FIRST_YEAR + i // 12, i % 12 + 1, 1)


@dataclass(frozen=True)
class DpBound:
    lower: object
    upper: object
    epsilon: float  # spent on this column (ε/2 per bound)
    rows: int  # w.p. >= 1 - β (each bound) fewer than this many rows lie beyond it


def threshold(eps_bound: float, k: int) -> int:
    """T = α = ⌈8 ln(2k/β) / ε_b⌉: AboveThreshold over k queries is (α, β)-accurate (Dwork &
    Roth 2014, Thm 3.24): w.p. >= 1 − β it halts on no query below T − α = 0 rows and passes
    none of 2α rows or more."""
    return math.ceil(8 * math.log(2 * k / BETA) / eps_bound)


def above_threshold(queries: list[int], eps_bound: float, source: RandomSource) -> int | None:
    """AboveThreshold (Dwork & Roth 2014, Alg. 1) with exact discrete Laplace noise
    (:func:`mechanisms.samplers.discrete_laplace`): ρ ~ DLap(2/ε_b) on the threshold, ν_i ~
    DLap(4/ε_b) on each integer, sensitivity-1 query; the index of the first query with
    q_i + ν_i >= T + ρ (None: none). ε_b-DP however many queries it reads."""
    eps = Fraction(eps_bound)
    t = threshold(eps_bound, len(queries)) + discrete_laplace(2 / eps, source)
    for i, q in enumerate(queries):
        if q + discrete_laplace(4 / eps, source) >= t:
            return i
    return None


def _draw(above: list[int], below: list[int], eps: float, source: RandomSource) -> tuple[int, int, int]:
    """(lower cell, upper cell, 2T): ε/2 for each bound (sequential composition: ε). The upper
    bound scans the cells from the top down, asking #rows above g_i, and stops on the first
    that passes the noisy threshold: the bound is the cell scanned just before (the top cell
    if the first passes). The lower bound likewise from the bottom up with #rows below g_i."""
    U = len(above) - 1
    i = above_threshold(above[::-1], eps / 2, source)
    hi = 0 if i is None else min(U - i + 1, U)
    j = above_threshold(below, eps / 2, source)
    lo = U if j is None else max(j - 1, 0)
    return min(lo, hi), max(lo, hi), 2 * threshold(eps / 2, U + 1)  # an inverted pair: post-processing


def dp_numeric_bounds(
    above: list[int], below: list[int], integral: bool, eps: float, source: RandomSource
) -> DpBound:
    """``above[i]`` = #{x > g_i}, ``below[i]`` = #{x < g_i} over the 1-2-5 grid g (non-null rows)."""
    g = grid_125(integral)
    lo, hi, rows = _draw(above, below, eps, source)
    return DpBound(_num(g[lo], integral), _num(g[hi], integral), eps, rows)


def dp_date_bounds(
    month_counts: dict[int, int], timestamp: bool, eps: float, source: RandomSource
) -> DpBound:
    """``month_counts``: rows per month index (:func:`month_index`); a bound at month i is its
    first moment (lower) or its last (upper)."""
    per = [month_counts.get(i, 0) for i in range(MONTHS)]
    n = sum(per)
    upto = list(itertools.accumulate(per))  # rows in months <= i
    above = [n - u for u in upto]
    below = [u - p for u, p in zip(upto, per)]
    lo, hi, rows = _draw(above, below, eps, source)
    return DpBound(month_floor(month_value(lo), timestamp), month_ceil(month_value(hi), timestamp), eps, rows)
