"""AVG by independent noise addition: Algorithm 1 of Kulesza, Suresh, Wang 2024 (add-remove
mean spec sections 3.1, 7.8), the baseline the add-remove mean is compared with (never served).

eps/2 on the raw sum (sensitivity W = max(|l|, |u|)), eps/2 on the count; this is also how
SmartNoise SQL answers AVG (noisy SUM / noisy COUNT). Leading n^2 MSE (8W^2 + 8mu^2)/eps^2. Not
shift-invariant. It reuses :class:`~mechanisms.measurements.LaplaceSum` and ``GeometricCount``
(integers on grids, discrete Laplace) with the interface and post-processing of Algorithm 3.
"""

from __future__ import annotations

from fractions import Fraction
from numbers import Real

import numpy as np

from mechanisms.mean.common import GridMean, MeanRelease
from mechanisms.mean.grid import dlap_grid_sample
from mechanisms.mean.quantiles import laplace_combo_abs_quantile
from mechanisms.measurements import GeometricCount, LaplaceSum
from mechanisms.rng import RandomSource, default_source

__all__ = ["IndependentLaplaceMean"]


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
