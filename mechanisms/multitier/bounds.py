"""Utility-match bounds of the multi-tier Subset mechanism (Thm 5.3, Thm 5.4; spec 4.9).

kbar = max{2, ceil(d/(e^eps + 1))} (taken from Thm 5.4, pitfall 13). The
theorem terms are evaluated only where kbar <= floor((d-1)/2); above that
(even d) the Case-3 term applies, and in the Step-4 regime the ratio is
<= CASE4_SLACK (spec 4.9 minor erratum: 1.083 at d = 4).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .subset import subset_variance

__all__ = ["kbar", "thm53_bound", "thm54_bound", "GLOBAL_BOUND", "CASE4_SLACK"]

GLOBAL_BOUND = 171 / 11
CASE4_SLACK = 1.09


def _V(rho: float, k: int, d: int) -> float:
    return subset_variance(math.log(rho), k, d)


def kbar(eps: float, d: int) -> int:
    return max(2, math.ceil(d / (math.exp(eps) + 1) - 1e-12))


def _case3(d: int) -> float:
    h, k = d // 2, (d - 1) // 2
    return _V((d + 2) / h - 1, h, d) / _V(d / k - 1, k, d)


def _bound(eps: float, d: int, first: Callable[[int], float]) -> float:
    if eps > math.log(d - 1):
        return 1.0  # Case 1: exact
    kb, kmax = kbar(eps, d), (d - 1) // 2
    if kb <= kmax:
        b = first(kb)
        return max(b, _case3(d)) if d % 2 == 0 and kmax >= 2 else b
    if d % 2 == 0 and kmax >= 1 and eps >= math.log((d + 4) / d) - 1e-12:
        return _case3(d)  # Case 3 (even d)
    return CASE4_SLACK  # Case 4 (Step 4)


def thm53_bound(eps: float, d: int) -> float:
    """Alg. 3 bound: V(ln(d/kb - 1), kb) / V(ln(d/(kb-1) - 1), kb-1) (and Case 3)."""
    return _bound(eps, d, lambda kb: _V(d / kb - 1, kb, d) / _V(d / (kb - 1) - 1, kb - 1, d))


def thm54_bound(eps: float, d: int) -> float:
    """Alg. 5 bound: V(ln((d+1)/kb - 1), kb) / V(ln((d-1)/(kb-1) - 1), kb-1) (and Case 3)."""
    return _bound(eps, d, lambda kb: _V((d + 1) / kb - 1, kb, d) / _V((d - 1) / (kb - 1) - 1, kb - 1, d))
