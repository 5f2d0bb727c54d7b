"""Error quantiles behind the released half-widths (mechanisms/mean/quantiles.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanisms.mean import Hourglass, gamma_star
from mechanisms.mean.quantiles import (
    hourglass_abs_quantile,
    integer_abs_quantile,
    laplace_combo_abs_quantile,
    laplace_combo_tail,
)

REPS = 400_000
SE = math.sqrt(0.95 * 0.05 / REPS)


@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0])
def test_hourglass_quantile_matches_simulation(eps):
    """P(|Z1 - alpha K| <= q(alpha)) = 0.95 within 4 SE, for AVG-type alpha in [0, 1]
    and SUM-type alpha = -l/w outside it; the Laplace-limit value is rejected at
    eps = 4 (the check can fail)."""
    z1, k = Hourglass(eps).sample(np.random.default_rng(21), REPS)
    alphas = [0.0, 0.3, 0.5, 0.85, -1.5, 2.0]
    q = hourglass_abs_quantile(eps, gamma_star(eps), alphas)
    for a, qa in zip(alphas, q):
        assert np.mean(np.abs(z1 - a * k) <= qa) == pytest.approx(0.95, abs=4 * SE)
    if eps == 4.0:
        lap = laplace_combo_abs_quantile(0.7 / eps, 0.3 / eps)
        assert abs(np.mean(np.abs(z1 - 0.3 * k) <= lap) - 0.95) > 10 * SE


def test_hourglass_quantile_symmetric_and_monotone():
    for eps in [0.05, 0.3, 2.0]:
        al = np.linspace(0, 1, 21)
        q = hourglass_abs_quantile(eps, gamma_star(eps), al)
        assert np.allclose(q, q[::-1], rtol=1e-6)  # alpha <-> 1 - alpha
        assert np.all(np.diff(q[:11]) <= 1e-9 * q[0])  # nonincreasing on [0, 1/2]


@pytest.mark.parametrize("a,c", [(1.0, 0.0), (2.0, 2.0), (3.0, 0.5), (0.2, 5.0)])
def test_laplace_combo_quantile(a, c):
    rng = np.random.default_rng(5)
    z = a * rng.laplace(0, 1, REPS) + c * rng.laplace(0, 1, REPS)
    q = laplace_combo_abs_quantile(a, c)
    assert np.mean(np.abs(z) <= q) == pytest.approx(0.95, abs=4 * SE)
    assert laplace_combo_tail(q, a, c) == pytest.approx(0.05, rel=1e-9)
    if c == 0:
        assert q == pytest.approx(a * math.log(20))


def test_integer_quantile():
    ks = np.arange(-3, 4)
    pmf = np.array([0.01, 0.02, 0.1, 0.74, 0.1, 0.02, 0.01])
    assert integer_abs_quantile(ks, pmf, 0.94) == 1
    assert integer_abs_quantile(ks, pmf, 0.95) == 2
    assert integer_abs_quantile(ks, pmf, 0.5) == 0
