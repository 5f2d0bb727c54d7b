"""Error quantiles for the released AVG / SUM / COUNT (add-remove mean spec sections 4.1-4.2, 7.5).

All are functions of the public noise law (and of released values), never of
the true data:

* :func:`hourglass_abs_quantile` -- q with P(|Z1 - alpha K| <= q) = level for
  (Z1, K) ~ hourglass. Lemma 4 gives K = J(Z1) + L with L ~ DLap(eps)
  independent of Z1, so Z1 - alpha K = V - alpha L with V = Z1 - alpha J(Z1) a
  mixture of uniforms (one per staircase step); the cdf is exact up to the
  series truncation (mass < e^-26). For eps < 0.05 the Laplace limit is used
  (the hourglass tends to independent Lap(1/eps) coordinates; relative
  error O(eps)).
* :func:`laplace_combo_abs_quantile` -- q for |a X + c Y|, X, Y iid Lap(1).
* :func:`integer_abs_quantile` -- least integer h with P(|K| <= h) >= level.
* :func:`hourglass_count_quantile` -- the same for the grid hourglass's line index
  K = J + L in closed form (O(log h) tail evaluations instead of a convolution of
  O(1/eps) terms, which grows without bound as eps falls).

The delta method (Lemma 1) turns these into half-widths: the AVG error is
~ w (Z1 - alpha K)/n, the derived SUM error is w Z1 + l K = w (Z1 - (-l/w) K).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq

from ..once import single_flight
from .constants import staircase_a

__all__ = [
    "hourglass_abs_quantile",
    "laplace_combo_abs_quantile",
    "integer_abs_quantile",
    "laplace_combo_tail",
    "hourglass_count_tail",
    "hourglass_count_quantile",
]

_SMALL_EPS = 0.05


def laplace_combo_tail(h: float, a: float, c: float) -> float:
    """P(|a X + c Y| > h), X, Y iid Lap(1), a, c >= 0 (characteristic functions:
    density (a e^-|z|/a - c e^-|z|/c) / (2(a^2 - c^2)))."""
    a, c = max(abs(a), abs(c)), min(abs(a), abs(c))
    if a == 0:
        return 0.0
    if c < 1e-6 * a:
        return math.exp(-h / a)
    if a - c < 1e-6 * a:
        return math.exp(-h / a) * (1 + h / (2 * a))
    return (a * a * math.exp(-h / a) - c * c * math.exp(-h / c)) / (a * a - c * c)


def laplace_combo_abs_quantile(a: float, c: float, level: float = 0.95) -> float:
    """q with P(|a X + c Y| <= q) = level, X, Y iid Lap(1)."""
    _check_level(level)
    if max(abs(a), abs(c)) == 0:
        return 0.0
    alpha = 1 - level
    hi = (abs(a) + abs(c)) * (math.log(2 / alpha) + 2)
    while laplace_combo_tail(hi, a, c) > alpha:
        hi *= 2
    q: float = brentq(lambda h: laplace_combo_tail(h, a, c) - alpha, 0.0, hi, xtol=1e-12 * hi)
    return q


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


@single_flight(maxsize=512)
def _hourglass_q(eps: float, gamma: float, alphas: tuple[float, ...], level: float) -> tuple[float, ...]:
    b = math.exp(-eps)
    n = int(math.ceil(26 / eps)) + 2
    a = staircase_a(eps, gamma)
    j = np.arange(-n, n + 1)
    aj = np.abs(j)
    mass = np.where(aj == 0, 2 * gamma * a, a * b**aj)  # P(J = j)
    lo_z = np.where(aj == 0, -gamma, aj - 1 + gamma) * np.where(j < 0, -1, 1)
    hi_z = np.where(aj == 0, gamma, aj + gamma) * np.where(j < 0, -1, 1)
    lo_z, hi_z = np.minimum(lo_z, hi_z), np.maximum(lo_z, hi_z)  # Z1 range on step j
    p_l = (1 - b) / (1 + b) * b**aj  # DLap pmf on the same range
    wid = hi_z - lo_z
    out = []
    for al in alphas:
        lo = lo_z - al * j  # V = Z1 - alpha J on step j
        bp = np.sort(np.concatenate([lo, lo + wid]))  # F_V is piecewise linear
        f_bp = (mass * np.clip((bp[:, None] - lo) / wid, 0.0, 1.0)).sum(axis=1)
        x = al * j  # alpha * (values of L)

        def cover(
            h: float, x: np.ndarray = x, bp: np.ndarray = bp, f_bp: np.ndarray = f_bp
        ) -> float:  # P(|V - alpha L| <= h)
            return float(np.dot(p_l, np.interp(x + h, bp, f_bp) - np.interp(x - h, bp, f_bp)))

        # bracket from the Laplace limit, widened until it holds; then bisect
        lo_h, hi_h = 0.0, 2 * laplace_combo_abs_quantile(abs(1 - al) / eps, abs(al) / eps, level) + 2
        while cover(hi_h) < level:
            hi_h *= 2
        for _ in range(40):
            mid = 0.5 * (lo_h + hi_h)
            lo_h, hi_h = (lo_h, mid) if cover(mid) >= level else (mid, hi_h)
        out.append(hi_h)
    return tuple(out)


def hourglass_abs_quantile(eps: float, gamma: float, alphas: ArrayLike, level: float = 0.95) -> np.ndarray:
    """q(alpha) with P(|Z1 - alpha K| <= q) >= level, (Z1, K) ~ hourglass(eps, gamma)."""
    _check_level(level)
    al = tuple(float(x) for x in np.atleast_1d(alphas))
    if eps < _SMALL_EPS:
        return np.array([laplace_combo_abs_quantile((1 - x) / eps, x / eps, level) for x in al])
    return np.array(_hourglass_q(float(eps), float(gamma), al, float(level)))


def integer_abs_quantile(ks: np.ndarray, pmf: np.ndarray, level: float = 0.95) -> int:
    """Least integer h >= 0 with sum_{|k| <= h} pmf(k) >= level (ks symmetric range)."""
    _check_level(level)
    ks = np.asarray(ks)
    for h in range(int(np.abs(ks).max()) + 1):
        if pmf[np.abs(ks) <= h].sum() >= level:
            return h
    raise ValueError("pmf range too short for this level")


def hourglass_count_tail(h: int, eps: float, big_g: int, grid: int) -> float:
    """P(|K| > h), h >= 0, for the line index K = J + L of the grid hourglass (Lemma 4 on the
    grid): L ~ DLap(eps) and P(J = 0) = (2G - 1)/Zs, P(J = j) = M b^|j|/Zs (j != 0),
    Zs = (2G - 1) + 2 M b/(1 - b), b = e^-eps.

    J's law is w0 delta_0 + lam DLap(eps) with lam = M (1 + b)/((1 - b) Zs) and
    w0 = 1 - lam = (2G - 1 - M)/Zs (a signed mixture: w0 may be < 0), so K's law is
    w0 DLap + lam DLap*DLap, with the closed-form tails (m = h + 1)
        P(|L| > h)       = 2 b^m / (1 + b)
        P(|L1 + L2| > h) = 2 b^m ((m + 1)(1 - b) + b + 2 b^2/(1 + b)) / (1 + b)^2
    (P(L1 + L2 = d) = ((1-b)/(1+b))^2 b^|d| (|d| + 1 + 2 b^2/(1 - b^2)) summed over |d| > h)."""
    b, omb = math.exp(-eps), -math.expm1(-eps)
    zs = (2 * big_g - 1) + 2 * grid * b / omb
    lam = grid * (1 + b) / (omb * zs)
    w0 = (2 * big_g - 1 - grid) / zs
    m = h + 1
    bm = math.exp(-eps * m)
    t1 = 2 * bm / (1 + b)
    t2 = 2 * bm * ((m + 1) * omb + b + 2 * b * b / (1 + b)) / (1 + b) ** 2
    return w0 * t1 + lam * t2


@single_flight(maxsize=1024)
def hourglass_count_quantile(eps: float, big_g: int, grid: int, level: float = 0.95) -> int:
    """Least integer h >= 0 with P(|K| <= h) >= level (:func:`hourglass_count_tail`; the tail
    decreases in h, so a doubling bracket then bisection: O(log h) evaluations at any eps)."""
    _check_level(level)

    def ok(h: int) -> bool:
        return 1.0 - hourglass_count_tail(h, eps, big_g, grid) >= level

    if ok(0):
        return 0
    lo, hi = 0, 1  # invariant: not ok(lo), ok(hi)
    while not ok(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi
