"""Confidence intervals of released values, from each mechanism's public error law.

An interval is post-processing of a release: it reads the released values and the
mechanism's noise law (its ε, bounds, grid), never the data, so it costs nothing
(Dwork & Roth 2014, Prop. 2.1). Each function returns ``(low, high)`` arrays with
P(true value ∈ [low, high]) ≥ ``level`` over the mechanism's noise, where the true value
is the aggregate the mechanism measured: over the rows contribution bounding kept and
with each value clamped to the column's declared bounds (the *bounded* value).

* :func:`dlap_interval` — geometric COUNT and discrete-Laplace SUM: value ± k·g with k the
  least integer with P(|Z| ≤ k) ≥ level (:func:`mechanisms.dlap.dlap_half_width`), g the
  SUM's grid; a float SUM adds g/2 for rounding S to the grid. The noise is integer, so
  the exact coverage is P(|Z| ≤ k) (:func:`dlap_coverage`), at least ``level`` and at
  most one atom of the law above it.
* :func:`gaussian_interval` — COUNT / SUM by the discrete Gaussian (Canonne, Kamath, Steinke
  2020) on a zCDP tier: the same construction with k from :func:`dgauss_half_width`; exact
  coverage :func:`dgauss_coverage`.
* :func:`mean_interval` — AVG of Algorithm 3 / 2 (Kulesza, Suresh, Wang 2024) by inverting
  the pivot ŝ₁ − α n̂ = Z₁ − α K (hourglass; Z₁ − α(Z₁ + Z₂) transformed Laplace;
  Z_s + (½ − α) Z_n shifted Laplace), whose law depends only on the true ratio α: the set
  {α ∈ [0, 1] : |r̂ − α| ≤ q(α)/n̂} holds α with probability ≥ level for every n (a test
  inversion; q read from a table on α = 0, 1/20, …, 1/2 as the larger neighbour, which is at
  or above q; the grid rounding of the input is below 1/(2M) = 2⁻²¹ in α).
  The ratio r̂ is read from the released AVG (clipped to [0, 1] and the column's bounds:
  clipping only widens the set around α); n̂ ≤ 0 gives the whole range [lower, upper]
  (the midpoint policy's answer, which the range covers).
* :func:`gaussian_mean_interval` — AVG on a zCDP tier (a discrete Gaussian SUM and COUNT, their
  ratio): S̃ and Ñ each within their (1 + level)/2 intervals (a union bound), the ratio's range
  over that box, within the bounds; S̃ is read as AVG·Ñ (clamping the AVG only widens the range
  on the clamped side, where the bound cuts it anyway). Conservative: coverage above ``level``.
* :func:`variance_interval` — VAR/STDDEV from three noisy moments: each moment within its
  (1 − (1 − level)/3) interval (Bonferroni), the estimator's range over that box
  (interval arithmetic): conservative (coverage above ``level``).
* :func:`consistent` — a value made consistent (a COUNT clamped at 0, an AVG to its
  column's bounds) keeps a covering interval by clamping both ends into the same public
  range: the true value lies in that range, and clamping is monotone.

Each mechanism's function is also :func:`interval`, one entry point by the measurement's type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import singledispatch
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .discrete_gaussian import GaussianCount, GaussianSum, dgauss_half_width, dgauss_tail
from .dlap import dlap_half_width, dlap_tail
from .gaussian_stats import GaussianMean
from .mean.common import GridMean
from .mean.quantiles import hourglass_abs_quantile, laplace_combo_abs_quantile
from .mean.shifted import ShiftedLaplaceMean
from .mean.transformed import HourglassMean, LaplaceTransformedMean
from .measurements import GeometricCount, LaplaceSum
from .once import single_flight
from .variance import MomentVariance

__all__ = [
    "Interval",
    "consistent",
    "dlap_coverage",
    "dlap_interval",
    "dgauss_coverage",
    "gaussian_interval",
    "gaussian_mean_interval",
    "interval",
    "mean_interval",
    "variance_interval",
]

Interval = tuple[NDArray[Any], NDArray[Any]]
_Q_POINTS = 11  # q(α) table on α in [0, 1/2], step 1/20 (the hourglass's own 95% table: computed
#                 with the release, shared); between points the larger neighbour (upper envelope)
_SCAN = 129  # points of the coarse scan of the confidence set around r^ (then bisection)
_CHUNK = 4096  # cells scanned at once (bounds the scan's memory: _CHUNK × _SCAN floats)


def _check_level(level: float) -> float:
    level = float(level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return level


def dlap_coverage(scale: float, level: float = 0.95) -> float:
    """P(|Z| ≤ k), Z ~ DLap(scale), k = :func:`dlap_half_width`: the exact coverage of
    :func:`dlap_interval` (≥ level)."""
    k = dlap_half_width(scale, _check_level(level))
    return 1.0 - float(dlap_tail(k, scale))


def dlap_interval(m: GeometricCount | LaplaceSum, values: ArrayLike, level: float = 0.95) -> Interval:
    """COUNT / SUM: released value ± k·grid (+ grid/2 for a float SUM rounded to the grid)."""
    k = dlap_half_width(m.scale, _check_level(level))
    return _plus_minus(values, k, float(m.grid), isinstance(m, LaplaceSum) and not m.integer)


def dgauss_coverage(sigma2: Any, level: float = 0.95) -> float:
    """P(|Z| ≤ k), Z the discrete Gaussian of variance parameter σ², k = :func:`dgauss_half_width`:
    the exact coverage of :func:`gaussian_interval` (≥ level)."""
    return 1.0 - float(dgauss_tail(dgauss_half_width(sigma2, _check_level(level)), sigma2))


def gaussian_interval(m: GaussianCount | GaussianSum, values: ArrayLike, level: float = 0.95) -> Interval:
    """COUNT / SUM by the discrete Gaussian: value ± k·grid (+ grid/2 for a float SUM)."""
    k = dgauss_half_width(m.sigma2, _check_level(level))
    return _plus_minus(values, k, float(m.grid), isinstance(m, GaussianSum) and not m.integer)


def _plus_minus(values: ArrayLike, k: int, grid: float, rounded: bool) -> Interval:
    v = np.asarray(values)
    if rounded:
        h = k * grid + grid / 2
        vf = v.astype(np.float64)
        return vf - h, vf + h
    if v.dtype.kind in "iu":
        return v - k, v + k
    return np.asarray([int(x) - k for x in v.tolist()], dtype=object), np.asarray(
        [int(x) + k for x in v.tolist()], dtype=object
    )


@single_flight(maxsize=256)
def _q_table(kind: str, params: tuple[float, ...], level: float) -> tuple[float, ...]:
    """q(α) on α = 0, 1/20, …, 1/2: the level-quantile of the mechanism's pivot |Z₁ − α K|
    (the law is symmetric under α ↦ 1 − α for the hourglass and transformed Laplace; the
    shifted Laplace pivot depends on |½ − α|)."""
    alphas = [i / (2 * (_Q_POINTS - 1)) for i in range(_Q_POINTS)]
    if kind == "hourglass":
        eps, gamma = params
        return tuple(float(q) for q in hourglass_abs_quantile(eps, gamma, alphas, level))
    if kind == "transformed":
        (eps,) = params
        return tuple(laplace_combo_abs_quantile((1 - a) / eps, a / eps, level) for a in alphas)
    (eps,) = params  # shifted: Z_s ~ Lap(1/eps) in s1 units, Z_n ~ Lap(2/eps) times |1/2 - α|
    return tuple(laplace_combo_abs_quantile(1 / eps, abs(0.5 - a) * 2 / eps, level) for a in alphas)


def _pivot_quantile(m: GridMean, level: float) -> Callable[[NDArray[np.float64]], NDArray[np.float64]]:
    """α ↦ an upper bound of q(α) (the table's larger neighbour: the envelope covers q between
    the points where q is monotone there, the table being fine)."""
    if isinstance(m, HourglassMean):
        table = np.asarray(_q_table("hourglass", (m.noise.eps, m.noise.gamma), level))
    elif isinstance(m, LaplaceTransformedMean):
        table = np.asarray(_q_table("transformed", (m.eps,), level))
    elif isinstance(m, ShiftedLaplaceMean):
        table = np.asarray(_q_table("shifted", (m.eps,), level))
    else:
        raise TypeError(f"no pivot for {type(m).__name__}")
    step = 1 / (2 * (_Q_POINTS - 1))
    top = _Q_POINTS - 1

    def q(alpha: NDArray[np.float64]) -> NDArray[np.float64]:
        a = np.clip(alpha, 0.0, 1.0)
        a = np.minimum(a, 1.0 - a)
        i = np.clip(np.floor(a / step).astype(np.int64), 0, top)
        j = np.minimum(i + 1, top)
        out: NDArray[np.float64] = np.maximum(table[i], table[j])
        return out

    return q


def _ratio_set(
    q: Callable[[NDArray[np.float64]], NDArray[np.float64]],
    r: NDArray[np.float64],
    nn: NDArray[np.float64],
    reach: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per cell, the ends of {α ∈ [0, 1] : |r − α|·n ≤ q(α)}: a scan of _SCAN points over
    r ± reach/n, then bisection between the outermost point in the set and its outer neighbour."""

    def inside(alpha: NDArray[np.float64], r_: NDArray[np.float64], n_: NDArray[np.float64]) -> Any:
        return np.abs(r_ - alpha) * n_ <= q(alpha)

    t = np.linspace(-1.0, 1.0, _SCAN)
    grid = np.clip(r[:, None] + (reach / nn)[:, None] * t[None, :], 0.0, 1.0)
    ok = inside(grid, r[:, None], nn[:, None])
    ok |= grid == r[:, None]  # α = r^ is always in the set (q ≥ 0)
    first = np.argmax(ok, axis=1)
    last = _SCAN - 1 - np.argmax(ok[:, ::-1], axis=1)
    rows = np.arange(r.size)

    def refine(inner: NDArray[np.float64], outer: NDArray[np.float64]) -> NDArray[np.float64]:
        for _ in range(48):
            mid = 0.5 * (inner + outer)
            good = inside(mid, r, nn)
            inner, outer = np.where(good, mid, inner), np.where(good, outer, mid)
        return inner

    lo_a = grid[rows, first]
    lo_a = np.where(first > 0, refine(lo_a, grid[rows, np.maximum(first - 1, 0)]), lo_a)
    hi_a = grid[rows, last]
    hi_a = np.where(last < _SCAN - 1, refine(hi_a, grid[rows, np.minimum(last + 1, _SCAN - 1)]), hi_a)
    return lo_a, hi_a


def mean_interval(m: GridMean, avg: ArrayLike, n_hat: ArrayLike, level: float = 0.95) -> Interval:
    """AVG intervals by pivot inversion (module docstring), per cell: ``avg`` the released
    AVG, ``n_hat`` the released count of the same draw."""
    level = _check_level(level)
    a = np.asarray(avg, dtype=np.float64)
    n = np.asarray(n_hat, dtype=np.float64)
    lower, upper = float(m.lower), float(m.upper)
    lo_out = np.full(a.shape, lower)
    hi_out = np.full(a.shape, upper)
    pos = n > 0
    if not pos.any():
        return lo_out, hi_out
    q = _pivot_quantile(m, level)
    r = np.clip((a[pos] - m.lo_t) / m.w_t, 0.0, 1.0)
    nn = n[pos]
    reach = float(np.max(q(np.linspace(0.0, 0.5, _Q_POINTS))))  # |r^ - α| ≤ q(α)/n ≤ reach/n
    parts = [_ratio_set(q, r[c : c + _CHUNK], nn[c : c + _CHUNK], reach) for c in range(0, r.size, _CHUNK)]
    lo_a = np.concatenate([p[0] for p in parts])
    hi_a = np.concatenate([p[1] for p in parts])
    lo_out[pos] = np.clip(m.lo_t + m.w_t * lo_a, lower, upper)
    hi_out[pos] = np.clip(m.lo_t + m.w_t * hi_a, lower, upper)
    lo_out[pos] = np.minimum(lo_out[pos], a[pos])  # the released value is inside (float rounding)
    hi_out[pos] = np.maximum(hi_out[pos], a[pos])
    return lo_out, hi_out


def gaussian_mean_interval(
    m: GaussianMean, avg: ArrayLike, n_hat: ArrayLike, level: float = 0.95
) -> Interval:
    """AVG on a zCDP tier (module docstring), per cell."""
    each = 1 - (1 - _check_level(level)) / 2
    hs, hn = float(m.sum.half_width(each)), float(m.count.half_width(each))
    a = np.asarray(avg, dtype=np.float64)
    n = np.asarray(n_hat, dtype=np.float64)
    s_hat = a * n
    ok = n > hn
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.where(ok, (s_hat - hs) / (n + hn), m.lower)
        hi = np.where(ok, (s_hat + hs) / np.where(ok, n - hn, 1.0), m.upper)
    lo = np.minimum(np.clip(lo, m.lower, m.upper), a)
    hi = np.maximum(np.clip(hi, m.lower, m.upper), a)
    return lo, hi


def variance_interval(
    m: MomentVariance, n: float, s1: float, s2: float, level: float = 0.95, func: str | None = None
) -> tuple[float, float]:
    """VAR/STDDEV from the three released moments (module docstring; :meth:`MomentVariance.bound`
    at ``level``): (low, high) of the estimator over the Bonferroni box, in [0, cap]."""
    func = func or m.func
    third = 1 - (1 - _check_level(level)) / 3
    cap = m.cap_of(func)
    a = float(m.sum_measurement.half_width(third)) / m.k
    b = float(m.sumsq_measurement.half_width(third)) / m.k**2
    c = float(m.count_measurement.half_width(third))
    s1, s2 = s1 / m.k, s2 / m.k**2
    samp = func.endswith("samp")
    n_lo, n_hi = max(n - c, 1.0), n + c
    if n_hi < 1 or (samp and (n_hi < 2 or n_lo < 2)):
        return 0.0, cap
    h2 = m.h**2
    q1 = [t / d for t in (s1 - a, s1 + a) for d in (n_lo, n_hi)]
    m1_lo, m1_hi = max(min(q1), -m.h), min(max(q1), m.h)
    q2 = [t / d for t in (s2 - b, s2 + b) for d in (n_lo, n_hi)]
    m2_lo, m2_hi = max(min(q2), 0.0), min(max(q2), h2)
    if m1_lo > m1_hi or m2_lo > m2_hi:
        return 0.0, cap
    sq_hi = max(m1_lo**2, m1_hi**2)
    sq_lo = 0.0 if m1_lo <= 0 <= m1_hi else min(m1_lo**2, m1_hi**2)
    lo, hi = max(m2_lo - sq_hi, 0.0), min(max(m2_hi - sq_lo, 0.0), h2)
    if samp:
        lo, hi = lo * n_hi / (n_hi - 1), min(hi * n_lo / (n_lo - 1), 2 * h2)
    if func.startswith("stddev"):
        lo, hi = math.sqrt(lo), math.sqrt(hi)
    return lo, min(hi, cap)


def consistent(low: NDArray[Any], high: NDArray[Any], lo: float | None, hi: float | None) -> Interval:
    """Both ends clamped into the public range [lo, hi] the released value is made consistent
    with (module docstring): still covering, and holding the clamped value."""
    if lo is None and hi is None:
        return low, high

    def clamp(x: NDArray[Any]) -> NDArray[Any]:
        if x.dtype == object:
            return np.asarray(
                [
                    type(v)(lo)
                    if lo is not None and v < lo
                    else type(v)(hi)
                    if hi is not None and v > hi
                    else v
                    for v in x.tolist()
                ],
                dtype=object,
            )
        clipped: NDArray[Any] = np.clip(x, lo, hi)
        return clipped

    return clamp(low), clamp(high)


@singledispatch
def interval(m: Any, values: ArrayLike, level: float = 0.95, **released: Any) -> Interval:
    """The ``level`` interval of ``m``'s released ``values`` (arrays over cells); ``released``
    holds the other released values a mechanism's interval reads (``n_hat`` for an AVG).
    A mechanism without an interval raises TypeError."""
    raise TypeError(f"no interval for {type(m).__name__}")


@interval.register
def _(m: GeometricCount, values: ArrayLike, level: float = 0.95, **released: Any) -> Interval:
    return dlap_interval(m, values, level)


@interval.register
def _(m: LaplaceSum, values: ArrayLike, level: float = 0.95, **released: Any) -> Interval:
    return dlap_interval(m, values, level)


@interval.register
def _(m: GridMean, values: ArrayLike, level: float = 0.95, **released: Any) -> Interval:
    return mean_interval(m, values, released["n_hat"], level)


@interval.register
def _(m: GaussianCount, values: ArrayLike, level: float = 0.95, **released: Any) -> Interval:
    return gaussian_interval(m, values, level)


@interval.register
def _(m: GaussianSum, values: ArrayLike, level: float = 0.95, **released: Any) -> Interval:
    return gaussian_interval(m, values, level)


@interval.register
def _(m: GaussianMean, values: ArrayLike, level: float = 0.95, **released: Any) -> Interval:
    return gaussian_mean_interval(m, values, released["n_hat"], level)
