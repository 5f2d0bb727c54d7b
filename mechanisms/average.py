"""AVG as noisy clamped SUM / noisy COUNT (the "standard" add-remove
baseline, add-remove mean spec section 1.4, eq. 4: worst-case normalised MSE <= 4 w^2/eps^2).
"""

from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist

from .measurements import GeometricCount, LaplaceSum, Measurement, Release, as_epsilon
from .rng import RandomSource, default_source
from .scalars import RealLike

__all__ = ["SplitAverage"]


class SplitAverage(Measurement):
    """AVG over values clamped to [lower, upper] with budget split eps/2 + eps/2.

    * ``sum_measurement``   = LaplaceSum(eps/2, lower, upper, integer)
    * ``count_measurement`` = GeometricCount(eps/2)

    Privacy map: sequential composition, eps(d_in) = eps_sum(d_in) + eps_count(d_in)
    (= d_in * eps). Everything below is post-processing of the two noisy values:

    * denominator: n_hat = max(noisy_count, 1) (n is private in add-remove, so
      a noisy count <= 0 is possible and must not be replaced by the true n);
    * value: clamp(noisy_sum / n_hat, lower, upper), a float.

    The 95% half-width is an APPROXIMATION computed from released values only
    (never the true sum/count, which would leak): delta method for a ratio,
    sd ~= sqrt(Var_S + avg_hat^2 Var_N) / n_hat with the known noise variances,
    half-width = z_(1+level)/2 * sd, capped at upper - lower (the estimate is in
    [lower, upper], so an interval of that half-width always covers the truth).
    """

    name = "split_average"

    def __init__(self, epsilon: RealLike, lower: RealLike, upper: RealLike, integer: bool = False) -> None:
        half = as_epsilon(epsilon) / 2
        self.sum_measurement = LaplaceSum(half, lower, upper, integer)
        self.count_measurement = GeometricCount(half)
        self.lower = self.sum_measurement.lower
        self.upper = self.sum_measurement.upper

    def privacy_map_exact(self, d_in: int) -> Fraction:
        return self.sum_measurement.privacy_map_exact(d_in) + self.count_measurement.privacy_map_exact(d_in)

    def release(self, true_value: tuple[RealLike, int], source: RandomSource | None = None) -> Release:
        """Release AVG from ``true_value = (clamped_sum, count)``."""
        true_sum, true_count = true_value
        src = source if source is not None else default_source()
        rs = self.sum_measurement.release(true_sum, src)
        rc = self.count_measurement.release(true_count, src)
        n_hat = max(rc.value, 1)
        avg = min(max(rs.value / n_hat, float(self.lower)), float(self.upper))
        hw = self.half_width(0.95, n_hat=n_hat, avg_hat=avg)
        return Release(avg, self.epsilon, hw, self.name, None, (rs, rc))

    def half_width(
        self, level: float = 0.95, n_hat: int | None = None, avg_hat: float | None = None
    ) -> float:
        """Approximate half-width from released (n_hat, avg_hat).

        Without them, returns the data-independent bound ``upper - lower``.
        """
        cap = float(self.upper) - float(self.lower)
        if n_hat is None or avg_hat is None:
            return cap
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {level}")
        z = NormalDist().inv_cdf(0.5 + level / 2)
        var = self.sum_measurement.noise_variance + avg_hat**2 * self.count_measurement.noise_variance
        return min(z * math.sqrt(var) / max(n_hat, 1), cap)
