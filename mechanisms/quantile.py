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

Near the ends of a small group the target q·n lies within a few rows of the data's edge,
and the (U + 1)-point stretch of the grid beyond the data scores almost as well as the
data: the answer then lands outside the data's range (a 0.9-quantile of 40 rows on [0, 500]
lands above the data most of the time). The *protected quantile*
(:class:`ProtectedQuantile`, the capped rank of :mod:`mechanisms.extreme` applied to a
quantile) keeps at least min(k0, s·n) rows beyond its target on the near side — for q ≥ 1/2
it aims at T(n) = max((1 − q)·n, min(k0, s·n)) rows above the answer, for q < 1/2 at
n − max(q·n, min(k0, s·n)) — trading a rank bias of at most k0·(1 − (1 − q')/s)⁺ rows
(q' = max(q, 1 − q)) for the grid beyond the data. Its score is, as the capped rank's, the
distance from T(n) to the answer's ranks [#{x > y}, #{x ≥ y}] (a tie block containing the aim
scores 0): each bound moves by 0 or 1 per added row and T by at most max(1 − q, q, s) ≤ 1
(for q < 1/2, n − … moves by between 0 and 1), so each term moves by at most 1: sensitivity
1, ε-DP.

Error law (:meth:`ExpMechQuantile.expected_error`, :meth:`ExpMechQuantile.useful_from`, and
the same on :class:`ProtectedQuantile`): as MAX/MIN's (:func:`mechanisms.extreme.rank_error_law`),
the expected relative rank error |c(y) − (1 − q)·n|/n of an answer inside the data's range
(c the rows above it), 1 outside, averaged over the reference groups (n rows spread over the
middle half, and the middle tenth, of the declared range); :func:`choose_quantile` picks the
candidate with the least regret across group sizes (public inputs only).
:class:`RecursiveQuantiles` has the same two methods as an estimate: d times one draw's law at
its round's ε, for the quantile drawn at depth d.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from .exact_choice import exp_weighted_index
from .extreme import (
    LAW_SIZES,
    REFERENCE_SPANS,
    ExtremeGrid,
    first_useful,
    rank_error_law,
    rank_pieces,
    reference_arrays,
)
from .once import single_flight
from .rng import RandomSource

__all__ = [
    "QuantileGrid",
    "ExpMechQuantile",
    "MAX_DENOMINATOR",
    "ProtectedQuantile",
    "choose_quantile",
    "quantile_candidates",
]

PROTECT_SHARES = (Fraction(1, 2), Fraction(1, 4))  # the protected quantile's candidates' s

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

    share = Fraction(0)  # no protection: the plain mechanism

    def pmf(self, hist: Sequence[tuple[int, int]]) -> NDArray[np.float64]:
        """Pr[answer = grid index i], i = 0..U (floats: for tests and audits)."""
        starts, length, powers, D = self.scores(hist)
        logw = -float(self.epsilon) / (2 * D) * powers.astype(np.float64)
        w = np.exp(logw - logw.max())
        per_point = np.repeat(w, length)
        out: NDArray[np.float64] = per_point / per_point.sum()
        return out

    def law(self, n: int) -> tuple[float, float]:
        """(P[outside the data's range], expected relative rank error), averaged over the
        reference groups of n rows (module doc)."""
        laws = [self.law_at(n, span) for span in REFERENCE_SPANS]
        return sum(x for x, _ in laws) / len(laws), sum(y for _, y in laws) / len(laws)

    def law_at(self, n: int, span: Fraction) -> tuple[float, float]:
        """The law on one reference group: n rows over the middle ``span`` of the range."""
        return _quantile_law(
            self.epsilon, self.grid.U, self.beta, Fraction(self.q), self.share, int(n), Fraction(span)
        )

    def expected_error(self, n: int) -> float:
        """The expected relative rank error on the reference group of n rows (module doc)."""
        return self.law(n)[1]

    def useful_from(self) -> int | None:
        """The smallest group size whose expected relative rank error is ≤ 1/10 (None beyond
        10^6 rows)."""
        return _quantile_useful(self.epsilon, self.grid.U, self.beta, Fraction(self.q), self.share)


def _k0(epsilon: float, U: int, beta: float) -> int:
    return math.ceil(2.0 / epsilon * math.log((U + 1) / beta))


def _target(q: Fraction, share: Fraction, k0: int, n: int) -> tuple[int, int]:
    """(L·T(n), L): the rows above the answer the protected quantile aims at (module doc),
    scaled by L = lcm of q's and s's denominators to an integer."""
    L = math.lcm(q.denominator, share.denominator)
    guard = min(L * k0, int(share * L) * n)
    if q >= Fraction(1, 2):
        return max(int((1 - q) * L) * n, guard), L
    return L * n - max(int(q * L) * n, guard), L


def _piece_scores(
    q: Fraction, share: Fraction, k0: int, gt: NDArray[np.int64], ge: NDArray[np.int64], n: int
) -> tuple[NDArray[np.int64], int]:
    """Scores of the pieces of :func:`mechanisms.extreme.rank_pieces` (gt rows above, ge at or
    above): the plain mechanism's |D·c − P·n| with c = n − gt the rows at or below (share 0),
    or the protected quantile's distance from its aim to the ranks [gt, ge], scaled by L."""
    if share == 0:
        return np.abs(q.denominator * gt - (q.denominator - q.numerator) * n), q.denominator
    T, L = _target(q, share, k0, n)
    return np.maximum(0, np.maximum(L * gt - T, T - L * ge)), L


@single_flight(maxsize=4096)
def _quantile_law(
    epsilon: float, U: int, beta: float, q: Fraction, share: Fraction, n: int, span: Fraction
) -> tuple[float, float]:
    k0 = _k0(epsilon, U, beta)

    def scores(gt: NDArray[np.int64], ge: NDArray[np.int64], n: int) -> tuple[NDArray[np.int64], int]:
        return _piece_scores(q, share, k0, gt, ge, n)

    return rank_error_law(epsilon, U, *reference_arrays(n, U, span), scores, float((1 - q) * n))


@single_flight(maxsize=1024)
def _quantile_useful(epsilon: float, U: int, beta: float, q: Fraction, share: Fraction) -> int | None:
    def error(n: int) -> float:
        laws = [_quantile_law(epsilon, U, beta, q, share, n, span)[1] for span in REFERENCE_SPANS]
        return sum(laws) / len(laws)

    return first_useful(error)


@dataclass(frozen=True)
class ProtectedQuantile(ExpMechQuantile):
    """ε-DP q-quantile keeping min(k0, s·n) rows beyond its target on the near side (module doc)."""

    share: Fraction = Fraction(1, 4)

    name = "protected_quantile"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.share <= Fraction(1, 2) or Fraction(self.share).denominator > 1000:
            raise ValueError("need 0 < share <= 1/2 with a denominator <= 1000")

    @property
    def k0(self) -> int:
        return _k0(self.epsilon, self.grid.U, self.beta)

    def shift(self) -> int:
        """The most rows the protection moves the target from q·n: k0·(1 − (1 − q')/s)⁺."""
        q = max(Fraction(self.q), 1 - Fraction(self.q))
        return math.ceil(max(Fraction(0), self.k0 * (1 - (1 - q) / Fraction(self.share))))

    def rank_half_width(self) -> int:
        """W.p. ≥ 1 − β the answer's ranks come within this many rows of q·n: k0 from the aim
        (some grid point's ranks contain it: no tie term), the aim within :meth:`shift` of q·n."""
        return self.k0 + self.shift()

    def scores(
        self, hist: Sequence[tuple[int, int]]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], int]:
        """(piece starts, lengths, scaled scores, L): the distance from the aim T(n) to each
        grid point's ranks [#{x > y}, #{x ≥ y}] (module doc), on :func:`rank_pieces`."""
        U = self.grid.U
        merged: dict[int, int] = {}
        for i, n in hist:
            i = min(max(int(i), 0), U)
            merged[i] = merged.get(i, 0) + int(n)
        v = np.array(sorted(merged), dtype=np.int64)
        m = np.array([merged[i] for i in v.tolist()], dtype=np.int64)
        starts, length, gt, ge, n = rank_pieces(v, m, U)
        score, L = _piece_scores(Fraction(self.q), Fraction(self.share), self.k0, gt, ge, n)
        return starts, length, score, L


def quantile_candidates(epsilon: float, grid: ExtremeGrid, q: Fraction, beta: float) -> list[ExpMechQuantile]:
    """The mechanisms :func:`choose_quantile` compares: the plain exponential mechanism and
    the protected quantile at each share of ``PROTECT_SHARES``."""
    out = [ExpMechQuantile(epsilon, grid, q, beta)]
    out += [ProtectedQuantile(epsilon, grid, q, beta, s) for s in PROTECT_SHARES]
    return out


def choose_quantile(
    epsilon: float, grid: ExtremeGrid, q: Fraction, beta: float
) -> tuple[ExpMechQuantile, list[float]]:
    """The candidate with the least regret across ``LAW_SIZES`` (ties: the first, the plain
    mechanism) and every candidate's regret, in :func:`quantile_candidates`' order."""
    ms = quantile_candidates(epsilon, grid, q, beta)
    table = np.array([[m.expected_error(n) for n in LAW_SIZES] for m in ms])
    r = [float(x) for x in (table - table.min(axis=0)).max(axis=1)]
    return ms[int(np.argmin(r))], r


def ascending(values: Sequence[float | int], qs: Sequence[Fraction]) -> list[float | int]:
    """``values`` (released for the quantiles ``qs``) reassigned in ascending order of q:
    post-processing. For sorted targets t_i = q_i·n and the monotone rank c, the sorted
    vector is never farther from them in the largest rank error than the vector itself
    (the rearrangement inequality in L∞), so every stated rank bound still holds."""
    order = sorted(range(len(qs)), key=lambda i: qs[i])
    out: list[float | int] = list(values)
    for i, v in zip(order, sorted(values)):
        out[i] = v
    return out


def tree_depth(k: int) -> int:
    """⌈log2(k + 1)⌉: the rounds of :class:`RecursiveQuantiles` for k quantiles."""
    return max(1, math.ceil(math.log2(k + 1)))


@dataclass(frozen=True)
class RecursiveQuantiles:
    """ε-DP k quantiles of one group's rows by recursive splitting (Kaplan, Schnapp and
    Stemmer 2022, "Differentially private approximate quantiles", ICML), in the add-remove
    model: the middle requested quantile is drawn by :class:`ExpMechQuantile` over the
    whole grid; the rows at or below it and those above it are then two disjoint data sets
    on two disjoint ranges of the grid, and the quantiles below (above) are drawn
    recursively from the left (right) one, each at the relative level
    (q − q_lo)/(q_hi − q_lo) of its range. Every round's draws read disjoint sets of rows,
    and the score of each has sensitivity ≤ 1 in its own set (as one quantile's: the row
    count of the set is its own n), so a round is ε/L-DP by parallel composition; the
    ranges depend on earlier rounds' released values only; L = :func:`tree_depth` rounds
    compose to ε. The answers are ascending by construction.

    Rank error: a quantile drawn at depth d (the middle one at d = 1) has
    |c(y) − q·n| ≤ d·(m + t) with probability ≥ 1 − β, where m = (2L/ε) ln((U + 1)·L/β)
    (each of its ≤ L draws at β/L) and t the most rows on one grid point: by induction, the
    target of a draw in the range between two earlier answers with rank errors e_lo, e_hi is
    off by (1 − q')·e_lo + q'·e_hi, at most the larger of them."""

    epsilon: float
    grid: ExtremeGrid
    qs: tuple[Fraction, ...]
    beta: float = 0.05

    name = "recursive_quantiles"

    def __post_init__(self) -> None:
        if not self.epsilon > 0 or not 0 < self.beta < 1 or not self.qs:
            raise ValueError("need epsilon > 0, 0 < beta < 1 and at least one q")
        if any(not 0 <= q <= 1 or Fraction(q).denominator > MAX_DENOMINATOR for q in self.qs):
            raise ValueError(f"each q in [0, 1] with a denominator <= {MAX_DENOMINATOR}")

    @property
    def rounds(self) -> int:
        return tree_depth(len(set(self.qs)))

    @property
    def round_epsilon(self) -> float:
        return self.epsilon / self.rounds

    def depths(self) -> dict[Fraction, int]:
        """Each distinct q's depth in the recursion (1: the first draw)."""
        out: dict[Fraction, int] = {}

        def walk(qs: list[Fraction], d: int) -> None:
            if qs:
                mid = len(qs) // 2
                out[qs[mid]] = d
                walk(qs[:mid], d + 1)
                walk(qs[mid + 1 :], d + 1)

        walk(sorted(set(self.qs)), 1)
        return out

    def rank_half_width(self, q: Fraction | None = None) -> int:
        """The 95% rank statement of ``q`` (of the deepest one if None), ties excluded."""
        L = self.rounds
        m = math.ceil(2.0 * L / self.epsilon * math.log((self.grid.U + 1) * L / self.beta))
        d = self.depths()[q] if q is not None else L
        return d * m

    def expected_error(self, n: int, q: Fraction | None = None) -> float:
        """An estimate of ``q``'s expected relative rank error on the reference groups of n rows
        (of the deepest one if None): d times the law of one exponential mechanism at the round's
        ε on the whole grid (exact for the first draw, d = 1), as the rank statement adds the
        errors of the d draws on its path — an estimate, not the law of the tree."""
        d = self.depths()[q] if q is not None else self.rounds
        one = ExpMechQuantile(
            self.round_epsilon, self.grid, q if q is not None else Fraction(1, 2), self.beta
        )
        return min(1.0, d * one.expected_error(n))

    def useful_from(self, q: Fraction | None = None) -> int | None:
        """The smallest group size whose :meth:`expected_error` is ≤ 1/10 (None beyond 10^6)."""
        return first_useful(lambda n: self.expected_error(n, q))

    def release_all(
        self, hist: Sequence[tuple[int, int]], source: RandomSource
    ) -> dict[Fraction, float | int]:
        """``hist``: (grid index, row count) pairs of the group: each distinct q's value."""
        U = self.grid.U
        merged: dict[int, int] = {}
        for i, n in hist:
            i = min(max(int(i), 0), U)
            merged[i] = merged.get(i, 0) + int(n)
        eps = self.round_epsilon
        out: dict[Fraction, int] = {}

        def walk(qs: list[Fraction], lo: int, hi: int, q_lo: Fraction, q_hi: Fraction) -> None:
            """Draw ``qs`` (ascending, strictly inside [q_lo, q_hi]) on grid indices [lo, hi]."""
            if not qs:
                return
            mid = len(qs) // 2
            q = qs[mid]
            span = q_hi - q_lo
            rel = (q - q_lo) / span if span > 0 else Fraction(1, 2)
            sub = [(i - lo, n) for i, n in merged.items() if lo <= i <= hi]
            index_grid = ExtremeGrid(0.0, float(hi - lo), 1.0, hi - lo, True)
            y = lo + int(ExpMechQuantile(eps, index_grid, rel, self.beta).release(sub, source))
            out[q] = y
            walk(qs[:mid], lo, y, q_lo, q)
            if y < hi:
                walk(qs[mid + 1 :], y + 1, hi, q, q_hi)
            else:  # nothing on the grid above y: the quantiles above it are y (no row read)
                out.update((r, y) for r in qs[mid + 1 :])

        walk(sorted(set(self.qs)), 0, U, Fraction(0), Fraction(1))
        return {q: self.grid.value(i) for q, i in out.items()}
