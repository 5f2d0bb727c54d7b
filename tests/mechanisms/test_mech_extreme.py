"""Central MAX / MIN (mechanisms/extreme.py): the shifted-rank exponential mechanism of
Chen et al. 2025 §6.4 on a column's public grid."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2

from mechanisms import SeededSource
from mechanisms.extreme import ExtremeGrid, ShiftedRankExtreme


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
