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

When a group has fewer than k0 rows, c(y) ≤ n < k0 everywhere and the score is smallest below
the data: the shifted-rank answer then lies below the group's minimum. The capped-rank
mechanism (:class:`CappedRankExtreme`) aims at t(n) = min(k0, s·n) rows beyond the answer
for a public fraction s (1/2, 1/4, …): the shifted rank for n ≥ k0/s, a rank inside the data
below. Adding a row moves c(y) by 0 or 1 and s·n by s ≤ 1 in the same direction, so the
score |c(y) − t(n)| still has sensitivity 1 and the release is ε-DP; the exponential
mechanism's utility theorem (McSherry-Talwar 2007; Dwork-Roth Thm 3.11) gives
|c(y) − t(n)| ≤ k0 + ties with probability ≥ 1 − β, so at most t(n) + k0 ≤ 2·k0 rows lie
beyond the answer — the shifted rank's own statement.

Error law (both mechanisms; :meth:`ShiftedRankExtreme.expected_error`,
:meth:`ShiftedRankExtreme.useful_from`): the *relative rank error* of an answer y is
c(y)/n (the share of the group's rows beyond it) when y lies within the group's data range,
and 1 when it lies outside (no row has that value: no better than the other end). Its
expectation depends on how the rows lie on the grid; the law is computed exactly (the
mechanism's own pmf) on the *reference group*: n rows spread evenly over the middle half of
the declared range (ties when n exceeds its grid points). An answer is called useful when its
expected relative rank error is at most ``USEFUL`` (1/10). :func:`choose_extreme` picks, per
statement, the candidate with the least worst-case excess of that expectation over the best
candidate across group sizes (minimax regret over ``LAW_SIZES``): only ε/k, the grid and β
enter — never a group's true size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from .exact_choice import exp_weighted_index
from .once import single_flight
from .per_record.framework import shifted_rank_max
from .rng import RandomSource

__all__ = [
    "CappedRankExtreme",
    "RankTargetExtreme",
    "ExtremeGrid",
    "ShiftedRankExtreme",
    "USEFUL",
    "candidates",
    "choose_extreme",
    "reference_histogram",
    "regret",
]

USEFUL = 0.1  # expected relative rank error at or below which an answer is called useful
LAW_SIZES = (2, 5, 10, 20, 40, 70, 100, 200, 400, 1_000, 3_000, 10_000, 100_000)
CAP_SHARES = (Fraction(1, 2), Fraction(1, 4))  # the capped-rank candidates' s

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


def reference_arrays(n: int, U: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The error law's reference group: n rows spread evenly over the grid indices of the
    middle half of the declared range, [⌊U/4⌉, ⌊3U/4⌉] (module doc); ties when n exceeds
    them. (distinct indices ascending, row counts); symmetric, so MAX and MIN share it."""
    a, b = round(U / 4), round(3 * U / 4)
    if n <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if n == 1 or a == b:
        return np.array([(a + b) // 2], dtype=np.int64), np.array([n], dtype=np.int64)
    pos = np.floor(a + (b - a) * np.arange(n, dtype=np.float64) / (n - 1) + 0.5).astype(np.int64)
    counts = np.bincount(pos - a)
    idx = np.nonzero(counts)[0]
    return (a + idx).astype(np.int64), counts[idx].astype(np.int64)


def reference_histogram(n: int, U: int) -> list[tuple[int, int]]:
    """:func:`reference_arrays` as (grid index, row count) pairs."""
    v, m = reference_arrays(n, U)
    return list(zip(v.tolist(), m.tolist()))


class RankTargetExtreme:
    """An exponential mechanism for MAX (or MIN) over the grid with the score
    |D·c(y) − T(n)|/D, c(y) the rows beyond y, at γ = ε/(2D): what its subclasses share —
    the intervals of the grid on which c is constant, the exact draw, the pmf and the error law."""

    epsilon: float
    grid: ExtremeGrid
    func: str
    beta: float
    name: str
    kind: str  # "shifted" or "capped": the error law's cache key

    def _check(self, epsilon: float, grid: ExtremeGrid, func: str, beta: float) -> None:
        if not epsilon > 0 or not 0 < beta < 1 or func not in ("max", "min"):
            raise ValueError("need epsilon > 0, 0 < beta < 1 and func max or min")
        self.epsilon, self.grid, self.func, self.beta = float(epsilon), grid, func, float(beta)

    def privacy_map(self, d_in: int = 1) -> float:
        """ε per added or removed row (the score moves by ≤ 1: sensitivity 1)."""
        return self.epsilon * d_in

    @property
    def k0(self) -> int:
        return math.ceil(2.0 / self.epsilon * math.log((self.grid.U + 1) / self.beta))

    def rank_half_width(self) -> int:
        """With probability ≥ 1 − β at most this many rows lie beyond the answer (t(n) + k0
        ≤ 2·k0), plus the gap a tie block leaves (at most the most rows on one point)."""
        return 2 * self.k0

    def scale(self) -> int:
        """D: the score's denominator (scores are the integers D·|c − T(n)/D|)."""
        return 1

    def target(self, n: int) -> int:
        """T(n) = D·t(n): the scaled number of rows aimed at beyond the answer."""
        raise NotImplementedError

    def target_rows(self, n: int) -> float:
        """t(n): the rows the mechanism aims to leave beyond the answer in a group of n."""
        return self.target(n) / self.scale()

    def _oriented(self, hist: Sequence[tuple[int, int]]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(distinct oriented indices ascending, their row counts): j = i for MAX, U − i for MIN."""
        U = self.grid.U
        merged: dict[int, int] = {}
        for i, n in hist:
            i = min(max(int(i), 0), U)
            j = i if self.func == "max" else U - i
            merged[j] = merged.get(j, 0) + int(n)
        v = np.array(sorted(merged), dtype=np.int64)
        return v, np.array([merged[i] for i in v.tolist()], dtype=np.int64)

    def intervals(
        self, hist: Sequence[tuple[int, int]]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], int]:
        """(starts, lengths, rows beyond c, n) of the intervals of oriented grid indices
        (j = i for MAX, U − i for MIN) on which c is constant: below the lowest value, then
        from each distinct value up to the next."""
        return _intervals(*self._oriented(hist), self.grid.U)

    def release(self, hist: Sequence[tuple[int, int]], source: RandomSource) -> float | int:
        """``hist``: (grid index, row count) pairs of the group (any order, indices in [0, U])."""
        starts, length, c, n = self.intervals(hist)
        D = self.scale()
        idx = exp_weighted_index(
            length, np.abs(D * c - self.target(n)), Fraction(self.epsilon) / (2 * D), source
        )
        y = int(starts[idx]) + source.randbelow(int(length[idx]))
        return self.grid.value(y if self.func == "max" else self.grid.U - y)

    def pmf(self, hist: Sequence[tuple[int, int]]) -> NDArray[np.float64]:
        """Pr[answer = grid index i], i = 0..U (floats: for tests and the error law)."""
        starts, length, c, n = self.intervals(hist)
        D = self.scale()
        logw = -float(self.epsilon) / (2 * D) * np.abs(D * c - self.target(n)).astype(np.float64)
        w = np.exp(logw - logw.max())
        per_point = np.repeat(w, length)
        p: NDArray[np.float64] = per_point / per_point.sum()
        return p if self.func == "max" else p[::-1].copy()

    def law(self, n: int) -> tuple[float, float]:
        """(P[the answer lies outside the group's data range], expected relative rank error)
        on the reference group of n rows (module doc)."""
        return _law(self.kind, self.epsilon, self.grid.U, self.beta, self._law_key(), int(n))

    def _law_key(self) -> Fraction:
        return Fraction(0)

    def expected_error(self, n: int) -> float:
        """The expected relative rank error on the reference group of n rows: the share of
        its rows beyond the answer, 1 for an answer outside the data's range (module doc)."""
        return self.law(n)[1]

    def useful_from(self) -> int | None:
        """The smallest group size whose expected relative rank error is ≤ ``USEFUL``
        (None beyond 10^6 rows)."""
        return _useful_from(self.kind, self.epsilon, self.grid.U, self.beta, self._law_key())


def _intervals(
    v: NDArray[np.int64], m: NDArray[np.int64], U: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], int]:
    n = int(m.sum())
    starts = np.concatenate(([0], v)).astype(np.int64)
    ends = np.concatenate((v - 1, [U])).astype(np.int64)  # inclusive
    c = n - np.concatenate(([0], np.cumsum(m))).astype(np.int64)
    length = ends - starts + 1
    keep = length > 0
    return starts[keep], length[keep], c[keep], n


def _relative_error(
    m: RankTargetExtreme, v: NDArray[np.int64], counts: NDArray[np.int64]
) -> tuple[float, float]:
    """(P[outside the data range], expected relative rank error) of ``m`` on the oriented
    histogram (v, counts), exactly from its interval weights: the points of each interval
    inside [min v, max v] are in range, the rest outside."""
    starts, length, c, n = _intervals(v, counts, m.grid.U)
    if n == 0:
        return 1.0, 1.0
    D = m.scale()
    logw = -float(m.epsilon) / (2 * D) * np.abs(D * c - m.target(n)).astype(np.float64)
    w = np.exp(logw - logw.max())
    lo_v, hi_v = int(v[0]), int(v[-1])
    ends = starts + length - 1
    # points inside [lo_v, hi_v] of each interval, the rest is outside
    inside = np.clip(np.minimum(ends, hi_v) - np.maximum(starts, lo_v) + 1, 0, None)
    w_in, w_all = w * inside, w * length
    total = float(w_all.sum())
    miss = 1.0 - float(w_in.sum()) / total
    rel = miss + float((w_in * (c / n)).sum()) / total
    return miss, rel


@single_flight(maxsize=4096)
def _law(kind: str, epsilon: float, U: int, beta: float, key: Fraction, n: int) -> tuple[float, float]:
    grid = ExtremeGrid(0.0, float(U), 1.0, U, True)
    m: RankTargetExtreme = (
        CappedRankExtreme(epsilon, grid, "max", beta, key)
        if kind == "capped"
        else ShiftedRankExtreme(epsilon, grid, "max", beta)
    )
    return _relative_error(m, *reference_arrays(n, U))


@single_flight(maxsize=1024)
def _useful_from(kind: str, epsilon: float, U: int, beta: float, key: Fraction) -> int | None:
    """The smallest n with expected relative rank error ≤ USEFUL: the first such n of a
    geometric scan (ratio 5/4), then bisection below it (the error falls with n there)."""

    def ok(n: int) -> bool:
        return _law(kind, epsilon, U, beta, key, n)[1] <= USEFUL

    lo, n = 1, 2
    while n <= 1_000_000:
        if ok(n):
            while n - lo > 1:
                mid = (lo + n) // 2
                lo, n = (lo, mid) if ok(mid) else (mid, n)
            return n
        lo, n = n, max(n + 1, n * 5 // 4)
    return None


class ShiftedRankExtreme(RankTargetExtreme):
    """ε-DP MAX (or MIN) of the grid indices of one group's rows (Chen et al. 2025 §6.4):
    target t(n) = k0 rows beyond the answer, whatever n."""

    def __init__(self, epsilon: float, grid: ExtremeGrid, func: str = "max", beta: float = 0.05) -> None:
        self._check(epsilon, grid, func, beta)
        self.name = f"shifted_rank_{func}"
        self.kind = "shifted"

    def target(self, n: int) -> int:
        return self.k0

    def release(self, hist: Sequence[tuple[int, int]], source: RandomSource) -> float | int:
        """``hist``: (grid index, row count) pairs of the group (any order, indices in [0, U])."""
        U = self.grid.U
        v, m = self._oriented(hist)
        y, _ = shifted_rank_max(v, m, self.epsilon, self.beta, U, source)
        return self.grid.value(y if self.func == "max" else U - y)


class CappedRankExtreme(RankTargetExtreme):
    """ε-DP MAX (or MIN) aiming at t(n) = min(k0, s·n) rows beyond the answer (module doc):
    the shifted rank on groups of ≥ k0/s rows, a rank inside the data on smaller ones."""

    def __init__(
        self,
        epsilon: float,
        grid: ExtremeGrid,
        func: str = "max",
        beta: float = 0.05,
        share: Fraction = Fraction(1, 2),
    ) -> None:
        self._check(epsilon, grid, func, beta)
        share = Fraction(share)
        if not 0 < share <= 1 or share.denominator > 1000:
            raise ValueError("need 0 < share <= 1 with a denominator <= 1000")
        self.share = share
        self.name = f"capped_rank_{func}"
        self.kind = "capped"

    def scale(self) -> int:
        return self.share.denominator

    def target(self, n: int) -> int:
        return min(self.share.denominator * self.k0, self.share.numerator * int(n))

    def _law_key(self) -> Fraction:
        return self.share


def candidates(epsilon: float, grid: ExtremeGrid, func: str, beta: float) -> list[RankTargetExtreme]:
    """The mechanisms :func:`choose_extreme` compares: the shifted rank and the capped rank
    at each share of ``CAP_SHARES``."""
    out: list[RankTargetExtreme] = [ShiftedRankExtreme(epsilon, grid, func, beta)]
    out += [CappedRankExtreme(epsilon, grid, func, beta, s) for s in CAP_SHARES]
    return out


def regret(ms: Sequence[RankTargetExtreme]) -> list[float]:
    """Each mechanism's largest excess of expected relative rank error over the best of ``ms``
    across ``LAW_SIZES`` (the reference group's sizes)."""
    table = np.array([[m.expected_error(n) for n in LAW_SIZES] for m in ms])
    return [float(x) for x in (table - table.min(axis=0)).max(axis=1)]


def choose_extreme(
    epsilon: float, grid: ExtremeGrid, func: str, beta: float
) -> tuple[RankTargetExtreme, list[float]]:
    """The candidate with the least regret (module doc; ties: the first, the shifted rank) and
    every candidate's regret, in :func:`candidates`' order. Public inputs only."""
    ms = candidates(epsilon, grid, func, beta)
    r = regret(ms)
    return ms[int(np.argmin(r))], r
