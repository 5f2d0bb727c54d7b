"""The AVG near its bounds (mechanisms/mean/bias.py): the clamped value's bias is the one the
error law states, and the unclamped value (``consistent = false``) is unbiased — both measured
on the exact sampler from a seeded source, with tolerances from the law."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanisms import SeededSource
from mechanisms.mean import make_mean, sigma2
from mechanisms.mean.bias import (
    clamp_bias,
    laplace_combo_excess,
    raw_bias_bound,
    staircase_abs_tail,
    staircase_excess,
)
from mechanisms.mean.constants import gamma_star
from mechanisms.mean.noise import Staircase
from mechanisms.mean.quantiles import laplace_combo_tail

N = 20_000  # releases of one cell, drawn at once (the batch path the proxy serves)
Z = 4.5  # a 4.5-sigma tolerance on a mean of N draws: fails by chance with probability < 1e-5


def _releases(m, total, n, seed):
    """N releases of one cell (sum ``total``, ``n`` rows) through ``apply_many``."""
    noise = m.draw_many(N, SeededSource(seed))
    rel = m.apply_many((np.full(N, total, dtype=np.int64), np.full(N, n, dtype=np.int64)), noise)
    return np.asarray(rel.values, dtype=float)


def test_unclamped_avg_is_unbiased_where_the_clamped_one_is_not():
    """The audit's case: true AVG 2.6 on [0, 500] (100 rows at ε 1). Theory (spec 4.2, exact
    at γ*): sd = w'·σ(ε)·√((1 − α)² + α²)/n per release; the unclamped mean error is within
    Z·sd/√N plus its second-order bias bound w'σ²/n² of 0. The clamped one is biased upward by
    about β(d/h)·h (:func:`clamp_bias`), far outside that tolerance."""
    eps, lo, hi, n = 1.0, 0, 500, 100
    total, mu = 260, 2.6
    raw = make_mean("hourglass", eps, lo, hi, integer=True, clamp=False)
    clamped = make_mean("hourglass", eps, lo, hi, integer=True)
    alpha = (mu - raw.lo_t) / raw.w_t
    sd = raw.w_t * math.sqrt(sigma2(eps) * ((1 - alpha) ** 2 + alpha**2)) / n
    tol = Z * sd / math.sqrt(N) + raw_bias_bound(raw, n)
    err_raw = float(np.mean(_releases(raw, total, n, 7))) - mu
    err_clamped = float(np.mean(_releases(clamped, total, n, 7))) - mu
    assert abs(err_raw) <= tol
    assert err_clamped > 4 * tol  # the clamp's bias is real at this distance from the bound


def test_clamped_bias_at_a_bound_is_the_stated_share_of_the_half_width():
    """True AVG at the lower bound (all rows 0), 400 rows: the clamped mean error is
    β(0)·h (h the 95% half-width at that AVG) within Z·sd/√N, sd of the clamped error
    ≤ that of the unclamped (w'σ/n), plus the second-order term."""
    for eps in (0.5, 1.0, 2.0):
        m = make_mean("hourglass", eps, 0, 500, integer=True)
        n = 400
        h = m.half_width(0.95, n_hat=n, avg_hat=0.0)
        law = clamp_bias(m)
        sd = m.w_t * math.sqrt(sigma2(eps)) / n
        got = float(np.mean(_releases(m, 0, n, 11)))
        assert abs(got - law.at_bound * h) <= Z * sd / math.sqrt(N) + raw_bias_bound(m, n)
        assert law.within is not None and 0 < law.within < 1


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_staircase_tail_and_excess_match_the_law(eps):
    """The closed-form tail equals the staircase density's integral (numerically, fine grid),
    and the excess E[(|Z| − s)⁺] equals its integral of the tail."""
    g = gamma_star(eps)
    st = Staircase(eps, g)
    xs = np.linspace(0, 60 / eps, 600_001)
    dens = 2 * st.pdf(xs)
    cdf = np.concatenate(([0.0], np.cumsum((dens[1:] + dens[:-1]) / 2 * np.diff(xs))))
    for x in (0.3, 1.0, 2.5, 7.2):
        i = int(round(x / (xs[1] - xs[0])))
        assert staircase_abs_tail(xs[i], eps, g) == pytest.approx(1 - cdf[i], abs=2e-4)
    for s in (0.0, 1.5):
        sub = np.linspace(s, 60 / eps, 60_001)
        tail = np.array([staircase_abs_tail(float(x), eps, g) for x in sub])
        approx = float(np.sum((tail[1:] + tail[:-1]) / 2 * np.diff(sub)))
        assert staircase_excess(s, eps, g) == pytest.approx(approx, rel=1e-3, abs=1e-6)


def test_laplace_excess_is_the_tail_integral():
    for a, c in ((2.0, 0.0), (1.0, 1.0), (3.0, 1.0)):
        hs = np.linspace(0.5, 200, 400_001)
        tail = np.array([laplace_combo_tail(float(h), a, c) for h in hs[::100]])
        approx = float(np.sum((tail[1:] + tail[:-1]) / 2 * np.diff(hs[::100])))
        assert laplace_combo_excess(0.5, a, c) == pytest.approx(approx, rel=1e-3)
