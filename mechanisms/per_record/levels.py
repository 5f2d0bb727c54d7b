"""Privacy-specified domain partition (paper section 5.1, Alg. 1 line 8; spec 3.1, 11.2-11.3, 12.2)
and the log2 value buckets of the framework sum / naive sum (spec 12.3).

Levels (base 2, rounding toward the LOWER budget):

    L   = max(1, ceil(log2(eps_max / eps_min)))       (computed exactly by doubling)
    h_i = min(2^i eps_min, eps_max),  lo_i = 2^(i-1) eps_min,   i = 1..L
    lvl(e) = first i with e <= h_i   (I_1 = [eps_min, h_1] closed; I_i = (h_{i-1}, h_i])

so every record in level i has E(r) >= lo_i, the budget its noise is calibrated
to.  Multiplying by 2^k is exact in binary floating point, so h_i and lo_i are
exact; the backend gets them (``Levels.hi``, plain floats) as exact literals and compares
with ``<=`` (:func:`rewriter.per_record_sql.level_sql`) -- the same comparisons numpy's
``searchsorted(side='left')`` makes, hence identical levels on every double, boundaries
included.  No LOG2/FLOOR (spec 11.3).
"""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from ..scalars import RealLike

if TYPE_CHECKING:
    from .privacy import PrivacyFunction

__all__ = ["Levels", "ValueBuckets"]


class Levels:
    """The L domains for public (eps_min, eps_max); never depends on data (spec 11.4)."""

    def __init__(self, eps_min: float, eps_max: float) -> None:
        eps_min, eps_max = float(eps_min), float(eps_max)
        if not (0 < eps_min <= eps_max and math.isfinite(eps_max)):
            raise ValueError(f"need 0 < eps_min <= eps_max < inf, got {eps_min}, {eps_max}")
        L, x = 0, eps_min
        while x < eps_max:
            x *= 2.0
            L += 1
        self.L = max(1, L)  # eps_min == eps_max: plain Laplace (spec 11.23)
        self.eps_min, self.eps_max = eps_min, eps_max
        self.lo = np.array([math.ldexp(eps_min, i) for i in range(self.L)])  # lo_1..lo_L
        self.hi = np.array([min(math.ldexp(eps_min, i + 1), eps_max) for i in range(self.L)])
        self.hi[-1] = eps_max

    @classmethod
    def for_function(cls, pf: PrivacyFunction) -> Levels:
        return cls(pf.eps_min, pf.eps_max)

    def level(self, e: ArrayLike) -> np.ndarray:
        """1-based level of budget(s) ``e``; raises on e < eps_min (an unclamped E)."""
        ea = np.asarray(e, dtype=np.float64)
        if np.any(ea < self.eps_min) or np.any(np.isnan(ea)):
            raise ValueError("budget below eps_min or NaN: E must be clamped to [eps_min, eps_max]")
        lvl: np.ndarray = np.searchsorted(self.hi[:-1], ea, side="left") + 1
        return lvl

    def __repr__(self) -> str:
        return f"Levels(eps_min={self.eps_min!r}, eps_max={self.eps_max!r}, L={self.L})"


class ValueBuckets:
    """Buckets b(v) = 0 if v <= 1 else ceil(log2 v), v in (2^(b-1), 2^b]; b = 0..B, B = ceil(log2 U).

    Candidate clipping radii tau_j = min(2^j, U): for a value in bucket b,
    min(v, tau_j) = v if b <= j else tau_j, so clipped sums follow exactly from a
    (bucket -> count, sum) histogram (spec 12.4). The backend's b(v) is
    :func:`rewriter.per_record_sql.bucket_sql` over ``edges`` (the same ``<=`` comparisons).
    """

    def __init__(self, U: RealLike) -> None:
        if isinstance(U, float) and U.is_integer():
            U = int(U)
        self.U = operator.index(U)  # type: ignore[arg-type]  # a non-integral bound raises TypeError
        if self.U < 1:
            raise ValueError("U must be >= 1")
        self.B = (self.U - 1).bit_length()
        self.edges = [1 << j for j in range(self.B)]  # 2^0 .. 2^(B-1)
        self.tau = [min(1 << j, self.U) for j in range(self.B + 1)]

    def bucket(self, v: ArrayLike) -> np.ndarray:
        b: np.ndarray = np.searchsorted(np.asarray(self.edges, dtype=np.float64), np.asarray(v), side="left")
        return b
