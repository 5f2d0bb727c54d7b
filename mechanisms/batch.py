"""Exact integer samplers drawing a whole release at once (add-remove mean spec section 2.2).

The laws are EXACTLY those of :mod:`mechanisms.samplers` (Canonne, Kamath, Steinke 2020),
row by row, with the randomness read as numpy arrays of CSPRNG words
(``RandomSource.bits64``). Integer arithmetic only: int64/uint32 arrays and Python ints, no
floating point, whose Laplace samplers leak through their representable outputs (Mironov 2012).

* Thresholds. A row compares a uniform U in [0, 1) with an irrational x (exp(-c) or
  exp(-c)/(1 + exp(-c))) through U's first 32 bits u and an integer interval
  lo <= 2^32 x <= hi (:mod:`mechanisms.exact_real`): u < lo means U < x, u >= hi means
  U >= x; the other rows (u in [lo, hi), probability <= 3 * 2^-32) are decided exactly by
  :class:`~mechanisms.exact_real.LazyUniform`, which reads more bits of the same U.
* :func:`geometric_array` -- Y >= 0, P[Y = y] = (1 - b) b^y, b = exp(-s/t). As
  b^y = prod_i (b^(2^i))^(y_i) over the binary digits of y, the law FACTORISES: the low
  digits y_0 .. y_(m-1) and the high part H = floor(Y / 2^m) are independent, with
  P[y_i = 1] = q_i/(1 + q_i), q_i = exp(-2^i s/t), and H geometric of ratio
  B = exp(-2^m s/t). m is the least with 2^m s/t >= 1/16 (m = 0 at scales <= 16), so a
  digit is one threshold comparison and H is inverse-CDF on a table: P[H >= h] = B^h, so
  H = #{h >= 1 : U < B^h} for h up to the first L with B^L < 2^-20; a row reaching L
  (H >= L) gets L + a fresh draw (memorylessness). The count is read from a table over u's
  top 16 bits wherever no threshold falls in that bucket (:func:`high_counts`), by binary
  search otherwise. This is the law of the scalar
  :func:`~mechanisms.samplers.geometric_exp` (CKS Alg. 2 steps 1-3: the same pmf), with O(1)
  array steps and 4(m + 1) CSPRNG bytes per row.
* :func:`discrete_laplace_array` -- Z = Y1 - Y2 of two independent geometrics of ratio
  b = exp(-1/scale): P[Z = z] = sum_y (1-b)^2 b^(y + |z|) b^y = (1-b)/(1+b) b^|z|, the law
  of the scalar :func:`~mechanisms.samplers.discrete_laplace`.
* :func:`bernoulli32` (rational p, the 64-bit ``RandomSource.bernoulli_array`` on 32 bits),
  :func:`randbelow32`, :func:`fair_coins`, and :func:`fill_by_rejection` (a rejection
  sampler's batch: the accepted terms of an iid sequence of proposals are iid from the
  conditional law, so the first ``size`` accepted proposals are ``size`` exact draws).

Rows are independent and every row's draws are independent of the other rows', so a batch
of n has the law of n scalar draws (the bytes are consumed in another order; the law is the
same). Draws are int64: :func:`fits_int64` says whether a scale fits.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache, partial

import numpy as np

from .exact_real import LazyUniform, exp_neg_interval, logistic_interval
from .rng import RandomSource
from .scalars import RationalLike

# A threshold x known through integer intervals: ``interval(prec) -> (lo, hi)``, lo <= 2^prec x <= hi.
Interval = Callable[[int], tuple[int, int]]

__all__ = [
    "geometric_array",
    "discrete_laplace_array",
    "bernoulli32",
    "randbelow32",
    "below_array",
    "fair_coins",
    "fill_by_rejection",
    "fits_int64",
    "low_digits",
    "MAX_DIGITS",
]

MAX_DIGITS = 50  # 2^50 grid units of noise scale at most (int64 room)
_TAIL_BITS = 20  # H's table stops at B^L < 2^-20
_HIGH = 16  # the table's ratio B = exp(-g), g >= 1/16


def _ratio(x: RationalLike, what: str) -> tuple[int, int]:
    """(numerator, denominator) of an int or Fraction; floats are refused (pass them exactly)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Rational):
        raise TypeError(f"{what} must be an int or Fraction, got {type(x).__name__}")
    f = Fraction(x)
    return f.numerator, f.denominator


def words32(size: int, source: RandomSource) -> np.ndarray:
    """``size`` independent uniform 32-bit words (int64 values in [0, 2^32))."""
    return source.bits64((size + 1) // 2).view(np.uint32)[:size].astype(np.int64)


def fair_coins(size: int, source: RandomSource) -> np.ndarray:
    """``size`` independent fair bits (bool), 64 per CSPRNG word."""
    words = source.bits64((size + 63) // 64)
    return np.unpackbits(words.view(np.uint8))[:size].astype(bool)


def fill_by_rejection(
    size: int, propose: Callable[[int], tuple[np.ndarray, np.ndarray]], accept_rate: Fraction
) -> np.ndarray:
    """``size`` draws of the accepted law of ``propose(k) -> (values, accepted mask)`` (k iid
    proposals), taken in order; ``accept_rate`` (a lower bound) only sizes the batches."""
    parts: list[np.ndarray] = []
    got = 0
    while got < size:
        want = size - got
        vals, ok = propose(min(int(want * Fraction(11, 10) / accept_rate) + 16, 1 << 22))
        vals = vals[ok][:want]
        parts.append(vals)
        got += vals.shape[0]
    if not parts:
        empty: np.ndarray = propose(0)[0]
        return empty
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


def bernoulli32(size: int, num: int, den: int, source: RandomSource) -> np.ndarray:
    """``size`` exact Bernoulli(num/den) coins: u = U's first 32 bits against
    P = floor(2^32 num/den); u == P (probability 2^-32) is decided by the rest of U,
    uniform and independent of u, against 2^32 num/den - P (``source.bernoulli``)."""
    if den < 1 or not 0 <= num <= den:
        raise ValueError(f"need 0 <= num <= den, den >= 1; got {num}/{den}")
    if num == den:
        return np.ones(size, dtype=bool)
    big_p = (num << 32) // den
    u = words32(size, source)
    out = u < big_p
    for i in np.flatnonzero(u == big_p):
        out[i] = source.bernoulli((num << 32) - big_p * den, den)
    return out


def randbelow32(size: int, m: int, source: RandomSource) -> np.ndarray:
    """``size`` exactly uniform integers in [0, m), 1 <= m <= 2^32 (int64): rejection on the
    top bit_length(m - 1) bits of 32-bit words."""
    if not 1 <= m <= 1 << 32:
        raise ValueError(f"randbelow32 needs 1 <= m <= 2**32, got {m}")
    k = (m - 1).bit_length()
    if k == 0:
        return np.zeros(size, dtype=np.int64)

    def propose(n: int) -> tuple[np.ndarray, np.ndarray]:
        r = words32(n, source) >> (32 - k)
        return r, r < m

    return fill_by_rejection(size, propose, Fraction(1, 2))


def _decide(u: np.ndarray, lo: int, hi: int, interval: Interval, source: RandomSource) -> np.ndarray:
    """U < x per row, x known by ``interval`` with lo <= 2^32 x <= hi (module doc)."""
    out = u < lo
    for i in np.flatnonzero((u >= lo) & (u < hi)):
        out[i] = LazyUniform(int(u[i]), 32, source).below(interval)
    return out


def below_array(size: int, interval: Interval, source: RandomSource) -> np.ndarray:
    """``size`` exact coins [U < x], x in [0, 1] known by ``interval(prec) -> (lo, hi)`` with
    lo <= 2^prec x <= hi (a few units wide): U's first 32 bits decide almost every row."""
    lo, hi = interval(32)
    return _decide(words32(size, source), lo, hi, interval, source)


def low_digits(s: int, t: int) -> int:
    """m = the least m >= 0 with 2^m s/t >= 1/16: the digits of Y drawn one by one."""
    return max(0, (t - 1) // (_HIGH * s)).bit_length() if _HIGH * s < t else 0


def fits_int64(scale: RationalLike) -> bool:
    """Whether :func:`discrete_laplace_array` at ``scale`` draws into int64."""
    num, den = _ratio(scale, "scale")
    return num > 0 and low_digits(den, num) <= MAX_DIGITS


@lru_cache(maxsize=64)
def _table(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """(-lo_h, -hi_h) for h = 1..L: lo_h <= 2^32 B^h <= hi_h, B = exp(-a/b), B^L < 2^-20
    (negated: increasing, for ``searchsorted``)."""
    los, his = [], []
    h = 1
    while True:
        lo, hi = exp_neg_interval(a * h, b, 32)
        los.append(-lo)
        his.append(-hi)
        if hi <= 1 << (32 - _TAIL_BITS):
            out = np.array(los, dtype=np.int64), np.array(his, dtype=np.int64)
            for arr in out:  # shared by every thread: read only
                arr.flags.writeable = False
            return out
        h += 1


_BUCKET_SHIFT = 16  # u's top 16 bits index the bucket table
_UNDECIDED = np.iinfo(np.uint16).max


@lru_cache(maxsize=32)
def _buckets(a: int, b: int) -> np.ndarray:
    """Per bucket k of u (u >> 16 = k): the count #{h : U < B^h} shared by every u in it,
    or ``_UNDECIDED`` where a threshold interval [lo_h, hi_h] meets the bucket. The count is
    #{h : lo_h > u} when it equals #{h : hi_h > u}; the first is least at the bucket's
    largest u, the second largest at its smallest u, and the first never exceeds the second,
    so when those two agree every u in the bucket has that count, decided."""
    neg_lo, neg_hi = _table(a, b)
    starts = np.arange(1 << (32 - _BUCKET_SHIFT), dtype=np.int64) << _BUCKET_SHIFT
    fewest = np.searchsorted(neg_lo, -(starts + (1 << _BUCKET_SHIFT) - 1), side="left")
    most = np.searchsorted(neg_hi, -starts, side="left")
    out = np.where(fewest == most, fewest, _UNDECIDED).astype(np.uint16)
    out.flags.writeable = False  # shared by every thread: read only
    return out


def high_counts(u: np.ndarray, a: int, b: int, source: RandomSource) -> np.ndarray:
    """#{h in 1..L : U < B^h} per row, U's first 32 bits ``u`` (L when U < B^L): one
    lookup of u's bucket (:func:`_buckets`) per row; the rows in an undecided bucket
    (probability <= L * 2^-16) by binary search on the table, and those whose u lies in
    a threshold interval exactly (:class:`~mechanisms.exact_real.LazyUniform`)."""
    neg_lo, neg_hi = _table(a, b)
    big_l = neg_lo.size
    h: np.ndarray = _buckets(a, b)[u >> _BUCKET_SHIFT].astype(np.int64)
    rest = np.flatnonzero(h == _UNDECIDED)
    if rest.size:
        us = -u[rest]
        h_rest = np.searchsorted(neg_lo, us, side="left")  # #{h : lo_h > u}: surely U < B^h
        sure = np.searchsorted(neg_hi, us, side="left")  # #{h : hi_h > u}: possibly U < B^h
        for i in np.flatnonzero(h_rest != sure):  # u in some [lo_h, hi_h): exact
            lazy, c = LazyUniform(int(u[rest[i]]), 32, source), 0
            while c < big_l and lazy.below(partial(exp_neg_interval, a * (c + 1), b)):
                c += 1
            h_rest[i] = c
        h[rest] = h_rest
    return h


def _high_part(size: int, a: int, b: int, source: RandomSource) -> np.ndarray:
    """H >= 0 with P[H >= h] = B^h, B = exp(-a/b): H = #{h : U < B^h} (module doc)."""
    big_l = _table(a, b)[0].size
    h = high_counts(words32(size, source), a, b, source)
    tail = np.flatnonzero(h == big_l)  # H >= L: L + a fresh H (memoryless)
    if tail.size:
        h[tail] = big_l + _high_part(tail.size, a, b, source)
    return h


def geometric_array(size: int, gamma: RationalLike, source: RandomSource) -> np.ndarray:
    """``size`` independent exact draws Y >= 0, P[Y = y] = (1 - e^-gamma) e^(-gamma y),
    rational gamma > 0 (the law of :func:`~mechanisms.samplers.geometric_exp`), as int64."""
    s, t = _ratio(gamma, "gamma")
    if s <= 0:
        raise ValueError(f"gamma must be > 0, got {s}/{t}")
    m = low_digits(s, t)
    if m > MAX_DIGITS:
        raise ValueError(
            f"gamma {s}/{t} needs {m} binary digits; the batch draws at most "
            f"{MAX_DIGITS} (use the scalar sampler)"
        )
    y = np.zeros(size, dtype=np.int64)
    for i in range(m):  # digit i: P[1] = q_i/(1 + q_i)
        lo, hi = logistic_interval(s << i, t, 32)
        bit = _decide(words32(size, source), lo, hi, partial(logistic_interval, s << i, t), source)
        y |= bit.astype(np.int64) << i
    h = _high_part(size, s << m, t, source)
    if m and h.size and int(h.max()) >= 1 << (62 - m):  # H >= 2^12: probability < e^-256
        raise OverflowError("geometric draw beyond int64")
    return y | (h << m) if m else h


def discrete_laplace_array(size: int, scale: RationalLike, source: RandomSource) -> np.ndarray:
    """``size`` independent exact discrete Laplace draws, P[Z = z] proportional to
    exp(-|z|/scale) (the law of :func:`~mechanisms.samplers.discrete_laplace`), as int64."""
    t, s = _ratio(scale, "scale")
    if t <= 0:
        raise ValueError(f"scale must be > 0, got {t}/{s}")
    gamma = Fraction(s, t)
    out: np.ndarray = geometric_array(size, gamma, source) - geometric_array(size, gamma, source)
    return out
