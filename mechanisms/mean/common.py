"""Shared parts of the AVG measurements (add-remove mean spec sections 3, 3.5, 6, 7).

* :class:`MeanRelease` -- a :class:`~mechanisms.measurements.Release` whose
  ``value`` is the AVG estimate and whose ``parts`` are the SUM and COUNT
  estimates post-processed from the SAME draw (``parts[i].epsilon == 0``: their
  cost is the parent's ``epsilon``, charged once; spec 7.5).
* :func:`mean_from_ratio` -- the denominator policy ``midpoint_le0`` (spec 3.5):
  if the released count n^ <= 0 the AVG is the midpoint m = (l + u)/2, else
  l' + w' Clip(s1^/n^, [0, 1]), finally clipped to [l, u]. The output is always
  in [l, u] (|error| <= w/2 when n^ <= 0) and never NaN/inf.
* :class:`GridMean` -- bounds handling and the integer grid input of the
  transformed coordinates: s1 = (S - n l')/w' is rounded (half up) to the
  grid (1/M)Z. Half-up rounding commutes with integer shifts, so a neighbour
  (one row t = (x - l')/w' in [0, 1] added) moves M s1 by an integer
  a in {floor(Mt), ceil(Mt)} subset of [0, M] and n by exactly 1: the grid
  input keeps the sensitivity set +-(a/M, 1 - a/M) of Thm 2 / Alg. 3.
  Float sums (``integer=False``) are not exact; to absorb their rounding the
  bounds are widened by two grid cells each side (l' = l - d, w' = w + 2d,
  d = 2w/(M - 4)), so every row has M t' in [2, M - 2] and a sum error below
  one grid cell (w'/M) still leaves a in [0, M]. M = 2^k <= 2^20 with
  M W/w <= 2^20 (W = max(|l|, |u|)), so an fsum-rounded sum stays within one
  cell for n < 2^32. Integer columns (exact int sums) need no widening.
"""

from __future__ import annotations

import math
import operator
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..measurements import BatchRelease, Measurement, Release, as_epsilon, as_int_bound
from ..scalars import RealLike
from .batch import grid_inputs

__all__ = ["MeanRelease", "mean_from_ratio", "GridMean", "POLICY"]

POLICY = "midpoint_le0"


@dataclass(frozen=True)
class MeanRelease(Release):
    """AVG release; ``parts = (SUM release, COUNT release)`` from the same draw."""

    @property
    def sum(self) -> Any:
        return self.parts[0].value

    @property
    def count(self) -> Any:
        return self.parts[1].value


def mean_from_ratio(
    s1_hat: ArrayLike, n_hat: ArrayLike, lo_t: float, w_t: float, lower: float, upper: float
) -> NDArray[np.float64]:
    """AVG from released (s1^, n^) in transformed units, policy ``midpoint_le0``."""
    s1 = np.asarray(s1_hat, dtype=float)
    n = np.asarray(n_hat, dtype=float)
    pos = n > 0
    r = np.clip(s1 / np.where(pos, n, 1.0), 0.0, 1.0)
    est = np.clip(lo_t + w_t * r, lower, upper)
    out: NDArray[np.float64] = np.where(pos, est, 0.5 * (lower + upper))
    return out


class GridMean(Measurement):
    """Base for AVG measurements taking ``true_value = (clamped_sum, count)``.

    ``clamp``: the AVG is returned clamped to [lower, upper] (the paper's estimator, spec 3.3);
    False returns l' + w'·ŝ1/n̂ unclamped (the midpoint when n̂ ≤ 0), unbiased to first order,
    for a reader who clamps afterwards or not at all (:mod:`.bias`). The half-width is the
    same either way (taken at the clamped value)."""

    scale: float  # the noise scale in output units (for EXPLAIN)
    clamp: bool = True

    def __init__(self, epsilon: RealLike, lower: RealLike, upper: RealLike, integer: bool = False) -> None:
        self.epsilon_exact = as_epsilon(epsilon)
        self.integer = bool(integer)
        if self.integer:
            lower, upper = as_int_bound(lower), as_int_bound(upper)
        else:
            lower, upper = float(lower), float(upper)
            if not (math.isfinite(lower) and math.isfinite(upper)):
                raise ValueError("bounds must be finite")
        if not lower < upper:
            raise ValueError(f"need lower < upper, got [{lower}, {upper}]")
        self.lower, self.upper = lower, upper
        lo, w = Fraction(lower), Fraction(upper) - Fraction(lower)
        big_w = max(abs(Fraction(lower)), abs(Fraction(upper)))
        if self.integer:
            self.grid = 1 << 20
            guard = Fraction(0)
        else:
            k = 20 - max(0, math.ceil(math.log2(big_w / w)))
            self.grid = 1 << max(k, 8)
            guard = 2 * w / (self.grid - 4)
        self._lo_t, self._w_t = lo - guard, w + 2 * guard  # l', w' (exact)
        self.lo_t, self.w_t = float(self._lo_t), float(self._w_t)
        self._ratios = (
            self._lo_t.numerator,
            self._lo_t.denominator,
            self._w_t.numerator,
            self._w_t.denominator,
        )
        self._tol = Fraction(1, 10**6) * max(Fraction(1), big_w / w)

    # -- inputs ------------------------------------------------------------
    def _sum_count(self, true_value: Any) -> tuple[Fraction, int]:
        s, n = true_value
        n = operator.index(n)
        if n < 0:
            raise ValueError(f"count must be >= 0, got {n}")
        if self.integer:
            s = Fraction(operator.index(s))
        else:
            s = Fraction(float(s)) if isinstance(s, (float, np.floating)) else Fraction(s)
        return s, n

    def grid_input(self, true_value: Any) -> tuple[int, int]:
        """(A, n): A = round_half_up(M (S - n l')/w'), the grid numerator (see module doc)."""
        s, n = true_value
        if (
            type(n) is int
            and n >= 0
            and (type(s) is int or (type(s) is float and not self.integer and math.isfinite(s)))
        ):
            # the same rational formula in integers: s = a/b exactly, l' = c/d, w' = e/f,
            # s1 = (s - n l')/w' = N/D; A = floor(M N/D + 1/2) = (2 M N + D) // 2D
            a, b = (s, 1) if type(s) is int else s.as_integer_ratio()
            c, d, e, f = self._ratios
            num, den = (a * d - n * c * b) * f, b * d * e
            if 0 <= num <= n * den:
                return (2 * self.grid * num + den) // (2 * den), n
        s, n = self._sum_count(true_value)
        s1 = (s - n * self._lo_t) / self._w_t
        if s1 < -self._tol * (n + 1) or s1 > n + self._tol * (n + 1):
            raise ValueError("sum is outside [n*lower, n*upper]: clamp values before summing")
        s1 = min(max(s1, Fraction(0)), Fraction(n))
        return math.floor(self.grid * s1 + Fraction(1, 2)), n

    def grid_inputs(self, sums: Any, counts: Any) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`grid_input` of many cells, exactly (int64 arrays; :mod:`mechanisms.mean.batch`)."""
        return grid_inputs(sums, counts, self.grid, self._ratios, self.integer, self.grid_input)

    # -- outputs -----------------------------------------------------------
    def _finish(
        self, s1_hat: ArrayLike, n_hat: ArrayLike
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """(mean, sum, count) arrays from released (s1^, n^) -- post-processing only."""
        s1 = np.asarray(s1_hat, dtype=float)
        n = np.asarray(n_hat, dtype=float)
        mean = mean_from_ratio(s1, n, self.lo_t, self.w_t, float(self.lower), float(self.upper))
        if not self.clamp:
            with np.errstate(all="ignore"):
                mean = np.where(n > 0, self.lo_t + self.w_t * (s1 / np.where(n > 0, n, 1.0)), mean)
        total = self.lo_t * n + self.w_t * s1
        return mean, total, n

    def _release(self, s1_hat: float, n_hat: float) -> MeanRelease:
        s1_hat, n_hat = float(s1_hat), float(n_hat)  # scalar form of _finish (same policy)
        lower, upper = float(self.lower), float(self.upper)
        if n_hat > 0:
            mean = min(max(self.lo_t + self.w_t * min(max(s1_hat / n_hat, 0.0), 1.0), lower), upper)
        else:
            mean = 0.5 * (lower + upper)
        total, count = self.lo_t * n_hat + self.w_t * s1_hat, n_hat
        count = int(round(count))
        total = int(round(total)) if self.integer else total
        hw = self.half_width(0.95, n_hat=n_hat, avg_hat=mean)
        if not self.clamp and n_hat > 0:
            mean = self.lo_t + self.w_t * (s1_hat / n_hat)
        parts = (
            Release(total, 0.0, self.sum_half_width(), self.name + ":sum", None),
            Release(count, 0.0, self.count_half_width(), self.name + ":count", None),
        )
        return MeanRelease(mean, self.epsilon, hw, self.name, self.scale, parts)

    def release_many(
        self, num: np.ndarray, n_hat: np.ndarray, hw_many: Callable[[np.ndarray, np.ndarray], float]
    ) -> BatchRelease:
        """:meth:`_release` of many cells from the released integers (s1^ = num/M, n^): the
        same float operations in the same order, elementwise (IEEE: equal results), while
        |num|, |n^| < 2^53 (int64 -> float64 then exact, as int / int and float(int) are);
        else cell by cell. ``hw_many(n_hat, mean)``: the largest AVG half-width."""
        lim = 1 << 53
        if num.size and max(int(np.abs(num).max()), int(np.abs(n_hat).max())) >= lim:
            rels = [self._release(int(a) / self.grid, int(k)) for a, k in zip(num, n_hat)]
            return BatchRelease(
                [r.value for r in rels],
                max((r.half_width for r in rels), default=0.0),
                self.name,
                tuple(
                    BatchRelease(
                        [r.parts[p].value for r in rels],
                        float(rels[0].parts[p].half_width) if rels else 0.0,
                        rels[0].parts[p].mechanism if rels else "",
                    )
                    for p in (0, 1)
                ),
            )
        s1, nh = num.astype(np.float64) / self.grid, n_hat.astype(np.float64)
        lower, upper = float(self.lower), float(self.upper)
        pos = nh > 0
        with np.errstate(all="ignore"):
            r = np.minimum(np.maximum(s1 / np.where(pos, nh, 1.0), 0.0), 1.0)
        mean = np.where(
            pos, np.minimum(np.maximum(self.lo_t + self.w_t * r, lower), upper), 0.5 * (lower + upper)
        )
        value = mean
        if not self.clamp:
            with np.errstate(all="ignore"):
                value = np.where(pos, self.lo_t + self.w_t * (s1 / np.where(pos, nh, 1.0)), mean)
        total = self.lo_t * nh + self.w_t * s1
        sums: np.ndarray | list[int] = total
        if self.integer:
            sums = (
                np.rint(total).astype(np.int64)
                if not total.size or float(np.abs(total).max()) < 2.0**62
                else [int(round(t)) for t in total.tolist()]
            )
        parts = (
            BatchRelease(sums, float(self.sum_half_width()), self.name + ":sum"),
            BatchRelease(n_hat, float(self.count_half_width()), self.name + ":count"),
        )
        return BatchRelease(value, hw_many(nh, mean), self.name, parts)

    def setup(self) -> GridMean:
        """Compute the 95% half-width constants now (at config load) instead of at the first
        release; they are shared through single-flight memos (:mod:`mechanisms.once`)."""
        self.half_width(0.95, n_hat=1.0, avg_hat=float(self.lower))
        self.sum_half_width()
        self.count_half_width()
        return self

    @property
    def _worst_avg(self) -> float:
        """AVG value maximising the half-width (used when only n^ is given):
        an endpoint for Alg. 3 and 2 (q is largest at alpha in {0, 1}), the
        endpoint of largest |x| for Alg. 1."""
        lo, hi = float(self.lower), float(self.upper)
        return hi if abs(hi) > abs(lo) else lo

    def _mean_hw(self, q_t: float, n_hat: float | None) -> float:
        """Half-width w' q / n^ capped at w; w/2 when n^ <= 0 (midpoint policy)."""
        w = float(self.upper) - float(self.lower)
        if n_hat is None:
            return w
        if n_hat <= 0:
            return w / 2
        return min(self.w_t * q_t / n_hat, w)

    def simulate(self, true_value: Any, size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Vectorised releases with the same noise law (simulation/benchmarks only)."""
        mean, total, count = self._finish(*self._simulate_noisy(true_value, size, rng))
        return {"mean": mean, "sum": total, "count": count}

    # -- what each AVG mechanism defines ----------------------------------
    @abstractmethod
    def half_width(
        self, level: float = 0.95, n_hat: float | None = None, avg_hat: float | None = None
    ) -> float:
        """AVG half-width at ``level`` given the released count ``n_hat`` and AVG ``avg_hat``."""

    @abstractmethod
    def sum_half_width(self, level: float = 0.95) -> float:
        """Half-width of the SUM derived from the same draw."""

    @abstractmethod
    def count_half_width(self, level: float = 0.95) -> float:
        """Half-width of the COUNT derived from the same draw."""

    @abstractmethod
    def _simulate_noisy(self, true_value: Any, size: int, rng: np.random.Generator) -> tuple[Any, Any]:
        """``size`` noisy (s1^, n^) pairs with the release's noise law (simulation only)."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon}, lower={self.lower}, "
            f"upper={self.upper}, integer={self.integer})"
        )
