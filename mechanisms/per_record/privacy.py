"""Privacy budget functions E(r) (paper Def 3.6, Eq. (1); per-record spec sections 1.3, 10.3, 12.1).

``f(v)`` is numpy, vectorised, float64 (never float32, spec 11.3). The backend computes
the same E in SQL (:func:`rewriter.per_record_sql.privacy_sql`, from this function's plain
constants kind, alpha, eps_min, eps_max, v_cap, log_c) by the *same* IEEE-754 double
operations in the same order, so both agree bit for bit on the same input. Keep the two
in step: ``_g_np`` below is mirrored there.

Shortcuts (paper section 8 / spec 10.3), all single-column, monotone
non-increasing in |v| and clamped to [eps_min, eps_max]:

* :func:`inverse_function`  E(v) = alpha / v            (tables; alpha = 1e4)
* :func:`sqrt_function`     E(v) = alpha / sqrt(v)      (figures; alpha = 8)
* :func:`log_function`      E(v) = alpha / log_b(v)^4   (figures; alpha = 500, base unstated)

E is evaluated on |v| (paper footnote 4); below ``v_cap`` (where the formula
reaches eps_max, or log(v) would be <= 0) the value is held at E(v_cap).
eps_min = E(U) unless given (the paper's choice); values above U get eps_min.
NULL (NaN) inputs get eps_min (spec 11.19).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from ..scalars import RealLike

__all__ = ["PrivacyFunction", "inverse_function", "sqrt_function", "log_function"]


_KINDS = ("inverse", "sqrt", "log")


@dataclass(frozen=True)
class PrivacyFunction:
    """E(v) = clamp(alpha / g(max(|v|, v_cap)), eps_min, eps_max) with g by ``kind``.

    ``U`` is the public value bound (integer; the universe is [0, U]).
    ``log_c`` is ln(base) for the log form (1.0 = natural log).
    """

    kind: str
    alpha: float
    U: int
    eps_max: float
    eps_min: float
    v_cap: float
    log_c: float = 1.0
    name: str = ""

    monotone = True  # single column, non-increasing in |v|: enables ExtensionSum

    # -- the evaluation (mirrored in SQL by rewriter.per_record_sql.privacy_sql) --
    def _g_np(self, x: np.ndarray | np.float64) -> np.ndarray | np.float64:
        if self.kind == "inverse":
            return x
        if self.kind == "sqrt":
            root: np.ndarray | np.float64 = np.sqrt(x)
            return root
        t = np.log(x) if self.log_c == 1.0 else np.log(x) / self.log_c
        quartic: np.ndarray | np.float64 = t * t * t * t
        return quartic

    def __call__(self, v: ArrayLike) -> np.ndarray:
        """E(v) as float64 (vectorised); NaN (NULL) -> eps_min."""
        va = np.asarray(v, dtype=np.float64)
        x = np.maximum(np.abs(va), self.v_cap)
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.minimum(np.maximum(self.alpha / self._g_np(x), self.eps_min), self.eps_max)
        return np.where(np.isnan(va), self.eps_min, e)

    # -- derived -------------------------------------------------------------
    def max_value(self, x: float) -> int:
        """E^{-1}(x) on integers: the largest v in [0, U] with E(v) >= x (App. A).

        Found by bisection on the numpy E (monotone); the search uses a 1e-12
        relative margin so a last-ulp difference between SQL and numpy can only
        make the result larger (more noise), never smaller. -1 if no v qualifies.
        """
        x = float(x) * (1.0 - 1e-12)
        if float(self(0)) < x:
            return -1
        lo, hi = 0, self.U  # invariant: E(lo) >= x
        if float(self(hi)) >= x:
            return hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if float(self(mid)) >= x:
                lo = mid
            else:
                hi = mid
        return lo

    def scaled(self, w: float) -> PrivacyFunction:
        """E_q = w * E (a query's share of the lifetime budget, spec 11.21)."""
        w = float(w)
        if not (0.0 < w <= 1.0):
            raise ValueError(f"weight must be in (0, 1], got {w}")
        return replace(
            self,
            alpha=self.alpha * w,
            eps_min=self.eps_min * w,
            eps_max=self.eps_max * w,
            name=f"{self.name}*{w!r}",
        )


def _make(
    kind: str,
    alpha: float,
    U: RealLike,
    eps_max: float,
    eps_min: float | None,
    v_cap: float,
    log_c: float = 1.0,
) -> PrivacyFunction:
    if isinstance(U, float) and U.is_integer():
        U = int(U)
    U = operator.index(U)  # type: ignore[arg-type]  # a non-integral bound raises TypeError
    alpha, eps_max = float(alpha), float(eps_max)
    if U < 1 or not (alpha > 0 and math.isfinite(alpha)) or not (eps_max > 0 and math.isfinite(eps_max)):
        raise ValueError("need U >= 1, alpha > 0, eps_max > 0")
    pf = PrivacyFunction(
        kind, alpha, U, eps_max, eps_max, float(v_cap), float(log_c), name=f"{kind}(alpha={alpha!r}, U={U})"
    )
    e_u = float(np.minimum(alpha / pf._g_np(np.float64(max(float(U), pf.v_cap))), eps_max))
    eps_min = e_u if eps_min is None else float(eps_min)
    if not (0 < eps_min <= eps_max):
        raise ValueError(f"need 0 < eps_min <= eps_max, got {eps_min}, {eps_max}")
    return replace(pf, eps_min=eps_min)


def inverse_function(
    alpha: float = 1e4, U: RealLike = 10**12, eps_max: float = 100.0, eps_min: float | None = None
) -> PrivacyFunction:
    """Paper Eq. (1): E = alpha / v, capped at eps_max for v < alpha/eps_max."""
    return _make("inverse", alpha, U, eps_max, eps_min, max(alpha / eps_max, 1e-9))


def sqrt_function(
    alpha: float = 8.0, U: RealLike = 10**12, eps_max: float = 100.0, eps_min: float | None = None
) -> PrivacyFunction:
    """E = alpha / sqrt(v) (paper section 8, Figs. 3-5)."""
    return _make("sqrt", alpha, U, eps_max, eps_min, max((alpha / eps_max) ** 2, 1e-9))


def log_function(
    alpha: float = 500.0,
    U: RealLike = 10**12,
    eps_max: float = 100.0,
    base: float = math.e,
    eps_min: float | None = None,
) -> PrivacyFunction:
    """E = alpha / log_base(v)^4 (paper section 8; the base is unstated, spec 11.1).

    Held constant below v_cap = max(base^((alpha/eps_max)^(1/4)), 2) so log(v) > 0.
    """
    c = 1.0 if base == math.e else math.log(base)
    return _make("log", alpha, U, eps_max, eps_min, max(base ** ((alpha / eps_max) ** 0.25), 2.0), c)
