"""Closed-form constants for add-remove mean estimation (Kulesza, Suresh, Wang
2024, arXiv:2312.06658; add-remove mean spec sections 2.3-2.6 and 4.2).

Throughout b = e^-eps and (1 - b) = -expm1(-eps) for numerical stability
(add-remove mean spec section 6 item 5).
"""

from __future__ import annotations

import math
from functools import lru_cache

__all__ = [
    "gamma_star",
    "sigma2",
    "staircase_a",
    "staircase_var",
    "hourglass_c",
    "st2d_a2",
    "st2d_a2_paper",
    "st2d_coord_var",
    "gamma_tilde",
    "mse_leading",
    "derived_count_var",
    "derived_sum_var",
]


def _b(eps: float) -> float:
    return math.exp(-eps)


def _omb(eps: float) -> float:
    return -math.expm1(-eps)


def _check(eps: float) -> float:
    eps = float(eps)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {eps!r}")
    return eps


def gamma_star(eps: float) -> float:
    """Geng-Viswanath optimal gamma for squared loss (spec 2.3, cited in Thm 3),
    stable form ((b(1+b)/2)^(1/3) - b)/(1 - b); series 1/2 - eps/12 below 1e-6."""
    eps = _check(eps)
    if eps < 1e-6:
        return 0.5 - eps / 12
    b = _b(eps)
    g: float = ((b * (1 + b) / 2) ** (1 / 3) - b) / _omb(eps)
    return g


def sigma2(eps: float) -> float:
    """sigma^2(eps) of eq. (2): the swap-model optimum = add-remove optimum (Cor. 2)."""
    eps = _check(eps)
    b = _b(eps)
    s2: float = (2 ** (-2 / 3) * b ** (2 / 3) * (1 + b) ** (2 / 3) + b) / _omb(eps) ** 2
    return s2


def staircase_a(eps: float, gamma: float, delta: float = 1.0) -> float:
    """Staircase normaliser a(gamma) = (1-b)/(2 Delta (gamma + b(1-gamma))) (App. D.1, erratum fixed)."""
    b = _b(_check(eps))
    return _omb(eps) / (2 * delta * (gamma + b * (1 - gamma)))


def staircase_var(eps: float, gamma: float) -> float:
    """Closed-form staircase variance for Delta = 1 (spec 2.3, [derived])."""
    b, omb = _b(_check(eps)), _omb(eps)
    s0, s1, s2 = 1 / omb, b / omb**2, b * (1 + b) / omb**3
    g = gamma
    return (
        2
        * staircase_a(eps, g)
        * (g * s2 + g * g * s1 + g**3 * s0 / 3 + b * ((1 - g) * s2 + (1 - g * g) * s1 + (1 - g**3) * s0 / 3))
    )


def hourglass_c(eps: float, gamma: float) -> float:
    """Hourglass normaliser c(gamma) = (1-b)/(1+b) a(gamma) (App. D.1), Delta = 1."""
    b = _b(_check(eps))
    return _omb(eps) / (1 + b) * staircase_a(eps, gamma)


def st2d_a2(eps: float, gamma: float) -> float:
    """CORRECTED 2-D staircase normaliser a2 = (1-b)^2/(2[(b + gamma(1-b))^2 + b])
    (spec 2.5 [erratum], section 6 item 6), Delta = 1."""
    b, omb = _b(_check(eps)), _omb(eps)
    return omb**2 / (2 * ((b + gamma * omb) ** 2 + b))


def st2d_a2_paper(eps: float, gamma: float) -> float:
    """The normaliser as printed in Def. 3 (WRONG; kept to show the test rejects it)."""
    b, omb = _b(_check(eps)), _omb(eps)
    return omb**2 / (2 * (b * (b + omb * gamma) + omb * (b + omb * gamma**2)))


def st2d_coord_var(eps: float, gamma: float) -> float:
    """E[Z1^2] = E[R^2]/3 for the 2-D staircase (spec 2.5 closed form)."""
    b, omb = _b(_check(eps)), _omb(eps)
    s0, s1, s2 = 1 / omb, b / omb**2, b * (1 + b) / omb**3
    s3 = b * (1 + 4 * b + b * b) / omb**4
    g = gamma
    er2 = st2d_a2(eps, g) * (
        (4 * g * s3 + 6 * g**2 * s2 + 4 * g**3 * s1 + g**4 * s0)
        + b * (4 * (1 - g) * s3 + 6 * (1 - g**2) * s2 + 4 * (1 - g**3) * s1 + (1 - g**4) * s0)
    )
    return er2 / 3


@lru_cache(maxsize=256)
def gamma_tilde(eps: float) -> float:
    """argmin over [0, 1] of the 2-D staircase coordinate variance (Lemma 5; numeric)."""
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(
        lambda g: st2d_coord_var(eps, g), bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-10}
    )
    return float(res.x)


def mse_leading(kind: str, eps: float, lower: float, upper: float, mu: float) -> float:
    """Leading-term n^2 * MSE (spec 4.2 table, general [l, u]).

    kind: alg1 | alg2 | alg3_laplace | alg3_staircase2d | hourglass | swap_staircase.
    """
    w, m = upper - lower, (lower + upper) / 2
    alpha = (mu - lower) / w
    shape = (1 - alpha) ** 2 + alpha**2
    if kind == "alg1":
        big_w = max(abs(lower), abs(upper))
        return (8 * big_w**2 + 8 * mu**2) / eps**2
    if kind == "alg2":
        return (2 * w**2 + 8 * (mu - m) ** 2) / eps**2
    if kind == "alg3_laplace":
        return 2 * w**2 / eps**2 * shape
    if kind == "alg3_staircase2d":
        return w**2 * st2d_coord_var(eps, gamma_tilde(eps)) * shape
    if kind == "hourglass":
        return w**2 * sigma2(eps) * shape
    if kind == "swap_staircase":
        return w**2 * sigma2(eps)
    raise ValueError(f"unknown kind {kind!r}")


def derived_count_var(kind: str, eps: float) -> float:
    """Var of the COUNT derived from one Alg-3 release (spec 4.2 last note)."""
    return 2 * sigma2(eps) if kind == "hourglass" else 4 / eps**2


def derived_sum_var(kind: str, eps: float, lower: float, upper: float) -> float:
    """Var of SUM^ = l n^ + w s1^ from one Alg-3 release (spec 4.2 last note)."""
    v = sigma2(eps) if kind == "hourglass" else 2 / eps**2
    return v * (lower**2 + upper**2)
