"""Baselines for the benchmark only (paper section 8; spec 9): naive global minimum
and the SOTA PDP "personalized truncation" count/sum (dajun2024PDP, formulas from the
public reference code).  The PDP ones treat every record's budget as public (PDP, not
PrDP) and use numpy float Laplace like the reference -- never serve them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from mechanisms.per_record.framework import shifted_rank_max, universal_sum
from mechanisms.per_record.levels import ValueBuckets
from mechanisms.rng import RandomSource
from mechanisms.samplers import discrete_laplace

__all__ = ["naive_count", "naive_sum", "naive_max", "pdp_count", "pdp_sum"]


def naive_count(n: int, eps_min: float, source: RandomSource) -> int:
    """eps_min-DP count: n + DLap(1/eps_min)."""
    return int(n) + discrete_laplace(1 / Fraction(float(eps_min)), source)


def naive_sum(
    C: Sequence[int], S: Sequence[int], eps_min: float, beta: float, U: int, source: RandomSource
) -> int:
    """eps_min-DP universal sum over the whole bucket histogram (spec 6.3 / 9a)."""
    return universal_sum(C, S, Fraction(float(eps_min)), beta, ValueBuckets(U), source)[0]


def naive_max(
    values: Sequence[int], counts: Sequence[int], eps_min: float, beta: float, U: int, source: RandomSource
) -> int:
    """eps_min-DP shifted-rank max (not usable: n << k0, spec 9a)."""
    return shifted_rank_max(values, counts, float(eps_min), beta, U, source)[0]


def pdp_count(
    eps_j: np.ndarray, beta: float, eps_min: float, eps_max: float, rng: np.random.Generator
) -> float:
    """PDP count (spec 9b): max over i of |{eps_j > 2^i eps_min}| + (t/k)(Lap(1) - ln(t/beta))."""
    t = math.ceil(math.log2(eps_max / eps_min))
    e = np.sort(np.asarray(eps_j, dtype=np.float64))
    result = 0.0
    for i in range(t + 1):
        k = 2.0**i * eps_min
        c = e.size - np.searchsorted(e, k, side="right")
        result = max(result, c + (t / k) * (rng.laplace() - math.log(t / beta)))
    return result


def pdp_sum(
    eps_j: np.ndarray,
    v: np.ndarray,
    beta: float,
    eps_min: float,
    eps_max: float,
    U: int,
    rng: np.random.Generator,
) -> float:
    """PDP sum (spec 9b): per-record truncation tau_j = floor(2^i eps_j / eps_max)."""
    t = math.ceil(math.log2(eps_max * U / eps_min))
    e = np.asarray(eps_j, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    result = 0.0
    for i in range(t + 1):
        tau = np.floor(2.0**i * e / eps_max)
        s = float(np.minimum(tau, v).sum())
        result = max(result, s + (t * 2.0**i / eps_max) * (rng.laplace() - math.log(t / beta)))
    return result
