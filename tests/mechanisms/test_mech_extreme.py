"""Central MAX / MIN (mechanisms/extreme.py): the shifted-rank exponential mechanism of
Chen et al. 2025 §6.4 and the capped rank on a column's public grid, their error laws and the
choice between them."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2

from mechanisms import SeededSource
from mechanisms.extreme import (
    REFERENCE_SPANS,
    USEFUL,
    CappedRankExtreme,
    ExtremeGrid,
    ShiftedRankExtreme,
    candidates,
    choose_extreme,
    reference_histogram,
    regret,
)


def exact_pmf(hist: dict[int, int], U: int, eps: float, beta: float, func: str) -> np.ndarray:
    """Pr[answer index = y] ∝ exp(−ε |c(y) − k0| / 2), c(y) = #{x beyond y} (per-record spec §6.4)."""
    k0 = math.ceil(2 / eps * math.log((U + 1) / beta))
    ys = np.arange(U + 1)
    if func == "max":
        c = np.array([sum(n for v, n in hist.items() if v > y) for y in ys])
    else:
        c = np.array([sum(n for v, n in hist.items() if v < y) for y in ys])
    w = np.exp(-eps * np.abs(c - k0) / 2)
    return w / w.sum()


@pytest.mark.parametrize("func", ["max", "min"])
def test_release_follows_the_exact_law(func):
    """20,000 seeded releases on a 31-point grid against the exact pmf: Pearson chi-square
    (cells with expectation < 5 pooled) below its 0.9999 quantile."""
    U, eps, beta = 30, 2.0, 0.05
    hist = {3: 4, 7: 10, 12: 3, 25: 6, 26: 1}
    grid = ExtremeGrid(0.0, float(U), 1.0, U, True)
    m = ShiftedRankExtreme(eps, grid, func, beta)
    src = SeededSource(31 + (func == "min"))
    n = 20_000
    got = np.bincount([m.release(list(hist.items()), src) for _ in range(n)], minlength=U + 1)
    p = exact_pmf(hist, U, eps, beta, func)
    big = n * p >= 5
    obs = np.append(got[big], got[~big].sum())
    exp_ = np.append(n * p[big], n * p[~big].sum())
    keep = exp_ > 0
    stat = (((obs - exp_) ** 2)[keep] / exp_[keep]).sum()
    assert stat < chi2.ppf(0.9999, keep.sum() - 1)


def test_privacy_map_and_neighbouring_ratio():
    """ε-DP in the add-remove model: on every neighbouring pair of histograms (one row added
    anywhere) the exact output probabilities differ by a factor ≤ e^ε."""
    U, eps = 12, 0.7
    m = ShiftedRankExtreme(eps, ExtremeGrid(0.0, U, 1.0, U, True), "max", 0.1)
    assert m.privacy_map(1) == eps and m.privacy_map(3) == pytest.approx(3 * eps)
    base = {2: 3, 5: 1, 9: 2}
    worst = 0.0
    for func in ("max", "min"):
        p = exact_pmf(base, U, eps, 0.1, func)
        for v in range(U + 1):
            nb = dict(base)
            nb[v] = nb.get(v, 0) + 1
            q = exact_pmf(nb, U, eps, 0.1, func)
            worst = max(worst, float(np.max(np.abs(np.log(p / q)))))
    assert worst <= eps + 1e-12


def test_rank_guarantee_and_grid():
    """With probability ≥ 1 − β at most 2·k0 rows lie above the MAX answer: over 400 seeded
    releases on 5,000 rows, the share of violations stays below β + 4.5 binomial sds."""
    rng = np.random.default_rng(3)
    xs = rng.integers(0, 100_000, 5_000)
    grid = ExtremeGrid.for_column("float", 0.0, 500_000.0)
    assert (grid.U, grid.step) == (100_000, 5.0) and grid.value(3) == 15.0 and grid.value(10**6) == 500_000.0
    assert ExtremeGrid.for_column("int", -5, 95) == ExtremeGrid(-5.0, 95.0, 1.0, 100, True)
    m = ShiftedRankExtreme(1.0, grid, "max", 0.05)
    idx = np.minimum(xs // 5, grid.U)
    hist = list(zip(*np.unique(idx, return_counts=True)))
    src, bad, n = SeededSource(8), 0, 400
    for _ in range(n):
        y = m.release(hist, src)
        bad += int((xs > y + 5).sum() > m.rank_half_width())  # + one grid step of rounding
    assert bad / n <= 0.05 + 4.5 * math.sqrt(0.05 * 0.95 / n)
    with pytest.raises(ValueError):
        ShiftedRankExtreme(0.0, grid)


# -- the capped rank and the error laws ------------------------------------------------------


def capped_pmf(hist: dict[int, int], U: int, eps: float, beta: float, share: Fraction) -> np.ndarray:
    """Pr[answer index = y] ∝ exp(−ε·d(y)/2), d(y) = max(0, c(y) − t, t − c⁺(y)), c(y) = #{x > y},
    c⁺(y) = #{x ≥ y}, t = min(k0, s·n) (module doc), written point by point."""
    k0 = math.ceil(2 / eps * math.log((U + 1) / beta))
    n = sum(hist.values())
    t = min(k0, float(share) * n)
    c = np.array([sum(m for v, m in hist.items() if v > y) for y in range(U + 1)])
    cplus = np.array([sum(m for v, m in hist.items() if v >= y) for y in range(U + 1)])
    w = np.exp(-eps * np.maximum(0, np.maximum(c - t, t - cplus)) / 2)
    return w / w.sum()


@pytest.mark.parametrize("share", [Fraction(1, 2), Fraction(1, 4)])
def test_capped_release_follows_the_exact_law(share):
    """20,000 seeded releases on a 31-point grid, a group smaller than k0 (the cap binds),
    against the law written out here: Pearson chi-square below its 0.9999 quantile; and the
    mechanism's own pmf (used by the error law) is that law."""
    U, eps, beta = 30, 1.0, 0.05
    hist = {3: 4, 7: 5, 12: 3, 25: 2, 26: 1}  # n = 15 < k0 = 9/share
    m = CappedRankExtreme(eps, ExtremeGrid(0.0, float(U), 1.0, U, True), "max", beta, share)
    assert 15 * share < m.k0
    p = capped_pmf(hist, U, eps, beta, share)
    assert np.allclose(m.pmf(list(hist.items())), p, rtol=1e-9, atol=0)
    src, n = SeededSource(41), 20_000
    got = np.bincount([m.release(list(hist.items()), src) for _ in range(n)], minlength=U + 1)
    big = n * p >= 5
    obs = np.append(got[big], got[~big].sum())
    exp_ = np.append(n * p[big], n * p[~big].sum())
    keep = exp_ > 0
    stat = (((obs - exp_) ** 2)[keep] / exp_[keep]).sum()
    assert stat < chi2.ppf(0.9999, keep.sum() - 1)


@pytest.mark.parametrize("func", ["max", "min"])
@pytest.mark.parametrize("share", [Fraction(1, 2), Fraction(1, 4)])
def test_capped_rank_is_eps_dp_on_every_neighbour(func, share):
    """ε-DP in the add-remove model, exactly: for histograms of every size around the cap
    (n = 0 .. 2·k0/s, so the target min(k0, s·n) moves with n and then stops), one row added
    at any grid point changes no output probability by more than a factor e^ε."""
    U, eps, beta = 10, 1.5, 0.2
    grid = ExtremeGrid(0.0, float(U), 1.0, U, True)
    m = CappedRankExtreme(eps, grid, func, beta, share)
    rng = np.random.default_rng(5)
    worst = 0.0
    for n in range(0, int(2 * m.k0 / share) + 2):
        base = np.bincount(rng.integers(0, U + 1, n), minlength=U + 1)
        hist = [(i, int(k)) for i, k in enumerate(base) if k]
        p = m.pmf(hist)
        for v in range(U + 1):
            q = m.pmf(hist + [(v, 1)])
            worst = max(worst, float(np.max(np.abs(np.log(p / q)))))
    assert worst <= eps + 1e-9
    assert m.privacy_map(2) == pytest.approx(2 * eps)


def test_capped_rank_answers_a_tied_maximum():
    """A column whose maximum is shared by many rows (5,000 rows, 2,000 of them at 60 on
    [0, 100]): the shifted rank's score is the same at the maximum and everywhere above it
    (c = 0, |0 − k0|), so most of its answers lie above the data; the capped rank scores the
    maximum 0 (its tie block contains the aim) and answers within the data."""
    grid = ExtremeGrid(0.0, 100.0, 1.0, 100, True)
    hist = [(v, 75) for v in range(20, 60)] + [(60, 2000)]
    sr, cr = ShiftedRankExtreme(1.0, grid), CappedRankExtreme(1.0, grid, share=Fraction(1, 4))
    assert float(sr.pmf(hist)[61:].sum()) > 0.5
    assert float(cr.pmf(hist)[20:61].sum()) > 0.95 and int(np.argmax(cr.pmf(hist))) == 60


def test_capped_rank_statement_has_no_tie_term():
    """W.p. ≥ 1 − β at most 2·k0 rows lie above the answer, ties included: over 400 seeded
    releases on 4,000 rows with 300-row tie blocks, violations stay below β + 4.5 sds."""
    grid = ExtremeGrid(0.0, 50.0, 1.0, 50, True)
    xs = np.repeat(np.arange(30, 43), 300)[:4000]
    hist = list(zip(*np.unique(xs, return_counts=True)))
    m = CappedRankExtreme(0.5, grid, "max", 0.05, Fraction(1, 2))
    src, bad, N = SeededSource(19), 0, 400
    for _ in range(N):
        y = m.release(hist, src)
        bad += int((xs > y).sum() > m.rank_half_width())
    assert bad / N <= 0.05 + 4.5 * math.sqrt(0.05 * 0.95 / N)


@pytest.mark.parametrize("span", REFERENCE_SPANS)
def test_error_law_is_the_mechanisms_behaviour(span):
    """The law's (miss, relative rank error) on each reference group equals what seeded
    releases give, within 4.5 standard errors of the mean (relative error in [0, 1]); the
    law a mechanism states is their average."""
    U = 200
    grid = ExtremeGrid(0.0, float(U), 1.0, U, True)
    src = SeededSource(17)
    for m, n in [(CappedRankExtreme(0.5, grid, "max"), 40), (ShiftedRankExtreme(0.5, grid, "min"), 60)]:
        hist = reference_histogram(n, U, span)
        xs = np.repeat([i for i, _ in hist], [k for _, k in hist])
        miss_law, rel_law = m.law_at(n, span)
        N, misses, rels = 3000, 0, []
        for _ in range(N):
            y = int(m.release(hist, src))
            out = not xs.min() <= y <= xs.max()
            misses += out
            beyond = (xs > y).sum() if m.func == "max" else (xs < y).sum()
            rels.append(1.0 if out else beyond / n)
        assert abs(misses / N - miss_law) <= 4.5 * math.sqrt(miss_law * (1 - miss_law) / N) + 1e-9
        assert abs(np.mean(rels) - rel_law) <= 4.5 * np.std(rels) / math.sqrt(N)
        laws = [m.law_at(n, x)[1] for x in REFERENCE_SPANS]
        assert m.expected_error(n) == pytest.approx(sum(laws) / len(laws))


def test_useful_from_is_the_first_useful_size():
    grid = ExtremeGrid(0.0, 100.0, 1.0, 100, True)
    for m in candidates(1 / 3, grid, "max", 0.05):
        n = m.useful_from()
        assert n is not None and m.expected_error(n) <= USEFUL < m.expected_error(n - 1)


def test_choice_uses_the_laws_and_fixes_the_small_group_case():
    """The chosen mechanism has the least regret across the law's sizes; on the audit's group
    (40 rows, values 20..60 of [0, 100], ε 1 over a unit's factor 3) it lands within the data's
    range more often than the shifted rank, whose aim (k0 > n) lies below the data."""
    grid = ExtremeGrid(0.0, 100.0, 1.0, 100, True)
    eps = 1 / 3
    chosen, regrets = choose_extreme(eps, grid, "max", 0.05)
    ms = candidates(eps, grid, "max", 0.05)
    assert regrets == regret(ms) and chosen.name == ms[int(np.argmin(regrets))].name
    xs = np.linspace(20, 60, 40).round().astype(int)
    hist = list(zip(*np.unique(xs, return_counts=True)))
    sr = ShiftedRankExtreme(eps, grid)
    assert sr.k0 > len(xs)

    def inside(m):
        return float(m.pmf(hist)[20:61].sum())

    assert inside(chosen) > inside(sr) and inside(sr) < 0.5  # most of the shifted rank's mass is below 20
    assert float(sr.pmf(hist)[:20].sum()) > 0.5
