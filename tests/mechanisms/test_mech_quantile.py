"""Central quantiles (mechanisms/quantile.py): the exponential mechanism over a column's
public grid, Pr[y] ∝ exp(−ε |c(y) − q·n| / 2), c(y) = #{x ≤ y} (Smith 2011); the protected
quantile, the error laws and the choice between them."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2

from mechanisms import SeededSource
from mechanisms.extreme import REFERENCE_SPANS, USEFUL, ExtremeGrid, reference_histogram
from mechanisms.quantile import (
    ExpMechQuantile,
    ProtectedQuantile,
    RecursiveQuantiles,
    choose_quantile,
    quantile_candidates,
)


def exact_pmf(hist: dict[int, int], U: int, eps: float, q: float) -> np.ndarray:
    """The law written from the definition, point by point (not from the interval code)."""
    n = sum(hist.values())
    c = np.array([sum(m for v, m in hist.items() if v <= y) for y in range(U + 1)])
    w = np.exp(-eps * np.abs(c - q * n) / 2)
    return w / w.sum()


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(9, 10), Fraction(1, 4)])
def test_release_follows_the_exact_law(q):
    """20,000 seeded releases on a 31-point grid against the exact pmf: Pearson chi-square
    (cells with expectation < 5 pooled) below its 0.9999 quantile."""
    U, eps = 30, 1.0
    hist = {3: 4, 7: 10, 12: 3, 25: 6, 26: 1}
    m = ExpMechQuantile(eps, ExtremeGrid(0.0, float(U), 1.0, U, True), q)
    src = SeededSource(41 + q.denominator)
    n = 20_000
    got = np.bincount([m.release(list(hist.items()), src) for _ in range(n)], minlength=U + 1)
    p = exact_pmf(hist, U, eps, float(q))
    big = n * p >= 5
    obs = np.append(got[big], got[~big].sum())
    exp_ = np.append(n * p[big], n * p[~big].sum())
    keep = exp_ > 0
    stat = (((obs - exp_) ** 2)[keep] / exp_[keep]).sum()
    assert stat < chi2.ppf(0.9999, keep.sum() - 1)


def test_neighbouring_ratio_is_at_most_e_eps():
    """ε-DP, add-remove: one row added anywhere moves c(y) by ≤ 1 and q·n by q, so every
    output probability changes by a factor ≤ e^ε (checked exactly, for several q)."""
    U, eps = 12, 0.7
    base = {2: 3, 5: 1, 9: 2}
    worst = 0.0
    for q in (0.0, 0.1, 0.5, 0.75, 1.0):
        p = exact_pmf(base, U, eps, q)
        for v in range(U + 1):
            nb = dict(base)
            nb[v] = nb.get(v, 0) + 1
            worst = max(worst, float(np.max(np.abs(np.log(p / exact_pmf(nb, U, eps, q))))))
    assert worst <= eps + 1e-12
    m = ExpMechQuantile(eps, ExtremeGrid(0.0, U, 1.0, U, True), Fraction(1, 2))
    assert m.privacy_map(2) == pytest.approx(2 * eps)
    with pytest.raises(ValueError):
        ExpMechQuantile(eps, m.grid, Fraction(3, 2))


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(9, 10)])
def test_rank_guarantee(q):
    """Utility theorem of the exponential mechanism (Δu = 1): w.p. ≥ 1 − β,
    |c(y) − q·n| ≤ OPT + (2/ε) ln((U + 1)/β). 400 seeded releases on 5,000 float rows (grid
    step 5, one step of rounding allowed): the share of violations stays below β + 4.5
    binomial sds."""
    rng = np.random.default_rng(5)
    xs = rng.lognormal(10, 0.8, 5_000).clip(0, 500_000)
    grid = ExtremeGrid.for_column("float", 0.0, 500_000.0)
    m = ExpMechQuantile(1.0, grid, q, 0.05)
    k = m.rank_half_width()
    assert k == math.ceil(2 * math.log(100_001 / 0.05))
    idx = np.minimum((xs // grid.step).astype(int), grid.U)
    hist = list(zip(*np.unique(idx, return_counts=True)))
    ties = max(n for _, n in hist)
    src, bad, n = SeededSource(9), 0, 400
    target = float(q) * xs.size
    for _ in range(n):
        y = m.release(hist, src)
        lo, hi = (xs <= y - grid.step).sum(), (xs <= y + grid.step).sum()  # rank within a step
        bad += int(min(abs(lo - target), abs(hi - target)) > k + ties and not lo <= target <= hi)
    assert bad / n <= 0.05 + 4.5 * math.sqrt(0.05 * 0.95 / n)


# -- the protected quantile and the error laws -----------------------------------------------


def protected_pmf(hist: dict[int, int], U: int, eps: float, beta: float, q: float, s: float) -> np.ndarray:
    """Pr[y] ∝ exp(−ε·d(y)/2), d(y) = max(0, a(y) − T, T − a⁺(y)), a(y) = #{x > y}, a⁺(y) = #{x ≥ y},
    T = max((1 − q)·n, min(k0, s·n)) for q ≥ 1/2 and n − max(q·n, min(k0, s·n)) below (module
    doc), written point by point."""
    k0 = math.ceil(2 / eps * math.log((U + 1) / beta))
    n = sum(hist.values())
    guard = min(k0, s * n)
    T = max((1 - q) * n, guard) if q >= 0.5 else n - max(q * n, guard)
    a = np.array([sum(m for v, m in hist.items() if v > y) for y in range(U + 1)])
    aplus = np.array([sum(m for v, m in hist.items() if v >= y) for y in range(U + 1)])
    w = np.exp(-eps * np.maximum(0, np.maximum(a - T, T - aplus)) / 2)
    return w / w.sum()


@pytest.mark.parametrize("q", [Fraction(9, 10), Fraction(1, 10)])
def test_protected_release_follows_the_exact_law(q):
    """A group smaller than k0 (the guard binds): 20,000 seeded releases against the law
    written out here (chi-square below its 0.9999 quantile); the pmf the error law uses is it."""
    U, eps, beta, s = 30, 1.0, 0.05, Fraction(1, 4)
    hist = {3: 4, 7: 5, 12: 3, 25: 2, 26: 1}
    m = ProtectedQuantile(eps, ExtremeGrid(0.0, float(U), 1.0, U, True), q, beta, s)
    p = protected_pmf(hist, U, eps, beta, float(q), float(s))
    assert np.allclose(m.pmf(list(hist.items())), p, rtol=1e-9, atol=0)
    src, n = SeededSource(7 + q.numerator), 20_000
    got = np.bincount([m.release(list(hist.items()), src) for _ in range(n)], minlength=U + 1)
    big = n * p >= 5
    obs = np.append(got[big], got[~big].sum())
    exp_ = np.append(n * p[big], n * p[~big].sum())
    keep = exp_ > 0
    stat = (((obs - exp_) ** 2)[keep] / exp_[keep]).sum()
    assert stat < chi2.ppf(0.9999, keep.sum() - 1)


@pytest.mark.parametrize("q", [Fraction(1, 1), Fraction(9, 10), Fraction(3, 4), Fraction(1, 10), Fraction(0)])
@pytest.mark.parametrize("s", [Fraction(1, 2), Fraction(1, 4)])
def test_protected_quantile_is_eps_dp_on_every_neighbour(q, s):
    """ε-DP in the add-remove model, exactly: for every group size around the guard (n = 0 ..
    2·k0/s), one row added at any grid point moves no output probability by more than e^ε."""
    U, eps, beta = 10, 1.5, 0.2
    m = ProtectedQuantile(eps, ExtremeGrid(0.0, float(U), 1.0, U, True), q, beta, s)
    rng = np.random.default_rng(9)
    worst = 0.0
    for n in range(0, int(2 * m.k0 / s) + 2):
        base = np.bincount(rng.integers(0, U + 1, n), minlength=U + 1)
        hist = [(i, int(k)) for i, k in enumerate(base) if k]
        p = m.pmf(hist)
        for v in range(U + 1):
            worst = max(worst, float(np.max(np.abs(np.log(p / m.pmf(hist + [(v, 1)]))))))
    assert worst <= eps + 1e-9


@pytest.mark.parametrize("tied", [False, True])
def test_protected_rank_statement(tied):
    """W.p. ≥ 1 − β the answer's ranks [#{x < y}, #{x ≤ y}] come within rank_half_width() =
    k0 + shift of q·n, ties included (no tie term): over 400 seeded releases on 3,000 rows
    (distinct-ish, or in 100-row tie blocks), violations stay below β + 4.5 sds."""
    rng = np.random.default_rng(4)
    xs = rng.integers(0, 100_000, 3_000) if not tied else np.repeat(rng.integers(0, 100_000, 30), 100)
    grid = ExtremeGrid(0.0, 100_000.0, 1.0, 100_000, True)
    m = ProtectedQuantile(0.2, grid, Fraction(99, 100), 0.05, Fraction(1, 4))
    assert m.shift() > 0 and m.rank_half_width() == m.k0 + m.shift()
    hist = list(zip(*np.unique(xs, return_counts=True)))
    src, bad, N = SeededSource(12), 0, 400
    target = 0.99 * len(xs)
    for _ in range(N):
        y = m.release(hist, src)
        lo, hi = (xs < y).sum(), (xs <= y).sum()
        bad += int(max(0.0, lo - target, target - hi) > m.rank_half_width())
    assert bad / N <= 0.05 + 4.5 * math.sqrt(0.05 * 0.95 / N)


@pytest.mark.parametrize("span", REFERENCE_SPANS)
def test_quantile_law_is_the_mechanisms_behaviour(span):
    """The law's (miss, relative rank error) on each reference group equals seeded releases'
    within 4.5 standard errors, for the plain and the protected mechanism."""
    U, n = 200, 40
    grid = ExtremeGrid(0.0, float(U), 1.0, U, True)
    hist = reference_histogram(n, U, span)
    xs = np.repeat([i for i, _ in hist], [k for _, k in hist])
    src = SeededSource(23)
    for m in (ExpMechQuantile(0.5, grid, Fraction(9, 10)), ProtectedQuantile(0.5, grid, Fraction(1, 10))):
        miss_law, rel_law = m.law_at(n, span)
        N, misses, rels = 3000, 0, []
        for _ in range(N):
            y = int(m.release(hist, src))
            out = not xs.min() <= y <= xs.max()
            misses += out
            rels.append(1.0 if out else min(abs((xs > y).sum() - (1 - float(m.q)) * n) / n, 1.0))
        assert abs(misses / N - miss_law) <= 4.5 * math.sqrt(miss_law * (1 - miss_law) / N) + 1e-9
        assert abs(np.mean(rels) - rel_law) <= 4.5 * np.std(rels) / math.sqrt(N)


def test_choice_never_shifts_the_median_and_protects_the_tail():
    """For the median no protection binds (min(k0, s·n) ≤ n/2): whichever is chosen aims at
    n/2, its rank statement is the plain one's k0; the protected quantile scores a tie block
    containing n/2 as 0, so its law is never worse and it is chosen. For the audit's
    0.9-quantile of 40 rows (values ≤ 50 on [0, 500], ε 1 over a unit's factor 3) the chosen
    mechanism lands within the data's range more often than the plain one."""
    grid = ExtremeGrid(0.0, 500.0, 1.0, 500, True)
    eps = 1 / 3
    median, regrets = choose_quantile(eps, grid, Fraction(1, 2), 0.05)
    plain = quantile_candidates(eps, grid, Fraction(1, 2), 0.05)[0]
    assert isinstance(median, ProtectedQuantile) and median.shift() == 0
    assert median.rank_half_width() == plain.rank_half_width() and regrets[0] >= min(regrets)
    m, regrets = choose_quantile(eps, grid, Fraction(9, 10), 0.05)
    plain = quantile_candidates(eps, grid, Fraction(9, 10), 0.05)[0]
    assert regrets[0] > min(regrets) and m.name == "protected_quantile"
    hist = list(zip(*np.unique(np.linspace(10, 50, 40).round().astype(int), return_counts=True)))
    assert m.pmf(hist)[10:51].sum() > plain.pmf(hist)[10:51].sum()
    assert plain.pmf(hist)[51:].sum() > 0.5  # the plain one's answer is mostly above the data
    n = m.useful_from()
    assert n is not None and m.expected_error(n) <= USEFUL < m.expected_error(n - 1)


def test_recursive_quantiles_error_estimate():
    """The tree's estimate: the first draw's law exactly (one exponential mechanism at the
    round's ε), d times it at depth d; useful_from is the first size where it is ≤ 1/10."""
    grid = ExtremeGrid(0.0, 100.0, 1.0, 100, True)
    qs = (Fraction(1, 4), Fraction(1, 2), Fraction(3, 4))
    t = RecursiveQuantiles(1.0, grid, qs)
    assert t.depths() == {Fraction(1, 2): 1, Fraction(1, 4): 2, Fraction(3, 4): 2}
    for q, d in t.depths().items():
        one = ExpMechQuantile(t.round_epsilon, grid, q).expected_error(60)
        assert t.expected_error(60, q) == pytest.approx(min(1.0, d * one))
        n = t.useful_from(q)
        assert n is not None and t.expected_error(n, q) <= USEFUL < t.expected_error(n - 1, q)
