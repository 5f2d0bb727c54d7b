"""PrLDP count (Algorithms 3-5, spec 7): randomizer structure and the analyzer's
explicit bound err <= 8 sqrt(c n) ln(L/beta)/eps_min (spec 8) in >= 1 - beta of runs."""

import math
from fractions import Fraction

import numpy as np
import pytest

from mechanisms.per_record import Levels, PrLDPCount, PrLDPFramework
from mechanisms.rng import SeededSource

LV = Levels(0.01, 10.24)  # L = 10


def test_randomizer_sends_indicator_plus_level_noise():
    m = PrLDPCount(LV)
    e = 0.3  # level of 0.3: (0.16, 0.32] -> 5
    lvl = int(LV.level(e))
    assert lvl == 5
    a, b = m.randomize(e, SeededSource(8)), m.randomize(None, SeededSource(8))
    assert len(a) == LV.L and np.array_equal(np.array(a) - np.array(b), np.eye(LV.L, dtype=int)[lvl - 1])
    assert m.scales[lvl - 1] == 1 / Fraction(float(LV.lo[lvl - 1]))
    assert m.record_epsilon(e) == LV.lo[lvl - 1] <= e


def _dlap_sums(scales, n, runs, rng):
    """Sum over n parties of DLap(s) per level: difference of two geometrics (exact law)."""
    out = np.zeros((runs, len(scales)))
    for i, s in enumerate(scales):
        q = 1 - math.exp(-1 / float(s))
        g = rng.geometric(q, size=(runs, n, 2)) - 1
        out[:, i] = (g[..., 0] - g[..., 1]).sum(axis=1)
    return out


@pytest.mark.parametrize("c_ldp", [8.0, 2.0])
def test_analyzer_bound_holds_in_1_minus_beta_of_runs(c_ldp):
    n, runs, beta = 2000, 300, 0.1
    rng = np.random.default_rng(5)
    levels = np.concatenate([np.full(3, 3), np.full(200, 6), np.full(800, 8), np.full(997, 10)])
    counts = np.bincount(levels, minlength=LV.L + 1)[1:]
    eps_min_D = 1.2 * LV.lo[2]  # inside level 3
    m = PrLDPCount(LV, beta, c_ldp)
    bound = m.error_bound(eps_min_D, n)

    def violations(mech):
        noise = _dlap_sums(mech.scales, n, runs, rng)
        bad = 0
        for row in noise:
            r = mech.analyze((counts + row).astype(int), n)
            bad += abs(r.value - counts.sum()) > bound or r.eps_tau < eps_min_D / 2
        return bad

    assert violations(m) <= beta * runs + 3 * math.sqrt(runs * beta * (1 - beta))
    # a far too small threshold constant lets empty levels pass: the check fails
    assert violations(PrLDPCount(LV, beta, 1e-4)) > beta * runs + 3 * math.sqrt(runs * beta * (1 - beta))


def test_framework_round2_filter_and_budget():
    f = PrLDPFramework(LV, beta=0.1)
    ell = 4
    eps_tau = LV.lo[ell - 1]
    assert f.participates(eps_tau, ell) and not f.participates(np.nextafter(eps_tau, 0), ell)
    assert f.round2_epsilon(ell) == Fraction(float(eps_tau)) / 2
    e = np.array([LV.eps_min, eps_tau, 2 * eps_tau, LV.eps_max])
    assert np.all(f.record_epsilon(e) <= e)
    a = f.round2_randomize(1.0, ell, SeededSource(2)) - f.round2_randomize(None, ell, SeededSource(2))
    assert a == 1
