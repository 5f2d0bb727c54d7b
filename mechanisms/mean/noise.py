"""Continuous noise laws for add-remove mean estimation (add-remove mean spec section 2).

Each class has the density (or pmf), a vectorised numpy sampler
``sample(rng, size)`` and ``privacy_map(d_in)`` (pure eps-DP for a query whose
per-step sensitivity lies in the law's sensitivity set; group privacy gives
d_in * eps). These samplers are for simulation and reference only: serving
uses the grid versions in :mod:`mechanisms.mean.grid` (Mironov 2012).

* :class:`Laplace` (2.1), :class:`DiscreteLaplace` (2.2),
* :class:`Staircase` -- univariate staircase (Def. 2, eq. 11),
* :class:`Hourglass` -- the paper's 2-D mechanism (eq. 7, Thm 2, Lemmas 3-4),
  returned as (Z1, K) with K = Z1 + Z2 an integer,
* :class:`Staircase2D` -- the l1 staircase (Def. 3, eq. 12) with the
  corrected normaliser (spec 2.5 erratum).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..dlap import dlap_pmf
from ..scalars import Size
from .constants import (
    gamma_star,
    gamma_tilde,
    hourglass_c,
    st2d_a2,
    st2d_coord_var,
    staircase_a,
    staircase_var,
)

__all__ = ["Laplace", "DiscreteLaplace", "Staircase", "Hourglass", "Staircase2D", "geometric0"]


def geometric0(rng: np.random.Generator, eps: float, size: Size) -> Any:
    """P(G = k) = (1-b) b^k, k >= 0 (spec 2.2)."""
    return rng.geometric(-math.expm1(-eps), size) - 1


class Laplace:
    """Lap(scale): density exp(-|z|/scale)/(2 scale), variance 2 scale^2 (spec 2.1)."""

    def __init__(self, scale: float) -> None:
        self.scale = float(scale)

    def pdf(self, z: ArrayLike) -> Any:
        return np.exp(-np.abs(z) / self.scale) / (2 * self.scale)

    def sample(self, rng: np.random.Generator, size: Size = None) -> Any:
        return rng.laplace(0.0, self.scale, size)

    @property
    def variance(self) -> float:
        return 2 * self.scale**2

    def privacy_map(self, d_in: int, sensitivity: float = 1.0) -> float:
        """eps = d_in * l1-sensitivity / scale."""
        return d_in * sensitivity / self.scale


class DiscreteLaplace:
    """P(L = m) = (1-b)/(1+b) b^|m| on Z, b = e^-eps (spec 2.2); sensitivity 1."""

    def __init__(self, eps: float) -> None:
        self.eps = float(eps)

    def pmf(self, m: ArrayLike) -> Any:
        return dlap_pmf(m, 1 / self.eps)

    def sample(self, rng: np.random.Generator, size: Size = None) -> Any:
        return geometric0(rng, self.eps, size) - geometric0(rng, self.eps, size)

    @property
    def variance(self) -> float:
        b = math.exp(-self.eps)
        return 2 * b / math.expm1(-self.eps) ** 2

    def privacy_map(self, d_in: int) -> float:
        return d_in * self.eps


class Staircase:
    """Univariate staircase (Def. 2, eq. 11): f(x) = a(gamma) b^j(x),
    j(x) = floor(|x|/Delta + 1 - gamma) (Lemma 3 compact form, eq. 10 convention)."""

    def __init__(self, eps: float, gamma: float | None = None, delta: float = 1.0) -> None:
        self.eps = float(eps)
        self.gamma = gamma_star(eps) if gamma is None else float(gamma)
        self.delta = float(delta)
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError("gamma must be in [0, 1]")

    def exponent(self, x: ArrayLike) -> Any:
        return np.floor(np.abs(x) / self.delta + 1 - self.gamma)

    def pdf(self, x: ArrayLike) -> Any:
        return staircase_a(self.eps, self.gamma, self.delta) * np.exp(-self.eps * self.exponent(x))

    def sample(self, rng: np.random.Generator, size: Size = None) -> Any:
        """Geng-Viswanath construction (spec 2.3 sampler)."""
        b, g = math.exp(-self.eps), self.gamma
        sign = np.where(rng.random(size) < 0.5, -1.0, 1.0)
        geo = geometric0(rng, self.eps, size)
        u = rng.random(size)
        outer = rng.random(size) < (1 - g) * b / (g + (1 - g) * b)
        return sign * self.delta * np.where(outer, geo + g + (1 - g) * u, geo + g * u)

    @property
    def variance(self) -> float:
        return staircase_var(self.eps, self.gamma) * self.delta**2

    def privacy_map(self, d_in: int) -> float:
        return d_in * self.eps


class Hourglass:
    """The hourglass mechanism (section 4.1, eq. 7), Delta = 1.

    Support: lines x + y = k (k integer). On line k, for x >= 0 with step index
    j = floor(x + 1 - gamma), the density in x is c(gamma) b^(j + |k - j|)
    (spec 2.4 closed form); (x, k) -> (-x, -k) for x < 0. Theorem 2: eps-DP for
    neighbour differences +-(x0, 1 - x0), x0 in [0, 1]. Default gamma = gamma*(eps)
    (Thm 3), where Var Z1 = Var Z2 = sigma^2(eps) and Cov(Z1, Z2) = 0.
    """

    def __init__(self, eps: float, gamma: float | None = None) -> None:
        self.eps = float(eps)
        self.gamma = gamma_star(eps) if gamma is None else float(gamma)
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError("gamma must be in (0, 1]")
        self.c = hourglass_c(self.eps, self.gamma)

    def step(self, x: ArrayLike) -> Any:
        """Signed step index J(x) = sign(x) floor(|x| + 1 - gamma) (eq. 10)."""
        x = np.asarray(x, dtype=float)
        return np.sign(x) * np.floor(np.abs(x) + 1 - self.gamma)

    def exponent(self, x: ArrayLike, k: ArrayLike) -> Any:
        """E(x, k) with density c b^E on line k; = |J| + |k - J|."""
        j = self.step(x)
        return np.abs(j) + np.abs(np.asarray(k, dtype=float) - j)

    def pdf(self, x: ArrayLike, k: ArrayLike) -> Any:
        return self.c * np.exp(-self.eps * self.exponent(x, k))

    def k_pmf(self, k: ArrayLike) -> Any:
        """P(K = k) = c b^|k| (|k| + 2 gamma + 2 b^2/(1 - b^2)) (spec 2.4 moments)."""
        b = math.exp(-self.eps)
        ka = np.abs(np.asarray(k, dtype=float))
        return self.c * b**ka * (ka + 2 * self.gamma + 2 * b * b / (1 - b * b))

    def sample(self, rng: np.random.Generator, size: Size = None) -> Any:
        """Z1 ~ staircase (Lemma 3), then K = J(Z1) + DLap(eps) (Lemma 4)."""
        z1 = Staircase(self.eps, self.gamma).sample(rng, size)
        k = self.step(z1).astype(np.int64) + DiscreteLaplace(self.eps).sample(rng, size)
        return z1, k

    def privacy_map(self, d_in: int) -> float:
        return d_in * self.eps


class Staircase2D:
    """l1 staircase (Def. 3, eq. 12), Delta = 1: f = a2 b^floor(|x| + |y| + 1 - gamma),
    with the CORRECTED a2 (spec 2.5). Default gamma = gamma~(eps) (Lemma 5)."""

    def __init__(self, eps: float, gamma: float | None = None) -> None:
        self.eps = float(eps)
        self.gamma = gamma_tilde(self.eps) if gamma is None else float(gamma)
        self.a2 = st2d_a2(self.eps, self.gamma)

    def pdf(self, x: ArrayLike, y: ArrayLike) -> Any:
        r = np.abs(x) + np.abs(y)
        return self.a2 * np.exp(-self.eps * np.floor(r + 1 - self.gamma))

    def sample(self, rng: np.random.Generator, size: Size = None) -> Any:
        """Exact ring/shell sampler (spec 2.5 [derived])."""
        eps, g = self.eps, self.gamma
        b, omb = math.exp(-eps), -math.expm1(-eps)
        al, be = 2 * g + 2 * b * (1 - g), g * g + b * (1 - g * g)
        wnb, wge = al * b / omb**2, be / omb
        k = np.where(
            rng.random(size) < wnb / (wnb + wge),
            1 + geometric0(rng, eps, size) + geometric0(rng, eps, size),
            geometric0(rng, eps, size),
        ).astype(float)
        win, wout = 2 * k * g + g * g, b * (2 * k * (1 - g) + 1 - g * g)
        inner = rng.random(size) < win / (win + wout)
        r1, r2 = np.where(inner, k, k + g), np.where(inner, k + g, k + 1)
        r = np.sqrt(r1**2 + rng.random(size) * (r2**2 - r1**2))
        u = rng.random(size)
        sx = np.where(rng.random(size) < 0.5, -1.0, 1.0)
        sy = np.where(rng.random(size) < 0.5, -1.0, 1.0)
        return sx * r * u, sy * r * (1 - u)

    @property
    def coord_variance(self) -> float:
        return st2d_coord_var(self.eps, self.gamma)

    def privacy_map(self, d_in: int) -> float:
        return d_in * self.eps
