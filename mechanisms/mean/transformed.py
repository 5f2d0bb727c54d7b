"""Algorithm 3 (transformed noise addition, section 2) as measurements.

Input: ``true_value = (S, n)`` -- exact sum of values clamped to [l, u] and
their count (COUNT(x), NULLs excluded; spec 7.2). The data enter only through
the grid input (A, n) of :class:`~mechanisms.mean.common.GridMean`
(A/M = s1, n - A/M = s2). One joint 2-D draw uses the FULL eps (no split):

* :class:`HourglassMean` (Thm 3, the optimal estimator): (I, K) from the grid
  hourglass; s1^ = (A + I)/M, n^ = n + K (an exact integer).
  Leading n^2 MSE = w^2 sigma^2(eps) ((1-alpha)^2 + alpha^2) (spec 4.2).
* :class:`LaplaceTransformedMean` (Thm 1): s1 and s2 each get discrete Laplace
  of scale M/eps grid units (l1 sensitivity M after the transform);
  n^ = (s1^ + s2^). Leading n^2 MSE = (2 w^2/eps^2)((1-alpha)^2 + alpha^2).

Released values are integers on the grid (no float noise; Mironov 2012): the
AVG l' + w' Clip(s1^/n^) and the SUM l' n^ + w' s1^ are computed from them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from ..measurements import BatchRelease
from ..rng import RandomSource, default_source
from ..samplers import discrete_laplace
from ..scalars import RealLike
from .common import GridMean, MeanRelease
from .constants import sigma2
from .grid import GridHourglass, dlap_grid_sample
from .quantiles import hourglass_abs_quantile, hourglass_count_quantile, laplace_combo_abs_quantile

__all__ = ["HourglassMean", "LaplaceTransformedMean"]

_ALPHA_GRID = tuple(i / 20 for i in range(11))  # 0, 0.05, ..., 0.5


def _interp(x: float, xs: Sequence[float], ys: Sequence[float] | np.ndarray) -> float:
    """``float(np.interp(x, xs, ys))`` for one point on an increasing grid (no array round trip)."""
    i = bisect.bisect_right(xs, x)
    if i <= 0:
        return float(ys[0])
    if i >= len(xs):
        return float(ys[-1])
    x0, x1 = xs[i - 1], xs[i]
    return float(ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0))


def _fold(alpha: float) -> float:
    """q(alpha) = q(1 - alpha) (swap symmetry of the hourglass, spec 2.4): fold to [0, 1/2]."""
    a = min(max(alpha, 0.0), 1.0)
    return min(a, 1.0 - a)


class HourglassMean(GridMean):
    """AVG by Algorithm 3 with hourglass noise, gamma = gamma*(eps) (Thm 3).

    Privacy map: eps(d_in) = d_in * eps -- Thm 2 for one step on the grid input
    (see :mod:`mechanisms.mean.grid`), group privacy for d_in steps; the AVG,
    SUM and COUNT are post-processing of the one draw.
    """

    name = "hourglass_mean"

    def __init__(self, epsilon: RealLike, lower: RealLike, upper: RealLike, integer: bool = False) -> None:
        super().__init__(epsilon, lower, upper, integer)
        self.noise = GridHourglass(self.epsilon_exact, self.grid)
        # sd of the sum-coordinate noise, output units (for EXPLAIN)
        self.scale = self.w_t * math.sqrt(sigma2(self.noise.eps))
        self._q_mean: np.ndarray | None = None
        self._q_count: dict[tuple[str, float], float] = {}

    def privacy_map_exact(self, d_in: int) -> Fraction:
        return self.noise.privacy_map(d_in)

    def release(self, true_value: Any, source: RandomSource | None = None) -> MeanRelease:
        return self.apply(true_value, self.draw(source))

    def draw(self, source: RandomSource | None = None) -> tuple[int, int]:
        """(I, K) of the grid hourglass: data-independent (Alg. 3 adds it to (A, n))."""
        return self.noise.sample_exact(source if source is not None else default_source())

    def apply(self, true_value: Any, noise: Any, source: RandomSource | None = None) -> MeanRelease:
        if noise is None:
            return self.release(true_value, source)
        a, n = self.grid_input(true_value)
        i, k = noise
        return self._release((a + i) / self.grid, n + k)

    def draw_many(self, n: int, source: RandomSource | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``n`` draws (I, K) at once (:meth:`GridHourglass.sample_many`: the law of ``n``
        :meth:`draw` calls)."""
        return self.noise.sample_many(n, source if source is not None else default_source())

    def apply_many(self, values: Any, noises: Any) -> BatchRelease:
        """:meth:`apply` for every cell: ``values = (sums, counts)`` columns, the grid inputs
        exact (:meth:`GridMean.grid_inputs`), then s1^ = (A + I)/M, n^ = n + K."""
        sums, counts = values
        a, n = self.grid_inputs(sums, counts)
        i, k = noises
        return self.release_many(a + i, n + k, self._half_width_many)

    def _half_width_many(self, n_hat: np.ndarray, mean: np.ndarray) -> float:
        """max over cells of ``half_width(0.95, n_hat, avg_hat=mean)``, elementwise in the same
        operations as :func:`_fold`, :func:`_interp` and ``_mean_hw``."""
        if not n_hat.size:
            return 0.0
        self.half_width(0.95, n_hat=1.0, avg_hat=float(self.lower))  # the q table
        w = float(self.upper) - float(self.lower)
        a = np.minimum(np.maximum((mean - self.lo_t) / self.w_t, 0.0), 1.0)
        al = np.minimum(a, 1.0 - a)
        xs, ys = np.asarray(_ALPHA_GRID, dtype=np.float64), np.asarray(self._q_mean, dtype=np.float64)
        idx = np.searchsorted(xs, al, side="right")
        j = np.clip(idx, 1, xs.size - 1)
        q = ys[j - 1] + (ys[j] - ys[j - 1]) * (al - xs[j - 1]) / (xs[j] - xs[j - 1])
        q = np.where(idx <= 0, ys[0], np.where(idx >= xs.size, ys[-1], q))
        pos = n_hat > 0
        hw = np.where(pos, np.minimum(self.w_t * q / np.where(pos, n_hat, 1.0), w), w / 2)
        return float(hw.max())

    def _simulate_noisy(self, true_value: Any, size: int, rng: np.random.Generator) -> tuple[Any, Any]:
        a, n = self.grid_input(true_value)
        i, k = self.noise.sample(rng, size)
        return (a + i) / self.grid, n + k

    # -- half-widths (delta method, Lemma 1; released values only) ---------
    def half_width(
        self, level: float = 0.95, n_hat: float | None = None, avg_hat: float | None = None
    ) -> float:
        """AVG half-width w' q(alpha^)/n^ with alpha^ = (avg^ - l')/w' and
        q = the level-quantile of |Z1 - alpha K| (exact hourglass law)."""
        if n_hat is None or n_hat <= 0:
            return self._mean_hw(0.0, n_hat)
        if avg_hat is None:  # no released AVG: worst case over the range
            avg_hat = self._worst_avg
        al = _fold((avg_hat - self.lo_t) / self.w_t)
        if level == 0.95:  # table on alpha in {0, 0.05, .., 0.5}, linear interpolation
            if self._q_mean is None:
                self._q_mean = hourglass_abs_quantile(self.noise.eps, self.noise.gamma, _ALPHA_GRID, 0.95)
            q = _interp(al, _ALPHA_GRID, self._q_mean)
        else:
            q = float(hourglass_abs_quantile(self.noise.eps, self.noise.gamma, [al], level)[0])
        return self._mean_hw(q, n_hat)

    def sum_half_width(self, level: float = 0.95) -> float:
        """SUM^ - SUM = w' Z1 + l' K = w'(Z1 - alpha_s K), alpha_s = -l'/w' (data-independent:
        computed once per level)."""
        key = ("sum", level)
        if key not in self._q_count:
            q = hourglass_abs_quantile(self.noise.eps, self.noise.gamma, [-self.lo_t / self.w_t], level)[0]
            self._q_count[key] = self.w_t * float(q)
        return self._q_count[key]

    def count_half_width(self, level: float = 0.95) -> int:
        """Exact quantile of |K|, K = J + DLap(eps) on the grid law (Lemma 4), in closed form
        (:func:`~mechanisms.mean.quantiles.hourglass_count_quantile`: O(log) at any eps)."""
        return hourglass_count_quantile(self.noise.eps, self.noise.G, self.noise.grid, level)


class LaplaceTransformedMean(GridMean):
    """AVG by Algorithm 3 with (discrete, grid) Laplace noise (Thm 1).

    Privacy map: the grid input moves by (a, M - a), a in [0, M]: l1 sensitivity
    M grid units; eps(d_in) = d_in * M / scale with scale = M/eps.
    """

    name = "laplace_transformed_mean"

    def __init__(self, epsilon: RealLike, lower: RealLike, upper: RealLike, integer: bool = False) -> None:
        super().__init__(epsilon, lower, upper, integer)
        self.noise_scale = Fraction(self.grid) / self.epsilon_exact  # grid units
        self.eps = float(self.epsilon_exact)
        self.scale = self.w_t / self.eps

    def privacy_map_exact(self, d_in: int) -> Fraction:
        return d_in * self.grid / self.noise_scale

    def release(self, true_value: Any, source: RandomSource | None = None) -> MeanRelease:
        a, n = self.grid_input(true_value)
        src = source if source is not None else default_source()
        y1 = a + discrete_laplace(self.noise_scale, src)
        y2 = (n * self.grid - a) + discrete_laplace(self.noise_scale, src)
        return self._release(y1 / self.grid, (y1 + y2) / self.grid)

    def _simulate_noisy(self, true_value: Any, size: int, rng: np.random.Generator) -> tuple[Any, Any]:
        a, n = self.grid_input(true_value)
        sc = float(self.noise_scale)
        y1 = a + dlap_grid_sample(rng, sc, size)
        y2 = (n * self.grid - a) + dlap_grid_sample(rng, sc, size)
        return y1 / self.grid, (y1 + y2) / self.grid

    def half_width(
        self, level: float = 0.95, n_hat: float | None = None, avg_hat: float | None = None
    ) -> float:
        """Error ~ w'((1-alpha) Z1 - alpha Z2)/n, Z ~ Lap(1/eps) (continuous approx.)."""
        if n_hat is None or n_hat <= 0:
            return self._mean_hw(0.0, n_hat)
        if avg_hat is None:  # no released AVG: worst case over the range
            avg_hat = self._worst_avg
        al = min(max((avg_hat - self.lo_t) / self.w_t, 0.0), 1.0)
        return self._mean_hw(laplace_combo_abs_quantile((1 - al) / self.eps, al / self.eps, level), n_hat)

    def sum_half_width(self, level: float = 0.95) -> float:
        """SUM^ - SUM = u' Z1 + l' Z2."""
        return laplace_combo_abs_quantile((self.lo_t + self.w_t) / self.eps, self.lo_t / self.eps, level)

    def count_half_width(self, level: float = 0.95) -> int:
        """COUNT^ - COUNT = Z1 + Z2 (rounded up to an integer)."""
        return int(math.ceil(laplace_combo_abs_quantile(1 / self.eps, 1 / self.eps, level)))
