"""DP partition selection (mechanisms/partition_selection.py; Desfontaines et al. 2022).

(a) the (ε, δ) inequalities checked exactly on the exact keep probabilities (truncated geometric:
Fractions; thresholding: rigorous Fraction bounds around the irrational α = e^-(ε/k), with the
tail summed from the pmf here), π(0) = 0; (b) optimality: π >= thresholding's keep probability;
(c) empirical binomial / chi-square checks of the samplers (fixed seeds); (d) mutants of π and T
fail (a), so the check can fail.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from mech_testutil import RecordingSource, dlap_chisq_pvalue
from scipy import stats

from mechanisms import SeededSource
from mechanisms.partition_selection import (
    GeometricThresholdSelection,
    TruncatedGeometricSelection,
    exp_bounds,
    keep_probability,
    release,
    select,
    threshold,
)
from mechanisms.rng import RandomSource

# (ε, δ, k): small and large ε, tiny and large δ, k > 1 (per key ε/k, δ/k)
PARAMS = [
    (1, 1e-5, 1),
    (Fraction(1, 10), 1e-9, 1),
    (Fraction(1, 2), Fraction(1, 10), 1),
    (5, 1e-3, 1),
    (0.3, 1e-6, 1),
    (1, 1e-5, 3),
    (2, 1e-8, 4),
]


def taylor_bounds(x: Fraction, terms: int = 120) -> tuple[Fraction, Fraction]:
    """S <= e^x <= S + R for x >= 0: S = sum_{j<terms} x^j/j! (all terms positive), and the
    Lagrange remainder R = x^terms/terms! · e^x <= x^terms/terms! · 3^ceil(x)."""
    s, term = Fraction(0), Fraction(1)
    for j in range(terms):
        s += term
        term = term * x / (j + 1)
    return s, s + term * 3 ** math.ceil(x)


def pair_violations(p0: Fraction, p1: Fraction, x: Fraction, delta: Fraction) -> list[str]:
    """The (ln x, δ)-DP conditions of one coin when a unit is added to a key (n -> n+1, keep
    probabilities p0 -> p1): p1 <= x p0 + δ and 1 - p0 <= x (1 - p1) + δ."""
    bad = [] if p1 <= x * p0 + delta else ["keep"]
    return bad + ([] if 1 - p0 <= x * (1 - p1) + delta else ["drop"])


def dp_violations(pi: list[Fraction], x: Fraction, delta: Fraction) -> list[str]:
    """Every failure of the (ln x, δ)-DP conditions of a one-coin-per-key selection: π(0) = 0,
    0 <= π <= 1 and :func:`pair_violations` at every n. Exact arithmetic: x, δ, π Fractions."""
    bad = [] if pi[0] == 0 else ["pi(0) != 0: a key never seen could be invented"]
    bad += [f"pi({n}) = {p} outside [0, 1]" for n, p in enumerate(pi) if not 0 <= p <= 1]
    for n in range(len(pi) - 1):
        bad += [f"{what} at n = {n}" for what in pair_violations(pi[n], pi[n + 1], x, delta)]
    return bad


def recursion(x: Fraction, delta: Fraction, upto: int, growth=None, step=None, decay=None) -> list:
    """The paper's recursion pi(n) = min(x pi + δ, 1 - (1 - pi - δ)/x, 1) (growth factor, δ step
    and decay factor overridable: the mutants of (d))."""
    growth, step, decay = growth or x, step or delta, decay or 1 / x
    pi = [Fraction(0)]
    for _ in range(upto):
        p = pi[-1]
        pi.append(min(growth * p + step, 1 - (1 - p - delta) * decay, Fraction(1)))
    return pi


def tail_from_pmf(m: int, a: Fraction) -> Fraction:
    """P(Z >= m) for P(Z = z) = (1-a)/(1+a) a^|z|: the pmf summed over [m, M] and the rest
    (z > M) as the geometric series (1-a)/(1+a) a^(M+1)/(1-a). Integers over q^L (a = p/q,
    L = max |z|), reduced once."""
    p, q = a.numerator, a.denominator
    top = max(m, 0) + 40
    L = max(-m, top)
    head = Fraction(sum(p ** abs(z) * q ** (L - abs(z)) for z in range(m, top + 1)), q**L)
    return (1 - a) / (1 + a) * (head + a ** (top + 1) / (1 - a))


def threshold_keep_bounds(mech: GeometricThresholdSelection, n: int) -> tuple[Fraction, Fraction]:
    """[lo, hi] around P(n + Z >= T), Z ~ DLap(α), α in [alpha_lo, alpha_hi]: P(Z >= m) is
    increasing in α for m >= 1 (d/dα α^m/(1+α) > 0) and decreasing for m <= 0, so the ends of
    the α interval bound it."""
    if n == 0:
        return Fraction(0), Fraction(0)
    ends = [tail_from_pmf(mech.threshold - n, a) for a in (mech.alpha_lo, mech.alpha_hi)]
    return min(ends), max(ends)


def threshold_violations(mech: GeometricThresholdSelection, d: Fraction) -> list[str]:
    """Failures of the per-key (ε/k, δ/k) conditions on rigorous bounds of P(keep | n), n up to
    T + 60 (past T the ratio condition is the same geometric identity), with x = 1/alpha_hi <=
    e^(ε/k): keep(n+1) <= x keep(n) + d and drop(n) <= x drop(n+1) + d, keep(0) = 0."""
    b = [threshold_keep_bounds(mech, n) for n in range(mech.threshold + 60)]
    x = 1 / mech.alpha_hi
    bad = [] if b[0] == (0, 0) else ["keep(0) != 0"]
    for n in range(len(b) - 1):
        (lo0, _hi0), (_lo1, hi1) = b[n], b[n + 1]
        if hi1 > x * lo0 + d:
            bad.append(f"keep: P(keep | {n + 1}) > x P(keep | {n}) + d")
        if 1 - lo0 > x * (1 - hi1) + d:
            bad.append(f"drop: P(drop | {n}) > x P(drop | {n + 1}) + d")
    return bad


# ----------------------------------------------------------------------------- (a) exact DP
def test_exp_bounds_bracket_taylor():
    for x in (Fraction(0), Fraction(1, 10), Fraction(1, 3), Fraction(1), Fraction(5), Fraction(0.3)):
        lo, hi = exp_bounds(x, 100)
        s_lo, s_hi = taylor_bounds(x)
        assert lo <= s_lo and s_hi <= hi and hi - lo <= Fraction(4 * max(1, math.ceil(math.exp(x))), 2**100)


@pytest.mark.parametrize("eps,delta,k", PARAMS)
def test_truncated_geometric_is_dp_exactly(eps, delta, k):
    mech = TruncatedGeometricSelection(eps, delta, k)
    x, d = mech.base, mech.step
    assert d == Fraction(delta) / k
    assert x <= taylor_bounds(Fraction(eps) / k)[0]  # x <= e^(ε/k): (ln x, δ/k) implies (ε/k, δ/k)
    assert (Fraction(eps) / k - Fraction(math.log(x))) < 1e-15  # the loss of optimality is nil
    pi = [mech.keep_probability(n) for n in range(mech.n_one + 5)]
    assert pi[0] == 0 and mech.select(0, RecordingSource(1)) is False
    assert dp_violations(pi, x, d) == []
    assert pi[mech.n_one - 1] < 1 == pi[mech.n_one]


@pytest.mark.parametrize("eps,delta,k", PARAMS)
def test_closed_form_is_the_recursion_and_has_no_slack(eps, delta, k):
    """Closed form == the paper's recursion exactly, and raising any π(n) < 1 by 2^-300 breaks
    the DP conditions: π is pointwise the largest (ε, δ)-DP selection (the optimality theorem)."""
    mech = TruncatedGeometricSelection(eps, delta, k)
    x, d = mech.base, mech.step
    pi = [mech.keep_probability(n) for n in range(mech.n_one + 5)]
    assert pi == recursion(x, d, mech.n_one + 4)
    for n in range(1, mech.n_one):  # growth: "keep" is tight; decay: "drop" is
        assert pair_violations(pi[n - 1], pi[n] + Fraction(1, 2**300), x, d), n


@pytest.mark.parametrize("eps,delta,k", PARAMS)
def test_thresholding_is_dp_per_key_exactly(eps, delta, k):
    mech = GeometricThresholdSelection(eps, delta, k)
    e_lo, e_hi = taylor_bounds(Fraction(eps) / k)
    assert 1 / mech.alpha_hi <= e_lo and e_hi <= 1 / mech.alpha_lo  # α = e^-(ε/k) is bracketed
    ns = range(mech.threshold + 60)
    assert [mech.keep_probability_bounds(n) for n in ns] == [threshold_keep_bounds(mech, n) for n in ns]
    assert release(0, eps, delta, k, RecordingSource(2)) == (False, 0)
    assert threshold_violations(mech, Fraction(delta) / k) == []


@pytest.mark.parametrize("eps,delta,k", PARAMS)
def test_threshold_is_the_least_with_tail_at_most_delta_over_k(eps, delta, k):
    mech = GeometricThresholdSelection(eps, delta, k)
    t, d = threshold(eps, delta, k), Fraction(delta) / k
    assert t == mech.threshold >= 1
    assert tail_from_pmf(t - 1, mech.alpha_hi) <= d  # P(1 + Z >= T) <= δ/k
    if t > 1:
        assert tail_from_pmf(t - 2, mech.alpha_lo) > d  # T - 1 would not do
    # the usual float formula T = 1 + ceil(ln(k/(δ(1+α)))·k/ε) agrees
    a = math.exp(-float(eps) / k)
    assert abs(t - (1 + math.ceil(math.log(k / (float(delta) * (1 + a))) * k / float(eps)))) <= 1


# ----------------------------------------------------------------------------- (b) optimality
@pytest.mark.parametrize("eps,delta,k", PARAMS)
def test_truncated_geometric_dominates_thresholding(eps, delta, k):
    opt, thr = TruncatedGeometricSelection(eps, delta, k), GeometricThresholdSelection(eps, delta, k)
    for n in range(max(opt.n_one, thr.threshold) + 40):
        assert opt.keep_probability(n) >= thr.keep_probability_bounds(n)[1], n


# ----------------------------------------------------------------------------- (c) empirical
def test_select_fires_with_pi():
    """Draws at n in the growth and decay regions: each count within 5 binomial sd
    sqrt(N π (1 - π)) of N π, and Σ (obs - Nπ)² / (Nπ(1-π)) ~ χ²(m) with p-value > 1e-3."""
    eps, delta, N = Fraction(1, 2), Fraction(1, 1000), 4000
    mech = TruncatedGeometricSelection(eps, delta)
    src = SeededSource(20)
    ns = [n for n in range(1, mech.n_one) if 0.01 < mech.keep_probability(n) < 0.99]
    assert len(ns) >= 8 and any(n > mech.n_star for n in ns)
    chi = 0.0
    for n in ns:
        p = float(mech.keep_probability(n))
        hits = sum(select(n, eps, delta, src) for _ in range(N))
        sd = math.sqrt(N * p * (1 - p))
        assert abs(hits - N * p) <= 5 * sd, (n, hits, N * p)
        chi += (hits - N * p) ** 2 / sd**2
    assert stats.chi2.sf(chi, len(ns)) > 1e-3


def test_release_keep_rate_and_noise_law():
    """release: keep rate within 5 binomial sd of P(keep | n); noisy - n is DLap(k/ε) (chi-square
    goodness of fit, Cochran bins, p > 1e-3)."""
    eps, delta, k, N = 1, 1e-3, 2, 4000
    mech = GeometricThresholdSelection(eps, delta, k)
    src = SeededSource(21)
    for n in (mech.threshold - 3, mech.threshold, mech.threshold + 2):
        out = [release(n, eps, delta, k, src) for _ in range(N)]
        p = mech.keep_probability(n)
        hits = sum(kept for kept, _ in out)
        assert abs(hits - N * p) <= 5 * math.sqrt(N * p * (1 - p)), (n, hits, N * p)
        assert all(kept == (noisy >= mech.threshold) for kept, noisy in out)
        assert dlap_chisq_pvalue(np.array([noisy - n for _, noisy in out]), float(mech.scale)) > 1e-3


class ScriptedSource(RandomSource):
    """U = 0.<bits>: the test chooses the uniform the exact Bernoulli compares with π."""

    def __init__(self, u: int, nbits: int) -> None:
        self.u, self.left = u, nbits

    def getrandbits(self, k: int) -> int:
        self.left -= k
        return (self.u >> self.left) & ((1 << k) - 1) if self.left >= 0 else 0

    def randbelow(self, n: int) -> int:
        raise AssertionError("select draws bits only")


def test_select_is_exact_bernoulli_at_the_boundary():
    """π(1) = δ = 1/3: U just below 1/3 (agreeing with it on 64 bits, so a second word is
    read) keeps the key, U just above drops it; only integer bits are asked for."""
    mech = TruncatedGeometricSelection(1, Fraction(1, 3))
    assert mech.keep_probability(1) == Fraction(1, 3)
    third = (1 << 128) // 3  # floor(2^128 / 3) < 2^128 / 3
    assert mech.select(1, ScriptedSource(third, 128)) is True
    assert mech.select(1, ScriptedSource(third + 1, 128)) is False
    rec = RecordingSource(3)
    mech.select(1, rec)
    assert {c[0] for c in rec.calls} == {"getrandbits"}


# ----------------------------------------------------------------------------- (d) mutants
@pytest.mark.parametrize("which", ["growth", "step", "decay"])
def test_mutated_pi_fails_the_check(which):
    """π with its slope off by 10% (growth factor x·1.1, first step δ·1.1, decay factor 0.9/x)
    violates (a): the check can fail."""
    mech = TruncatedGeometricSelection(1, 1e-5)
    x, d = mech.base, mech.step
    tweak = {
        "growth": {"growth": x * Fraction(11, 10)},
        "step": {"step": d * Fraction(11, 10)},
        "decay": {"decay": Fraction(9, 10) / x},
    }[which]
    mutant = recursion(x, d, mech.n_one + 5, **tweak)
    assert mutant != recursion(x, d, mech.n_one + 5)
    assert dp_violations(mutant, x, d)


def test_threshold_one_lower_fails_the_check():
    """T - 1 releases a one-unit key with probability > δ/k: the check sees it."""
    mech = GeometricThresholdSelection(1, 1e-5, 2)
    assert threshold_violations(mech, Fraction(1e-5) / 2) == []
    mech.threshold -= 1
    assert threshold_violations(mech, Fraction(1e-5) / 2) == ["keep: P(keep | 1) > x P(keep | 0) + d"]


# ----------------------------------------------------------------------------- API, NOTICE
def test_api_privacy_map_and_notice():
    assert keep_probability(0, 1, 1e-5) == 0 and keep_probability(1, 1, 1e-5) == Fraction(1e-5)
    assert keep_probability(10**6, 1, 1e-5) == 1 and select(10**6, 1, 1e-5) is True
    m = TruncatedGeometricSelection(0.5, 1e-6)
    assert m.privacy_map() == (0.5, 1e-6) and m.privacy_map(0) == (0.0, 0.0)
    assert m.privacy_map(2) == pytest.approx((1.0, 2 * math.exp(0.5) * 1e-6))
    assert m.describe() == "partition selection: truncated geometric, ε=0.5, δ=1e-06"
    t = GeometricThresholdSelection(1, 1e-5, 2)
    assert t.privacy_map() == (1.0, 1e-5)
    assert t.describe() == (
        f"partition selection: geometric threshold T={t.threshold}, scale 2, ε=1, δ=1e-05, 2 groups per unit"
    )
    for bad in [dict(delta=0), dict(delta=1), dict(k=0), dict(k=1.5)]:
        with pytest.raises(ValueError):
            TruncatedGeometricSelection(**{"epsilon": 1, "delta": 1e-5, **bad})
    with pytest.raises(ValueError):
        select(-1, 1, 1e-5)
