"""SVT-Exp: sparse vector technique with exponential query noise (Liu et al. 2024, Alg. 2, Thm. 3;
SVT spec Sec. 2.1-2.5, 3.1).

rho ~ Lap(b), b = Delta/eps1 (threshold noise, drawn once; per positive with RESAMPLE);
v_i ~ Exp(scale theta), theta = s c Delta/eps2, s = 2 (general) or 1 (monotone queries, App. B);
answer top iff q_i + v_i >= T_i + rho + r, r = public correction (r_op of Eq. 9 by default).
Privacy map (Thm. 3): eps1 + eps2 (RESAMPLE=False) or c eps1 + eps2 (RESAMPLE=True), times d_in
(group privacy); it is computed from the scales actually used, so a wrong scale shows in the map.
The cost never depends on how many candidates passed, on k_max or on the number of passes.

Two noise paths: ``exact=True`` (serving) uses exact integer DLap / geometric noise on integer
inputs (see :mod:`.exact`); ``exact=False`` uses real-valued numpy noise from
``source.generator()`` (the paper's mechanism; float noise, only comparison bits are released --
SVT spec Sec. 6 item 20: this helps but is not a proof against floating-point attacks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from ..measurements import Release, as_epsilon
from ..rng import RandomSource, default_source
from ..samplers import discrete_laplace
from ..scalars import RealLike
from .correction import correction_term
from .engine import Transcript, run_passes
from .exact import geometric
from .gamma import allocation_ratio

__all__ = ["SvtExp", "shuffle_order"]

_EPS1_GRID = 2**40  # eps1 is rounded DOWN to a multiple of 2^-40 (exact Fractions)


def shuffle_order(n: int, source: RandomSource) -> np.ndarray:
    """Uniform permutation of range(n) by Fisher-Yates on ``source.randbelow`` (CSPRNG when
    serving): a data-independent query order (SVT spec Sec. 6 item 21)."""
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = source.randbelow(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return np.asarray(perm, dtype=np.int64)


class SvtExp:
    """SVT-Exp measurement (Alg. 2). ``epsilon`` is the total charged (Thm. 3).

    Parameters: cutoff ``c``; per-query ``sensitivity`` Delta (an int when ``exact``);
    ``monotone`` (only for queries that move in one direction on every neighbouring pair, App. A);
    ``resample`` (Dwork et al.; cost c eps1 + eps2); ``k`` (assumed negatives per positive in
    Eq. 8; default floor(n/c) at run time); ``alpha`` (Eq. 7 tolerance); ``correction``:
    'optimal' | 'numerical' | 'mean' | 'none' | a public number; ``w`` = eps2/eps1' overrides the
    Table 4/6 split (eps1' = total threshold budget)."""

    name = "svt_exp"

    def __init__(
        self,
        epsilon: RealLike,
        c: int,
        sensitivity: RealLike = 1,
        *,
        monotone: bool = False,
        resample: bool = False,
        k: int | None = None,
        alpha: float = 0.0,
        correction: str | float = "optimal",
        w: float | None = None,
        exact: bool = False,
    ) -> None:
        eps = as_epsilon(epsilon)
        if isinstance(c, bool) or int(c) != c or c < 1:
            raise ValueError(f"c must be an integer >= 1, got {c!r}")
        self.c, self.monotone, self.resample, self.exact = int(c), bool(monotone), bool(resample), bool(exact)
        if exact:
            if isinstance(sensitivity, bool) or int(sensitivity) != sensitivity or sensitivity < 1:
                raise ValueError("exact path needs an integer sensitivity >= 1 (grid units)")
            self.sensitivity = Fraction(int(sensitivity))
        else:
            self.sensitivity = Fraction(float(sensitivity))
            if not self.sensitivity > 0:
                raise ValueError(f"sensitivity must be > 0, got {sensitivity!r}")
        self.shift = 1 if self.monotone else 2  # s in theta = s c Delta/eps2
        n_rho = self.c if self.resample else 1  # threshold draws paid for
        if w is None:
            w = allocation_ratio(self.c, "exp", self.monotone, self.resample)
        e1 = Fraction(math.floor(float(eps) / (1 + w) / n_rho * _EPS1_GRID), _EPS1_GRID)
        e2 = eps - n_rho * e1
        if e1 <= 0 or e2 <= 0:
            raise ValueError("epsilon too small to split between threshold and queries")
        self.epsilon1, self.epsilon2 = e1, e2
        self.b = self.sensitivity / e1  # Laplace scale, Eq. 15
        self.theta = self.shift * self.c * self.sensitivity / e2  # Exp scale 1/lambda, Thm. 3
        self.k, self.alpha, self.correction = k, float(alpha), correction

    # ---------------------------------------------------------------- privacy map (Thm. 3)
    def privacy_map_exact(self, d_in: int) -> Fraction:
        """eps at add-remove distance d_in: d_in (n_rho Delta/b + s c Delta/theta)."""
        if int(d_in) != d_in or d_in < 0:
            raise ValueError(f"d_in must be an integer >= 0, got {d_in!r}")
        n_rho = self.c if self.resample else 1
        return d_in * (
            n_rho * self.sensitivity / self.b + self.shift * self.c * self.sensitivity / self.theta
        )

    def privacy_map(self, d_in: int) -> float:
        return float(self.privacy_map_exact(d_in))

    @property
    def epsilon(self) -> float:
        return self.privacy_map(1)

    def correction_for(self, n: int) -> float:
        """Public correction r for n candidates (k = floor(n/c) unless given); rounded to an int
        on the exact path. Depends on (b, theta, k, alpha) only, never on data."""
        k = self.k if self.k is not None else max(n // self.c, 1)
        r = correction_term(self.correction, float(self.b), float(self.theta), k, self.alpha)
        return int(round(r)) if self.exact else r

    # ---------------------------------------------------------------- running
    def run(
        self,
        values: Sequence[Any],
        thresholds: Any,
        source: RandomSource | None = None,
        *,
        max_passes: int = 1,
        k_max: int | None = None,
        order: np.ndarray | None = None,
    ) -> Transcript:
        """Alg. 2 with APPEND as ``max_passes`` passes; ``thresholds`` scalar or per candidate.
        ``order``: a data-independent permutation (default: shuffled with ``source``)."""
        src = source if source is not None else default_source()
        n = len(values)
        if n == 0:
            return Transcript([], 0, 0, "exhausted", [])
        thr = list(thresholds) if np.ndim(thresholds) else [thresholds] * n
        if len(thr) != n:
            raise ValueError("need one threshold per candidate")
        if order is None:
            order = shuffle_order(n, src)
        r = self.correction_for(n)
        k_max = max_passes * n if k_max is None else int(k_max)
        draw_rho: Callable[[], Any]
        draw_noise: Callable[[int], np.ndarray]
        if self.exact:
            vals = np.array([int(v) for v in values], dtype=object)
            tarr = np.array([int(t) for t in thr], dtype=object)
            b, th = self.b, self.theta

            def draw_rho() -> int:
                return discrete_laplace(b, src)

            def draw_noise(m: int) -> np.ndarray:
                return np.array([geometric(th, src) for _ in range(m)], dtype=object)
        else:
            vals, tarr = np.asarray(values, dtype=float), np.asarray(thr, dtype=float)
            gen = src.generator()
            bf, thf = float(self.b), float(self.theta)
            draw_rho = lambda: gen.laplace(0.0, bf)  # noqa: E731
            draw_noise = lambda m: gen.exponential(thf, m)  # noqa: E731
        return run_passes(
            vals,
            tarr,
            order,
            c=self.c,
            r=r,
            draw_rho=draw_rho,
            draw_noise=draw_noise,
            max_passes=max_passes,
            k_max=k_max,
            resample=self.resample,
        )

    def release(
        self, values: Sequence[Any], thresholds: Any, source: RandomSource | None = None, **kw: Any
    ) -> Release:
        """Release the sorted positions answered top. No numeric value is released, so
        ``half_width`` is NaN; ``scale`` is the Exp scale theta."""
        t = self.run(values, thresholds, source, **kw)
        return Release(tuple(sorted(t.selected)), self.epsilon, math.nan, self.name, float(self.theta))

    def params(self) -> dict[str, Any]:
        """Public parameters to log with each answer (SVT spec Sec. 7.4)."""
        return {
            "c": self.c,
            "sensitivity": float(self.sensitivity),
            "monotone": self.monotone,
            "resample": self.resample,
            "epsilon1": float(self.epsilon1),
            "epsilon2": float(self.epsilon2),
            "b": float(self.b),
            "theta": float(self.theta),
            "exact": self.exact,
            "alpha": self.alpha,
            "correction": self.correction,
        }

    def __repr__(self) -> str:
        return (
            f"SvtExp(epsilon={self.epsilon}, c={self.c}, monotone={self.monotone}, "
            f"resample={self.resample}, exact={self.exact})"
        )
