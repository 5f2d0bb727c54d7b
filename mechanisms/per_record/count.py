"""Algorithm 1 (PrDP Count, paper section 5.1; spec 3) and the PrDP sum
extension (paper section 5.2, Appendix A; spec 4).

Input is what ONE backend scan returns (``GROUP BY level``): per-level exact
counts (and, for the sum, per-level sums of the quantized values v in [0, U]);
levels with no rows are zeros and are noised like every other level.

Privacy (parallel composition over the disjoint domains, Lemma 3.11): a record
of level i changes only level i's value, by 1 (count) or by v <= V_i (sum),
and level i's noise is DLap(1/lo_i) resp. DLap(V_i/lo_i), so it costs at most
lo_i <= E(r).  ``record_epsilon`` computes exactly that from the scales used.

``weight`` w (default 1) answers under E_q = w * E (a query's share, spec 11.21):
levels are still assigned by E, every level's budget becomes w * lo_i (an exact
rational, no rounding) and eps_tau is reported on the E_q scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from ..rng import RandomSource
from ..scalars import RealLike
from .core import LevelHistogram, LevelScan, PrRelease, as_int
from .levels import Levels
from .privacy import PrivacyFunction

__all__ = ["PrDPCount", "ExtensionSum"]

Counts = LevelHistogram | Mapping[int, int] | Sequence[int]


def exact_weight(w: RealLike) -> Fraction:
    """The exact rational value of the weight (a float is taken at its binary value)."""
    f = Fraction(w) if isinstance(w, Fraction) else Fraction(float(w))
    if not (f > 0 and float(f) < float("inf")):
        raise ValueError(f"weight must be positive and finite, got {w!r}")
    return f


def _hist(x: Counts, L: int) -> LevelHistogram:
    return x if isinstance(x, LevelHistogram) else LevelHistogram.from_level_counts(x, L)


class _ScanMechanism:
    """Shared release logic: noisy levels, first pass, sum of levels >= ell."""

    name = "prdp"
    scan: LevelScan
    levels: Levels
    weight: Fraction = Fraction(1)

    @property
    def epsilon(self) -> float:
        """Largest per-record charge (a record of the top level)."""
        return float(max(self.scan.eps))

    def error_bound(self, k: int) -> int:
        """Guaranteed |error| at 1 - beta when level k holds eps_min(D) (count) / is the
        first non-empty level (sum): skipped levels i in [k, ell) hold <= 2 k_i
        (their noisy value missed T_i = k_i + 1 on G), kept ones add <= k_i of noise:
        err <= sum_{i>=k} 2 k_i  (~ 4 T_k, Thm 5.1 / Eq. (9), spec 3.3)."""
        return 2 * sum(self.scan.k[k - 1 :])

    def _release(self, values: Sequence[int], source: RandomSource | None) -> PrRelease:
        ell, noisy = self.scan.run(values, source)
        value = sum(noisy[ell - 1 :])
        sc = self.scan.scales[ell - 1]
        return PrRelease(
            value=value,
            epsilon=self.epsilon,
            half_width=float(self.error_bound(ell)),
            mechanism=self.name,
            scale=float(sc) if sc is not None else 0.0,
            eps_tau=float(self.weight * Fraction(float(self.levels.lo[ell - 1]))),
            ell=ell,
            beta=self.scan.beta,
            noise_half_width=float(sum(self.scan.k[ell - 1 :])),
        )


class PrDPCount(_ScanMechanism):
    """Algorithm 1: c~_i = c_i + DLap(1/lo_i) for all i; ell = first i with c~_i >= T_i
    (default L); output sum_{i>=ell} c~_i (an int) and eps_tau = lo_ell.

    Thm 5.1: w.p. >= 1 - beta, eps_tau >= eps_min(D)/2 and |err| <= 8 ln(L/beta)/eps_min(D)
    (+ <= 2L for the integer thresholds); ``error_bound`` gives the exact discrete form.
    """

    name = "prdp_count"

    def __init__(self, levels: Levels, beta: float = 0.1, weight: float = 1.0) -> None:
        if not 0 < beta < 1:
            raise ValueError("beta must be in (0, 1)")
        self.levels = levels
        self.weight = exact_weight(weight)
        self.scan = LevelScan(levels.lo, [1] * levels.L, self.weight, beta)

    def record_epsilon(self, e: ArrayLike) -> np.ndarray:
        """eps spent on a record with budget ``e`` (= lo_lvl(e) <= e)."""
        return self.scan.level_epsilon(self.levels.level(e))

    def release(self, level_counts: Counts, source: RandomSource | None = None) -> PrRelease:
        """``level_counts``: {level: COUNT(*)} (or a LevelHistogram); missing levels = 0."""
        return self._release(_hist(level_counts, self.levels.L).level_counts(), source)


class ExtensionSum(_ScanMechanism):
    """PrDP sum extension (section 5.2, App. A) for single-column monotone E:
    s~_i = s_i + DLap(b_i), b_i = V_i/lo_i, V_i = E^{-1}(lo_i) = the largest integer
    v in [0, U] with E(v) >= lo_i (the max over the whole domain X_i, never over the
    data, spec 11.6); T_i ~ b_i ln(L/beta); output sum_{i>=ell} s~_i (an int).
    Inverse E: b_i = alpha/lo_i^2.  Non-monotone E: pass ``monotone=False`` (V_i = U).

    Values must be integers in [0, U] (SQL: the clamped, rounded value; negative
    values need the split of spec 11.20).  Eq. (9): |err| <= ``error_bound(k)``.
    """

    name = "prdp_sum_extension"

    def __init__(
        self,
        pf: PrivacyFunction,
        beta: float = 0.1,
        levels: Levels | None = None,
        monotone: bool | None = None,
        weight: float = 1.0,
    ) -> None:
        if not 0 < beta < 1:
            raise ValueError("beta must be in (0, 1)")
        self.pf = pf
        self.weight = exact_weight(weight)
        self.levels = levels or Levels.for_function(pf)
        mono = pf.monotone if monotone is None else monotone
        U = pf.U
        self.V = [
            U if (not mono or i == 0) else min(U, max(0, pf.max_value(lo)))
            for i, lo in enumerate(self.levels.lo)
        ]
        self.scan = LevelScan(self.levels.lo, self.V, self.weight, beta)

    @property
    def b(self) -> list[float]:
        return [float(s) if s is not None else 0.0 for s in self.scan.scales]

    def record_epsilon(self, v: ArrayLike) -> np.ndarray:
        """eps spent on a record with (quantized) value ``v``: contrib / b_lvl <= E(v)."""
        v = np.asarray(v, dtype=np.float64)
        lvl = self.levels.level(self.pf(v))
        contrib = np.clip(v, 0, self.pf.U)
        return self.scan.level_epsilon(lvl, sens=contrib)

    def release(
        self, hist: LevelHistogram | Mapping[int, int] | Sequence[int], source: RandomSource | None = None
    ) -> PrRelease:
        """``hist``: a LevelHistogram with sums, or {level: SUM(v)}; missing levels = 0."""
        if isinstance(hist, LevelHistogram):
            sums = hist.level_sums()
        else:
            items = hist.items() if isinstance(hist, Mapping) else enumerate(hist, start=1)
            sums = [0] * self.levels.L
            for k, s in items:
                if not 1 <= int(k) <= self.levels.L:
                    raise ValueError(f"level {k} outside 1..{self.levels.L}")
                sums[int(k) - 1] += as_int(s)
        if any(s < 0 for s in sums):
            raise ValueError("negative level sum: values must lie in [0, U]")
        return self._release(sums, source)
