"""Law of the comparison noise Z = X - Y, X ~ Exp(scale theta), Y ~ Lap(b), and the
Table 4/6 budget split (Liu et al. 2024, "Unleash the Power of Ellipsis", Sec. 4.2-4.3;
SVT spec Sec. 2.2-2.3).

Closed form (Eq. 40 pieces, SVT spec Sec. 2.3), for z <= 0:  Gamma(z) = b e^{z/b} / (2(b+theta));
for z > 0 the survival 1 - Gamma(z) is evaluated in the factored form [ours, algebra]

    theta >= b:  e^{-z/theta} [(2theta+b) - b(theta+b) E] / (2(theta+b)),
                 E = expm1(-z u/(b theta))/u,  u = theta - b
    b > theta :  e^{-z/b} [(b+2theta) - 2theta^2 F] / (2(b+theta)),
                 F = expm1(-z v/(b theta))/v,  v = b - theta

which is continuous through the singular case b = theta (E, F -> -z/(b theta)) -- SVT spec Sec. 6 item 13 --
and never overflows, so log Gamma and log(1-Gamma) are accurate in both tails.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "gamma_cdf",
    "gamma_logcdf",
    "gamma_logsf",
    "allocation_ratio",
    "allocation",
    "comparison_variance",
]


def _expm1_ratio(x: np.ndarray, u: float) -> np.ndarray:
    """expm1(x u)/u, with the limit x at u = 0."""
    return x if u == 0.0 else np.expm1(x * u) / u


def _check(b: float, theta: float) -> tuple[float, float]:
    b, theta = float(b), float(theta)
    if not (b > 0 and theta > 0 and math.isfinite(b) and math.isfinite(theta)):
        raise ValueError(f"need finite b, theta > 0; got b={b}, theta={theta}")
    return b, theta


def _logsf_pos(z: np.ndarray, b: float, theta: float) -> np.ndarray:
    """log(1 - Gamma(z)) for z >= 0 (factored form above)."""
    if theta >= b:
        e = _expm1_ratio(-z / (b * theta), theta - b)
        br = ((2 * theta + b) - b * (theta + b) * e) / (2 * (theta + b))
        return -z / theta + np.log(br)
    f = _expm1_ratio(-z / (b * theta), b - theta)
    br = ((b + 2 * theta) - 2 * theta**2 * f) / (2 * (b + theta))
    return -z / b + np.log(br)


def _logcdf_neg(z: np.ndarray, b: float, theta: float) -> np.ndarray:
    """log Gamma(z) for z <= 0."""
    return z / b + math.log(b / (2 * (b + theta)))


def gamma_logcdf(z: ArrayLike, b: float, theta: float) -> np.ndarray:
    """log Gamma(z) = log P[Exp(theta) - Lap(b) <= z] (vectorised)."""
    b, theta = _check(b, theta)
    za = np.asarray(z, dtype=float)
    zn, zp = np.minimum(za, 0.0), np.maximum(za, 0.0)
    return np.where(za <= 0, _logcdf_neg(zn, b, theta), np.log1p(-np.exp(_logsf_pos(zp, b, theta))))


def gamma_logsf(z: ArrayLike, b: float, theta: float) -> np.ndarray:
    """log(1 - Gamma(z)) (vectorised)."""
    b, theta = _check(b, theta)
    za = np.asarray(z, dtype=float)
    zn, zp = np.minimum(za, 0.0), np.maximum(za, 0.0)
    return np.where(za <= 0, np.log1p(-np.exp(_logcdf_neg(zn, b, theta))), _logsf_pos(zp, b, theta))


def gamma_cdf(z: ArrayLike, b: float, theta: float) -> np.ndarray:
    """Gamma(z), the CDF of Z = X - Y (Eq. 8 / Eq. 40; SVT spec Sec. 2.3)."""
    out: np.ndarray = np.exp(gamma_logcdf(z, b, theta))
    return out


# ---------------------------------------------------------------- budget split (Sec. 4.2)

_FAMILIES = ("exp", "lap", "gum", "gau")


def _var_coeffs(c: int, family: str, monotone: bool) -> tuple[float, float]:
    """(A, B) with Var(N1) = A (Delta/eps1)^2, Var(N2) = B (Delta/eps2)^2 (SVT spec Sec. 2.2).
    SVT-Gau: both noises are Gaussian with the same multiplier a, which cancels in w."""
    if family not in _FAMILIES:
        raise ValueError(f"family must be one of {_FAMILIES}, got {family!r}")
    sc = (1 if monotone else 2) * c
    a = 1.0 if family == "gau" else 2.0  # Gau: a^2 factored out of A and B
    b = {"exp": 1.0, "lap": 2.0, "gum": math.pi**2 / 6, "gau": 1.0}[family] * sc**2
    return a, b


def allocation_ratio(c: int, family: str = "exp", monotone: bool = False, resample: bool = False) -> float:
    """w* = eps2/eps1 minimising V(w) = (1+w)^2 (A + B/w^2) Delta^2/eps^2 (Eq. 6, 51-53), i.e.
    w* = (B/A)^{1/3}: Table 4 (non-monotone) and Table 6 (monotone).

    With RESAMPLE the cost is c eps1 + eps2 (Thm. 3); [ours] the same argument with the threshold
    budget eps1' = c eps1 gives A' = A c^2, so w = eps2/eps1' = (B/(A c^2))^{1/3}."""
    if c < 1:
        raise ValueError(f"c must be >= 1, got {c}")
    a, b = _var_coeffs(c, family, monotone)
    if resample:
        a *= c**2
    w: float = (b / a) ** (1.0 / 3.0)
    return w


def allocation(
    epsilon: float, c: int, family: str = "exp", monotone: bool = False, resample: bool = False
) -> tuple[float, float]:
    """(eps1, eps2) per Table 4/6: eps1 = eps/(1+w), eps2 = eps w/(1+w). With ``resample`` the
    returned eps1 is per threshold draw, so that c eps1 + eps2 = eps."""
    w = allocation_ratio(c, family, monotone, resample)
    e1 = epsilon / (1 + w)
    return (e1 / c if resample else e1), epsilon - e1


def comparison_variance(
    epsilon: float,
    c: int,
    family: str = "exp",
    monotone: bool = False,
    w: float | None = None,
    delta: float = 1.0,
) -> float:
    """V = Var(N1) + Var(N2) at split w (default w*), Eq. 51 (Gau: in units of a^2)."""
    a, b = _var_coeffs(c, family, monotone)
    w = allocation_ratio(c, family, monotone) if w is None else w
    return (1 + w) ** 2 * (a + b / w**2) * delta**2 / epsilon**2
