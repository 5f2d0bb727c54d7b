"""Exact integer noise and grid snapping for the serving path of SVT-Exp (SVT spec Sec. 6 item 20).

The paper analyses real-valued noise. Serving uses its exact discrete analogue [ours]:
threshold noise rho ~ DLap(b) (:func:`mechanisms.samplers.discrete_laplace`) and query noise
v ~ Geometric on {0, 1, ...} with P[v = j] proportional to exp(-j/theta), on integer values and
thresholds. The proof of Thm. 2/3 goes through verbatim on the integers: the DLap pmf ratio under a
shift Delta is <= e^{Delta/b} (Eq. 4 / 15) and the geometric survival P[v >= x] = exp(-max(x,0)/theta)
(integer x) has ratio <= e^{s Delta/theta} under a shift s Delta (Eq. 5 / 23, 29); ties q + v = T + rho + r
are decided as top (the comparison is >=). Nothing here uses floating point.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from ..rng import RandomSource
from ..samplers import bernoulli_exp
from ..scalars import RationalLike

__all__ = ["geometric", "snap_grid", "to_grid"]


def geometric(scale: RationalLike, source: RandomSource) -> int:
    """Exact one-sided geometric draw: P[Y = y] proportional to exp(-y/scale), y >= 0.

    Steps 1-3 of Canonne-Kamath-Steinke 2020 Alg. 2 (as in ``discrete_laplace``, without the sign):
    with scale = t/s, U ~ Unif{0..t-1} accepted w.p. exp(-U/t), V ~ Geom(ratio e^-1), X = U + tV has
    P[X = x] proportional to exp(-x/t), and Y = floor(X/s) has ratio exp(-s/t) = exp(-1/scale)."""
    sc = Fraction(scale)
    if sc <= 0:
        raise ValueError(f"scale must be > 0, got {sc}")
    t, s = sc.numerator, sc.denominator
    while True:
        u = source.randbelow(t)
        if bernoulli_exp(Fraction(u, t), source):
            break
    v = 0
    while bernoulli_exp(1, source):
        v += 1
    return (u + t * v) // s


def _is_integral(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return True
    if isinstance(x, numbers.Rational):
        return Fraction(x).denominator == 1
    try:
        xf = float(x)
    except (TypeError, ValueError):
        return False
    return math.isfinite(xf) and xf.is_integer()


def snap_grid(values: Iterable[Any], thresholds: Iterable[Any], sensitivity: Any) -> Fraction:
    """Grid g: 1 if values, thresholds and sensitivity are all integers (COUNT), otherwise a power
    of two with sensitivity/g in [2^10, 2^11), so x/g is exact in binary (as in ``LaplaceSum``)."""
    if (
        all(_is_integral(v) for v in values)
        and all(_is_integral(t) for t in thresholds)
        and _is_integral(sensitivity)
    ):
        return Fraction(1)
    return Fraction(2) ** (math.frexp(float(sensitivity))[1] - 11)


def to_grid(
    values: Iterable[Any], thresholds: Iterable[Any], sensitivity: Any, strict: bool, grid: Fraction
) -> tuple[list[int], list[int], int]:
    """(values_g, thresholds_g, sensitivity_g) as Python ints in grid units.

    values: round(q/g) (monotone, so monotone shifts stay monotone); sensitivity:
    floor(Delta/g) + 1 when g != 1, since |round(a) - round(b)| <= floor(|a-b|) + 1;
    thresholds: q >= T  ->  q_g >= ceil(T/g);  q > T  ->  q_g >= floor(T/g) + 1 (exact for integers,
    within one grid unit otherwise)."""

    def exact(x: Any) -> Fraction:
        return Fraction(x) if isinstance(x, (int, numbers.Rational)) else Fraction(float(x))

    vg = [round(exact(v) / grid) for v in values]
    tg = [(math.floor(exact(t) / grid) + 1) if strict else math.ceil(exact(t) / grid) for t in thresholds]
    d = exact(sensitivity) / grid
    dg = int(d) if grid == 1 else math.floor(d) + 1
    return vg, tg, dg
