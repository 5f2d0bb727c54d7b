"""Noise families for multi-tier release and their residual samplers.

The multi-tier spec sections 2-3 (paper Sec. 4, Table 1, Alg. 1, Thm 4.1). A family maps a
tier level eps to a noise law eta(eps); the residual s (eps_hi -> eps_lo) has
CF Phi_eta(eps_lo) / Phi_eta(eps_hi), so r_lo = r_hi + s has law q + eta(eps_lo)
without touching the data. Every family exposes ``cf(eps, t)`` so tests can
check sampled residuals against the CF ratio. Float families: :mod:`.continuous`.

Exactness: ``tsg`` and ``msdlap`` draw only through ``source.bernoulli`` /
``bernoulli_exp`` / ``discrete_laplace`` (rational arithmetic, eps taken as the
exact rational value of its float). ``laplace``, ``gaussian`` and ``skellam``
draw from ``source.generator()`` (floating point; Mironov 2012 applies to the
continuous ones -- prefer ``tsg`` on a fixed-point grid for serving, spec
pitfall 6).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..dlap import dlap_half_width
from ..measurements import as_epsilon
from ..rng import RandomSource
from ..samplers import bernoulli_exp, discrete_laplace
from ..scalars import RealLike

__all__ = ["NoiseFamily", "TSG", "MSDLap", "tsg_residual_weights", "tsg_residual", "REFUSED", "ALIASES"]

REFUSED = {
    "discrete_gaussian": "the discrete Gaussian has no valid residual (paper Remark 4.1, spec 3.6: "
    "CF ratio DG(1)->DG(1.1) has Bochner eigenvalue -0.1887); use 'tsg' or 'skellam'",
    "staircase": "the staircase mechanism has no valid residual (paper App. F, spec 3.7: CF ratio "
    "2.8->1.0 has |R(5 pi)| = 1.44 > 1); use 'tsg' or 'laplace'",
}
ALIASES = {
    "geometric": "tsg",
    "discrete_laplace": "tsg",
    "dlap": "tsg",
    "dgauss": "discrete_gaussian",
    "dg": "discrete_gaussian",
    "koufogiannis": "laplace",
}
"""Other names a config may give a family (resolved by :func:`.registry.get_family`)."""


def _bern_ratio(a: Fraction, b: Fraction, source: RandomSource) -> bool:
    """Exact Bernoulli((1 - e^-b) / (1 - e^-a)) for a > b > 0.

    U ~ Bern(e^-b), V ~ Bern(e^-(a-b)) independent; U and V together have
    probability e^-a. Conditioned on not(U and V) (rejection), P(not U) is the
    ratio. Expected 1/(1 - e^-a) rounds.
    """
    while True:
        if not bernoulli_exp(b, source):
            return True
        if not bernoulli_exp(a - b, source):
            return False


class _LazyUniform:
    """A uniform real in [0, 1) revealed bit by bit, for exact comparisons.

    Only ``source.getrandbits`` is used; a comparison reads bits until the
    prefixes differ (expected 2 extra bits), so no floating point is involved.
    """

    __slots__ = ("bits", "n", "source")

    def __init__(self, source: RandomSource) -> None:
        self.bits, self.n, self.source = 0, 0, source

    def prefix(self, n: int) -> int:
        if n > self.n:
            self.bits = (self.bits << (n - self.n)) | self.source.getrandbits(n - self.n)
            self.n = n
        return self.bits >> (self.n - n)

    def less(self, other: _LazyUniform) -> bool:
        n = 8
        while True:
            a, b = self.prefix(n), other.prefix(n)
            if a != b:
                return a < b
            n += 8

    def less_than(self, x: Fraction) -> bool:
        """U < x for a rational x in [0, 1]."""
        n = 8
        while True:
            scaled = x * (1 << n)
            px = scaled.numerator // scaled.denominator
            pu = self.prefix(n)
            if pu != px:
                return pu < px
            if scaled.denominator == 1:  # U in [x, x + 2^-n): not below x
                return False
            n += 8


def _bern_ratio_small(a: Fraction, b: Fraction, source: RandomSource) -> bool:
    """Exact Bernoulli((1 - e^-b) / (1 - e^-a)) for 1 >= a > b > 0, in O(1) expected draws.

    (1 - e^-b)/(1 - e^-a) = P(T < b | T < a) for T ~ Exp(1). Given T < a,
    T = a U with U on [0, 1] of density proportional to e^(-a U): propose U
    uniform (lazy bits) and accept with probability e^(-a U) by CKS Alg. 1
    (A_k ~ Bern(a U / k) = Bern(a / k) and [V_k < U], V_k a fresh lazy
    uniform; accept iff the first failure index is odd). Then return [U < b/a].
    Acceptance probability (1 - e^-a)/a >= 0.63, so unlike the rejection in
    :func:`_bern_ratio` (expected 1/(1 - e^-a) rounds, about Delta/eps for a
    sensitivity-Delta grid) the cost does not grow as a -> 0.
    """
    x = b / a
    while True:
        u = _LazyUniform(source)
        k = 1
        while source.bernoulli(a.numerator, a.denominator * k) and _LazyUniform(source).less(u):
            k += 1
        if k % 2 == 1:
            return u.less_than(x)


def tsg_residual_weights(a: float, b: float) -> tuple[float, float]:
    """Eq. (1) weights (w0, w1) for TSG(p=e^-a) -> TSG(q=e^-b), a >= b > 0 (spec 3.1).

    w0 = (1-q)^2 p / ((1-p)^2 q), w1 = (q-p)(1-pq) / ((1-p)^2 q), w0 + w1 = 1.
    """
    if a == math.inf:
        return 0.0, 1.0
    r = math.expm1(-b) / math.expm1(-a)  # (1-q)/(1-p)
    w0 = math.exp(b - a) * r * r
    return w0, 1.0 - w0


def tsg_residual(a: Fraction, b: Fraction, source: RandomSource) -> int:
    """Exact draw of the Eq. (1) residual: 0 w.p. w0, else TSG(e^-b).

    w0 = e^-(a-b) * ((1-e^-b)/(1-e^-a))^2 is sampled as a product of three
    independent exact Bernoullis (bernoulli_exp and two ratio Bernoullis:
    ``_bern_ratio_small`` when a < 1, whose cost does not grow with the
    sensitivity of a fixed-point grid, else ``_bern_ratio``).
    """
    if a < b:
        raise ValueError("residuals only go from a larger to a smaller eps")
    if a == b:
        return 0
    ratio = _bern_ratio_small if a < 1 else _bern_ratio
    if bernoulli_exp(a - b, source) and ratio(a, b, source) and ratio(a, b, source):
        return 0
    return discrete_laplace(1 / b, source)


class NoiseFamily:
    """A noise family eta(eps) for sensitivity ``sensitivity`` (spec 3)."""

    name = "family"
    exact = False  # integer, float-free sampling
    integer = False  # values live on Z
    pure = True  # eta(eps) is pure eps-DP

    def __init__(self, sensitivity: RealLike = 1) -> None:
        if not (sensitivity > 0 and math.isfinite(sensitivity)):
            raise ValueError(f"sensitivity must be finite and > 0, got {sensitivity!r}")
        self.sensitivity = sensitivity

    def cf(self, eps: float, t: ArrayLike) -> Any:
        """Characteristic function of eta(eps) at ``t`` (numpy)."""
        raise NotImplementedError

    def variance(self, eps: float) -> float:
        raise NotImplementedError

    def root(self, true_value: Any, eps: float, source: RandomSource) -> Any:
        """q + eta(eps): the only data access of Alg. 1."""
        return true_value + self.noise(eps, source)

    def noise(self, eps: float, source: RandomSource) -> Any:
        raise NotImplementedError

    def residual(self, eps_hi: float, eps_lo: float, source: RandomSource) -> Any:
        """A fresh residual with CF cf(eps_lo) / cf(eps_hi)."""
        raise NotImplementedError

    def residual_variance(self, eps_hi: float, eps_lo: float) -> float:
        raise NotImplementedError

    def pmf(self, eps: float, k: ArrayLike) -> Any:
        """P(eta(eps) = k) on an integer array ``k`` (integer families; analysis/bridges only)."""
        raise NotImplementedError

    def residual_pmf(self, eps_hi: float, eps_lo: float, k: ArrayLike) -> Any:
        """The residual's pmf on an integer array ``k`` (integer families; analysis/bridges only)."""
        raise NotImplementedError

    def residual_weights(self, eps_hi: float, eps_lo: float) -> tuple[float, float]:
        """(w0, w1): the residual's atom at 0 and the weight of its continuous/integer part."""
        raise NotImplementedError

    def half_width(self, eps: float, level: float = 0.95) -> float:
        """Chebyshev half-width sqrt(Var/(1-level)) (conservative default)."""
        return math.sqrt(self.variance(eps) / (1 - level))

    def scale(self, eps: float) -> float:
        return math.sqrt(self.variance(eps))


class TSG(NoiseFamily):
    """Two-sided geometric, p = e^{-eps/Delta} (spec 3.1; Eq. (1) residual). Integer, exact."""

    name, exact, integer = "tsg", True, True
    sensitivity: int

    def __init__(self, sensitivity: int = 1) -> None:
        if int(sensitivity) != sensitivity or sensitivity < 1:
            raise ValueError("tsg needs an integer sensitivity >= 1 (use a fixed-point grid)")
        super().__init__(int(sensitivity))

    def _a(self, eps: float) -> Fraction:
        return as_epsilon(eps) / self.sensitivity

    def cf(self, eps: float, t: ArrayLike) -> Any:
        p = math.exp(-eps / self.sensitivity)
        return (1 - p) ** 2 / (1 - 2 * p * np.cos(t) + p * p)

    def variance(self, eps: float) -> float:
        p = math.exp(-eps / self.sensitivity)
        return 2 * p / math.expm1(-eps / self.sensitivity) ** 2

    def noise(self, eps: float, source: RandomSource) -> Any:
        return discrete_laplace(1 / self._a(eps), source)

    def root(self, true_value: Any, eps: float, source: RandomSource) -> Any:
        return int(true_value) + self.noise(eps, source)

    def residual(self, eps_hi: float, eps_lo: float, source: RandomSource) -> Any:
        return tsg_residual(self._a(eps_hi), self._a(eps_lo), source)

    def residual_weights(self, eps_hi: float, eps_lo: float) -> tuple[float, float]:
        return tsg_residual_weights(eps_hi / self.sensitivity, eps_lo / self.sensitivity)

    def residual_variance(self, eps_hi: float, eps_lo: float) -> float:
        return self.residual_weights(eps_hi, eps_lo)[1] * self.variance(eps_lo)

    def residual_pmf(self, eps_hi: float, eps_lo: float, k: ArrayLike) -> Any:
        """Eq. (1) pmf on integer array ``k`` (floats; analysis/bridges only)."""
        w0, w1 = self.residual_weights(eps_hi, eps_lo)
        return w1 * self.pmf(eps_lo, k) + w0 * (np.asarray(k) == 0)

    def pmf(self, eps: float, k: ArrayLike) -> Any:
        b = eps / self.sensitivity
        return math.tanh(b / 2) * np.exp(-b * np.abs(np.asarray(k, dtype=float)))

    def half_width(self, eps: float, level: float = 0.95) -> float:
        return dlap_half_width(1 / self._a(eps), level)

    def scale(self, eps: float) -> float:
        return self.sensitivity / eps


class MSDLap(NoiseFamily):
    """Paper form of MSDLap (spec 3.5): eta = sum_{xi=1..Delta} xi * TSG_xi(e^-eps).

    Residual (erratum E4): sum_xi xi * s^(xi), s^(xi) iid Eq. (1) residuals.
    Integer, exact; costs Delta TSG draws per level.
    """

    name, exact, integer = "msdlap", True, True
    sensitivity: int

    def __init__(self, sensitivity: int = 1) -> None:
        if int(sensitivity) != sensitivity or sensitivity < 1:
            raise ValueError("msdlap needs an integer sensitivity >= 1")
        super().__init__(int(sensitivity))
        self._unit = TSG(1)

    def cf(self, eps: float, t: ArrayLike) -> Any:
        return np.prod(
            [self._unit.cf(eps, xi * np.asarray(t)) for xi in range(1, self.sensitivity + 1)], axis=0
        )

    def variance(self, eps: float) -> float:
        D = self.sensitivity
        return D * (D + 1) * (2 * D + 1) / 6 * self._unit.variance(eps)

    def noise(self, eps: float, source: RandomSource) -> Any:
        return sum(xi * self._unit.noise(eps, source) for xi in range(1, self.sensitivity + 1))

    def root(self, true_value: Any, eps: float, source: RandomSource) -> Any:
        return int(true_value) + self.noise(eps, source)

    def residual(self, eps_hi: float, eps_lo: float, source: RandomSource) -> Any:
        return sum(xi * self._unit.residual(eps_hi, eps_lo, source) for xi in range(1, self.sensitivity + 1))

    def residual_variance(self, eps_hi: float, eps_lo: float) -> float:
        return self.variance(eps_lo) - self.variance(eps_hi)
