"""Exact comparisons of a uniform draw with exp(-c), c rational (add-remove mean spec section 2.2).

The batch samplers (:mod:`mechanisms.batch`) decide almost every row from the first 32 bits
of a uniform U in [0, 1) against a threshold x = exp(-c) or x = exp(-c)/(1 + exp(-c)); a row
whose 32 bits cannot decide (its dyadic interval meets x: probability <= 3 * 2^-32 per
threshold) is decided EXACTLY here, by drawing more bits of the same U until its interval
lies on one side of x (Knuth-Yao style lazy comparison). Thresholds are known through
integer intervals only: ``lo <= 2^prec x <= hi``, computed in integer arithmetic with proved
error bounds -- no floating point (Mironov 2012), so the comparison is exact and the law of
the sampler is exactly the one it is proved for.

exp(-c), c = a/b >= 0: with s = bit_length(floor(c)), f = c / 2^s < 1, the alternating series
sum_k (-f)^k / k! in fixed point at P bits (T_0 = 2^P, T_k = floor(T_(k-1) f / k)): each
T_k is below the true term by at most 2 units (e_k <= e_(k-1) f/k + 1 <= 2), the series
stops at T_K = 0 (truncation <= the next true term <= 2 units), so the sum is within
2K + 4 units; then s squarings of the interval (floor of lo^2, ceiling of hi^2), which at most
double its width plus 2 each; P - prec = s + bit_length(2P + 8) + 4 guard bits bring the
final width to at most 3 units of 2^-prec.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from .rng import RandomSource

__all__ = ["exp_neg_interval", "logistic_interval", "tilted_share_interval", "LazyUniform"]


@lru_cache(maxsize=4096)
def exp_neg_interval(a: int, b: int, prec: int) -> tuple[int, int]:
    """(lo, hi) with lo <= 2^prec exp(-a/b) <= hi and hi - lo <= 3 (a >= 0, b >= 1)."""
    if a < 0 or b < 1 or prec < 0:
        raise ValueError(f"need a >= 0, b >= 1, prec >= 0; got {a}, {b}, {prec}")
    s = (a // b).bit_length()
    fb = b << s  # f = a / fb in [0, 1)
    big_p = prec + s + 4
    big_p += (2 * big_p + 8).bit_length()
    term = total = 1 << big_p
    k = 0
    while term:
        k += 1
        term = term * a // (fb * k)
        total += -term if k % 2 else term
    err = 2 * k + 4
    lo, hi = max(total - err, 0), total + err
    for _ in range(s):  # exp(-c) = exp(-f)^(2^s)
        lo, hi = (lo * lo) >> big_p, -((-hi * hi) >> big_p)
    shift = big_p - prec
    return lo >> shift, -((-hi) >> shift)


@lru_cache(maxsize=4096)
def logistic_interval(a: int, b: int, prec: int) -> tuple[int, int]:
    """(lo, hi) with lo <= 2^prec q/(1 + q) <= hi, q = exp(-a/b) (increasing in q, so the
    ends of q's interval at prec + 8 bits bound it)."""
    p2 = prec + 8
    ql, qh = exp_neg_interval(a, b, p2)
    one = 1 << p2
    return (ql << prec) // (one + ql), -((-(qh << prec)) // (one + qh))


@lru_cache(maxsize=4096)
def tilted_share_interval(a: int, b: int, wa: int, wb: int, prec: int) -> tuple[int, int]:
    """(lo, hi) with lo <= 2^prec x <= hi, x = wb q / (wa (1 - q) + wb q), q = exp(-a/b),
    integer weights 1 <= wa <= wb. x is increasing in q (dx/dq = wa wb / D^2 > 0) with slope
    at most wb/wa (D = wa + q (wb - wa) >= wa), so q's interval at prec + bit_length(wb) + 8
    bits, whose width is at most 3 units there, bounds x within a few units of 2^-prec."""
    if not 1 <= wa <= wb:
        raise ValueError(f"need 1 <= wa <= wb; got {wa}, {wb}")
    p2 = prec + wb.bit_length() + 8
    ql, qh = exp_neg_interval(a, b, p2)
    one = 1 << p2
    lo = (wb * ql << prec) // (wa * (one - ql) + wb * ql)
    hi = -((-(wb * qh << prec)) // (wa * (one - qh) + wb * qh))
    return lo, hi


class LazyUniform:
    """U uniform in [0, 1) known to lie in [V/2^n, (V+1)/2^n); more bits are drawn from
    ``source`` only when a comparison needs them (each bit read once: the comparisons of one
    row with several thresholds share the same U)."""

    __slots__ = ("v", "n", "source")

    def __init__(self, prefix: int, nbits: int, source: RandomSource) -> None:
        self.v, self.n, self.source = prefix, nbits, source

    def below(self, interval: Callable[[int], tuple[int, int]]) -> bool:
        """U < x, for x given by ``interval(prec) -> (lo, hi)``, lo <= 2^prec x <= hi."""
        while True:
            lo, hi = interval(self.n)
            if self.v + 1 <= lo:  # U < (V+1)/2^n <= x
                return True
            if self.v >= hi:  # U >= V/2^n >= x (U = x has probability 0)
                return False
            self.v = (self.v << 64) | self.source.getrandbits(64)
            self.n += 64
