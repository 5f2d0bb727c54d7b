"""Discrete Laplace (two-sided geometric) distribution: pmf, cdf, tails,
variance and exact tail-based half-widths (floating point; analysis only,
never used to *sample*).

The add-remove mean spec section 2.2: with p = exp(-1/scale),
    P[Z = z]    = (1-p)/(1+p) * p^|z|
    P[|Z| > k]  = 2 p^(k+1) / (1+p)            (k >= 0)
    Var[Z]      = 2p / (1-p)^2
(1-p)/(1+p) = tanh(1/(2 scale)) and 1-p = -expm1(-1/scale) are used for
numerical stability at large scales.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .scalars import RealLike

__all__ = [
    "dlap_pmf",
    "dlap_logpmf",
    "dlap_cdf",
    "dlap_tail",
    "dlap_variance",
    "dlap_half_width",
]


def _t(scale: RealLike) -> float:
    t = float(scale)
    if not (t > 0 and math.isfinite(t)):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    return t


def dlap_logpmf(z: ArrayLike, scale: RealLike) -> NDArray[np.float64]:
    """log P[Z = z] (vectorised over integer ``z``)."""
    t = _t(scale)
    out: NDArray[np.float64] = math.log(math.tanh(0.5 / t)) - np.abs(np.asarray(z, dtype=float)) / t
    return out


def dlap_pmf(z: ArrayLike, scale: RealLike) -> NDArray[np.float64]:
    """P[Z = z] (vectorised over integer ``z``)."""
    return np.exp(dlap_logpmf(z, scale))


def dlap_cdf(z: ArrayLike, scale: RealLike) -> NDArray[np.float64]:
    """P[Z <= z] (vectorised over integer ``z``).

    z >= 0: 1 - p^(z+1)/(1+p);   z < 0: p^(-z)/(1+p).
    """
    t = _t(scale)
    zf = np.floor(np.asarray(z, dtype=float))
    onep = 1.0 + math.exp(-1.0 / t)
    neg = np.exp(np.minimum(zf, 0.0) / t) / onep  # p^(-z)/(1+p) for z < 0
    pos = 1.0 - np.exp(-(np.maximum(zf, 0.0) + 1.0) / t) / onep
    out: NDArray[np.float64] = np.where(zf < 0, neg, pos)
    return out


def dlap_tail(k: ArrayLike, scale: RealLike) -> NDArray[np.float64]:
    """P[|Z| > k] = 2 p^(k+1)/(1+p) for integer k >= 0 (1 for k < 0)."""
    t = _t(scale)
    kf = np.asarray(k, dtype=float)
    val = 2.0 * np.exp(-(np.maximum(kf, 0.0) + 1.0) / t) / (1.0 + math.exp(-1.0 / t))
    return np.where(kf < 0, 1.0, val)


def dlap_variance(scale: RealLike) -> float:
    """Var[Z] = 2p/(1-p)^2 with p = exp(-1/scale)."""
    t = _t(scale)
    return 2.0 * math.exp(-1.0 / t) / math.expm1(-1.0 / t) ** 2


def dlap_half_width(scale: RealLike, level: float = 0.95) -> int:
    """Smallest integer k >= 0 with P[|Z| <= k] >= level.

    Solves 2 p^(k+1)/(1+p) <= alpha (alpha = 1 - level) in log space:
    k + 1 >= scale * log(2 / (alpha (1+p))), then nudges k by +-1 against
    :func:`dlap_tail` so the result is exactly the minimal k.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    t = _t(scale)
    alpha = 1.0 - level
    p = math.exp(-1.0 / t)
    k = max(0, math.ceil(t * math.log(2.0 / (alpha * (1.0 + p)))) - 1)
    while k > 0 and float(dlap_tail(k - 1, t)) <= alpha:
        k -= 1
    while float(dlap_tail(k, t)) > alpha:
        k += 1
    return k
