"""Central quantiles (mechanisms/quantile.py): the exponential mechanism over a column's
public grid, Pr[y] ∝ exp(−ε |c(y) − q·n| / 2), c(y) = #{x ≤ y} (Smith 2011)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2

from mechanisms import SeededSource
from mechanisms.extreme import ExtremeGrid
from mechanisms.quantile import ExpMechQuantile


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
