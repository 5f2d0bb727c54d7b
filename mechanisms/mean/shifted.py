"""AVG by shifted noise addition: Algorithm 2 of Kulesza, Suresh, Wang 2024 (add-remove mean
spec sections 3.2, 7.8), served when a column's ``avg_mechanism = "shifted_laplace"``, with the same interface
and post-processing as Algorithm 3.

eps/2 on the midpoint-shifted sum (sensitivity w/2), eps/2 on the count (sensitivity 1). Leading
n^2 MSE (2w^2 + 8(mu - m)^2)/eps^2 (Lemma 2), at least twice Algorithm 3's. It releases integers
on a grid (discrete Laplace; Mironov 2012): it noises the grid input A - nM/2 (which moves by
a - M/2 in [-M/2, M/2] per row). The AVG uses the ``midpoint_le0`` denominator policy (spec 3.5).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from ..dlap import dlap_half_width
from ..rng import RandomSource, default_source
from ..samplers import discrete_laplace
from ..scalars import RealLike
from .common import GridMean, MeanRelease
from .grid import dlap_grid_sample
from .quantiles import laplace_combo_abs_quantile

__all__ = ["ShiftedLaplaceMean"]


class ShiftedLaplaceMean(GridMean):
    """Algorithm 2 (shifted noise addition). Privacy map (basic composition):
    d_in * ((M/2)/scale_sum + 1/scale_count) = d_in * eps."""

    name = "shifted_laplace_mean"

    def __init__(self, epsilon: RealLike, lower: RealLike, upper: RealLike, integer: bool = False) -> None:
        super().__init__(epsilon, lower, upper, integer)
        half = self.epsilon_exact / 2
        self.sum_scale = Fraction(self.grid, 2) / half  # grid units
        self.count_scale = 1 / half
        self.eps = float(self.epsilon_exact)
        self.scale = self.w_t / self.eps

    def privacy_map_exact(self, d_in: int) -> Fraction:
        return d_in * (Fraction(self.grid, 2) / self.sum_scale + 1 / self.count_scale)

    def _combine(self, a: Any, n: Any, zs: Any, zc: Any) -> tuple[Any, Any]:
        """(noisy shifted sum in s1 units, noisy count) from the grid input and the noise
        (scalars, or arrays in a simulation)."""
        n_hat = n + zc
        y = (a - n * self.grid // 2 + zs) + n_hat * (self.grid // 2)  # back to s1 units
        return y / self.grid, n_hat

    def release(self, true_value: Any, source: RandomSource | None = None) -> MeanRelease:
        a, n = self.grid_input(true_value)
        src = source if source is not None else default_source()
        zs = discrete_laplace(self.sum_scale, src)
        zc = discrete_laplace(self.count_scale, src)
        return self._release(*self._combine(a, n, zs, zc))

    def _simulate_noisy(self, true_value: Any, size: int, rng: np.random.Generator) -> tuple[Any, Any]:
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
