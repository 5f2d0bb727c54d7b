"""CorrectionTerm: the utility-optimal threshold correction r_op (Sec. 4.3, Eq. 7-9; SVT spec Sec. 2.3).

Worst case q_i = T_i (Eq. 8):  p(r) = Gamma(r + alpha)^k (1 - Gamma(r - alpha)),  r_op = argmax p (Eq. 9).

* :func:`r_op` -- closed form. alpha = 0: p = g(Gamma(r)) with g(x) = x^k (1-x) maximal at x = k/(k+1)
  (Thm. 8), so r_op = Gamma^{-1}(k/(k+1)), solved in log space. alpha > 0: log p is concave
  (Exp and Laplace are log-concave, SVT spec Sec. 2.3), maximised with a bounded scalar search.
* :func:`r_op_numerical` -- the generic numerical framework (Alg. 3 CorrectionTerm, Alg. 4 Discretizer):
  discretise both CDFs on a grid of width u = B/(m-1), convolve by FFT, argmax on the grid.

Both are pure functions of public parameters (b, theta, k, alpha) and are cached (``functools.lru_cache``);
r_op must never be computed from data (SVT spec Sec. 6 item 6).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq, minimize_scalar
from scipy.signal import fftconvolve

from .gamma import gamma_logcdf, gamma_logsf

__all__ = ["r_op", "r_op_numerical", "log_success_probability", "correction_term"]


def log_success_probability(r: ArrayLike, b: float, theta: float, k: int, alpha: float = 0.0) -> np.ndarray:
    """log p(r) of Eq. 8 (vectorised over r)."""
    ra = np.asarray(r, dtype=float)
    out: np.ndarray = k * gamma_logcdf(ra + alpha, b, theta) + gamma_logsf(ra - alpha, b, theta)
    return out


def _check_k(k: int) -> int:
    if int(k) != k or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    return int(k)


@lru_cache(maxsize=1024)
def r_op(b: float, theta: float, k: int, alpha: float = 0.0) -> float:
    """Optimal correction r_op (Eq. 9), closed form; b = Delta/eps1, theta = Exp scale."""
    b, theta, k, alpha = float(b), float(theta), _check_k(k), float(alpha)
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if alpha == 0.0:
        target = -math.log1p(k)  # log(1 - k/(k+1))
        if float(gamma_logsf(0.0, b, theta)) <= target:  # quantile on the z <= 0 branch
            return b * math.log(2 * (b + theta) * k / ((k + 1) * b))
        hi = b + theta
        while float(gamma_logsf(hi, b, theta)) > target:
            hi *= 2
        root: float = brentq(
            lambda z: float(gamma_logsf(z, b, theta)) - target, 0.0, hi, xtol=1e-12 * hi, rtol=1e-13
        )
        return root
    s = b + theta
    res = minimize_scalar(
        lambda r: -float(log_success_probability(r, b, theta, k, alpha)),
        bounds=(-50 * s, 50 * s),
        method="bounded",
        options={"xatol": 1e-9 * s},
    )
    return float(res.x)


def _discretize(cdf: Callable[[np.ndarray], np.ndarray], m: int, u: float) -> np.ndarray:
    """Alg. 4: [h_-inf, h_{-m+1}, ..., h_{m-2}, h_+inf] (2m entries), h_i = CDF((i+1)u) - CDF(iu)."""
    edges = np.arange(-m + 1, m) * u  # (1-m)u .. (m-1)u
    f = cdf(edges)
    return np.concatenate([[f[0]], np.diff(f), [1.0 - f[-1]]])


@lru_cache(maxsize=256)
def r_op_numerical(
    b: float, theta: float, k: int, alpha: float = 0.0, m_bins: int = 20001, e: float = 1e-12
) -> float:
    """Alg. 3 CorrectionTerm(b, lambda, alpha, m, e, k) on a grid (accuracy about one bucket u).

    [ours, SVT spec Sec. 2.3 (i)-(v)]: B = max of the Exp and Laplace (1-e)-quantiles; Z = X - Y is
    computed as X + Y (Laplace is symmetric); the mass of bucket-sum index s lies in
    [s u, (s+2) u) and is assigned to the midpoint, Gamma_bar((s+1) u) = P[index <= s]; alpha is
    rounded to whole buckets. Mass at +inf (either tail) stays above every grid point; the Laplace
    -inf tail stays below."""
    b, theta, k = float(b), float(theta), _check_k(k)
    big = max(theta * math.log(1 / e), b * math.log(1 / (2 * e)))
    u = big / (m_bins - 1)
    lap = _discretize(
        lambda x: np.where(
            x < 0, 0.5 * np.exp(np.minimum(x, 0) / b), 1 - 0.5 * np.exp(-np.maximum(x, 0) / b)
        ),
        m_bins,
        u,
    )
    ex = _discretize(lambda x: -np.expm1(-np.maximum(x, 0) / theta), m_bins, u)
    conv = np.clip(fftconvolve(lap[1:-1], ex[1:-1]), 0.0, None)  # index s = i + j + 2(m-1)
    # Laplace -inf tail combined with finite Exp buckets lies below every grid point.
    cdf = lap[0] * (1.0 - ex[-1]) + np.cumsum(conv)
    grid = (np.arange(conv.size) - 2 * (m_bins - 1) + 1) * u
    sf = np.clip(1.0 - cdf, 1e-300, None)
    a = int(round(alpha / u))
    n = cdf.size
    idx = np.arange(a, n - a)
    with np.errstate(divide="ignore"):
        logp = k * np.log(np.clip(cdf[idx + a], 1e-300, None)) + np.log(sf[idx - a])
    return float(grid[idx[int(np.argmax(logp))]])


def correction_term(kind: str | float, b: float, theta: float, k: int, alpha: float = 0.0) -> float:
    """r for the SVT-Exp variants of Table 3: 'optimal' (r_op), 'numerical' (Alg. 3), 'mean'
    (theta, Sec. 4.3.1), 'none' (0); a number is used as given (it must be public)."""
    if isinstance(kind, (int, float)) and not isinstance(kind, bool):
        return float(kind)
    if kind == "optimal":
        return r_op(float(b), float(theta), int(k), float(alpha))
    if kind == "numerical":
        return r_op_numerical(float(b), float(theta), int(k), float(alpha))
    if kind == "mean":
        return float(theta)
    if kind == "none":
        return 0.0
    raise ValueError(f"unknown correction {kind!r}")
