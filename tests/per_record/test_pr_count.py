"""Algorithm 1 (PrDP count): Example 5.2 aggregation, and the Thm 5.1 / spec 3.3
explicit bound in >= 1 - beta of runs (with a check that a wrong scale fails it)."""

import math

import numpy as np
import pytest

from mechanisms.per_record import Levels, PrDPCount, first_passing, inverse_function
from mechanisms.per_record.core import LevelHistogram, tail_k
from mechanisms.rng import SeededSource

EX52 = inverse_function(1e4, 1_280_000_000, 4.096)  # eps_min = 7.8125e-6, L = 19
# Example 5.2 / Fig. 1 noisy counts of X_12..X_19 (spec 3.4 ungarbled values)
EX52_TOP = [1729.38, 4042.73, 2384.80, 1042.90, 484.86, 199.22, 92.26, -0.14]


def _binomial_ceiling(n_runs, beta):
    # violations ~ Bin(n, p) with p <= beta: allow mean + 3 sd
    return beta * n_runs + 3 * math.sqrt(n_runs * beta * (1 - beta))


def test_example_5_2_aggregation(monkeypatch):
    lv = Levels.for_function(EX52)
    assert lv.L == 19 and lv.eps_min == 7.8125e-06
    m = PrDPCount(lv, beta=0.1)
    # paper threshold T_12 = ln(L/beta)/lo_12 = 327.94 at beta = 0.1 (spec 3.4)
    assert m.scan.paper_T[11] == pytest.approx(327.94, abs=0.01)
    # integer thresholds: T_i = k_i + 1 within [paper T_i, paper T_i + 2]
    for t, pt in zip(m.scan.T, m.scan.paper_T):
        assert pt <= t <= pt + 2
    # levels 1..11 below their thresholds (any such values), 12..19 as in Fig. 1
    low = [0.5 * t for t in m.scan.paper_T[:11]]
    noisy = low + EX52_TOP
    assert first_passing(noisy, m.scan.paper_T) == 12
    monkeypatch.setattr(m.scan, "noisy", lambda values, source: noisy)
    monkeypatch.setattr(m.scan, "T", m.scan.paper_T)
    r = m.release({12: 1700}, SeededSource(0))
    assert r.ell == 12 and r.eps_tau == pytest.approx(0.016, rel=1e-12)  # 2^11 eps_min
    assert r.value == pytest.approx(9976.01, abs=1e-6)
    # nothing passes -> ell = L and only the last level is output (spec 11.5)
    assert first_passing([-1.0] * 19, m.scan.paper_T) == 19


def test_empty_levels_are_noised_and_inputs_validated():
    lv = Levels(1e-3, 1.0)
    m = PrDPCount(lv)
    src = SeededSource(5)
    vals = [m.scan.noisy([0] * lv.L, src) for _ in range(50)]
    assert np.all(np.std(vals, axis=0) > 0)  # every level gets noise
    with pytest.raises(ValueError):
        m.release({lv.L + 1: 3}, src)  # level outside the public grid
    with pytest.raises(ValueError):
        LevelHistogram.from_rows([(1, -2)], lv.L)


def test_tail_k_is_the_discrete_laplace_quantile():
    for scale in (0.3, 1.0, 17.0, 5e3):
        p = math.exp(-1 / scale)
        k = tail_k(scale, 0.01)
        assert 2 * p ** (k + 1) / (1 + p) <= 0.01 < 2 * p**k / (1 + p)
    big = 1e9  # conservative branch: never below the continuous quantile
    assert tail_k(big, 0.01) >= big * math.log(1 / 0.01)


# fixtures: level -> count, and eps_min(D) (a budget inside the first non-empty level)
FIXTURES = [
    ({10: 3, 11: 40, 12: 1700, 13: 4000, 14: 2400, 15: 1000, 16: 500, 17: 200, 18: 90, 19: 5}, 1.5),
    ({15: 1, 16: 0, 17: 30, 18: 200, 19: 10}, 1.1),
]


def _run(m, counts, runs, seed):
    src = SeededSource(seed)
    out = [m.release(counts, src) for _ in range(runs)]
    return np.array([r.value for r in out]), np.array([r.eps_tau for r in out])


@pytest.mark.parametrize("fx", range(len(FIXTURES)))
def test_theorem_5_1_bound_holds_in_1_minus_beta_of_runs(fx):
    counts, rel = FIXTURES[fx]
    lv = Levels.for_function(EX52)
    k = min(counts)
    eps_min_D = rel * lv.lo[k - 1]  # in level k: (lo_k, 2 lo_k]
    beta, runs = 0.1, 400
    bound = 8 * math.log(lv.L / beta) / eps_min_D  # spec 3.3 explicit bound
    n = sum(counts.values())

    def violations(m):
        vals, eps_tau = _run(m, counts, runs, 100 + fx)
        return int(np.sum((np.abs(vals - n) > bound) | (eps_tau < eps_min_D / 2))), vals

    m = PrDPCount(lv, beta)
    v, vals = violations(m)
    assert v <= _binomial_ceiling(runs, beta)
    assert m.error_bound(k) <= bound + 2 * lv.L  # the discrete form is the same bound
    # the check is not vacuous: 16x the noise scale (same thresholds) violates it often
    bad = PrDPCount(lv, beta)
    bad.scan.scales = [s * 16 for s in bad.scan.scales]
    assert violations(bad)[0] > _binomial_ceiling(runs, beta)


def test_error_is_of_order_one_over_eps_min():
    """Thm 5.1: error ~ ln(L/beta)/eps_min(D), independent of eps_min = 7.8e-6 (naive ~ 1/eps_min)."""
    lv = Levels.for_function(EX52)
    counts, _ = FIXTURES[0]
    vals, eps_tau = _run(PrDPCount(lv), counts, 200, 7)
    err = np.abs(vals - sum(counts.values()))
    assert np.median(err) < 4 * math.log(lv.L / 0.1) / lv.lo[9]
    assert np.median(err) < 0.01 / lv.eps_min  # >> 100x better than the naive Lap(1/eps_min)
