"""Baselines of Table 3 (SVT spec Sec. 4), real-valued noise, for the benchmark only (not for serving).

All share Alg. 2's loop (:func:`mechanisms.svt.engine.run_passes`, RESAMPLE=False, APPEND as passes):

| name      | threshold noise | query noise (s = 2 general, 1 monotone) | r            | w          |
| exp_opt   | Lap(D/eps1)     | Exp(scale s c D/eps2)                   | r_op (Eq. 9) | Table 4/6  |
| exp_mean  | Lap(D/eps1)     | Exp(scale s c D/eps2)                   | theta        | Table 4/6  |
| exp_none  | Lap(D/eps1)     | Exp(scale s c D/eps2)                   | 0            | Table 4/6  |
| gum       | Lap(D/eps1)     | Gumbel(0, s c D/eps2)  (Alg. 5)         | gamma_E beta | Table 4/6  |
| lap       | Lap(D/eps1)     | Lap(s c D/eps2)        (Lyu et al.)     | 0            | (sc)^{2/3} |
| gau       | N(0,(aD/eps1)^2)| N(0,(a s c D/eps2)^2)  (App. G.4)       | 0            | (sc)^{2/3} |

SVT-Gau: a = sqrt(2 ln(1.25/delta)) (classic Gaussian mechanism; the paper gives no a, SVT spec
Sec. 4, item 17), (eps, delta)-DP only, with the usual eps <= 1 caveat. The exp variants take their
scales from :class:`mechanisms.svt.svt_exp.SvtExp`, so the benchmark runs the real parameterisation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mechanisms.svt.engine import Transcript, run_passes
from mechanisms.svt.gamma import allocation
from mechanisms.svt.svt_exp import SvtExp

__all__ = ["Variant", "make_variant", "VARIANTS"]

VARIANTS = ("exp_opt", "exp_mean", "exp_none", "lap", "gum", "gau")
EULER_GAMMA = 0.5772156649015329


@dataclass(frozen=True)
class Variant:
    """A fully parameterised SVT variant: name, privacy cost (eps, delta), correction r, and
    numpy samplers for the threshold and query noise."""

    name: str
    epsilon: float
    delta: float
    c: int
    r: float
    rho: Callable[[np.random.Generator], float]
    noise: Callable[[np.random.Generator, int], np.ndarray]

    def run(
        self, values, thresholds, gen: np.random.Generator, order, max_passes: int, k_max: int | None = None
    ) -> Transcript:
        n = len(values)
        return run_passes(
            np.asarray(values, float),
            np.asarray(thresholds, float),
            order,
            c=self.c,
            r=self.r,
            draw_rho=lambda: self.rho(gen),
            draw_noise=lambda m: self.noise(gen, m),
            max_passes=max_passes,
            k_max=max_passes * n if k_max is None else k_max,
        )


def make_variant(
    name: str,
    epsilon: float,
    c: int,
    k: int,
    sensitivity: float = 1.0,
    monotone: bool = False,
    delta: float = 1e-6,
) -> Variant:
    """Build one Table 3 variant at total budget ``epsilon`` (RESAMPLE=False)."""
    s = 1 if monotone else 2
    if name.startswith("exp_"):
        kind = {"exp_opt": "optimal", "exp_mean": "mean", "exp_none": "none"}[name]
        m = SvtExp(epsilon, c, sensitivity, monotone=monotone, k=k, correction=kind)
        b, th = float(m.b), float(m.theta)
        return Variant(
            name,
            m.epsilon,
            0.0,
            c,
            m.correction_for(k * c),
            lambda g: g.laplace(0.0, b),
            lambda g, n: g.exponential(th, n),
        )
    fam = {"lap": "lap", "gum": "gum", "gau": "gau"}[name]
    e1, e2 = allocation(epsilon, c, fam, monotone)
    b, beta = sensitivity / e1, s * c * sensitivity / e2
    if fam == "lap":
        return Variant(
            name, epsilon, 0.0, c, 0.0, lambda g: g.laplace(0.0, b), lambda g, n: g.laplace(0.0, beta, n)
        )
    if fam == "gum":
        return Variant(
            name,
            epsilon,
            0.0,
            c,
            EULER_GAMMA * beta,
            lambda g: g.laplace(0.0, b),
            lambda g, n: g.gumbel(0.0, beta, n),
        )
    a = math.sqrt(2 * math.log(1.25 / delta))
    return Variant(
        name, epsilon, delta, c, 0.0, lambda g: g.normal(0.0, a * b), lambda g, n: g.normal(0.0, a * beta, n)
    )
