"""Per-record LOCAL DP (paper section 7, Algorithms 3-5; spec 7).

Algorithm 3 (randomizer, run by each party on its own record): for every level i
send 1[r in X_i] + DLap(1/(frac lo_i)) -- all L numbers, always (the dummy record
bottom is in no level).  r <-> bottom changes one coordinate by 1, costing
frac * lo_lvl(r) <= frac * E(r) (parallel composition across coordinates).
Exact discrete noise, so reports are integers.

Algorithm 4 (analyzer): C~_i = sum_j Y_{j,i}; T_i = sqrt(c n) (1/(frac lo_i)) ln(L/beta)
with c = ``c_ldp`` (paper: 8; spec 7.2 / 11.15: 2 reproduces Table 4); ell = first
i with C~_i >= T_i (default L); output sum_{i>=ell} C~_i.  n (the number of
parties) is public in LDP.  Thm 7.3: err = O(sqrt(n)/eps_min log(log(R)/beta)).

Algorithm 5 (general PrLDP): round I = Algorithms 3-4 with E/2 and beta/2 -> ell;
round II: a party participates iff E(r) >= eps_tau (else sends for bottom) and runs
an eps_tau/2-LDP randomizer; here the count instance (indicator + DLap(2/eps_tau)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from ..rng import RandomSource, default_source
from ..samplers import discrete_laplace
from .core import PrRelease, first_passing
from .levels import Levels

__all__ = ["PrLDPCount", "PrLDPFramework"]


class PrLDPCount:
    """Algorithms 3 + 4.  ``frac`` = share of E used (1; 1/2 inside Algorithm 5)."""

    name = "prldp_count"

    def __init__(
        self, levels: Levels, beta: float = 0.1, c_ldp: float = 8.0, frac: Fraction = Fraction(1)
    ) -> None:
        if not 0 < beta < 1 or c_ldp <= 0:
            raise ValueError("need 0 < beta < 1 and c_ldp > 0")
        self.levels, self.beta, self.c_ldp = levels, float(beta), float(c_ldp)
        self.eps = [Fraction(frac) * Fraction(float(x)) for x in levels.lo]
        self.scales = [1 / e for e in self.eps]

    def randomize(self, e: float | None, source: RandomSource | None = None) -> list[int]:
        """Algorithm 3 on a record with budget ``e`` (None = the dummy record)."""
        src = source if source is not None else default_source()
        lvl = None if e is None else int(self.levels.level(e))
        return [
            (1 if lvl == i else 0) + discrete_laplace(sc, src) for i, sc in enumerate(self.scales, start=1)
        ]

    def record_epsilon(self, e: ArrayLike) -> np.ndarray:
        """Loss of r vs bottom: one coordinate moves by 1 at scale 1/(frac lo_lvl)."""
        out: np.ndarray = np.array([float(x) for x in self.eps])[self.levels.level(e) - 1]
        return out

    def thresholds(self, n: int) -> list[float]:
        a = math.sqrt(self.c_ldp * n) * math.log(self.levels.L / self.beta)
        return [a * float(sc) for sc in self.scales]

    def error_bound(self, eps_min_D: float, n: int) -> float:
        """Spec 8: err <= 8 sqrt(c n) ln(L/beta)/eps_min(D) (given the noise-sum tails hold)."""
        return 8 * math.sqrt(self.c_ldp * n) * math.log(self.levels.L / self.beta) / eps_min_D

    def select(self, column_sums: Sequence[int], n: int) -> tuple[int, list[int]]:
        if len(column_sums) != self.levels.L:
            raise ValueError(f"need {self.levels.L} column sums")
        sums = [int(s) for s in column_sums]
        return first_passing(sums, self.thresholds(n)), sums

    def analyze(self, column_sums: Sequence[int], n: int) -> PrRelease:
        """Algorithm 4 on the column sums of the n parties' reports."""
        ell, sums = self.select(column_sums, n)
        T = self.thresholds(n)
        return PrRelease(
            value=sum(sums[ell - 1 :]),
            epsilon=float(max(self.eps)),
            half_width=2 * sum(T[ell - 1 :]),
            mechanism=self.name,
            scale=float(self.scales[ell - 1]),
            eps_tau=float(self.levels.lo[ell - 1]),
            ell=ell,
            beta=self.beta,
            noise_half_width=sum(T[ell - 1 :]),
        )


class PrLDPFramework:
    """Algorithm 5 with a count as the round-II protocol."""

    name = "prldp_framework_count"

    def __init__(self, levels: Levels, beta: float = 0.1, c_ldp: float = 8.0) -> None:
        self.levels, self.beta = levels, float(beta)
        self.round1 = PrLDPCount(levels, beta / 2, c_ldp, Fraction(1, 2))

    def round1_select(self, column_sums: Sequence[int], n: int) -> int:
        return self.round1.select(column_sums, n)[0]

    def round2_epsilon(self, ell: int) -> Fraction:
        return Fraction(float(self.levels.lo[ell - 1])) / 2

    def participates(self, e: float, ell: int) -> bool:
        """Round II filter "E(r) >= eps_tau" (spec 7.3)."""
        return float(e) >= float(self.levels.lo[ell - 1])

    def round2_randomize(self, e: float | None, ell: int, source: RandomSource | None = None) -> int:
        src = source if source is not None else default_source()
        bit = 1 if (e is not None and self.participates(e, ell)) else 0
        return bit + discrete_laplace(1 / self.round2_epsilon(ell), src)

    def record_epsilon(self, e: ArrayLike) -> np.ndarray:
        """Round I lo_lvl/2 + worst round II eps_tau/2 over ell with lo_ell <= e."""
        ea = np.asarray(e, dtype=np.float64)
        lo = self.levels.lo
        top = lo[np.searchsorted(lo, ea, side="right") - 1]
        out: np.ndarray = self.round1.record_epsilon(ea) + top / 2
        return out

    def analyze(self, ell: int, round2_sum: int, n: int) -> PrRelease:
        eps = float(self.round2_epsilon(ell))
        hw = math.sqrt(2 * n / self.beta) / eps  # Chebyshev: Var(sum) <= n 2/eps^2
        return PrRelease(
            value=int(round2_sum),
            epsilon=float(self.record_epsilon(self.levels.eps_max)),
            half_width=hw,
            mechanism=self.name,
            scale=1 / eps,
            eps_tau=float(self.levels.lo[ell - 1]),
            ell=ell,
            beta=self.beta,
            noise_half_width=hw,
        )
