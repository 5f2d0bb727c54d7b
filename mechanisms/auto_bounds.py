"""A bound chosen under ε-DP from one value per privacy unit: a contribution bound (a unit's
rows in a table, its distinct groups) or a clamping bound (a unit's largest or smallest value
of a column) — the approach of Google's ApproxBounds (differential-privacy library,
``approx-bounds.md``) and Tumult Analytics' ``get_bounds``: a noisy histogram over
logarithmic bins, then a quantile read from it.

**Grid.** Bin edges are the public "nice" numbers {1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8} × 10^k
(about three per octave, so a chosen bound is at most 25 % above the quantile it covers), and
their negatives and 0 for values of either sign. Bin ``i`` holds the values in
``(edges[i-1], edges[i]]``; values beyond the last edge fall in the last bin (the grid's top is
the largest bound the field accepts), below the first edge in the first.

**Release (ε-DP per unit).** Each unit contributes ONE value, so adding or removing a unit
changes one bin's count by 1: the histogram has L1 sensitivity 1, and adding discrete Laplace
noise of scale 1/ε to EVERY bin (empty ones included) is ε-DP (Ghosh, Roughgarden &
Sundararajan 2009, the geometric mechanism; exact integer sampler of Canonne, Kamath &
Steinke 2020, :func:`mechanisms.samplers.discrete_laplace`). Everything after is
post-processing of the noisy counts and costs nothing:

1. *Support* (ApproxBounds): the bins whose noisy count reaches τ = ⌈ln(B/β)/ε⌉ (B bins). A
   bin with no unit passes with probability P[Z ≥ τ] = p^τ/(1+p) ≤ e^(−ετ) ≤ β/B (p = e^(−ε)),
   so with probability ≥ 1 − β no empty bin is taken for data (union bound). No bin passing
   means too few units for this ε: the choice fails (the caller refuses, never guesses).
2. *Quantile* (get_bounds): over the bins from the lowest to the highest supported one, the
   noisy counts clipped at 0 are summed from below; the bound is the upper edge of the first
   bin where that sum reaches q × the total. Noise enters only through the bins inside the
   support, never through the empty tail above the data.

**What it misses.** Units in bins holding fewer than about τ units are outside the support, so a
tail spread thinly over many bins (few units, or values spanning zero on the log grid) is not
counted and the bound lands inside it: more clamping, never a privacy cost. τ falls as 1/ε.

A lower bound is the same release on the negated values and grid (the lower edge of the bin
where the count from above reaches q × the total).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from .rng import RandomSource
from .samplers import discrete_laplace

__all__ = ["BoundChoice", "LogHistogramBound", "count_edges", "value_edges"]

NICE = tuple(Fraction(x) for x in ("1", "1.2", "1.5", "2", "2.5", "3", "4", "5", "6", "8"))
SMALLEST_DECADE = -6  # a float column's smallest nonzero edge is 10^-6
LARGEST_DECADE = 15  # … and its largest 8·10^15


def count_edges(top: int) -> tuple[Fraction, ...]:
    """Edges for a count ≥ 1 up to ``top``: the nice integers below it, then ``top``."""
    out: list[Fraction] = []
    k = 0
    while True:
        for m in NICE:
            v = m * 10**k
            if v >= top:
                return (*out, Fraction(top))
            if v.denominator == 1:
                out.append(v)
        k += 1


def value_edges(integral: bool) -> tuple[Fraction, ...]:
    """Signed edges for a column's values: −(nice numbers), 0, nice numbers (from 1 for an
    integer column, from 10^-6 otherwise), ascending."""
    low = 0 if integral else SMALLEST_DECADE
    pos = [m * Fraction(10) ** k for k in range(low, LARGEST_DECADE + 1) for m in NICE]
    return (*(-v for v in reversed(pos)), Fraction(0), *pos)


@dataclass(frozen=True)
class BoundChoice:
    """A chosen bound and what it rests on (all public once released)."""

    value: Fraction | None  # None: no bin reached the support threshold
    threshold: int  # τ, in units
    supported: int  # bins in the support


@dataclass(frozen=True)
class LogHistogramBound:
    """ε-DP upper bound covering about a ``q`` share of the units' values (module doc);
    ``lower=True``: the lower bound covering that share from above."""

    epsilon: float
    edges: tuple[Fraction, ...]
    q: Fraction
    beta: float = 0.05
    lower: bool = False

    def __post_init__(self) -> None:
        if not self.epsilon > 0 or not 0 < self.beta < 1 or not 0 < self.q <= 1:
            raise ValueError("need epsilon > 0, 0 < beta < 1 and 0 < q <= 1")
        if list(self.edges) != sorted(set(self.edges)) or not self.edges:
            raise ValueError("edges must be distinct and ascending")

    name = "log_histogram_quantile"

    def threshold(self) -> int:
        """τ = ⌈ln(B/β)/ε⌉: an empty bin's noisy count reaches it with probability ≤ β/B."""
        return math.ceil(math.log(len(self.edges) / self.beta) / self.epsilon)

    def counts(self, hist: Iterable[tuple[object, int]]) -> list[int]:
        """Units per bin of ``hist``: (value, units) pairs, values as exact decimals."""
        edges = self._edges()
        out = [0] * len(edges)
        for value, n in hist:
            v = _exact(value)
            if self.lower:
                v = -v
            out[_bin(edges, v)] += int(n)
        return out

    def release(self, hist: Iterable[tuple[object, int]], source: RandomSource) -> BoundChoice:
        """The bound for ``hist`` ((value, units) pairs, one value per unit)."""
        counts = self.counts(hist)
        scale = Fraction(1) / Fraction(self.epsilon)
        noisy = [c + discrete_laplace(scale, source) for c in counts]  # every bin: ε-DP
        return self.choose(noisy)

    def choose(self, noisy: Sequence[int]) -> BoundChoice:
        """Post-processing of the noisy counts (support, then the quantile)."""
        tau = self.threshold()
        support = [i for i, c in enumerate(noisy) if c >= tau]
        if not support:
            return BoundChoice(None, tau, 0)
        lo, hi = support[0], support[-1]
        kept = [max(c, 0) for c in noisy[lo : hi + 1]]
        target = self.q * sum(kept)
        run = 0
        pick = hi
        for i, c in enumerate(kept, start=lo):
            run += c
            if run >= target:
                pick = i
                break
        edge = self._edges()[pick]
        return BoundChoice(-edge if self.lower else edge, tau, len(support))

    def _edges(self) -> tuple[Fraction, ...]:
        return tuple(-e for e in reversed(self.edges)) if self.lower else self.edges


def _bin(edges: Sequence[Fraction], v: Fraction) -> int:
    """Index of the first edge ≥ v (values above the last edge: the last bin)."""
    lo, hi = 0, len(edges) - 1
    if v >= edges[hi]:
        return hi
    while lo < hi:
        mid = (lo + hi) // 2
        if edges[mid] >= v:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _exact(value: object) -> Fraction:
    """A backend's number as an exact fraction (a float by its shortest repr, a Decimal as
    written)."""
    if isinstance(value, float):
        return Fraction(repr(value))
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    return Fraction(str(value))
