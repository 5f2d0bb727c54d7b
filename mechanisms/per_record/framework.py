"""Algorithm 2 (general PrDP framework, paper section 6; spec 5) with the inner
mechanisms of spec 6.3 (universal Laplace sum) and 6.4 (shifted-rank exponential max).

Stage 1 = Algorithm 1 with E' = E/2 and beta/2 (DLap(2/lo_i), per-level failure
beta/(2L)) -> ell, eps_tau = lo_ell.  Stage 2 runs M with eps_tau/2 and beta/2 on
D_ell = {records with lvl >= ell} (spec 11.8); each such record has E(r) >= lo_ell,
so stage 2 costs eps_tau/2 <= E(r)/2 and stage 1 lo_lvl/2 <= E(r)/2: total <= E(r)
(sequential composition, Lemma 3.10; records outside D_ell pay stage 1 only).
Stage 1's noisy counts are discarded (spec 11.7).
``weight`` w scales every budget exactly (E_q = w * E, spec 11.21), as in count.py.

SQL input:
* FrameworkSum: one scan ``GROUP BY lvl, b`` -> (lvl, b, COUNT(*), SUM(v)).
* FrameworkMax: round 1 ``GROUP BY lvl`` -> (lvl, COUNT(*)) -> ``select_level``;
  round 2 ``SELECT v, COUNT(*) ... WHERE lvl >= :ell GROUP BY v`` -> ``release``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..exact_choice import exp_weighted_index
from ..rng import RandomSource, default_source
from ..samplers import discrete_laplace
from .core import LevelHistogram, LevelScan, PrRelease, as_int, tail_k
from .count import Counts, exact_weight
from .levels import Levels, ValueBuckets

__all__ = [
    "clipped_sum",
    "universal_sum",
    "shifted_rank_max",
    "EpsTauEstimator",
    "FrameworkSum",
    "FrameworkMax",
]


def clipped_sum(C: Sequence[int], S: Sequence[int], j: int, buckets: ValueBuckets) -> int:
    """sum_v min(v, tau_j) from per-bucket counts C and sums S (bucket b holds (2^(b-1), 2^b])."""
    return sum(int(s) for s in S[: j + 1]) + buckets.tau[j] * sum(int(c) for c in C[j + 1 :])


def universal_sum(
    C: Sequence[int],
    S: Sequence[int],
    eps: Fraction,
    beta: float,
    buckets: ValueBuckets,
    source: RandomSource,
) -> tuple[int, int, Fraction]:
    """eps-DP sum of integers in [0, U] from a bucket histogram (spec 6.3, dong2023universal
    stand-in, with the 2^j off-by-one of the reference code corrected, spec 11.9).

    radius: AboveThreshold with eps_r = eps/2, beta_r = beta/2 on q_j = #{v <= 2^j}
    (q_j - n = -#{v > 2^j}: sensitivity 1); noisy threshold n - (6/eps_r) ln(2/beta_r)
    + DLap(2/eps_r), queries + DLap(4/eps_r) (integer shifts -> the usual proof holds
    for discrete Laplace).  Then sum min(v, tau) + DLap(tau/(eps/2)).  Returns
    (value, tau, noise scale).  All noise exact discrete; output an int.
    """
    eps = Fraction(eps)
    eps_r, beta_r = eps / 2, beta / 2
    C = [int(c) for c in C]
    n = sum(C)
    rho = discrete_laplace(2 / eps_r, source)
    thr = n - 6 / float(eps_r) * math.log(2 / beta_r) + rho
    jj, cum = buckets.B, 0
    for j in range(buckets.B + 1):
        cum += C[j]
        if cum + discrete_laplace(4 / eps_r, source) > thr:
            jj = j
            break
    tau = buckets.tau[jj]
    clipped = clipped_sum(C, S, jj, buckets)
    scale = Fraction(tau) / (eps / 2)
    return clipped + discrete_laplace(scale, source), tau, scale


def shifted_rank_max(
    values: Sequence[int] | np.ndarray,
    counts: Sequence[int] | np.ndarray,
    eps: float,
    beta: float,
    U: int,
    source: RandomSource,
) -> tuple[int, int]:
    """eps-DP max of integers in [0, U] (spec 6.4): k0 = ceil((2/eps) ln((U+1)/beta)),
    Pr[y] ~ exp(-eps |c(y) - k0| / 2), c(y) = #{x > y}, y in {0..U}.

    c is constant on the integer intervals between distinct values, so an interval is
    drawn with weight length * exp(-eps|c - k0|/2) -- exactly (:func:`mechanisms.exact_choice.
    exp_weighted_index`: inverse CDF of a lazily read uniform with rigorous bounds, no weight
    is rounded away, so the release is pure eps-DP for the rational eps the float denotes) --
    then y uniformly inside it with the exact integer sampler.  ``values`` sorted, distinct,
    in [0, U].  Returns (y, k0).  W.p. >= 1 - beta the rank error c(y) <= 2 k0 + ties.
    """
    v = np.asarray(values, dtype=np.int64)
    m = np.asarray(counts, dtype=np.int64)
    if v.size and (np.any(np.diff(v) <= 0) or v[0] < 0 or v[-1] > U):
        raise ValueError("values must be sorted, distinct and in [0, U]")
    n = int(m.sum())
    k0 = math.ceil(2.0 / eps * math.log((U + 1) / beta))
    starts = np.concatenate(([0], v)).astype(np.int64)
    ends = np.concatenate((v - 1, [U])).astype(np.int64)  # inclusive
    c = n - np.concatenate(([0], np.cumsum(m)))
    length = ends - starts + 1
    keep = length > 0
    starts, length, c = starts[keep], length[keep], c[keep]
    idx = exp_weighted_index(length, np.abs(c - k0), Fraction(eps) / 2, source)
    return int(starts[idx]) + source.randbelow(int(length[idx])), k0


class EpsTauEstimator:
    """Algorithm 2 part 1: Algorithm 1 with E/2 and beta/2; returns ell (1-based)."""

    def __init__(self, levels: Levels, beta: float = 0.1, weight: float = 1.0) -> None:
        if not 0 < beta < 1:
            raise ValueError("beta must be in (0, 1)")
        self.levels, self.beta = levels, beta
        self.weight = exact_weight(weight)
        self.scan = LevelScan(levels.lo, [1] * levels.L, self.weight / 2, beta / 2)

    def select(self, level_counts: Sequence[int], source: RandomSource | None) -> int:
        return self.scan.run(level_counts, source)[0]

    def stage2_epsilon(self, ell: int) -> Fraction:
        """eps given to M: eps_tau/2 on the original scale (spec 11.7)."""
        return self.weight * Fraction(float(self.levels.lo[ell - 1])) / 2

    def eps_tau(self, ell: int) -> float:
        """eps_tau = w lo_ell on the E_q scale."""
        return float(self.weight * Fraction(float(self.levels.lo[ell - 1])))

    def record_epsilon(self, e: ArrayLike) -> np.ndarray:
        """Worst case over ell of stage 1 + stage 2 (paid only if lvl >= ell) = lo_lvl."""
        lvl = self.levels.level(e)
        s1 = self.scan.level_epsilon(lvl)
        s2 = np.array(
            [max(float(self.stage2_epsilon(l)) for l in range(1, int(i) + 1)) for i in np.atleast_1d(lvl)]
        ).reshape(np.shape(lvl))
        out: np.ndarray = s1 + s2
        return out

    def dropped_bound(self, ell: int) -> int:
        """Plug-in bound on records dropped: 2 sum_{i>=k} k_i with k := ell (spec 5, Thm 6.1)."""
        return 2 * sum(self.scan.k[ell - 1 :])


class FrameworkSum(EpsTauEstimator):
    """Algorithm 2 with M = :func:`universal_sum` (Table 3 "PrDP Framework"); any E."""

    name = "prdp_sum_framework"

    def __init__(self, levels: Levels, U: int, beta: float = 0.1, weight: float = 1.0) -> None:
        super().__init__(levels, beta, weight)
        self.buckets = ValueBuckets(U)

    @property
    def epsilon(self) -> float:
        return float(self.record_epsilon(self.levels.eps_max))

    def release(self, hist: LevelHistogram, source: RandomSource | None = None) -> PrRelease:
        """``hist``: rows (lvl, b, COUNT(*), SUM(v)) -> LevelHistogram.from_rows(rows, L, B)."""
        if hist.B != self.buckets.B or hist.L != self.levels.L:
            raise ValueError(f"histogram must be {self.levels.L} levels x {self.buckets.B + 1} buckets")
        src = source if source is not None else default_source()
        ell = self.select(hist.level_counts(), src)
        C = hist.cnt[ell - 1 :].sum(axis=0)
        S = [int(sum(col)) for col in hist.sums[ell - 1 :].T]
        value, tau, scale = universal_sum(C, S, self.stage2_epsilon(ell), self.beta / 2, self.buckets, src)
        k = tail_k(scale, self.beta / 4)
        return PrRelease(
            value=value,
            epsilon=self.epsilon,
            half_width=float(k + tau * self.dropped_bound(ell)),
            mechanism=self.name,
            scale=float(scale),
            eps_tau=self.eps_tau(ell),
            ell=ell,
            beta=self.beta,
            noise_half_width=float(k),
        )


class FrameworkMax(EpsTauEstimator):
    """Algorithm 2 with M = :func:`shifted_rank_max`, in two round trips:

    1. ``ell = select_level({lvl: COUNT(*)}, source)``  (GROUP BY lvl)
    2. ``release(ell, [(v, COUNT(*)) for lvl >= ell], source)``  (GROUP BY v)
    The release's half_width is a plug-in RANK bound (rows above the answer).
    """

    name = "prdp_max_framework"

    def __init__(self, levels: Levels, U: int, beta: float = 0.1, weight: float = 1.0) -> None:
        super().__init__(levels, beta, weight)
        self.U = int(U)

    @property
    def epsilon(self) -> float:
        return float(self.record_epsilon(self.levels.eps_max))

    def select_level(self, level_counts: Counts, source: RandomSource | None = None) -> int:
        h = (
            level_counts
            if isinstance(level_counts, LevelHistogram)
            else LevelHistogram.from_level_counts(level_counts, self.levels.L)
        )
        return self.select(h.level_counts(), source)

    def release(
        self, ell: int, value_counts: Iterable[Sequence[Any]], source: RandomSource | None = None
    ) -> PrRelease:
        src = source if source is not None else default_source()
        acc: dict[int, int] = {}
        U = self.U
        for v, c in value_counts:
            v = as_int(v)
            v = 0 if v < 0 else (U if v > U else v)
            acc[v] = acc.get(v, 0) + as_int(c)
        vals = sorted(acc)
        return self._release_sorted(int(ell), vals, [acc[v] for v in vals], src)

    def release_arrays(
        self, ell: int, values: np.ndarray, counts: np.ndarray, source: RandomSource | None = None
    ) -> PrRelease:
        """:meth:`release` for the value counts as two integer arrays (a columnar scan): the
        same clip to [0, U] and sum of the counts per clipped value, so the same release from
        the same source."""
        v, c = np.asarray(values), np.asarray(counts)
        if v.dtype.kind not in "iu" or c.dtype.kind not in "iu" or self.U >= 1 << 62:
            raise TypeError("release_arrays takes integer arrays (and U below 2^62)")
        vals, inverse = np.unique(np.clip(v.astype(np.int64), 0, self.U), return_inverse=True)
        acc = np.zeros(vals.size, dtype=np.int64)
        np.add.at(acc, inverse, c.astype(np.int64))
        src = source if source is not None else default_source()
        return self._release_sorted(int(ell), vals, acc, src)

    def _release_sorted(
        self,
        ell: int,
        vals: Sequence[int] | np.ndarray,
        counts: Sequence[int] | np.ndarray,
        src: RandomSource,
    ) -> PrRelease:
        if not 1 <= ell <= self.levels.L:
            raise ValueError("ell out of range")
        eps = float(self.stage2_epsilon(ell))
        y, k0 = shifted_rank_max(vals, counts, eps, self.beta / 2, self.U, src)
        return PrRelease(
            value=y,
            epsilon=self.epsilon,
            half_width=float(2 * k0 + self.dropped_bound(ell)),
            mechanism=self.name,
            scale=2.0 / eps,
            eps_tau=self.eps_tau(ell),
            ell=int(ell),
            beta=self.beta,
            noise_half_width=float(2 * k0),
            half_width_units="rank",
        )
