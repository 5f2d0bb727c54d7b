"""Exact integer samplers (Canonne, Kamath, Steinke 2020, "The Discrete
Gaussian for Differential Privacy", Algorithms 1-2).

All arithmetic is on Python ints / Fractions; the only randomness primitive
used is ``source.bernoulli(num, den)`` / ``source.randbelow(n)`` with integer
arguments. No floating point anywhere in this module: floating-point Laplace
samplers leak through the pattern of representable outputs (Mironov 2012).

The add-remove mean spec section 2.2 (discrete Laplace): P[Z = z] = (1-b)/(1+b) b^|z| with
b = exp(-1/scale); for a sensitivity-D integer query, scale = D/eps gives eps-DP.
"""

from __future__ import annotations

import numbers
from fractions import Fraction

from .rng import RandomSource
from .scalars import RationalLike

__all__ = ["bernoulli_exp", "discrete_laplace", "geometric_exp"]


def _as_fraction(x: RationalLike, what: str) -> Fraction:
    # Floats are refused on purpose: pass an int or a Fraction.
    if type(x) is Fraction:  # the common case, without the ABC check
        return x
    if isinstance(x, bool) or not isinstance(x, numbers.Rational):
        raise TypeError(f"{what} must be an int or Fraction, got {type(x).__name__}")
    return Fraction(x)


def _bernoulli_exp_unit(num: int, den: int, source: RandomSource) -> bool:
    """Bernoulli(exp(-num/den)) for 0 <= num/den <= 1 (CKS Alg. 1, gamma <= 1).

    Draw A_k ~ Bernoulli(gamma/k) for k = 1, 2, ... until the first failure at
    K; return [K odd]. P[K > k] = gamma^k / k!, so P[K odd] = exp(-gamma).
    Expected number of draws <= e.
    """
    k = 1
    while source.bernoulli(num, den * k):
        k += 1
    return k % 2 == 1


def _bernoulli_exp_int(num: int, den: int, source: RandomSource) -> bool:
    """Bernoulli(exp(-num/den)) for any num/den >= 0 (CKS Alg. 1, gamma > 1).

    exp(-gamma) = exp(-1)^floor(gamma) * exp(-(gamma - floor(gamma))).
    """
    whole, rem = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp_unit(1, 1, source):
            return False
    return _bernoulli_exp_unit(rem, den, source)


def bernoulli_exp(gamma: RationalLike, source: RandomSource) -> bool:
    """Exact Bernoulli(exp(-gamma)) for rational ``gamma >= 0`` (CKS 2020 Alg. 1)."""
    g = _as_fraction(gamma, "gamma")
    if g < 0:
        raise ValueError(f"gamma must be >= 0, got {g}")
    return _bernoulli_exp_int(g.numerator, g.denominator, source)


def geometric_exp(gamma: RationalLike, source: RandomSource) -> int:
    """Exact Y >= 0 with P[Y = y] = (1 - e^-gamma) e^(-gamma y), rational ``gamma > 0``, in
    O(1) expected draws at any gamma (counting Bernoulli(exp(-gamma)) successes needs
    ~1/gamma draws, unbounded as gamma falls). CKS 2020 Alg. 2 steps 1-3 with
    gamma = s/t: X = U + t V has P[X = x] proportional to exp(-x/t) (U accepted with
    probability exp(-U/t), V counts Bernoulli(exp(-1)) successes); Y = floor(X/s)."""
    g = _as_fraction(gamma, "gamma")
    if g <= 0:
        raise ValueError(f"gamma must be > 0, got {g}")
    return _geometric_st(g.numerator, g.denominator, source)


def _geometric_st(s: int, t: int, source: RandomSource) -> int:
    """CKS 2020 Alg. 2 steps 1-3: Y >= 0 with P[Y = y] proportional to exp(-y s/t)."""
    while True:
        u = source.randbelow(t)
        if _bernoulli_exp_unit(u, t, source):
            break
    v = 0
    while _bernoulli_exp_unit(1, 1, source):
        v += 1
    return (u + t * v) // s


def discrete_laplace(scale: RationalLike, source: RandomSource) -> int:
    """Exact discrete Laplace draw: P[Z = z] proportional to exp(-|z|/scale).

    CKS 2020 Alg. 2 with scale = t/s (t, s coprime positive ints):

    1. U ~ Uniform{0..t-1}; accept with prob. exp(-U/t), else restart.
    2. V ~ Geometric: count successes of Bernoulli(exp(-1)) before a failure.
    3. X = U + t*V is geometric with P[X = x] proportional to exp(-x/t);
       Y = floor(X/s) is geometric with ratio exp(-s/t) = exp(-1/scale).
    4. Random sign; reject (negative, 0) so that 0 is not double-counted.

    Expected O(1) iterations independent of the scale: step 1 accepts with
    probability ~(1 - 1/e) and step 2 needs ~1/(1 - 1/e) Bernoulli draws; the
    sign rejection happens with probability <= 1/2. Ints are arbitrary size,
    so huge rational scales (e.g. Fraction(500000) / Fraction(0.1)) are exact.
    """
    sc = _as_fraction(scale, "scale")
    if sc <= 0:
        raise ValueError(f"scale must be > 0, got {sc}")
    t, s = sc.numerator, sc.denominator
    while True:
        y = _geometric_st(s, t, source)
        negative = source.randbelow(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y
