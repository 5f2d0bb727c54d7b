"""A quantile (percentile_cont / percentile_disc / median) of a bounded numeric column
under central ε-DP (add-remove model): the exponential mechanism over the column's
public grid (Smith 2011, "Privacy-preserving statistical estimation with optimal
convergence rates", STOC; McSherry-Talwar 2007 for the mechanism), from one histogram.

The column is put on the grid of :class:`mechanisms.extreme.ExtremeGrid` (U + 1 points
over its declared bounds, like MAX/MIN). With c(y) = #{x ≤ y} (rows at or below grid
point y) and n the group's row count, y is drawn with

    Pr[y] ∝ exp(−ε · |c(y) − q·n| / 2).

Adding or removing one row x moves c(y) by 0 or 1 and q·n by q, so the score moves by at
most max(q, 1 − q) ≤ 1: sensitivity 1, the release is ε-DP. The draw is exact
(:func:`mechanisms.exact_choice.exp_weighted_index`, integer scores: q = P/D is the
decimal the analyst wrote, the score is scaled by D and γ = ε/(2D)). c is constant between
distinct values, so an interval is drawn with weight length · exp(…) and y uniformly in it.

Rank error (the exponential mechanism's utility theorem, McSherry-Talwar Thm 8 / Dwork-Roth
Thm 3.11 with Δu = 1): with probability ≥ 1 − β,
|c(y) − q·n| ≤ OPT + (2/ε) ln((U + 1)/β), where OPT = min_y |c(y) − q·n| is at most the
largest number of rows sharing one grid point. The error is a number of rows (a rank), not
value units: where the data are dense the value is close.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from .exact_choice import exp_weighted_index
from .extreme import ExtremeGrid
from .rng import RandomSource

__all__ = ["QuantileGrid", "ExpMechQuantile", "MAX_DENOMINATOR"]

MAX_DENOMINATOR = 10**6  # q written with at most 6 decimals (keeps integer scores small)

QuantileGrid = ExtremeGrid  # the same public grid as MAX/MIN


@dataclass(frozen=True)
class ExpMechQuantile:
    """ε-DP q-quantile of the grid indices of one group's rows."""

    epsilon: float
    grid: ExtremeGrid
    q: Fraction
    beta: float = 0.05

    def __post_init__(self) -> None:
        if not self.epsilon > 0 or not 0 < self.beta < 1 or not 0 <= self.q <= 1:
            raise ValueError("need epsilon > 0, 0 < beta < 1 and 0 <= q <= 1")
        if Fraction(self.q).denominator > MAX_DENOMINATOR:
            raise ValueError(f"q needs a denominator <= {MAX_DENOMINATOR}")

    name = "exponential_quantile"

    def privacy_map(self, d_in: int = 1) -> float:
        """ε per added or removed row (the score's sensitivity is max(q, 1 − q) ≤ 1)."""
        return self.epsilon * d_in

    def rank_half_width(self) -> int:
        """⌈(2/ε) ln((U + 1)/β)⌉: w.p. ≥ 1 − β the answer's rank is within this many rows of
        q·n, plus the rows tied at one grid point (see module doc)."""
        return math.ceil(2.0 / self.epsilon * math.log((self.grid.U + 1) / self.beta))

    def scores(
        self, hist: Sequence[tuple[int, int]]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], int]:
        """(interval starts, lengths, scaled scores D·|c − q·n|, D) of a histogram."""
        U = self.grid.U
        merged: dict[int, int] = {}
        for i, n in hist:
            i = min(max(int(i), 0), U)
            merged[i] = merged.get(i, 0) + int(n)
        v = np.array(sorted(merged), dtype=np.int64)
        m = np.array([merged[i] for i in v.tolist()], dtype=np.int64)
        n = int(m.sum())
        q = Fraction(self.q)
        P, D = q.numerator, q.denominator
        starts = np.concatenate(([0], v)).astype(np.int64)
        ends = np.concatenate((v - 1, [U])).astype(np.int64)  # inclusive
        c = np.concatenate(([0], np.cumsum(m))).astype(np.int64)  # rows at or below
        length = ends - starts + 1
        keep = length > 0
        return starts[keep], length[keep], np.abs(D * c[keep] - P * n), D

    def release(self, hist: Sequence[tuple[int, int]], source: RandomSource) -> float | int:
        """``hist``: (grid index, row count) pairs of the group (any order, indices in [0, U])."""
        starts, length, powers, D = self.scores(hist)
        idx = exp_weighted_index(length, powers, Fraction(self.epsilon) / (2 * D), source)
        return self.grid.value(int(starts[idx]) + source.randbelow(int(length[idx])))
