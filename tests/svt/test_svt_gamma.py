"""Gamma = CDF of Exp(theta) - Lap(b) (SVT spec Sec. 2.3, Eq. 40) and the Table 4/6 split (Sec. 2.2)."""

import math

import numpy as np
import pytest

from mechanisms.svt import (
    allocation,
    allocation_ratio,
    comparison_variance,
    gamma_cdf,
    gamma_logcdf,
    gamma_logsf,
)

N_MC = 1_000_000
# DKW: P(sup_z |F_n - F| > eta) <= 2 exp(-2 n eta^2); eta for failure probability 1e-6
DKW = math.sqrt(math.log(2 / 1e-6) / (2 * N_MC))


def _ecdf_gap(b, theta, cdf_b, cdf_theta, seed):
    rng = np.random.default_rng(seed)
    z = np.sort(rng.exponential(theta, N_MC) - rng.laplace(0.0, b, N_MC))
    grid = np.quantile(z, np.linspace(0.001, 0.999, 400))
    emp = np.searchsorted(z, grid, side="right") / N_MC
    return float(np.max(np.abs(emp - gamma_cdf(grid, cdf_b, cdf_theta))))


@pytest.mark.parametrize("b,theta", [(18.1, 105.8), (5.0, 5.0), (10.0, 2.0)])
def test_gamma_cdf_matches_monte_carlo(b, theta):
    assert _ecdf_gap(b, theta, b, theta, seed=11) < DKW


def test_monte_carlo_check_rejects_wrong_law():
    # the check has power: X and Y swapped (Fig. 5a caption's reading) or a doubled scale fails
    b, theta = 18.1, 105.8
    assert _ecdf_gap(b, theta, theta, b, seed=12) > 5 * DKW
    assert _ecdf_gap(b, theta, b, 2 * theta, seed=13) > 5 * DKW


def test_gamma_limits_and_continuity():
    b = 3.0
    z = np.array([-5.0, -0.1, 0.0, 0.1, 2.0, 40.0])
    # b = theta limit form of SVT spec Sec. 2.3, compared with theta = b (1 +- 1e-7)
    lim = np.where(z <= 0, np.exp(z / b) / 4, 1 - np.exp(-z / b) * (0.75 + z / (2 * b)))
    for th in (b, b * (1 + 1e-7), b * (1 - 1e-7)):
        np.testing.assert_allclose(gamma_cdf(z, b, th), lim, rtol=1e-6, atol=1e-12)
    # continuity at 0 and complementarity of the log forms
    for b, th in [(2.0, 9.0), (9.0, 2.0)]:
        left, right = gamma_cdf([-1e-12, 1e-12], b, th)
        assert abs(left - right) < 1e-10
        zz = np.linspace(-50, 80, 101)
        np.testing.assert_allclose(
            np.exp(gamma_logcdf(zz, b, th)) + np.exp(gamma_logsf(zz, b, th)), 1.0, atol=1e-12
        )


def test_log_tails_accurate():
    # far right tail, theta > b: 1 - Gamma(z) ~ theta^2/(theta^2-b^2) e^{-z/theta} (Eq. 40, dominant term)
    b, th, z = 2.0, 9.0, 5000.0
    assert gamma_logsf(z, b, th) == pytest.approx(-z / th + math.log(th**2 / (th**2 - b**2)), abs=1e-9)
    # b > theta: dominant term b/(2(b-theta)) e^{-z/b}
    assert gamma_logsf(z, th, b) == pytest.approx(-z / th + math.log(th / (2 * (th - b))), abs=1e-9)
    # far left tail: log Gamma(z) = z/b + log(b/(2(b+theta)))
    assert gamma_logcdf(-5000.0, b, th) == pytest.approx(-2500 + math.log(b / 22), abs=1e-9)
    assert np.isfinite(gamma_logsf(1e6, b, th)) and np.isfinite(gamma_logcdf(-1e6, b, th))


@pytest.mark.parametrize("c", [1, 5, 50])
def test_allocation_reproduces_tables_4_and_6(c):
    # Table 4 (non-monotone) and Table 6 (monotone) closed forms
    table4 = {
        "exp": (math.sqrt(2) * c) ** (2 / 3),
        "gum": (math.pi * c / math.sqrt(3)) ** (2 / 3),
        "lap": (2 * c) ** (2 / 3),
        "gau": (2 * c) ** (2 / 3),
    }
    table6 = {
        "exp": (c / math.sqrt(2)) ** (2 / 3),
        "gum": (math.pi * c / (2 * math.sqrt(3))) ** (2 / 3),
        "lap": c ** (2 / 3),
        "gau": c ** (2 / 3),
    }
    for fam in table4:
        assert allocation_ratio(c, fam, monotone=False) == pytest.approx(table4[fam], rel=1e-12)
        assert allocation_ratio(c, fam, monotone=True) == pytest.approx(table6[fam], rel=1e-12)
        e1, e2 = allocation(0.7, c, fam)
        assert e1 + e2 == pytest.approx(0.7) and e2 / e1 == pytest.approx(table4[fam])


def test_allocation_minimises_variance():
    # w* is the argmin of V(w) (Eq. 51-53): a grid search never beats it
    for fam in ("exp", "gum", "lap"):
        for mono in (False, True):
            ws = np.linspace(0.5, 60, 20000)
            v = [comparison_variance(1.0, 50, fam, mono, w=w) for w in ws]
            assert min(v) >= comparison_variance(1.0, 50, fam, mono) * (1 - 1e-9)
    # SVT spec Sec. 2.2 minimal V at eps = 1, c = 50: Exp < Gum < Lap, monotone Exp < Lap
    assert comparison_variance(1.0, 50, "exp") == pytest.approx(11859, abs=1)
    assert comparison_variance(1.0, 50, "gum") == pytest.approx(19017, abs=1)
    assert comparison_variance(1.0, 50, "lap") == pytest.approx(22916, abs=1)
    assert comparison_variance(1.0, 50, "exp", True) == pytest.approx(3263, abs=1)
    assert comparison_variance(1.0, 50, "lap", True) == pytest.approx(6189, abs=1)


def test_resample_allocation_costs_epsilon():
    # RESAMPLE: c eps1 + eps2 = eps, and the split minimises c^2 Var(N1) + Var(N2) ([ours])
    c, eps = 10, 1.0
    e1, e2 = allocation(eps, c, "exp", resample=True)
    assert c * e1 + e2 == pytest.approx(eps)
    v = lambda x: 2 / x**2 + (2 * c) ** 2 / (eps - c * x) ** 2
    xs = np.linspace(1e-4, eps / c - 1e-4, 100001)
    assert v(e1) <= v(xs).min() * (1 + 1e-6)
