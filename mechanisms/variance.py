"""VAR_POP / VAR_SAMP / STDDEV_POP / STDDEV_SAMP from noisy moments (add-remove model).

The standard DP variance from three noisy sums (SmartNoise SQL answers VAR and
STDDEV this way, from noisy COUNT, SUM and SUM of squares; OpenDP's
``make_variance`` uses the same moments with a known n): with values clamped to
[L, U] and centred at m = (L + U) / 2, so that y = clamp(x) - m lies in [-h, h],
h = (U - L) / 2,

* n  = COUNT(x)                 sensitivity 1   → :class:`GeometricCount`
* S1 = Σ y                      sensitivity h   → :class:`LaplaceSum` on [-h, h]
* S2 = Σ y²                     sensitivity h²  → :class:`LaplaceSum` on [0, h²]

each at ε/3 (sequential composition: the privacy map is their sum). Centring
cuts the sensitivity of the sum of squares from max(L², U²) to h². Then, as
post-processing, ñ = max(n̂, 1), var_pop = S2/ñ - (S1/ñ)² clamped to [0, h²]
(the variance of values in [L, U] is at most h²); var_samp = var_pop · ñ/(ñ-1)
with ñ ≥ 2, clamped to [0, 2h²]; STDDEV is the square root.

Integer columns (``integer=True``) are measured exactly in half units:
S1' = Σ (2·clamp(x) - (L+U)) = 2·S1 and S2' = Σ (2·clamp(x) - (L+U))² = 4·S2
(integers, so the sums are exact and the grid is 1).

The 95% half-width is a BOUND computed from released values only: each noisy
moment is within its (1 - 0.05/3) half-width with probability ≥ 1 - 0.05/3
(Bonferroni: all three at once with probability ≥ 95%); the true variance then
lies in the range of the estimator over that box (interval arithmetic), and the
half-width is the largest distance from the estimate to that range's ends,
capped at the width of the clamp interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from .measurements import GeometricCount, LaplaceSum, Measurement, Release, as_epsilon
from .rng import RandomSource, default_source
from .scalars import RealLike

__all__ = ["MomentVariance", "VARIANCE_FUNCS"]

VARIANCE_FUNCS = ("var_pop", "var_samp", "stddev_pop", "stddev_samp")
_LEVEL3 = 1 - 0.05 / 3


class MomentVariance(Measurement):
    """One of :data:`VARIANCE_FUNCS` over values clamped to [lower, upper].

    ``release((n, S1, S2))`` with the moments of the module docstring (half units
    for ``integer=True``); ``parts`` = (count, sum, sum of squares) releases."""

    name = "moment_variance"

    def __init__(
        self,
        epsilon: RealLike,
        lower: RealLike,
        upper: RealLike,
        integer: bool = False,
        func: str = "var_pop",
    ) -> None:
        if func not in VARIANCE_FUNCS:
            raise ValueError(f"unknown variance function {func!r}")
        if not lower < upper:
            raise ValueError(f"need lower < upper, got [{lower}, {upper}]")
        third = as_epsilon(epsilon) / 3
        self.func, self.integer = func, bool(integer)
        self.lower, self.upper = lower, upper
        self.h = (float(upper) - float(lower)) / 2
        if self.integer:
            w = int(upper) - int(lower)
            self.k = 2  # moments in half units
            self.sum_measurement = LaplaceSum(third, -w, w, integer=True)
            self.sumsq_measurement = LaplaceSum(third, 0, w * w, integer=True)
        else:
            self.k = 1
            self.sum_measurement = LaplaceSum(third, -self.h, self.h)
            self.sumsq_measurement = LaplaceSum(third, 0.0, self.h * self.h)
        self.count_measurement = GeometricCount(third)

    @property
    def _parts(self) -> tuple[GeometricCount, LaplaceSum, LaplaceSum]:
        return (self.count_measurement, self.sum_measurement, self.sumsq_measurement)

    def privacy_map_exact(self, d_in: int) -> Fraction:
        return sum((m.privacy_map_exact(d_in) for m in self._parts), Fraction(0))

    @property
    def cap(self) -> float:
        return self.cap_of(self.func)

    def cap_of(self, func: str) -> float:
        """The width of the range the estimate is clamped to (a trivial half-width)."""
        top = self.h**2 * (2 if func.endswith("samp") else 1)
        return math.sqrt(top) if func.startswith("stddev") else top

    def draw(self, source: RandomSource | None = None) -> tuple[Any, ...]:
        src = source if source is not None else default_source()
        return tuple(m.draw(src) for m in self._parts)

    def release(self, true_value: Any, source: RandomSource | None = None) -> Release:
        return self.apply(true_value, self.draw(source))

    def apply(self, true_value: Any, noise: Any, source: RandomSource | None = None) -> Release:
        if noise is None:
            return self.release(true_value, source)
        rs = tuple(m.apply(v, z) for m, v, z in zip(self._parts, true_value, noise))
        return self._from_parts(rs, self.func)

    def derive(self, rel: Release, func: str) -> Release:
        """Another statistic of the same column from the same three noisy moments
        (post-processing: VAR_POP(x), STDDEV(x) and COUNT(x) in one statement are one release)."""
        if func == "count":
            return rel.parts[0]
        return self._from_parts(rel.parts, func)

    def _from_parts(self, rs: Sequence[Release], func: str) -> Release:
        n, s1, s2 = rs[0].value, rs[1].value / self.k, rs[2].value / self.k**2
        value = self.estimate(n, s1, s2, func)
        return Release(value, self.epsilon, self.bound(n, s1, s2, value, func), self.name, None, tuple(rs))

    # -- post-processing of the three noisy moments --------------------------------------
    def _var(self, n: float, s1: float, s2: float, func: str) -> float:
        samp = func.endswith("samp")
        nn = max(n, 2 if samp else 1)
        v = min(max(s2 / nn - (s1 / nn) ** 2, 0.0), self.h**2)
        if samp:
            v = min(v * nn / (nn - 1), 2 * self.h**2)
        return v

    def estimate(self, n: float, s1: float, s2: float, func: str | None = None) -> float:
        func = func or self.func
        v = self._var(n, s1, s2, func)
        return math.sqrt(v) if func.startswith("stddev") else v

    def half_width(self, level: float = 0.95) -> float:
        """Data-independent: the width of the clamp range (see :meth:`bound`)."""
        return self.cap

    def bound(self, n: float, s1: float, s2: float, value: float, func: str | None = None) -> float:
        """95% half-width bound from the released moments (module docstring)."""
        func = func or self.func
        cap = self.cap_of(func)
        a = float(self.sum_measurement.half_width(_LEVEL3)) / self.k
        b = float(self.sumsq_measurement.half_width(_LEVEL3)) / self.k**2
        c = float(self.count_measurement.half_width(_LEVEL3))
        samp = func.endswith("samp")
        n_lo, n_hi = max(n - c, 1.0), n + c
        if n_hi < 1 or (samp and n_hi < 2):
            return cap
        h2 = self.h**2
        q1 = [t / m for t in (s1 - a, s1 + a) for m in (n_lo, n_hi)]
        m1_lo, m1_hi = max(min(q1), -self.h), min(max(q1), self.h)
        q2 = [t / m for t in (s2 - b, s2 + b) for m in (n_lo, n_hi)]
        m2_lo, m2_hi = max(min(q2), 0.0), min(max(q2), h2)
        if m1_lo > m1_hi or m2_lo > m2_hi:
            return cap
        sq_hi = max(m1_lo**2, m1_hi**2)
        sq_lo = 0.0 if m1_lo <= 0 <= m1_hi else min(m1_lo**2, m1_hi**2)
        lo, hi = max(m2_lo - sq_hi, 0.0), min(max(m2_hi - sq_lo, 0.0), h2)
        if samp:
            if n_lo < 2:
                return cap
            lo, hi = lo * n_hi / (n_hi - 1), hi * n_lo / (n_lo - 1)
        if func.startswith("stddev"):
            lo, hi = math.sqrt(lo), math.sqrt(hi)
        return min(max(value - lo, hi - value, 0.0), cap)
