"""The hourglass mechanism restricted to a grid, for serving (spec 001 2.4, 6.7).

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
Zs = (2G - 1) + 2 M b/(1 - b); conditional (Lemma 4): K = J + DLap(eps). That
gives the exact sampler below (only integer draws from a RandomSource, via the
exact Bernoulli(exp(-eps)) of Canonne-Kamath-Steinke) and a vectorised numpy
sampler with the same law for simulation. :meth:`GridHourglass.sample_many` is the exact
sampler for a whole release (issue 21): the same steps on arrays, with the exact batch
samplers of :mod:`mechanisms.batch`.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..batch import (bernoulli32, discrete_laplace_array, fair_coins, fill_by_rejection,
                     geometric_array, randbelow32)
from ..rng import RandomSource
from ..samplers import discrete_laplace, geometric_exp
from .constants import gamma_star
from .noise import geometric0

__all__ = ["GridHourglass", "dlap_grid_sample"]


def dlap_grid_sample(rng: np.random.Generator, scale: float, size) -> np.ndarray:
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
        self._inv_eps = 1 / self.epsilon            # the K-coordinate's discrete-Laplace scale

    # -- law ---------------------------------------------------------------
    def step(self, i):
        """Signed step index J(i) (integer arithmetic)."""
        i = np.asarray(i, dtype=np.int64)
        return np.sign(i) * ((np.abs(i) + self.grid - self.G) // self.grid)

    def exponent(self, i, k):
        j = self.step(i)
        return np.abs(j) + np.abs(np.asarray(k, dtype=np.int64) - j)

    def logpmf(self, i, k):
        b = self._b
        log_norm = math.log(self.z_steps) + math.log1p(b) - math.log(-math.expm1(-self.eps))
        return -self.eps * self.exponent(i, k) - log_norm

    def pmf(self, i, k):
        return np.exp(self.logpmf(i, k))

    def marginal_pmf(self, i):
        """P(Z1 = i/M) = b^|J(i)| / Zs (Lemma 3 on the grid)."""
        return np.exp(-self.eps * np.abs(self.step(i))) / self.z_steps

    def step_pmf(self, j):
        """P(J = j): (2G - 1)/Zs at 0, M b^|j|/Zs otherwise."""
        j = np.abs(np.asarray(j, dtype=np.int64))
        return np.where(j == 0, 2 * self.G - 1, self.grid * np.exp(-self.eps * j)) / self.z_steps

    def privacy_map(self, d_in: int) -> Fraction:
        """Exact eps for add-remove distance d_in (Thm 2 + group privacy)."""
        return d_in * self.epsilon

    # -- samplers ----------------------------------------------------------
    def sample_exact(self, source: RandomSource) -> tuple[int, int]:
        """One exact draw (I, K), Z1 = I/M; integer randomness only.

        Step j ~ Geom0(b) (exact, O(1) draws at any eps: :func:`geometric_exp`), then accept
        j = 0 with probability (2G - 1)/(2M) (rejection to the weights
        (2G - 1) : 2M b^j); the point is uniform within the step's grid cells.
        """
        grid, big_g, eps = self.grid, self.G, self.epsilon
        while True:
            j = geometric_exp(eps, source)
            if j > 0 or source.bernoulli(2 * big_g - 1, 2 * grid):
                break
        if j == 0:
            i, sj = source.randbelow(2 * big_g - 1) - (big_g - 1), 0
        else:
            neg = source.randbelow(2) == 1
            mag = big_g + (j - 1) * grid + source.randbelow(grid)
            i, sj = (-mag, -j) if neg else (mag, j)
        return i, sj + discrete_laplace(self._inv_eps, source)

    def sample_many(self, size: int, source: RandomSource) -> tuple[np.ndarray, np.ndarray]:
        """``size`` exact draws (I, K) as int64 arrays: :meth:`sample_exact` row by row. The
        rejection of j = 0 (kept with probability (2G - 1)/(2M)) runs over oversampled
        proposals (:func:`~mechanisms.batch.fill_by_rejection`); the acceptance rate
        b + (1 - b)(2G - 1)/(2M) is computed in floats only to size the batches."""
        grid, big_g, eps = self.grid, self.G, self.epsilon

        def propose(k: int):
            j = geometric_array(k, eps, source)
            zero = np.flatnonzero(j == 0)
            ok = np.ones(k, dtype=bool)
            ok[zero] = bernoulli32(zero.size, 2 * big_g - 1, 2 * grid, source)
            return j, ok
        rate = self._b + (1 - self._b) * (2 * big_g - 1) / (2 * grid)
        j = fill_by_rejection(size, propose, Fraction(max(0.9 * rate, 1e-3)))
        zero = j == 0
        nz = int(zero.sum())
        i = np.empty(size, dtype=np.int64)
        i[zero] = randbelow32(nz, 2 * big_g - 1, source) - (big_g - 1)
        neg = fair_coins(size - nz, source)
        mag = big_g + (j[~zero] - 1) * grid + randbelow32(size - nz, grid, source)
        i[~zero] = np.where(neg, -mag, mag)
        sj = j.copy()
        sj[~zero] = np.where(neg, -j[~zero], j[~zero])
        return i, sj + discrete_laplace_array(size, self._inv_eps, source)

    def sample(self, rng: np.random.Generator, size) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised draws (I, K) with the same law (simulation only)."""
        grid, big_g = self.grid, self.G
        p0 = (2 * big_g - 1) / self.z_steps
        j = np.where(rng.random(size) < p0, 0, 1 + geometric0(rng, self.eps, size))
        sign = 2 * rng.integers(0, 2, size) - 1
        mag = big_g + (j - 1) * grid + rng.integers(0, grid, size)
        i = np.where(j == 0, rng.integers(-(big_g - 1), big_g, size), sign * mag)
        sj = np.where(j == 0, 0, sign * j)
        return i.astype(np.int64), (sj + geometric0(rng, self.eps, size)
                                    - geometric0(rng, self.eps, size)).astype(np.int64)
