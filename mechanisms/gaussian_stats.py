"""AVG and VAR on a zCDP budget, from discrete Gaussian moments of the cell.

AVG (:class:`GaussianMean`): a discrete Gaussian SUM and COUNT of the same cell, each at half the
ρ, the average their ratio (post-processing).

One release of ρ-zCDP: the clamped sum and the row count, each noised by the discrete Gaussian at
the L2 sensitivity of a unit's contribution (:mod:`mechanisms.discrete_gaussian`; Canonne, Kamath &
Steinke 2020 Thm 4), compose to ρ/2 + ρ/2 (Bun & Steinke 2016 Lemma 1.7). The released AVG is
S̃/Ñ clamped to [lower, upper] (the midpoint when Ñ < 1); SUM and COUNT of the same column are the
two parts, released once with it. Its half-width is a bound, not an exact quantile: with S̃ and Ñ
each within their 97.5% half-widths h_S, h_N (a union bound: both at once with probability ≥ 95%),
the true average s/n lies in [(S̃ − h_S)/(Ñ + h_N), (S̃ + h_S)/(Ñ − h_N)] for Ñ > h_N, within the
bounds otherwise.

VAR/STDDEV (:class:`GaussianVariance`): the three centred moments of
:class:`mechanisms.variance.MomentVariance` (COUNT, Σy, Σy²), each by the discrete Gaussian at ρ/3
and the unit's L2 sensitivity, with that class's estimate and its Bonferroni/interval-arithmetic
half-width bound (each moment within its 1 − 0.05/3 half-width).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .discrete_gaussian import GaussianCount, GaussianSum
from .measurements import BatchRelease, Release
from .rng import RandomSource
from .scalars import RationalLike, RealLike
from .variance import VARIANCE_FUNCS, MomentVariance

__all__ = ["GaussianMean", "GaussianVariance"]


class GaussianMean:
    """AVG of values clamped to [lower, upper] at ``rho`` (zCDP), from a discrete Gaussian SUM and
    COUNT at ρ/2 each; ``contributions_sq``: Δ₂² of one unit's contribution in rows (as
    :class:`~mechanisms.discrete_gaussian.GaussianCount`)."""

    name = "discrete_gaussian_mean"
    unit = "rho"

    def __init__(
        self,
        rho: RealLike,
        lower: RealLike,
        upper: RealLike,
        integer: bool = False,
        contributions_sq: RationalLike = 1,
    ) -> None:
        half = Fraction(rho) / 2
        self.sum = GaussianSum(half, lower, upper, integer=integer, contributions_sq=contributions_sq)
        self.count = GaussianCount(half, contributions_sq)
        self.lower, self.upper = float(self.sum.lower), float(self.sum.upper)
        self.rho = self.sum.rho + self.count.rho
        self._h = self._halves(0.95)

    def _halves(self, level: float) -> tuple[float, float]:
        """(h_S, h_N) at (1 + level)/2 each: both hold at once with probability ≥ ``level``."""
        each = 1 - (1 - level) / 2
        return float(self.sum.half_width(each)), float(self.count.half_width(each))

    def privacy_map_exact(self, d_in: int) -> Fraction:
        """ρ for ``d_in`` units: the two releases' maps added (Bun & Steinke 2016 Lemma 1.7)."""
        return self.sum.privacy_map_exact(d_in) + self.count.privacy_map_exact(d_in)

    def privacy_map(self, d_in: int) -> float:
        return float(self.privacy_map_exact(d_in))

    def draw(self, source: RandomSource | None = None) -> tuple[int, int]:
        return self.sum.draw(source), self.count.draw(source)

    def draw_many(self, n: int, source: RandomSource | None = None) -> tuple[Any, Any] | None:
        zs, zc = self.sum.draw_many(n, source), self.count.draw_many(n, source)
        return None if zs is None or zc is None else (zs, zc)

    def _avg(self, s: float, n: float) -> float:
        if n < 1:
            return (self.lower + self.upper) / 2
        return min(max(s / n, self.lower), self.upper)

    def _bound(self, s: float, n: float, halves: tuple[float, float] | None = None) -> float:
        """The half-width of the interval the module doc states, around the released AVG."""
        hs, hn = self._h if halves is None else halves
        width = self.upper - self.lower
        if n <= hn:
            return width
        lo, hi = (s - hs) / (n + hn), (s + hs) / (n - hn)
        a = self._avg(s, n)
        return min(max(a - max(lo, self.lower), min(hi, self.upper) - a, 0.0), width)

    def release(self, true_value: Any, source: RandomSource | None = None) -> Release:
        return self.apply(true_value, self.draw(source))

    def apply(self, true_value: Any, noise: Any, source: RandomSource | None = None) -> Release:
        """``true_value`` is (clamped sum, row count)."""
        if noise is None:
            return self.release(true_value, source)
        s, n = true_value
        rs, rn = self.sum.apply(s, noise[0]), self.count.apply(n, noise[1])
        value = self._avg(float(rs.value), float(rn.value))
        hw = self._bound(float(rs.value), float(rn.value))
        return Release(value, float(self.rho), hw, self.name, None, parts=(rs, rn))

    def apply_many(self, values: Any, noises: Any) -> BatchRelease:
        sums, counts = values
        bs, bn = self.sum.apply_many(sums, noises[0]), self.count.apply_many(counts, noises[1])
        s = np.asarray(bs.values, dtype=np.float64)
        n = np.asarray(bn.values, dtype=np.float64)
        avg: NDArray[np.float64] = np.where(
            n >= 1, np.clip(s / np.maximum(n, 1.0), self.lower, self.upper), (self.lower + self.upper) / 2
        )
        hw = max((self._bound(float(a), float(b)) for a, b in zip(s, n)), default=0.0)
        return BatchRelease(avg, hw, self.name, parts=(bs, bn))

    def half_width(self, level: float = 0.95, n_hat: int | None = None) -> float:
        """The bound's half-width for a cell of ``n_hat`` rows at the worst average over the bounds
        (EXPLAIN, before any data: the ends of [lower, upper] make the ratio's interval widest)."""
        if n_hat is None:
            return self.upper - self.lower
        h = self._halves(level)
        return max(self._bound(b * n_hat, float(n_hat), h) for b in (self.lower, self.upper))


class GaussianVariance(MomentVariance):
    """One of :data:`~mechanisms.variance.VARIANCE_FUNCS` over values clamped to [lower, upper] at
    ``rho`` (zCDP): :class:`~mechanisms.variance.MomentVariance` with its three moments by the
    discrete Gaussian at ρ/3 each; ``contributions_sq`` as :class:`GaussianMean`'s. Its privacy
    map is in ρ (the three maps added, Bun & Steinke 2016 Lemma 1.7)."""

    name = "discrete_gaussian_variance"
    unit = "rho"

    def __init__(
        self,
        rho: RealLike,
        lower: RealLike,
        upper: RealLike,
        integer: bool = False,
        func: str = "var_pop",
        contributions_sq: RationalLike = 1,
    ) -> None:
        if func not in VARIANCE_FUNCS:
            raise ValueError(f"unknown variance function {func!r}")
        if not lower < upper:
            raise ValueError(f"need lower < upper, got [{lower}, {upper}]")
        third, csq = Fraction(rho) / 3, contributions_sq
        self.func, self.integer = func, bool(integer)
        self.lower, self.upper = lower, upper
        self.h = (float(upper) - float(lower)) / 2
        if self.integer:  # moments in half units, as MomentVariance
            w = int(upper) - int(lower)
            self.k = 2
            self.sum_measurement = GaussianSum(third, -w, w, integer=True, contributions_sq=csq)  # type: ignore[assignment]
            self.sumsq_measurement = GaussianSum(third, 0, w * w, integer=True, contributions_sq=csq)  # type: ignore[assignment]
        else:
            self.k = 1
            self.sum_measurement = GaussianSum(third, -self.h, self.h, contributions_sq=csq)  # type: ignore[assignment]
            self.sumsq_measurement = GaussianSum(third, 0.0, self.h * self.h, contributions_sq=csq)  # type: ignore[assignment]
        self.count_measurement = GaussianCount(third, csq)  # type: ignore[assignment]
