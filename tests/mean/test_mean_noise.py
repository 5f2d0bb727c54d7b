"""Exact checks of the continuous noise laws (add-remove mean spec sections 2.3-2.6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from mechanisms.mean import Hourglass, Staircase, Staircase2D
from mechanisms.mean.constants import (
    gamma_star,
    gamma_tilde,
    sigma2,
    st2d_a2,
    st2d_a2_paper,
    st2d_coord_var,
    staircase_var,
)

EPS = [0.1, 0.5, 1.0, 2.0, 4.0, 8.0]


def _steps(gamma, n):
    """Staircase steps of Z1 (Delta = 1): signed index j, [lo, hi) and midpoint."""
    out = [(0, -gamma, gamma)]
    for j in range(1, n + 1):
        out += [(j, j - 1 + gamma, j + gamma), (-j, -(j + gamma), -(j - 1 + gamma))]
    return out


@pytest.mark.parametrize("eps", EPS)
def test_gamma_star_stable_form_and_sigma2(eps):
    b = math.exp(-eps)
    printed = -b / (1 - b) + (b - 2 * b**2 + 2 * b**4 - b**5) ** (1 / 3) / (2 ** (1 / 3) * (1 - b) ** 2)
    assert gamma_star(eps) == pytest.approx(printed, rel=1e-9)
    # gamma* minimises the closed-form staircase variance, and the minimum is sigma^2 (eq. 2)
    res = minimize_scalar(
        lambda g: staircase_var(eps, g), bounds=(0, 1), method="bounded", options={"xatol": 1e-12}
    )
    assert res.x == pytest.approx(gamma_star(eps), abs=1e-5)
    assert staircase_var(eps, gamma_star(eps)) == pytest.approx(sigma2(eps), rel=1e-10)


def test_gamma_star_small_eps_is_stable():
    # printed form cancels catastrophically at eps = 1e-6 (spec 2.3); ours stays ~1/2
    assert gamma_star(1e-6) == pytest.approx(0.5 - 1e-6 / 12, abs=1e-6)
    assert gamma_star(2e-6) == pytest.approx(0.5, abs=1e-5)
    assert sigma2(1e-4) * 1e-8 / 2 == pytest.approx(1.0, abs=1e-3)  # eq. (3): sigma^2 -> 2/eps^2


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("gamma", [0.05, 0.3, None, 1.0])
def test_staircase_pdf_normalises_and_variance(eps, gamma):
    st = Staircase(eps, gamma)
    n = int(60 / eps)
    mass = var = 0.0
    for _, lo, hi in _steps(st.gamma, n):  # pdf is constant on each step
        f = float(st.pdf((lo + hi) / 2))
        mass += f * (hi - lo)
        var += f * (hi**3 - lo**3) / 3
    assert mass == pytest.approx(1.0, abs=1e-12)
    assert var == pytest.approx(staircase_var(eps, st.gamma), rel=1e-10)


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("gamma", [0.2, None, 0.9])
def test_hourglass_normalises_marginal_and_k_law(eps, gamma):
    hg = Hourglass(eps, gamma)
    n = int(45 / eps) + 2
    ks = np.arange(-3 * n, 3 * n + 1)
    total, k_law = 0.0, np.zeros(ks.size)
    for _, lo, hi in _steps(hg.gamma, n):
        mid = (lo + hi) / 2
        line = hg.pdf(mid, ks) * (hi - lo)  # mass of this step on every line k
        total += line.sum()
        k_law += line
        # Lemma 3: summing over lines gives the univariate staircase with the same gamma
        assert hg.pdf(mid, ks).sum() == pytest.approx(float(Staircase(eps, hg.gamma).pdf(mid)), rel=1e-10)
    assert total == pytest.approx(1.0, abs=1e-10)
    inner = np.abs(ks) <= n // 2  # away from the step truncation
    assert np.allclose(k_law[inner], hg.k_pmf(ks[inner]), rtol=1e-9, atol=0)  # spec 2.4 P(K = k)
    assert hg.k_pmf(ks).sum() == pytest.approx(1.0, abs=1e-10)


def test_hourglass_exponent_ratio_bounded_by_one():
    """Thm 2: |E(x + t, k + 1) - E(x, k)| <= 1 for t in [0, 1]. Random points for
    arbitrary gamma, plus an exhaustive dyadic lattice (exact in floating point,
    so step boundaries are hit exactly). Independent full-eps staircases
    (spec 6.1) reach 2 on the same points and fail."""
    rng = np.random.default_rng(11)
    for gamma in [0.05, 0.2, gamma_star(1.0), 0.5, 0.8, 1.0]:
        hg = Hourglass(1.0, gamma)
        x, t = rng.uniform(-8, 8, 200_000), rng.uniform(0, 1, 200_000)
        k = rng.integers(-9, 10, x.size)
        assert np.abs(hg.exponent(x + t, k + 1) - hg.exponent(x, k)).max() == 1
    x, t, k = np.meshgrid(np.arange(-160, 161) / 32, np.arange(33) / 32, np.arange(-6, 7), indexing="ij")
    x, t, k = x.ravel(), t.ravel(), k.ravel()
    for gamma in np.arange(1, 9) / 8:
        hg = Hourglass(1.0, gamma)
        assert np.abs(hg.exponent(x + t, k + 1) - hg.exponent(x, k)).max() == 1
        st = Staircase(1.0, gamma)  # independent coordinates: x -> x + t, y -> y + 1 - t
        y = k - x
        d_ind = (st.exponent(x + t) + st.exponent(y + 1 - t)) - (st.exponent(x) + st.exponent(y))
        assert np.abs(d_ind).max() == 2


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_hourglass_sampler_moments(eps):
    """Var Z1 = Var Z2 = sigma^2, Cov = 0 at gamma* (spec 2.4); 4-SE tolerances."""
    n = 400_000
    z1, k = Hourglass(eps).sample(np.random.default_rng(5), n)
    z2 = k - z1
    assert k.dtype.kind == "i"
    s2 = sigma2(eps)
    se_var = np.sqrt(np.var(z1**2) / n)
    assert abs(np.mean(z1**2) - s2) < 4 * se_var
    assert abs(np.mean(z2**2) - s2) < 4 * np.sqrt(np.var(z2**2) / n)
    assert abs(np.mean(z1 * z2)) < 4 * np.sqrt(np.var(z1 * z2) / n)
    # the same check detects the nonzero covariance away from gamma* (eps=1, gamma=0.9: -0.508)
    if eps == 1.0:
        a1, kk = Hourglass(eps, 0.9).sample(np.random.default_rng(6), n)
        cov = np.mean(a1 * (kk - a1))
        assert abs(cov) > 4 * np.sqrt(np.var(a1 * (kk - a1)) / n)
        assert cov == pytest.approx(-0.508, abs=0.03)


@pytest.mark.parametrize("eps,gamma", [(1.0, 0.0), (1.0, 0.3), (1.0, 1.0), (4.0, None)])
def test_staircase2d_corrected_normaliser_integrates_to_one(eps, gamma):
    """4 * integral over the quadrant, computed from the pdf only: for each x the
    pdf is piecewise constant in y with jumps where x + y - gamma is an integer,
    so the y-integral is exact; the x-integrand is then piecewise linear
    (midpoint rule, error O(h^2)). Independent of the ring algebra behind a2."""
    st = Staircase2D(eps, gamma)
    r = 34 / eps
    h = 1e-4
    x = np.arange(h / 2, r, h)[:, None]
    cuts = np.arange(0, int(r) + 2) + st.gamma - x  # y where the step index changes
    edges = np.concatenate([np.zeros_like(x), np.clip(cuts, 0, None)], axis=1)
    lo, hi = edges[:, :-1], edges[:, 1:]
    mids = np.where(hi > lo, (lo + hi) / 2, lo)
    inner = (st.pdf(x, mids) * (hi - lo)).sum(axis=1)
    mass = 4 * inner.sum() * h
    assert mass == pytest.approx(1.0, abs=1e-6)
    paper_mass = mass * st_a2_ratio(eps, st.gamma)
    if eps == 1.0 and gamma in (0.0, 0.3, 1.0):  # the printed a2 is off by 37-43% (spec 2.5)
        assert paper_mass > 1.3


def st_a2_ratio(eps, gamma):
    return st2d_a2_paper(eps, gamma) / st2d_a2(eps, gamma)


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_staircase2d_sampler_and_gamma_tilde(eps):
    n = 400_000
    g = gamma_tilde(eps)
    z1, z2 = Staircase2D(eps).sample(np.random.default_rng(9), n)
    v = st2d_coord_var(eps, g)
    assert abs(np.mean(z1**2) - v) < 4 * np.sqrt(np.var(z1**2) / n)
    assert abs(np.mean(z2**2) - v) < 4 * np.sqrt(np.var(z2**2) / n)
    grid = np.linspace(0, 1, 2001)
    assert g == pytest.approx(grid[np.argmin([st2d_coord_var(eps, x) for x in grid])], abs=1e-3)
    assert v > sigma2(eps)  # Lemma 7: the l1 staircase is worse than the hourglass
