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
for a public fraction s (1/2, 1/4, …): the shifted rank's aim for n ≥ k0/s, a rank inside the
data below. Its score is the distance from t(n) to the answer's *ranks*
[c(y), c⁺(y)], c⁺(y) = #{x ≥ y}: max(0, c(y) − t(n), t(n) − c⁺(y)), so a grid point whose tie
block contains the aim scores 0 (the shifted rank's |c(y) − k0| scores the gap a tie block
leaves around k0, and above the maximum of a heavily tied column it scores no worse than the
maximum itself). Adding a row moves c and c⁺ by 0 or 1 each and s·n by s ≤ 1, each term of
the max by at most 1: sensitivity 1, the release is ε-DP. Some point's ranks contain t(n)
(the ranks of the grid's points cover 0..n), so the exponential mechanism's utility theorem
(McSherry-Talwar 2007; Dwork-Roth Thm 3.11) gives a score ≤ k0 with probability ≥ 1 − β:
at most t(n) + k0 ≤ 2·k0 rows lie beyond the answer — the shifted rank's statement, without
its tie term.

Error law (:meth:`RankTargetExtreme.expected_error`, :meth:`RankTargetExtreme.useful_from`,
:meth:`RankTargetExtreme.law`; every mechanism here has them): the *relative rank error* of
an answer y is c(y)/n (the share of the group's rows beyond it) when y lies within the group's data range,
and 1 when it lies outside (no row has that value: no better than the other end). Its
expectation depends on how the rows lie on the grid; the law is computed exactly (the
mechanism's own pmf) on two *reference groups* and averaged: n rows spread evenly over the
middle half, and over the middle tenth, of the declared range (ties when n exceeds their grid
points) — declared bounds are often much wider than the data, and the grid beyond the data is
what an answer must be kept out of (``REFERENCE_SPANS``). An answer is called useful when its
expected relative rank error is at most ``USEFUL`` (1/10). :func:`choose_extreme` picks, per
statement, the candidate with the least worst-case excess of that expectation over the best
candidate across group sizes (minimax regret over ``LAW_SIZES``): only ε/k, the grid and β
enter — never a group's true size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
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
    "REFERENCE_SPANS",
    "USEFUL",
    "candidates",
    "choose_extreme",
    "first_useful",
    "rank_error_law",
    "reference_arrays",
    "reference_histogram",
    "regret",
]

USEFUL = 0.1  # expected relative rank error at or below which an answer is called useful
REFERENCE_SPANS = (Fraction(1, 2), Fraction(1, 10))  # the reference groups' share of the declared range
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


def reference_arrays(
    n: int, U: int, span: Fraction = REFERENCE_SPANS[0]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """An error law's reference group: n rows spread evenly over the grid indices of the middle
    ``span`` of the declared range, [⌊U(1 − span)/2⌉, ⌊U(1 + span)/2⌉] (module doc); ties when
    n exceeds them. (distinct indices ascending, row counts); symmetric, so MAX and MIN share it."""
    a, b = round(U * (1 - span) / 2), round(U * (1 + span) / 2)
    if n <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if n == 1 or a == b:
        return np.array([(a + b) // 2], dtype=np.int64), np.array([n], dtype=np.int64)
    pos = np.floor(a + (b - a) * np.arange(n, dtype=np.float64) / (n - 1) + 0.5).astype(np.int64)
    counts = np.bincount(pos - a)
    idx = np.nonzero(counts)[0]
    return (a + idx).astype(np.int64), counts[idx].astype(np.int64)


def reference_histogram(n: int, U: int, span: Fraction = REFERENCE_SPANS[0]) -> list[tuple[int, int]]:
    """:func:`reference_arrays` as (grid index, row count) pairs."""
    v, m = reference_arrays(n, U, span)
    return list(zip(v.tolist(), m.tolist()))


def rank_pieces(
    v: NDArray[np.int64], m: NDArray[np.int64], U: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], int]:
    """The grid 0..U of an oriented histogram (v ascending distinct, m their rows) cut into
    pieces on which the rows above and at-or-above are constant: below the lowest value, then
    each value's point and the gap up to the next value. (starts, lengths, gt = #{x > y},
    ge = #{x ≥ y}, n); gt = ge except on a value's point, where ge − gt is its rows."""
    n = int(m.sum())
    if v.size == 0:
        one = np.array([0], dtype=np.int64)
        return one, np.array([U + 1], dtype=np.int64), one * 0, one * 0, 0
    above = n - np.cumsum(m)  # rows above each value
    nxt = np.concatenate((v[1:], [U + 1]))
    starts = np.concatenate(([0], np.ravel(np.column_stack((v, v + 1)))))
    length = np.concatenate(([v[0]], np.ravel(np.column_stack((np.ones_like(v), nxt - v - 1)))))
    gt = np.concatenate(([n], np.ravel(np.column_stack((above, above)))))
    ge = np.concatenate(([n], np.ravel(np.column_stack((above + m, above)))))
    keep = length > 0
    return (
        starts[keep].astype(np.int64),
        length[keep].astype(np.int64),
        gt[keep].astype(np.int64),
        ge[keep].astype(np.int64),
        n,
    )


ScoreFn = Callable[[NDArray[np.int64], NDArray[np.int64], int], tuple[NDArray[np.int64], int]]
"""(gt, ge, n) of the pieces → (integer scores, their scale L): Pr ∝ exp(−ε·score/(2L))."""


def rank_error_law(
    epsilon: float,
    U: int,
    v: NDArray[np.int64],
    counts: NDArray[np.int64],
    scores: ScoreFn,
    truth: float = 0.0,
) -> tuple[float, float]:
    """(P[outside the data range], expected relative rank error) of the exponential mechanism
    with ``scores`` over grid indices 0..U (oriented: rows above the answer count), on the
    histogram (v ascending distinct, counts), exactly from its piece weights: the points of a
    piece inside [min v, max v] are in range, the rest outside; an answer in range errs by the
    distance from ``truth`` (the rows above the true answer: 0 for MAX) to its ranks [gt, ge],
    over n (at most 1); one outside by 1."""
    starts, length, gt, ge, n = rank_pieces(v, counts, U)
    if n == 0:
        return 1.0, 1.0
    score, L = scores(gt, ge, n)
    logw = -float(epsilon) / (2 * L) * score.astype(np.float64)
    w = np.exp(logw - logw.max())
    lo_v, hi_v = int(v[0]), int(v[-1])
    ends = starts + length - 1
    inside = np.clip(np.minimum(ends, hi_v) - np.maximum(starts, lo_v) + 1, 0, None)
    w_in, w_all = w * inside, w * length
    total = float(w_all.sum())
    miss = 1.0 - float(w_in.sum()) / total
    dist = np.maximum(0.0, np.maximum(gt - truth, truth - ge)) / n
    rel = miss + float((w_in * np.minimum(dist, 1.0)).sum()) / total
    return miss, rel


def first_useful(error: Callable[[int], float]) -> int | None:
    """The smallest n ≤ 10^6 with ``error(n)`` ≤ ``USEFUL``: the first such n of a geometric
    scan (ratio 5/4), then bisection below it (the laws fall with n there); None if none."""
    lo, n = 1, 2
    while n <= 1_000_000:
        if error(n) <= USEFUL:
            while n - lo > 1:
                mid = (lo + n) // 2
                lo, n = (lo, mid) if error(mid) <= USEFUL else (mid, n)
            return n
        lo, n = n, max(n + 1, n * 5 // 4)
    return None


class RankTargetExtreme:
    """An exponential mechanism for MAX (or MIN) over the grid whose score is the distance
    from a target number of rows beyond the answer: what its subclasses share — the pieces of
    the grid (:func:`rank_pieces`, oriented: j = i for MAX, U − i for MIN), the pmf and the
    error law; each subclass gives its :meth:`scores`."""

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
        """With probability ≥ 1 − β at most this many rows lie beyond the answer: 2·k0."""
        return 2 * self.k0

    def scores(self, gt: NDArray[np.int64], ge: NDArray[np.int64], n: int) -> tuple[NDArray[np.int64], int]:
        """The pieces' integer scores and their scale L (Pr ∝ exp(−ε·score/(2L)))."""
        raise NotImplementedError

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

    def release(self, hist: Sequence[tuple[int, int]], source: RandomSource) -> float | int:
        """``hist``: (grid index, row count) pairs of the group (any order, indices in [0, U])."""
        starts, length, gt, ge, n = rank_pieces(*self._oriented(hist), self.grid.U)
        score, L = self.scores(gt, ge, n)
        idx = exp_weighted_index(length, score, Fraction(self.epsilon) / (2 * L), source)
        y = int(starts[idx]) + source.randbelow(int(length[idx]))
        return self.grid.value(y if self.func == "max" else self.grid.U - y)

    def pmf(self, hist: Sequence[tuple[int, int]]) -> NDArray[np.float64]:
        """Pr[answer = grid index i], i = 0..U (floats: for tests, audits and the error law)."""
        starts, length, gt, ge, n = rank_pieces(*self._oriented(hist), self.grid.U)
        score, L = self.scores(gt, ge, n)
        logw = -float(self.epsilon) / (2 * L) * score.astype(np.float64)
        w = np.exp(logw - logw.max())
        per_point = np.repeat(w, length)
        p: NDArray[np.float64] = per_point / per_point.sum()
        return p if self.func == "max" else p[::-1].copy()

    def law(self, n: int) -> tuple[float, float]:
        """(P[the answer lies outside the group's data range], expected relative rank error),
        averaged over the reference groups of n rows (module doc)."""
        laws = [self.law_at(n, span) for span in REFERENCE_SPANS]
        return sum(x for x, _ in laws) / len(laws), sum(y for _, y in laws) / len(laws)

    def law_at(self, n: int, span: Fraction) -> tuple[float, float]:
        """The law on one reference group: n rows over the middle ``span`` of the range."""
        return _law(self.kind, self.epsilon, self.grid.U, self.beta, self._law_key(), int(n), Fraction(span))

    def _law_key(self) -> Fraction:
        return Fraction(0)

    def expected_error(self, n: int) -> float:
        """The expected relative rank error on the reference groups of n rows: the share of
        their rows beyond the answer, 1 for an answer outside the data's range (module doc)."""
        return self.law(n)[1]

    def useful_from(self) -> int | None:
        """The smallest group size whose expected relative rank error is ≤ ``USEFUL``
        (None beyond 10^6 rows)."""
        return _useful_from(self.kind, self.epsilon, self.grid.U, self.beta, self._law_key())


@single_flight(maxsize=4096)
def _law(
    kind: str, epsilon: float, U: int, beta: float, key: Fraction, n: int, span: Fraction
) -> tuple[float, float]:
    grid = ExtremeGrid(0.0, float(U), 1.0, U, True)
    m: RankTargetExtreme = (
        CappedRankExtreme(epsilon, grid, "max", beta, key)
        if kind == "capped"
        else ShiftedRankExtreme(epsilon, grid, "max", beta)
    )
    return rank_error_law(epsilon, U, *reference_arrays(n, U, span), m.scores)


@single_flight(maxsize=1024)
def _useful_from(kind: str, epsilon: float, U: int, beta: float, key: Fraction) -> int | None:
    def error(n: int) -> float:
        return sum(_law(kind, epsilon, U, beta, key, n, span)[1] for span in REFERENCE_SPANS) / len(
            REFERENCE_SPANS
        )

    return first_useful(error)


class ShiftedRankExtreme(RankTargetExtreme):
    """ε-DP MAX (or MIN) of the grid indices of one group's rows (Chen et al. 2025 §6.4):
    score |c(y) − k0|, c(y) = #{x beyond y}, whatever n. A tie block makes c jump past k0:
    the best score is then the gap, and the statement holds plus those rows."""

    def __init__(self, epsilon: float, grid: ExtremeGrid, func: str = "max", beta: float = 0.05) -> None:
        self._check(epsilon, grid, func, beta)
        self.name = f"shifted_rank_{func}"
        self.kind = "shifted"

    def rank_half_width(self) -> int:
        """With probability ≥ 1 − β at most 2·k0 rows lie beyond the answer, plus the gap a
        tie block leaves around k0 (at most the most rows on one point)."""
        return 2 * self.k0

    def scores(self, gt: NDArray[np.int64], ge: NDArray[np.int64], n: int) -> tuple[NDArray[np.int64], int]:
        return np.abs(gt - self.k0), 1

    def release(self, hist: Sequence[tuple[int, int]], source: RandomSource) -> float | int:
        """``hist``: (grid index, row count) pairs of the group (any order, indices in [0, U])."""
        U = self.grid.U
        v, m = self._oriented(hist)
        y, _ = shifted_rank_max(v, m, self.epsilon, self.beta, U, source)
        return self.grid.value(y if self.func == "max" else U - y)


class CappedRankExtreme(RankTargetExtreme):
    """ε-DP MAX (or MIN) aiming at t(n) = min(k0, s·n) rows beyond the answer, scored by the
    distance from t(n) to the answer's ranks [#{x beyond y}, #{x at or beyond y}] (module doc):
    the shifted rank's aim on groups of ≥ k0/s rows, a rank inside the data on smaller ones;
    a tie block containing the aim scores 0."""

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

    def target(self, n: int) -> int:
        """L·t(n), L = s's denominator: the scaled rows aimed at beyond the answer."""
        return min(self.share.denominator * self.k0, self.share.numerator * int(n))

    def scores(self, gt: NDArray[np.int64], ge: NDArray[np.int64], n: int) -> tuple[NDArray[np.int64], int]:
        L, T = self.share.denominator, self.target(n)
        return np.maximum(0, np.maximum(L * gt - T, T - L * ge)), L

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
