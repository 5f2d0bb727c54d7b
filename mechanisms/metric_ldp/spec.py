"""Collection spec for metric-LDP (E_L1-LDP) reports: domains, buckets, report schema.

Xiang, Ding, He, Zhou 2020, "Linear and Range Counting under Metric-based LDP";
metric-LDP spec sections 1.3 (discretisation), 3.1 (M4 encoding), 7.15, 8 (SQL mapping).

A :class:`GroupSpec` describes one *joint group* of D private columns collected together
(joint collection is required for multi-dim ranges, spec 7.8). Dimension d has a public
domain [lo, hi] split into m_d equal buckets of width g = (hi - lo)/m_d and its own
epsilon_d per bucket step, so the guarantee is the weighted L1 metric
E(x, x') = sum_d eps_d |bucket_d(x) - bucket_d(x')| (spec 3.1, [DERIVED] per-dim eps).

Bit flips use an integer threshold: a bit flips iff U < Q with U uniform on [0, 2^32)
and Q = ceil(2^32 / (e^eps + 1)) + 1, so the flip probability q~ = Q/2^32 is slightly
*above* 1/(e^eps+1) and the realised per-step loss ln((1-q~)/q~) is <= eps. All
estimators use q~ (not the float 1/(e^eps+1)), so they stay exactly unbiased.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["DimSpec", "GroupSpec", "bucketize", "report_columns", "guarantee", "guarantee_text", "FLIP_BITS"]

FLIP_BITS = 32  # resolution of the flip threshold (U uniform on [0, 2^32))
_FLIP_RANGE: int = 2**FLIP_BITS
MECHANISMS = ("M4", "M3", "M2")


@dataclass(frozen=True)
class DimSpec:
    """One private ordinal/numeric column: public [lo, hi], m buckets, eps per bucket step.

    ``kind="weight"`` is the private-weight dimension of paper 4.3.2 (spec 3.9): m = 2,
    [lo, hi] = [0, Delta]; a weight w is rounded at random to bucket 2 w.p. w/Delta.
    """

    lo: float
    hi: float
    m: int
    epsilon: float
    name: str = ""
    kind: str = "value"  # "value" | "weight"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi) and self.lo < self.hi):
            raise ValueError(f"need finite lo < hi, got [{self.lo}, {self.hi}]")
        if int(self.m) != self.m or self.m < 1:
            raise ValueError(f"m must be a positive integer, got {self.m}")
        if self.kind not in ("value", "weight"):
            raise ValueError(f"kind must be 'value' or 'weight', got {self.kind!r}")
        if self.kind == "weight" and (self.m != 2 or self.lo != 0):
            raise ValueError("a weight dimension has m = 2 and lo = 0 (hi = Delta)")
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"epsilon must be finite and > 0, got {self.epsilon}")
        if self.flip_num >= 2 ** (FLIP_BITS - 1):
            raise ValueError(f"epsilon {self.epsilon} too small for a {FLIP_BITS}-bit threshold")

    @property
    def g(self) -> float:
        """Bucket width (hi - lo)/m: the granularity eps protects (spec 1.3)."""
        return (self.hi - self.lo) / self.m

    @property
    def flip_num(self) -> int:
        """Q: a bit flips iff U < Q, U uniform on [0, 2^FLIP_BITS)."""
        q = 1.0 / (math.exp(self.epsilon) + 1.0) if self.epsilon < 700 else 0.0
        return math.ceil(q * _FLIP_RANGE) + 1  # +1 covers float error in q: q~ > q

    @property
    def q(self) -> float:
        """Realised flip probability q~ = Q / 2^32 (>= 1/(e^eps+1), spec 1.5)."""
        return self.flip_num / _FLIP_RANGE

    @property
    def lam(self) -> float:
        """lambda = 1 - 2q~ (= tanh(eps/2) up to 2^-31)."""
        return 1.0 - 2.0 * self.q

    @property
    def kappa(self) -> float:
        """kappa = 1/lambda (= coth(eps/2) up to 2^-31)."""
        return 1.0 / self.lam

    @property
    def effective_epsilon(self) -> float:
        """The loss per bucket step actually realised: ln((1-q~)/q~) <= epsilon."""
        return math.log((1.0 - self.q) / self.q)

    def edges(self) -> np.ndarray:
        """m+1 bucket edges lo + k g; bucket k (1-based) is [edge[k-1], edge[k])."""
        return self.lo + (self.hi - self.lo) * np.arange(self.m + 1) / self.m


@dataclass(frozen=True)
class GroupSpec:
    """A joint group of D dimensions collected with one mechanism.

    mechanism: "M4" (thermometer + bitwise RR, default, any D), "M3" (Laplace prefix,
    D = 1) or "M2" (metric SHE under E_S, D = 1; ``sensitive`` = the set S of 1-based
    buckets). ``prefix`` names the report columns, so several groups can share a table.
    ``grid_bits`` (M2/M3): Laplace noise is discrete on the grid 2^-grid_bits.
    """

    dims: tuple[DimSpec, ...]
    mechanism: str = "M4"
    prefix: str = "b"
    sensitive: frozenset[int] | None = None
    grid_bits: int = 10

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", tuple(self.dims))
        if not self.dims or not all(isinstance(d, DimSpec) for d in self.dims):
            raise ValueError("dims must be a non-empty sequence of DimSpec")
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS}")
        if self.mechanism != "M4" and len(self.dims) != 1:
            raise ValueError(f"{self.mechanism} is a 1-D mechanism (paper 3.2-3.3)")
        if self.mechanism == "M2":
            s = frozenset(int(k) for k in (self.sensitive or ()))
            if not all(1 <= k <= self.dims[0].m for k in s):
                raise ValueError("sensitive buckets must lie in 1..m")
            object.__setattr__(self, "sensitive", s)
        if not self.prefix.isidentifier() or not self.prefix.islower():
            raise ValueError(f"prefix must be a lower-case identifier, got {self.prefix!r}")

    @property
    def D(self) -> int:
        return len(self.dims)

    @property
    def ms(self) -> tuple[int, ...]:
        return tuple(d.m for d in self.dims)

    @property
    def grid(self) -> int:
        """K = 2^grid_bits grid units per count (M2/M3 reports are integers / K)."""
        grid: int = 2**self.grid_bits
        return grid

    def column_slices(self) -> list[slice]:
        """Slice of the report array holding dimension d's columns."""
        out: list[slice] = []
        start = 0
        for k in self.report_widths():
            out.append(slice(start, start + k))
            start += k
        return out

    def report_widths(self) -> list[int]:
        if self.mechanism == "M3":
            return [self.dims[0].m - 1]
        return [d.m for d in self.dims]


def bucketize(values: np.ndarray, dim: DimSpec) -> np.ndarray:
    """bucket(u) = min(m, floor((u - lo) m / (hi - lo)) + 1), clamped to [1, m] (spec 7.15).

    Clamping is a local deterministic map (no privacy cost) but biases answers for
    out-of-domain values. NaN (SQL NULL) is refused: the caller must exclude such rows
    (n is then the number of non-NULL reports) -- spec 7.15 leaves NULLs open.
    """
    u = np.asarray(values, dtype=float)
    if np.isnan(u).any():
        raise ValueError("NaN/NULL values cannot be bucketed; exclude them first")
    k = np.floor((u - dim.lo) * dim.m / (dim.hi - dim.lo)).astype(np.int64) + 1
    return np.clip(k, 1, dim.m)


def report_columns(spec: GroupSpec) -> list[tuple[str, str]]:
    """(name, sql_type) of the report table columns, in report-array order.

    M4: ``{prefix}_{d}_{j}`` SMALLINT in {0, 1} for dimension d = 0..D-1 (group order)
    and threshold j = 1..m_d; 1 means the (randomised) report says bucket_d <= j, i.e.
    r_d[j] = 2 b - 1 in the paper's +-1 notation. Bit m_d is kept (spec 7.12).
    M3: ``{prefix}_0_{k}`` BIGINT, k = 1..m-1: K*1[x <= k] + discrete Laplace (grid units).
    M2: ``{prefix}_0_{k}`` BIGINT, k = 1..m: K*1[x = k] + discrete Laplace (grid units).
    """
    typ = "SMALLINT" if spec.mechanism == "M4" else "BIGINT"
    first = 1
    return [
        (f"{spec.prefix}_{d}_{j}", typ)
        for d, w in enumerate(spec.report_widths())
        for j in range(first, first + w)
    ]


def guarantee(spec: GroupSpec, x: Sequence[int], y: Sequence[int]) -> float:
    """E(x, y) for bucket vectors x, y (1-based): sum_d eps_d |x_d - y_d| (M3/M4),
    or E_S (M2: eps if x or y in S, 2 eps otherwise, 0 if equal; paper 3.2)."""
    if spec.mechanism == "M2":
        if x[0] == y[0]:
            return 0.0
        eps = spec.dims[0].epsilon
        sensitive = spec.sensitive or frozenset()
        return eps if (x[0] in sensitive or y[0] in sensitive) else 2 * eps
    return float(sum(d.epsilon * abs(int(a) - int(b)) for d, a, b in zip(spec.dims, x, y)))


def guarantee_text(spec: GroupSpec) -> str:
    """Human-readable guarantee for NOTICE/EXPLAIN (no budget is charged at query time)."""
    if spec.mechanism == "M2":
        d = spec.dims[0]
        return (
            f"local E_S-LDP (M2): two values are indistinguishable up to e^{d.epsilon:g} if "
            f"either is one of the {len(spec.sensitive or ())} sensitive buckets, else e^{2 * d.epsilon:g}"
            f" (bucket width {d.g:g})"
        )
    parts = []
    for i, d in enumerate(spec.dims):
        nm = d.name or f"dim{i}"
        if d.kind == "weight":
            parts.append(f"{d.epsilon:g}*[{nm} rounded weight differs] (Delta {d.hi:g})")
        else:
            parts.append(
                f"{d.epsilon:g}*|bucket({nm}) diff| (bucket width {d.g:g}, "
                f"i.e. {d.epsilon / d.g:.4g} per unit)"
            )
    return (
        "local metric-LDP (" + spec.mechanism + "), perturbed once at ingestion; queries are "
        "post-processing (epsilon 0 charged). E(x,x') = " + " + ".join(parts)
    )
