"""Shared pieces: the release record, the (level x bucket) histogram one SQL scan
returns, and the noisy-scan-then-first-pass step of Algorithm 1 (paper section 5.1,
Eq. (2); spec 3.2) used by COUNT, the sum extension and stage 1 of Algorithm 2.

Discrete noise: each level's value is an integer (count, or sum of integer
values), released as value + DLap(scale_i), scale_i = sens_i / (frac * lo_i) as
an exact Fraction -> the level's privacy loss is exactly frac * lo_i for a
record of sensitivity <= sens_i.  Thresholds are the discrete analogue of the
paper's T_i = scale_i ln(L/beta): T_i = k_i + 1 with k_i the least integer with
P[|DLap(scale_i)| > k_i] <= beta/L, so the good event G = {|Z_i| <= k_i for all i}
has P[G] >= 1 - beta exactly (union bound; spec 3.3).  T_i <= paper T_i + 2.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from numbers import Integral
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..dlap import dlap_half_width
from ..measurements import Release
from ..rng import RandomSource, default_source
from ..samplers import discrete_laplace
from ..scalars import RealLike

__all__ = ["PrRelease", "LevelHistogram", "LevelScan", "first_passing", "as_int", "tail_k"]


@dataclass(frozen=True)
class PrRelease(Release):
    """A PrDP release.  ``epsilon`` = the largest per-record charge (<= eps_max);
    the guarantee is per record (``record_epsilon`` of the mechanism).
    ``half_width``: plug-in error bound at 1 - beta (private eps_min(D) replaced
    by eps_tau; a guide, not a guarantee); ``noise_half_width``: the guaranteed
    1 - beta bound on the added noise alone (excludes records of dropped levels
    and clipping bias, which cannot be bounded without private quantities)."""

    eps_tau: float | None = None
    ell: int | None = None
    beta: float = 0.1
    noise_half_width: float | None = None
    half_width_units: str = "value"


def as_int(x: Any) -> int:
    """Integer from a SQL aggregate (int, numpy int, HUGEINT, integral Decimal/float)."""
    if type(x) is int:  # the usual case, first (an ABC check costs more than this test)
        return x
    if x is None:
        return 0
    if isinstance(x, (Integral, np.integer)):
        return int(x)
    if isinstance(x, (Decimal, float, np.floating, Fraction)) and x == int(x):
        return int(x)
    raise TypeError(f"expected an integer aggregate, got {x!r} (quantize values to integers)")


def tail_k(scale: RealLike, alpha: float) -> int:
    """Least k >= 0 with P[|DLap(scale)| > k] <= alpha (conservative above 1e6)."""
    t = float(scale)
    if t < 1e6:
        return dlap_half_width(t, 1.0 - alpha)
    p = math.exp(-1.0 / t)
    # 2 p^(k+1)/(1+p) <= alpha  <=>  k + 1 >= t ln(2/(alpha(1+p))); float slack added
    return math.ceil(t * math.log(2.0 / (alpha * (1.0 + p))) * (1 + 1e-12)) + 1


class LevelHistogram:
    """Dense ``cnt[level-1, bucket]`` (int64) and ``sums`` (exact Python ints).

    Missing (level, bucket) pairs are zeros -- empty levels are never skipped.
    """

    def __init__(self, L: int, B: int = 0) -> None:
        self.L, self.B = L, B
        self.cnt = np.zeros((L, B + 1), dtype=np.int64)
        self.sums = np.zeros((L, B + 1), dtype=object)
        self.sums[:] = 0

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[Any]], L: int, B: int | None = None) -> LevelHistogram:
        """Rows as SQL returns them: ``(lvl, cnt)``, ``(lvl, cnt, sum)`` (B None) or
        ``(lvl, b, cnt, sum)`` (B given).  Duplicate keys are added up."""
        h = cls(L, B or 0)
        for row in rows:
            if B is None:
                lvl, b, rest = row[0], 0, row[1:]
            else:
                lvl, b, rest = row[0], row[1], row[2:]
            lvl, b = as_int(lvl), as_int(b)
            if not (1 <= lvl <= L and 0 <= b <= h.B):
                raise ValueError(f"row outside the public grid: level {lvl}, bucket {b}")
            c = as_int(rest[0])
            if c < 0:
                raise ValueError("negative count")
            h.cnt[lvl - 1, b] += c
            if len(rest) > 1:
                h.sums[lvl - 1, b] += as_int(rest[1])
        return h

    @classmethod
    def from_level_counts(cls, counts: Mapping[int, int] | Sequence[int], L: int) -> LevelHistogram:
        items = counts.items() if isinstance(counts, Mapping) else enumerate(counts, start=1)
        return cls.from_rows(((k, v) for k, v in items), L)

    def level_counts(self) -> list[int]:
        return [int(x) for x in self.cnt.sum(axis=1)]

    def level_sums(self) -> list[int]:
        return [int(sum(row)) for row in self.sums]


def first_passing(noisy: Sequence[Any], thresholds: Sequence[Any]) -> int:
    """Alg. 1 lines 6-10: the first 1-based i with noisy_i >= T_i; L if none."""
    for i, (c, t) in enumerate(zip(noisy, thresholds), start=1):
        if c >= t:
            return i
    return len(noisy)


class LevelScan:
    """Per-level discrete Laplace + first-pass scan (Alg. 1 / extension / Alg. 2 stage 1).

    ``sens[i]``: the largest change one record of level i+1 makes to its value;
    ``frac``: fraction of lo_i spent (1, or 1/2 in Alg. 2); ``beta``: total failure
    probability of the good event (split evenly over the L levels).
    """

    def __init__(self, lo: np.ndarray, sens: Sequence[int], frac: Fraction, beta: float) -> None:
        self.L = len(lo)
        self.frac, self.beta = Fraction(frac), float(beta)
        self.eps = [self.frac * Fraction(float(x)) for x in lo]  # exact per-level loss
        self.sens = [int(s) for s in sens]
        self.scales = [Fraction(s) / e if s > 0 else None for s, e in zip(self.sens, self.eps)]
        a = self.beta / self.L
        self.k = [tail_k(sc, a) if sc is not None else 0 for sc in self.scales]
        self.T = [k + 1 for k in self.k]
        self.paper_T = [
            float(sc) * math.log(self.L / self.beta) if sc is not None else 0.0 for sc in self.scales
        ]

    def noisy(self, values: Sequence[int], source: RandomSource | None) -> list[int]:
        """All L noisy values, drawn before any comparison (spec 11.22)."""
        src = source if source is not None else default_source()
        return [
            int(v) + (discrete_laplace(sc, src) if sc is not None else 0)
            for v, sc in zip(values, self.scales)
        ]

    def run(self, values: Sequence[int], source: RandomSource | None) -> tuple[int, list[int]]:
        if len(values) != self.L:
            raise ValueError(f"need {self.L} per-level values, got {len(values)}")
        noisy = self.noisy(values, source)
        return first_passing(noisy, self.T), noisy

    def level_epsilon(self, lvl: ArrayLike, sens: ArrayLike | None = None) -> np.ndarray:
        """Privacy loss of a record in level ``lvl`` with sensitivity ``sens`` (default sens_i)."""
        la = np.asarray(lvl)
        s = np.array([float(x) if x is not None else np.inf for x in self.scales])[la - 1]
        d = np.array(self.sens, dtype=float)[la - 1] if sens is None else np.asarray(sens, float)
        return np.where(d == 0, 0.0, d / s)
