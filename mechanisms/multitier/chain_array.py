"""The tsg chain of Alg. 1 drawn for many cells at once (multi-tier spec sections 2.3, 3.1).

A data-market ladder releases every cell at every tier level: the root q + TSG(a_0) and, per
lower level, the Eq. (1) residual -- 0 with probability w0 = e^-(a-b) r^2,
r = (1 - e^-b)/(1 - e^-a), else a fresh TSG(e^-b) (a = eps_hi/Delta > b = eps_lo/Delta).
:func:`~.families.tsg_residual` draws one cell in pure Python (interpreter time per
cell and level); here the same law is drawn as numpy arrays over CSPRNG words, with exact integer
arithmetic only (:mod:`mechanisms.batch`, :mod:`mechanisms.exact_real`; no floating point,
Mironov 2012):

* Bernoulli(e^-c), c rational: U < e^-c by U's first 32 bits against an integer interval of
  2^32 e^-c; undecided rows (probability <= 3 * 2^-32) read more bits of the same U.
* Bernoulli(r): the same comparison against an interval of 2^prec r computed from intervals
  of e^-a and e^-b with enough guard bits (:func:`ratio_interval`).
* w0 is the product of three independent coins, e^-(a-b), r and r -- as the scalar draws it;
  the rows not at 0 get a discrete Laplace of scale 1/b
  (:func:`~mechanisms.batch.discrete_laplace_array`).

Cells are independent, so a batch of n cells has the law of n scalar chains (the bytes are
read in another order: the law is the same, not the stream).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import lru_cache, partial

import numpy as np

from ..batch import Interval, below_array, discrete_laplace_array, fits_int64
from ..exact_real import exp_neg_interval
from ..rng import RandomSource

__all__ = [
    "ratio_interval",
    "bernoulli_exp_array",
    "bernoulli_ratio_array",
    "tsg_residual_array",
    "tsg_chain_array",
    "chain_fits",
    "INT_ROOM",
]

INT_ROOM = 1 << 61
"""|true value| below this: a chain's int64 sums cannot overflow (noise beyond 2^60 grid units
has probability far below 2^-64 at any scale :func:`~mechanisms.batch.fits_int64` admits)."""


@lru_cache(maxsize=4096)
def ratio_interval(an: int, ad: int, bn: int, bd: int, prec: int) -> tuple[int, int]:
    """(lo, hi) with lo <= 2^prec r <= hi, r = (1 - e^-b)/(1 - e^-a), a = an/ad > b = bn/bd > 0.

    From intervals of 2^g e^-a and 2^g e^-b (width <= 3 each): r decreases in e^-b and
    increases in e^-a, so the interval's ends bound it. g = prec + 8 + k with
    2^-k < a/(1 + a) <= 1 - e^-a keeps the denominator above 2^(prec+8) units, so the width
    is a few units of 2^-prec."""
    k = (ad // an + 2).bit_length()
    g = prec + 8 + k
    la, ha = exp_neg_interval(an, ad, g)
    lb, hb = exp_neg_interval(bn, bd, g)
    one = 1 << g
    return ((one - hb) << prec) // (one - la), -((-((one - lb) << prec)) // (one - ha))


def _exp_threshold(c: Fraction) -> Interval:
    """e^-c, c > 0, by its intervals (``interval(prec)``)."""
    return partial(exp_neg_interval, c.numerator, c.denominator)


def _ratio_threshold(a: Fraction, b: Fraction) -> Interval:
    """(1 - e^-b)/(1 - e^-a), a > b > 0, by its intervals."""
    return partial(ratio_interval, a.numerator, a.denominator, b.numerator, b.denominator)


def bernoulli_exp_array(size: int, c: Fraction, source: RandomSource) -> np.ndarray:
    """``size`` exact Bernoulli(e^-c) coins, rational c >= 0."""
    if c < 0:
        raise ValueError(f"c must be >= 0, got {c}")
    if c == 0:
        return np.ones(size, dtype=bool)
    return below_array(size, _exp_threshold(c), source)


def bernoulli_ratio_array(size: int, a: Fraction, b: Fraction, source: RandomSource) -> np.ndarray:
    """``size`` exact Bernoulli((1 - e^-b)/(1 - e^-a)) coins, a > b > 0."""
    if not a > b > 0:
        raise ValueError(f"need a > b > 0, got {a}, {b}")
    return below_array(size, _ratio_threshold(a, b), source)


def _coins(size: int, thresholds: Iterable[Interval], source: RandomSource) -> np.ndarray:
    """The AND of independent coins [U < x] (x by its interval), each drawn only for the rows
    still True (the others' value does not depend on it)."""
    out = np.ones(size, dtype=bool)
    live = np.arange(size)
    for draw in thresholds:
        if not live.size:
            break
        keep = below_array(live.size, draw, source)
        out[live[~keep]] = False
        live = live[keep]
    return out


def tsg_residual_array(size: int, a: Fraction, b: Fraction, source: RandomSource) -> np.ndarray:
    """``size`` independent Eq. (1) residuals TSG(e^-a) -> TSG(e^-b), a >= b > 0 (int64): the
    law of :func:`~.families.tsg_residual`."""
    if a < b:
        raise ValueError("residuals only go from a larger to a smaller eps")
    out = np.zeros(size, dtype=np.int64)
    if a == b or not size:
        return out
    ratio = _ratio_threshold(a, b)
    zero = _coins(size, (_exp_threshold(a - b), ratio, ratio), source)
    rest = np.flatnonzero(~zero)
    out[rest] = discrete_laplace_array(rest.size, 1 / b, source)
    return out


def chain_fits(values: np.ndarray, rates: Sequence[Fraction]) -> bool:
    """Whether :func:`tsg_chain_array` can draw this chain in int64."""
    if values.size and not (-INT_ROOM < int(values.min()) and int(values.max()) < INT_ROOM):
        return False
    return all(r > 0 and fits_int64(1 / r) for r in rates)


def tsg_chain_array(values: np.ndarray, rates: Sequence[Fraction], source: RandomSource) -> list[np.ndarray]:
    """Alg. 1 for every cell: the raw chain values at rates a_0 > a_1 > ... (eps/Delta, exact),
    one int64 array per level. ``values``: the exact integer roots q (int64)."""
    values = np.asarray(values, dtype=np.int64)
    if not chain_fits(values, rates):
        raise OverflowError("the chain does not fit int64: draw it cell by cell")
    out, prev = [], None
    for r in rates:
        if prev is None:
            cur = values + discrete_laplace_array(values.size, 1 / r, source)
        else:
            cur = out[-1] + tsg_residual_array(values.size, prev, r, source)
        out.append(cur)
        prev = r
    return out
