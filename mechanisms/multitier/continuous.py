"""Floating-point noise families for multi-tier release (spec 3.2-3.4).

Laplace (= Koufogiannis et al. 2016), Gaussian (analytic calibration at a fixed
delta) and Skellam (no pure-DP calibration, erratum E5). Noise comes from
``source.generator()`` (a fresh numpy Generator per draw); the Laplace atom is an
exact rational Bernoulli. Continuous outputs are floats and therefore exposed to
Mironov (2012): for serving COUNT/SUM prefer ``tsg`` on a fixed-point grid
(:class:`mechanisms.multitier.ladder.SumGrid`, spec pitfall 6).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, special, stats

from ..measurements import as_epsilon
from ..rng import RandomSource
from ..scalars import RealLike
from .families import NoiseFamily

__all__ = ["Laplace", "Gaussian", "Skellam"]


class Laplace(NoiseFamily):
    """Laplace(Delta/eps) (spec 3.2, = Koufogiannis et al. 2016).

    Residual: 0 w.p. (eps_lo/eps_hi)^2 (exact rational Bernoulli), else
    Laplace(Delta/eps_lo) from ``source.generator()`` (floating point).
    """

    name = "laplace"

    def cf(self, eps: float, t: ArrayLike) -> Any:
        b = self.sensitivity / eps
        return 1 / (1 + (b * np.asarray(t)) ** 2)

    def variance(self, eps: float) -> float:
        return 2 * (self.sensitivity / eps) ** 2

    def noise(self, eps: float, source: RandomSource) -> Any:
        return float(source.generator().laplace(0.0, self.sensitivity / eps))

    def root(self, true_value: Any, eps: float, source: RandomSource) -> Any:
        return float(true_value) + self.noise(eps, source)

    def atom(self, eps_hi: float, eps_lo: float) -> Fraction:
        return (as_epsilon(eps_lo) / as_epsilon(eps_hi)) ** 2

    def residual(self, eps_hi: float, eps_lo: float, source: RandomSource) -> Any:
        w0 = self.atom(eps_hi, eps_lo)
        if w0 > 1:
            raise ValueError("residuals only go from a larger to a smaller eps")
        if source.bernoulli(w0.numerator, w0.denominator):
            return 0.0
        return self.noise(eps_lo, source)

    def residual_variance(self, eps_hi: float, eps_lo: float) -> float:
        return self.variance(eps_lo) - self.variance(eps_hi)

    def half_width(self, eps: float, level: float = 0.95) -> float:
        return self.sensitivity / eps * math.log(1 / (1 - level))

    def scale(self, eps: float) -> float:
        return self.sensitivity / eps


class Gaussian(NoiseFamily):
    """N(0, sigma(eps)^2), analytic Gaussian calibration at a fixed delta
    (Balle & Wang 2018; spec 3.3). Residual N(0, sigma_lo^2 - sigma_hi^2).
    Coalition guarantee: (max eps, delta) (spec 1.2, pitfall 15)."""

    name, pure = "gaussian", False

    def __init__(self, sensitivity: RealLike = 1, delta: float = 1e-6) -> None:
        super().__init__(sensitivity)
        if not 0 < delta < 1:
            raise ValueError("gaussian needs 0 < delta < 1")
        self.delta = delta
        self._sigma: dict[float, float] = {}

    def sigma(self, eps: float) -> float:
        if eps not in self._sigma:
            self._sigma[eps] = self._calibrate(eps)
        return self._sigma[eps]

    def _calibrate(self, eps: float) -> float:
        D, d = self.sensitivity, self.delta

        def excess(s: RealLike) -> float:  # delta(eps) of N(0, s^2) minus target (Balle & Wang 2018, Thm 8)
            a, c = D / (2 * s), eps * s / D
            gap: float = stats.norm.cdf(a - c) - math.exp(eps) * stats.norm.cdf(-a - c) - d
            return gap

        hi = D
        while excess(hi) > 0:
            hi *= 2
        sigma: float = optimize.brentq(excess, 1e-12 * D, hi, xtol=1e-14 * D)
        return sigma

    def cf(self, eps: float, t: ArrayLike) -> Any:
        return np.exp(-0.5 * (self.sigma(eps) * np.asarray(t)) ** 2)

    def variance(self, eps: float) -> float:
        return self.sigma(eps) ** 2

    def noise(self, eps: float, source: RandomSource) -> Any:
        return float(source.generator().normal(0.0, self.sigma(eps)))

    def root(self, true_value: Any, eps: float, source: RandomSource) -> Any:
        return float(true_value) + self.noise(eps, source)

    def residual(self, eps_hi: float, eps_lo: float, source: RandomSource) -> Any:
        v = self.residual_variance(eps_hi, eps_lo)
        if v < 0:
            raise ValueError("residuals only go from a larger to a smaller eps")
        return float(source.generator().normal(0.0, math.sqrt(v)))

    def residual_variance(self, eps_hi: float, eps_lo: float) -> float:
        return self.variance(eps_lo) - self.variance(eps_hi)

    def half_width(self, eps: float, level: float = 0.95) -> float:
        z: float = stats.norm.ppf(0.5 + level / 2)
        return z * self.sigma(eps)


class Skellam(NoiseFamily):
    """Skellam(lambda) = Poisson(lambda) - Poisson(lambda) (spec 3.4).

    Erratum E5: no pure-DP calibration exists. Level eps uses lambda = Delta^2/eps^2
    (variance 2 Delta^2/eps^2, as Laplace); the guarantee is the Renyi-DP curve
    :meth:`rdp` (Agarwal et al. 2021, Thm 3.5). Residual Skellam(lam_lo - lam_hi).
    Sampling via ``source.generator()`` (numpy Poisson).
    """

    name, integer, pure = "skellam", True, False

    def __init__(self, sensitivity: int = 1) -> None:
        super().__init__(int(sensitivity))

    def lam(self, eps: float) -> float:
        return (self.sensitivity / eps) ** 2

    def rdp(self, alpha: float, eps: float) -> float:
        D, mu = self.sensitivity, self.lam(eps)
        return alpha * D * D / (4 * mu) + min(
            ((2 * alpha - 1) * D * D + 6 * D) / (16 * mu * mu), 3 * D / (4 * mu)
        )

    def cf(self, eps: float, t: ArrayLike) -> Any:
        return np.exp(2 * self.lam(eps) * (np.cos(t) - 1))

    def pmf(self, lam: float, k: ArrayLike) -> Any:
        return special.ive(np.abs(np.asarray(k)), 2 * lam)  # e^{-2 lam} I_|k|(2 lam)

    def variance(self, eps: float) -> float:
        return 2 * self.lam(eps)

    def _sk(self, mu: float, source: RandomSource) -> int:
        g = source.generator()
        return int(g.poisson(mu)) - int(g.poisson(mu))

    def noise(self, eps: float, source: RandomSource) -> Any:
        return self._sk(self.lam(eps), source)

    def root(self, true_value: Any, eps: float, source: RandomSource) -> Any:
        return int(true_value) + self.noise(eps, source)

    def residual(self, eps_hi: float, eps_lo: float, source: RandomSource) -> Any:
        mu = self.lam(eps_lo) - self.lam(eps_hi)
        if mu < 0:
            raise ValueError("residuals only go from a larger to a smaller eps")
        return self._sk(mu, source)

    def residual_variance(self, eps_hi: float, eps_lo: float) -> float:
        return self.variance(eps_lo) - self.variance(eps_hi)
