"""Exact exponential-mechanism choice: i with P(i) ∝ counts[i] · exp(−γ · powers[i]).

Used by the shifted-rank MAX / MIN (:func:`mechanisms.per_record.framework.shifted_rank_max`),
whose grid intervals have integer lengths (``counts``) and integer scores (``powers``,
|c(y) − k0|) with γ = ε/2. A float64 inverse CDF (log-sum-exp) never draws an interval of
relative weight below ~1e-16, which makes the mechanism (ε, ~1e-16)-DP rather than ε-DP;
here the law is exact for the rational γ (a float ε is the rational it denotes).

Method: the inverse CDF of a lazily read uniform U = 0.b1b2… (bits from the RandomSource).
The outcomes are put in one fixed order (by score, then index); every cumulative weight is
known only within rigorous bounds, U only to ``bits`` bits; an outcome is returned when
U · W provably lies in its cumulative interval for every admissible value, otherwise more
bits of U are read and the weights recomputed at a higher precision. The result is the
exact inverse-CDF image of U, so P(i) is exactly the weight ratio, whatever the rounding.

* First pass, float64 (vectorised): weights from b = exp(−γ) by binary powering; with
  IEEE-754 round-to-nearest every product and sum has relative error ≤ 2^-53, which bounds
  the cumulative weights within a factor 1 ± ρ (ρ below). Decides all but ~ n·ρ of draws.
* Then Decimal interval arithmetic (exp correctly rounded, products and sums rounded
  outwards), 40 digits, then doubling each round; a round is left undecided with
  probability about n·10^-digits.
* Outcomes with γ·(score − min) > 130 weigh < e^-130 · Σcounts in total: they are kept as
  one block of weight in [0, that bound] placed last (a suffix of the same order); landing
  on or near it sends the draw to the full expansion.
"""

from __future__ import annotations

import bisect
import decimal
import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .rng import RandomSource
from .scalars import RealLike

__all__ = ["exp_weighted_index"]

_CUT = 130  # γ·r beyond this: the tail block (e^-130 < 1e-56)
_TAIL = 1e-56
_U53 = 2.0**-53
_EMIN, _EMAX = decimal.MIN_EMIN, decimal.MAX_EMAX


def exp_weighted_index(counts: ArrayLike, powers: ArrayLike, gamma: RealLike, source: RandomSource) -> int:
    """Exact draw of i with P(i) ∝ counts[i] · exp(−gamma · powers[i]); counts >= 1 and
    powers >= 0 integers, gamma >= 0 rational (a float is taken as the rational it is)."""
    g = Fraction(gamma)
    if g < 0:
        raise ValueError(f"gamma must be >= 0, got {g}")
    c = np.asarray(counts, dtype=np.int64)
    p = np.asarray(powers, dtype=np.int64)
    if c.ndim != 1 or c.shape != p.shape or c.size == 0 or c.min() < 1 or p.min() < 0:
        raise ValueError("need counts >= 1 and powers >= 0, one each, at least one outcome")
    if c.size == 1:
        return 0
    r = p - p.min()
    order = np.argsort(r, kind="stable")  # the fixed order: by score, then index
    rs, cs = r[order], c[order]
    total = int(cs.sum())
    cut = min(math.floor(_CUT / g), int(rs[-1])) if g > 0 else None
    k = int(np.searchsorted(rs, cut, side="right")) if cut is not None else rs.size
    bits, u = 128, source.getrandbits(128)
    j = _float_pass(rs[:k], cs[:k], total - int(cs[:k].sum()), g, u, bits)
    digits = 40
    while j is None:  # rare: refine U and the precision
        u, bits = (u << 128) | source.getrandbits(128), bits + 128
        j = _decimal_pass(rs, cs, k, g, digits, u, bits)
        k, digits = rs.size, 2 * digits
    return int(order[j])


@functools.lru_cache(maxsize=256)
def _exp_neg(g: Fraction, digits: int) -> tuple[decimal.Decimal, decimal.Decimal]:
    """(lo, hi) with lo <= exp(−g) <= hi: g rounded outwards, Decimal's exp (correctly
    rounded, error <= 1/2 ulp) widened by two ulps each side."""
    ctx = decimal.Context(prec=digits + 5, Emin=_EMIN, Emax=_EMAX)
    num, den = decimal.Decimal(g.numerator), decimal.Decimal(g.denominator)
    g_lo = decimal.Context(prec=digits + 5, rounding=decimal.ROUND_FLOOR).divide(num, den)
    g_hi = decimal.Context(prec=digits + 5, rounding=decimal.ROUND_CEILING).divide(num, den)
    lo, hi = ctx.exp(-g_hi), ctx.exp(-g_lo)
    for _ in range(2):
        lo, hi = ctx.next_minus(lo), ctx.next_plus(hi)
    return max(lo, decimal.Decimal(0)), min(hi, decimal.Decimal(1))


def _decide(cum_lo: Any, cum_hi: Any, tail: bool, t_lo: Any, t_hi: Any) -> int | None:
    """Position j with cum_hi[j-1] <= t_lo and t_hi < cum_lo[j] (then U·W is in block j
    for every admissible weight), or None; the last block is the tail when ``tail``."""
    j = (
        int(np.searchsorted(cum_lo, t_hi, side="right"))
        if isinstance(cum_lo, np.ndarray)
        else bisect.bisect_right(cum_lo, t_hi)
    )
    if j >= len(cum_lo) or (tail and j == len(cum_lo) - 1) or (j > 0 and cum_hi[j - 1] > t_lo):
        return None
    return j


def _float_pass(
    rs: NDArray[np.int64], cs: NDArray[np.int64], rest: int, g: Fraction, u: int, bits: int
) -> int | None:
    """The float64 pass over the kept prefix (module docstring); None when undecided."""
    n = rs.size
    rmax = int(rs[-1])
    # relative error of each cumulative weight: b's own error (<= 2^-52, from a 40-digit exp)
    # amplified r times, the squarings' (2^k - 1)·u, <= 64 products, the count product and
    # the running sum (n·u); doubled for second-order terms.
    rho = 2 * (3 * rmax + n + 70) * _U53
    if rho > 1e-6:
        return None
    b_lo, b_hi = _exp_neg(g, 40)
    base = float((b_lo + b_hi) / 2)
    pw = np.ones(n)
    rr = rs.copy()
    while True:  # pw = b^r by binary powering
        odd = (rr & 1).astype(bool)
        pw[odd] *= base
        rr >>= 1
        if not rr.any():
            break
        base *= base
    cum = np.cumsum(cs.astype(np.float64) * pw)
    cum_lo, cum_hi = cum * (1 - 2 * rho), cum * (1 + 2 * rho)
    tail = rest > 0
    if tail:
        cum_lo = np.append(cum_lo, cum_lo[-1])
        cum_hi = np.append(cum_hi, (cum_hi[-1] + rest * _TAIL) * (1 + 4 * _U53))
    scale = 2.0**-bits
    t_lo = cum_lo[-1] * (float(u) * scale) * (1 - 4 * _U53)
    t_hi = cum_hi[-1] * (float(u + 1) * scale) * (1 + 4 * _U53)
    return _decide(cum_lo, cum_hi, tail, t_lo, t_hi)


def _decimal_pass(
    rs: NDArray[np.int64], cs: NDArray[np.int64], k: int, g: Fraction, digits: int, u: int, bits: int
) -> int | None:
    """Interval arithmetic in Decimal over the first ``k`` outcomes (the rest as one block)."""
    down = decimal.Context(prec=digits, rounding=decimal.ROUND_FLOOR, Emin=_EMIN, Emax=_EMAX)
    up = decimal.Context(prec=digits, rounding=decimal.ROUND_CEILING, Emin=_EMIN, Emax=_EMAX)
    b_lo, b_hi = _exp_neg(g, digits)
    D = decimal.Decimal
    cum_lo, cum_hi = [], []
    s_lo = s_hi = D(0)
    w_lo = w_hi = D(1)  # bounds on b^r at r = r_at
    r_at = 0
    for r, cnt in zip(rs[:k].tolist(), cs[:k].tolist()):
        if r != r_at:
            w_lo = down.multiply(w_lo, _power(b_lo, r - r_at, down))
            w_hi = up.multiply(w_hi, _power(b_hi, r - r_at, up))
            r_at = r
        s_lo = down.add(s_lo, down.multiply(D(cnt), w_lo))
        s_hi = up.add(s_hi, up.multiply(D(cnt), w_hi))
        cum_lo.append(s_lo)
        cum_hi.append(s_hi)
    rest = int(cs[k:].sum())
    tail = rest > 0
    if tail:  # every dropped outcome has r > cut: b^r <= b_hi^(cut+1)
        bound = up.multiply(D(rest), _power(b_hi, int(rs[k]), up))
        cum_lo.append(s_lo)
        cum_hi.append(up.add(s_hi, bound))
    scale = D(1 << bits)  # exact
    t_lo = down.divide(down.multiply(cum_lo[-1], D(u)), scale)
    t_hi = up.divide(up.multiply(cum_hi[-1], D(u + 1)), scale)
    return _decide(cum_lo, cum_hi, tail, t_lo, t_hi)


def _power(x: decimal.Decimal, k: int, ctx: decimal.Context) -> decimal.Decimal:
    """x^k (k >= 0) by squaring, every product rounded in ``ctx``'s direction (0 <= x <= 1)."""
    out, base = decimal.Decimal(1), x
    while k:
        if k & 1:
            out = ctx.multiply(out, base)
        k >>= 1
        if k:
            base = ctx.multiply(base, base)
    return out
