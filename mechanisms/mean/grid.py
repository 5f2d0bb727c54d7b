"""The hourglass mechanism restricted to a grid, for serving (add-remove mean spec 2.4, 6.7).

Floating-point continuous noise leaks through its low-order bits (Mironov
2012), so the serving path releases integers only. The first coordinate lives
on the grid (1/M)Z (M a power of two), the line index K on Z:

    P(Z1 = i/M, K = k) = b^E(i, k) / Zh,   E = |J| + |k - J|,
    J(i) = sign(i) * floor((|i| + M - G) / M),  G = round(gamma M) in [1, M],

i.e. the hourglass density of eq. (7) (spec 2.4 closed form, with the eq. 10
step convention j = floor(x + 1 - gamma)) evaluated at grid points, with gamma
snapped to G/M. Privacy: the ratio bound of Thm 2 is pointwise,
|E(x + x0, k + 1) - E(x, k)| <= 1 for all real x and x0 in [0, 1], hence it holds
for every grid point and every grid shift a/M, a in {0..M} (checked
exhaustively in tests/mean). The common normaliser cancels, so the restricted
law is eps-DP for neighbour differences +-(a/M, 1 - a/M).

Marginal (Lemma 3 on the grid): P(Z1 = i/M) = b^|J(i)| / Zs with
Zs = (2G - 1) + 2 M b/(1 - b); conditional (Lemma 4): K = J + DLap(eps). So the
step J is 0 with probability (2G - 1)/Zs, and otherwise |J| = 1 + Geom0(b) with a
fair sign: the exact sampler below draws [J != 0] as one exact coin of
x = 2M b / ((2G - 1)(1 - b) + 2M b) (a lazily read uniform against x known through
proved integer intervals, :func:`~mechanisms.exact_real.tilted_share_interval`), then
the geometric part with the exact integer samplers of Canonne-Kamath-Steinke. Its cost
is O(1) expected draws at every eps: no rejection whose acceptance falls with the
step's probability (at G = 1, x ~ 2M e^-eps). :meth:`GridHourglass.sample_many` is the
same steps on arrays (the exact batch samplers of :mod:`mechanisms.batch`); a
vectorised numpy sampler with the same law serves simulation.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..batch import (
    Interval,
    below_array,
    discrete_laplace_array,
    fair_coins,
    geometric_array,
    randbelow32,
)
from ..exact_real import LazyUniform, tilted_share_interval
from ..rng import RandomSource
from ..samplers import discrete_laplace, geometric_exp
from ..scalars import Size
from .constants import gamma_star
from .noise import geometric0

__all__ = ["GridHourglass", "dlap_grid_sample"]


def dlap_grid_sample(rng: np.random.Generator, scale: float, size: Size) -> Any:
    """Vectorised discrete Laplace, P(z) proportional to exp(-|z|/scale) (simulation only)."""
    p = -math.expm1(-1.0 / scale)
    return rng.geometric(p, size) - rng.geometric(p, size)


class GridHourglass:
    """Hourglass on (1/M)Z x Z with gamma = G/M (module docstring)."""

    def __init__(self, epsilon: Fraction, grid: int, gamma: float | None = None) -> None:
        self.epsilon = Fraction(epsilon)
        self.eps = float(self.epsilon)
        self.grid = int(grid)
        g = gamma_star(self.eps) if gamma is None else float(gamma)
        self.G = min(max(round(g * self.grid), 1), self.grid)
        self.gamma = self.G / self.grid
        b = math.exp(-self.eps)
        self._b = b
        self.z_steps = (2 * self.G - 1) + 2 * self.grid * b / -math.expm1(-self.eps)
        self._inv_eps = 1 / self.epsilon  # the K-coordinate's discrete-Laplace scale

    # -- law ---------------------------------------------------------------
    def step(self, i: ArrayLike) -> Any:
        """Signed step index J(i) (integer arithmetic)."""
        ia = np.asarray(i, dtype=np.int64)
        return np.sign(ia) * ((np.abs(ia) + self.grid - self.G) // self.grid)

    def exponent(self, i: ArrayLike, k: ArrayLike) -> Any:
        j = self.step(i)
        return np.abs(j) + np.abs(np.asarray(k, dtype=np.int64) - j)

    def logpmf(self, i: ArrayLike, k: ArrayLike) -> Any:
        b = self._b
        log_norm = math.log(self.z_steps) + math.log1p(b) - math.log(-math.expm1(-self.eps))
        return -self.eps * self.exponent(i, k) - log_norm

    def pmf(self, i: ArrayLike, k: ArrayLike) -> Any:
        return np.exp(self.logpmf(i, k))

    def marginal_pmf(self, i: ArrayLike) -> Any:
        """P(Z1 = i/M) = b^|J(i)| / Zs (Lemma 3 on the grid)."""
        return np.exp(-self.eps * np.abs(self.step(i))) / self.z_steps

    def step_pmf(self, j: ArrayLike) -> Any:
        """P(J = j): (2G - 1)/Zs at 0, M b^|j|/Zs otherwise."""
        ja = np.abs(np.asarray(j, dtype=np.int64))
        return np.where(ja == 0, 2 * self.G - 1, self.grid * np.exp(-self.eps * ja)) / self.z_steps

    def privacy_map(self, d_in: int) -> Fraction:
        """Exact eps for add-remove distance d_in (Thm 2 + group privacy)."""
        return d_in * self.epsilon

    # -- samplers ----------------------------------------------------------
    def _nonzero_share(self) -> Interval:
        """``interval(prec)`` of x = P(J != 0) = 2M b / ((2G - 1)(1 - b) + 2M b)."""
        return partial(
            tilted_share_interval,
            self.epsilon.numerator,
            self.epsilon.denominator,
            2 * self.G - 1,
            2 * self.grid,
        )

    def sample_exact(self, source: RandomSource) -> tuple[int, int]:
        """One exact draw (I, K), Z1 = I/M; integer randomness only.

        [J != 0] is one exact coin of P(J != 0) (module docstring); then |J| - 1 ~ Geom0(b)
        (:func:`geometric_exp`) with a fair sign; the point is uniform within the step's
        grid cells. O(1) expected draws at any eps.
        """
        grid, big_g = self.grid, self.G
        if LazyUniform(0, 0, source).below(self._nonzero_share()):
            j = 1 + geometric_exp(self.epsilon, source)
            neg = source.randbelow(2) == 1
            mag = big_g + (j - 1) * grid + source.randbelow(grid)
            i, sj = (-mag, -j) if neg else (mag, j)
        else:
            i, sj = source.randbelow(2 * big_g - 1) - (big_g - 1), 0
        return i, sj + discrete_laplace(self._inv_eps, source)

    def sample_many(self, size: int, source: RandomSource) -> tuple[np.ndarray, np.ndarray]:
        """``size`` exact draws (I, K) as int64 arrays: :meth:`sample_exact` on arrays
        (the coins [J != 0] by :func:`~mechanisms.batch.below_array`)."""
        grid, big_g = self.grid, self.G
        nonzero = below_array(size, self._nonzero_share(), source)
        nz = int(nonzero.sum())
        j = 1 + geometric_array(nz, self.epsilon, source)
        neg = fair_coins(nz, source)
        mag = big_g + (j - 1) * grid + randbelow32(nz, grid, source)
        i = np.empty(size, dtype=np.int64)
        sj = np.zeros(size, dtype=np.int64)
        i[~nonzero] = randbelow32(size - nz, 2 * big_g - 1, source) - (big_g - 1)
        i[nonzero] = np.where(neg, -mag, mag)
        sj[nonzero] = np.where(neg, -j, j)
        return i, sj + discrete_laplace_array(size, self._inv_eps, source)

    def sample(self, rng: np.random.Generator, size: Size) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised draws (I, K) with the same law (simulation only)."""
        grid, big_g = self.grid, self.G
        p0 = (2 * big_g - 1) / self.z_steps
        j = np.where(rng.random(size) < p0, 0, 1 + geometric0(rng, self.eps, size))
        sign = 2 * rng.integers(0, 2, size) - 1
        mag = big_g + (j - 1) * grid + rng.integers(0, grid, size)
        i = np.where(j == 0, rng.integers(-(big_g - 1), big_g, size), sign * mag)
        sj = np.where(j == 0, 0, sign * j)
        return i.astype(np.int64), (
            sj + geometric0(rng, self.eps, size) - geometric0(rng, self.eps, size)
        ).astype(np.int64)
