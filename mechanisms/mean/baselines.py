"""Baselines for AVG in the add-remove model (add-remove mean spec sections 3.1-3.2, 7.8),
with the same interface and post-processing as Algorithm 3.

* :class:`ShiftedLaplaceMean` -- Algorithm 2: eps/2 on the midpoint-shifted
  sum (sensitivity w/2), eps/2 on the count (sensitivity 1). Leading n^2 MSE
  (2w^2 + 8(mu - m)^2)/eps^2 (Lemma 2), >= 2x Algorithm 3.
* :class:`IndependentLaplaceMean` -- Algorithm 1: eps/2 on the raw sum
  (sensitivity W = max(|l|, |u|)), eps/2 on the count; this is also how
  SmartNoise SQL answers AVG (noisy SUM / noisy COUNT). Leading n^2 MSE
  (8W^2 + 8mu^2)/eps^2. Not shift-invariant.

Both release integers on grids (discrete Laplace; Mironov 2012): Alg. 2 noises
the grid input A - nM/2 (it moves by a - M/2 in [-M/2, M/2] per row), Alg. 1
reuses :class:`~mechanisms.measurements.LaplaceSum` / ``GeometricCount``.
The AVG uses the ``midpoint_le0`` denominator policy (spec 3.5).
"""

from __future__ import annotations

from fractions import Fraction
from numbers import Real

import numpy as np

from ..dlap import dlap_half_width
from ..measurements import GeometricCount, LaplaceSum
from ..rng import RandomSource, default_source
from ..samplers import discrete_laplace
from .common import GridMean, MeanRelease
from .grid import dlap_grid_sample
from .quantiles import laplace_combo_abs_quantile

__all__ = ["ShiftedLaplaceMean", "IndependentLaplaceMean"]


class ShiftedLaplaceMean(GridMean):
    """Algorithm 2 (shifted noise addition). Privacy map (basic composition):
    d_in * ((M/2)/scale_sum + 1/scale_count) = d_in * eps."""

    name = "shifted_laplace_mean"

    def __init__(self, epsilon: Real, lower: Real, upper: Real, integer: bool = False) -> None:
        super().__init__(epsilon, lower, upper, integer)
        half = self.epsilon_exact / 2
        self.sum_scale = Fraction(self.grid, 2) / half  # grid units
        self.count_scale = 1 / half
        self.eps = float(self.epsilon_exact)
        self.scale = self.w_t / self.eps

    def privacy_map_exact(self, d_in: int) -> Fraction:
        return d_in * (Fraction(self.grid, 2) / self.sum_scale + 1 / self.count_scale)

    def _combine(self, a, n, zs, zc):
        n_hat = n + zc
        y = (a - n * self.grid // 2 + zs) + n_hat * (self.grid // 2)  # back to s1 units
        return y / self.grid, n_hat

    def release(self, true_value, source: RandomSource | None = None) -> MeanRelease:
        a, n = self.grid_input(true_value)
        src = source if source is not None else default_source()
        zs = discrete_laplace(self.sum_scale, src)
        zc = discrete_laplace(self.count_scale, src)
        return self._release(*self._combine(a, n, zs, zc))

    def _simulate_noisy(self, true_value, size, rng):
        a, n = self.grid_input(true_value)
        zs = dlap_grid_sample(rng, float(self.sum_scale), size)
        zc = dlap_grid_sample(rng, float(self.count_scale), size)
        return self._combine(a, n, zs, zc)

    def half_width(
        self, level: float = 0.95, n_hat: float | None = None, avg_hat: float | None = None
    ) -> float:
        """Error ~ (Z_s - (mu - m) Z_n)/n, Z_s ~ Lap(w'/eps), Z_n ~ Lap(2/eps)."""
        if n_hat is None or n_hat <= 0:
            return self._mean_hw(0.0, n_hat)
        if avg_hat is None:  # no released AVG: worst case over the range
            avg_hat = self._worst_avg
        m = self.lo_t + self.w_t / 2
        q = laplace_combo_abs_quantile(self.w_t / self.eps, 2 * abs(avg_hat - m) / self.eps, level)
        return self._mean_hw(q / self.w_t, n_hat)

    def sum_half_width(self, level: float = 0.95) -> float:
        m = self.lo_t + self.w_t / 2
        return laplace_combo_abs_quantile(self.w_t / self.eps, 2 * abs(m) / self.eps, level)

    def count_half_width(self, level: float = 0.95) -> int:
        return dlap_half_width(self.count_scale, level)


class IndependentLaplaceMean(GridMean):
    """Algorithm 1 (independent noise addition) = SUM(eps/2) / COUNT(eps/2)."""

    name = "independent_laplace_mean"

    def __init__(self, epsilon: Real, lower: Real, upper: Real, integer: bool = False) -> None:
        super().__init__(epsilon, lower, upper, integer)
        half = self.epsilon_exact / 2
        self.sum_measurement = LaplaceSum(half, lower, upper, integer)
        self.count_measurement = GeometricCount(half)
        self.eps = float(self.epsilon_exact)
        self.scale = self.sum_measurement.output_scale

    def privacy_map_exact(self, d_in: int) -> Fraction:
        return self.sum_measurement.privacy_map_exact(d_in) + self.count_measurement.privacy_map_exact(d_in)

    def _combine(self, s_hat, n_hat):
        return (np.asarray(s_hat, dtype=float) - self.lo_t * np.asarray(n_hat, dtype=float)) / self.w_t, n_hat

    def release(self, true_value, source: RandomSource | None = None) -> MeanRelease:
        s, n = self._sum_count(true_value)
        src = source if source is not None else default_source()
        rs = self.sum_measurement.release(int(s) if self.integer else float(s), src)
        rc = self.count_measurement.release(n, src)
        s1_hat, n_hat = self._combine(rs.value, rc.value)
        return self._release(float(s1_hat), n_hat)

    def _simulate_noisy(self, true_value, size, rng):
        s, n = self._sum_count(true_value)
        sm = self.sum_measurement
        g = float(sm.grid)
        q = int(s) if self.integer else round(float(s) / g)
        s_hat = g * (q + dlap_grid_sample(rng, float(sm.scale), size))
        n_hat = n + dlap_grid_sample(rng, float(self.count_measurement.scale), size)
        return self._combine(s_hat, n_hat)

    def half_width(
        self, level: float = 0.95, n_hat: float | None = None, avg_hat: float | None = None
    ) -> float:
        """Error ~ (Z_s - mu Z_n)/n, Z_s ~ Lap(2W/eps), Z_n ~ Lap(2/eps)."""
        if n_hat is None or n_hat <= 0:
            return self._mean_hw(0.0, n_hat)
        if avg_hat is None:  # no released AVG: worst case over the range
            avg_hat = self._worst_avg
        big_w = float(self.sum_measurement.delta)
        q = laplace_combo_abs_quantile(2 * big_w / self.eps, 2 * abs(avg_hat) / self.eps, level)
        return self._mean_hw(q / self.w_t, n_hat)

    def sum_half_width(self, level: float = 0.95):
        return self.sum_measurement.half_width(level)

    def count_half_width(self, level: float = 0.95) -> int:
        return self.count_measurement.half_width(level)
