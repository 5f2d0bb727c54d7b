"""The grid hourglass used for serving (mechanisms/mean/grid.py; add-remove mean spec 2.4, 6.7)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from mechanisms.mean import GridHourglass, Staircase
from mechanisms.rng import SeededSource


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("grid,gamma", [(16, None), (16, 1 / 16), (8, 1.0), (64, 0.3)])
def test_grid_pmf_normalises_and_marginal(eps, grid, gamma):
    hg = GridHourglass(Fraction(eps), grid, gamma)
    n = int(45 / eps) + 2
    i = np.arange(-n * grid, n * grid + 1)[:, None]
    k = np.arange(-3 * n, 3 * n + 1)[None, :]
    p = hg.pmf(i, k)
    assert p.sum() == pytest.approx(1.0, abs=1e-10)
    # Lemma 3 on the grid: the marginal is the staircase restricted to the grid
    assert np.allclose(p.sum(axis=1), hg.marginal_pmf(i[:, 0]), rtol=1e-9)
    # ... and is the continuous staircase (gamma = G/M, eq. 10 step convention; dyadic
    # grid points are exact floats) sampled at the grid points, renormalised: the
    # central step holds 2G - 1 cells instead of 2 gamma M = 2G, so the ratio is
    # Zs/(Zs + 1) (1/Zs <= 2e-5 at the serving grid M = 2^20, eps <= 10).
    cont = Staircase(eps, hg.gamma).pdf(i[:, 0] / grid) / grid
    assert np.allclose(cont / hg.marginal_pmf(i[:, 0]), hg.z_steps / (hg.z_steps + 1), rtol=1e-9)


@pytest.mark.parametrize("grid", [2, 4, 8, 16])
def test_grid_privacy_exhaustive(grid):
    """|E(i, k) - E(i - a, k - 1)| <= 1 for ALL grid points (window), all lines and
    all admissible shifts a in {0..M} and every snapped gamma G/M: the pmf ratio
    between neighbouring grid inputs is <= e^eps. A row outside the bounds
    (a = M + 1) breaks it -- the check can fail."""
    i = np.arange(-6 * grid, 6 * grid + 1)[:, None, None]
    k = np.arange(-8, 9)[None, :, None]
    a = np.arange(0, grid + 1)[None, None, :]
    for big_g in range(1, grid + 1):
        hg = GridHourglass(Fraction(1), grid, big_g / grid)
        assert hg.G == big_g
        d = hg.exponent(i, k) - hg.exponent(i - a, k - 1)
        assert np.abs(d).max() == 1
        d_out = hg.exponent(i, k) - hg.exponent(i - (grid + 1), k - 1)
        assert np.abs(d_out).max() >= 2


def _cells(i, k, hg):
    """Joint cell index over (J in [-3, 3] pooled tails, K in [-4, 4] pooled tails)."""
    j = np.clip(hg.step(i), -3, 3) + 3
    kk = np.clip(k, -4, 4) + 4
    return j * 9 + kk


def _expected(hg):
    n = 60
    i = np.arange(-n * hg.grid, n * hg.grid + 1)[:, None]
    k = np.arange(-3 * n, 3 * n + 1)[None, :]
    p = hg.pmf(i, k)
    cells = _cells(np.broadcast_to(i, p.shape), np.broadcast_to(k, p.shape), hg)
    return np.bincount(cells.ravel(), weights=p.ravel(), minlength=63)


def _chisq_p(cells, expected):
    obs = np.bincount(cells, minlength=63)
    keep = expected * cells.size >= 5
    exp = expected[keep] / expected[keep].sum() * obs[keep].sum()
    return stats.chisquare(obs[keep], exp).pvalue


def test_exact_sampler_matches_pmf():
    """Exact integer sampler (serving path) vs the pmf: chi-square on (J, K) cells
    and uniformity of the position inside each step; a wrong eps is rejected."""
    hg = GridHourglass(Fraction(1), 16)
    src = SeededSource(2024)
    draws = np.array([hg.sample_exact(src) for _ in range(20000)])
    i, k = draws[:, 0], draws[:, 1]
    expected = _expected(hg)
    assert _chisq_p(_cells(i, k, hg), expected) > 1e-3
    outer = np.abs(i) >= hg.G
    pos = (np.abs(i[outer]) - hg.G) % hg.grid
    assert stats.chisquare(np.bincount(pos, minlength=hg.grid)).pvalue > 1e-3
    wrong = _expected(GridHourglass(Fraction(3, 2), 16))
    assert _chisq_p(_cells(i, k, hg), wrong) < 1e-6


def test_vectorised_sampler_matches_pmf():
    hg = GridHourglass(Fraction(1, 2), 16)
    i, k = hg.sample(np.random.default_rng(3), 200_000)
    expected = _expected(hg)
    assert _chisq_p(_cells(i, k, hg), expected) > 1e-3
    assert _chisq_p(_cells(i, k, hg), _expected(GridHourglass(Fraction(6, 10), 16))) < 1e-6


def test_exact_sampler_uses_integer_randomness_only():
    class IntOnly(SeededSource):
        def __getattr__(self, name):
            raise AssertionError(f"sampler asked the source for {name!r}")

    hg = GridHourglass(Fraction(1, 3), 1 << 20)
    src = IntOnly(7)
    for _ in range(50):
        i, k = hg.sample_exact(src)
        assert isinstance(i, int) and isinstance(k, int)
