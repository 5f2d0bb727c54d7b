"""MAX / MIN of a bounded numeric column under central ε-DP (add-remove model).

The shifted-rank exponential mechanism of Chen et al. 2025 §6 (per-record spec §6.4,
:func:`mechanisms.per_record.framework.shifted_rank_max`) used directly, with one
budget for every row: the column is put on a public grid of U + 1 points over its
declared bounds; y is drawn with Pr[y] ∝ exp(−ε |c(y) − k0| / 2), c(y) = #{x > y},
k0 = ⌈(2/ε) ln((U + 1)/β)⌉. Adding or removing one row moves every c(y) by at most 1,
so the release is ε-DP — pure ε: the draw is exact (:mod:`mechanisms.exact_choice`; no
weight is rounded away, as a float64 CDF would below ~1e-16); with probability ≥ 1 − β at most 2·k0 rows lie above the
answer, plus up to the largest number of rows sharing one grid point (a tie block
makes c jump past k0: the score is then off by that gap) — the error is a number of rows, not of value units, and the
largest values are the best protected. MIN is MAX of U − v.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from .per_record.framework import shifted_rank_max
from .rng import RandomSource

__all__ = ["ExtremeGrid", "ShiftedRankExtreme"]

INT_GRID_MAX = 1_000_000  # an integer column keeps step 1 up to this range
FLOAT_GRID = 100_000  # points on a float (or wider integer) column's range


@dataclass(frozen=True)
class ExtremeGrid:
    """The public grid of a column's declared [lower, upper]: point i is lower + i·step."""

    lower: float
    upper: float
    step: float
    U: int
    integral: bool  # answers are integers (an int column)

    @classmethod
    def for_column(cls, type_: str, lower: float, upper: float) -> ExtremeGrid:
        span = float(upper) - float(lower)
        if type_ == "int" and span <= INT_GRID_MAX and float(lower).is_integer():
            return cls(float(lower), float(upper), 1.0, max(int(span), 0), True)
        U = FLOAT_GRID if span > 0 else 0
        return cls(float(lower), float(upper), span / U if U else 1.0, U, type_ == "int")

    def value(self, i: int) -> float | int:
        """Grid point i, computed in exact decimals (lower + i·step: 250.045, not 250.04500000000002)."""
        v = min(
            Fraction(repr(float(self.lower))) + i * Fraction(repr(float(self.step))),
            Fraction(repr(float(self.upper))),
        )
        return int(round(v)) if self.integral else float(v)


class ShiftedRankExtreme:
    """ε-DP MAX (or MIN) of the grid indices of one group's rows (Chen et al. 2025 §6.4)."""

    def __init__(self, epsilon: float, grid: ExtremeGrid, func: str = "max", beta: float = 0.05) -> None:
        if not epsilon > 0 or not 0 < beta < 1 or func not in ("max", "min"):
            raise ValueError("need epsilon > 0, 0 < beta < 1 and func max or min")
        self.epsilon, self.grid, self.func, self.beta = float(epsilon), grid, func, float(beta)
        self.name = f"shifted_rank_{func}"

    def privacy_map(self, d_in: int = 1) -> float:
        """ε per added or removed row (c(y) moves by ≤ 1: sensitivity 1 of the score)."""
        return self.epsilon * d_in

    @property
    def k0(self) -> int:
        return math.ceil(2.0 / self.epsilon * math.log((self.grid.U + 1) / self.beta))

    def rank_half_width(self) -> int:
        """With probability ≥ 1 − β at most this many rows lie beyond the answer, plus the
        gap a tie block leaves around k0 (at most the largest number of rows on one point)."""
        return 2 * self.k0

    def release(self, hist: Sequence[tuple[int, int]], source: RandomSource) -> float | int:
        """``hist``: (grid index, row count) pairs of the group (any order, indices in [0, U])."""
        U = self.grid.U
        merged: dict[int, int] = {}
        for i, n in hist:
            i = min(max(int(i), 0), U)
            j = i if self.func == "max" else U - i
            merged[j] = merged.get(j, 0) + int(n)
        values = sorted(merged)
        y, _ = shifted_rank_max(values, [merged[v] for v in values], self.epsilon, self.beta, U, source)
        return self.grid.value(y if self.func == "max" else U - y)
