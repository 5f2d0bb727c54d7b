"""Privacy of the randomizers: exact enumeration (spec 3.1 / Prop. 4, Prop. 2), law of the sampler."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from mechanisms.metric_ldp import (
    DimSpec,
    GroupSpec,
    bucketize,
    guarantee,
    perturb,
    perturb_buckets,
    report_probability,
    thermometer,
)
from mechanisms.metric_ldp.laplace import (
    column_variances,
    es_metric,
    fig1_ratio,
    laplace_log_ratio,
    m2_scales,
    m2_scales_numeric,
    m2_total_error,
    she_total_error,
)
from mechanisms.rng import SeededSource

CASES = [((1,), (1.0,)), ((2,), (0.7,)), ((4,), (1.0,)), ((3, 2), (1.0, 0.5)), ((2, 2, 2), (0.4, 1.3, 2.0))]


def _max_log_ratios(spec):
    """For every input pair: exact max over all 2^W outputs of ln P[o|x]/P[o|x']."""
    W = sum(spec.ms)
    outputs = list(itertools.product((0, 1), repeat=W))
    inputs = list(itertools.product(*[range(1, m + 1) for m in spec.ms]))
    law = {x: [report_probability(x, o, spec) for o in outputs] for x in inputs}
    for x in inputs:
        assert sum(law[x]) == 1  # a probability law, exactly
    for x, y in itertools.product(inputs, inputs):
        yield x, y, max(math.log(a / b) for a, b in zip(law[x], law[y]))


@pytest.mark.parametrize("ms,eps", CASES)
def test_ratio_enumeration_bounded_and_tight(ms, eps):
    spec = GroupSpec(tuple(DimSpec(0, 1, m, e) for m, e in zip(ms, eps)))
    for x, y, lr in _max_log_ratios(spec):
        E = guarantee(spec, x, y)
        assert lr <= E + 1e-12, (x, y, lr, E)
        # tight with the realised per-step loss ln((1-q~)/q~), which is within 1e-8 of eps
        tight = sum(d.effective_epsilon * abs(a - b) for d, a, b in zip(spec.dims, x, y))
        assert lr == pytest.approx(tight, abs=1e-12)
        assert E - lr < 1e-8 * (1 + E)


def test_enumeration_rejects_a_smaller_claimed_metric():
    spec = GroupSpec((DimSpec(0, 1, 3, 1.0), DimSpec(0, 1, 2, 0.5)))
    worse = GroupSpec((DimSpec(0, 1, 3, 0.5), DimSpec(0, 1, 2, 0.5)))  # claims eps_0 = 0.5
    assert any(lr > guarantee(worse, x, y) + 0.1 for x, y, lr in _max_log_ratios(spec))


def test_realised_flip_probability_is_conservative():
    for eps in (0.01, 0.5, 1.0, 3.0, 10.0):
        d = DimSpec(0, 1, 4, eps)
        assert Fraction(d.flip_num, 2**32) > Fraction(1) / (Fraction(math.exp(eps)) + 1)
        q = 1 / (math.exp(eps) + 1)  # d ln((1-q)/q) = dq / (q(1-q)), dq <= 2^-31
        assert eps - 2**-31 / (q * (1 - q)) * 1.01 < d.effective_epsilon <= eps
        # |q~ - q| <= 2^-31, so lambda moves by <= 2^-30: relative 2^-30 / tanh(eps/2)
        assert d.kappa == pytest.approx(1 / math.tanh(eps / 2), rel=2**-30 / math.tanh(eps / 2) * 1.01)
    with pytest.raises(ValueError):
        DimSpec(0, 1, 4, 1e-12)


def test_thermometer_and_bucketize():
    assert thermometer(np.array([1, 3, 4]), 4).tolist() == [[1, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1]]
    d = DimSpec(0, 100, 100, 1.0)
    assert bucketize(np.array([-5, 0, 0.999, 1, 30, 99.5, 100, 1e9]), d).tolist() == [
        1,
        1,
        1,
        2,
        31,
        100,
        100,
        100,
    ]
    with pytest.raises(ValueError):
        bucketize(np.array([np.nan]), d)


def test_sampler_follows_the_enumerated_law():
    """Chi-square of perturb_buckets' output frequencies vs report_probability (df = 15)."""
    spec = GroupSpec((DimSpec(0, 1, 2, 0.8), DimSpec(0, 1, 2, 1.5)))
    x = (2, 1)
    n = 200_000
    rep = perturb_buckets(np.tile(x, (n, 1)), spec, SeededSource(11))
    codes = rep @ (1 << np.arange(4)[::-1])
    obs = np.bincount(codes, minlength=16)
    outs = list(itertools.product((0, 1), repeat=4))
    exp = np.array([float(report_probability(x, o, spec)) for o in outs]) * n
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    wrong = GroupSpec((DimSpec(0, 1, 2, 1.2), DimSpec(0, 1, 2, 1.5)))  # the test can fail
    exp_w = np.array([float(report_probability(x, o, wrong)) for o in outs]) * n
    assert stats.chisquare(obs, exp_w).pvalue < 1e-6


def test_perturb_uses_the_source_and_is_reproducible():
    spec = GroupSpec((DimSpec(0, 10, 5, 1.0),))
    v = np.linspace(0, 10, 1000)
    a, b = perturb(v, spec, SeededSource(3)), perturb(v, spec, SeededSource(3))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, perturb(v, spec, SeededSource(4)))


@pytest.mark.parametrize("mech,m", [("M3", 6), ("M2", 6)])
def test_laplace_mechanisms_prop2(mech, m):
    spec = GroupSpec((DimSpec(0, 1, m, 0.9),), mechanism=mech, sensitive={2, 5} if mech == "M2" else None)
    for x in range(1, m + 1):
        for y in range(1, m + 1):
            assert laplace_log_ratio(spec, x, y) <= guarantee(spec, (x,), (y,)) + 1e-12
    # a twice-smaller noise scale would violate it for some pair
    s = (m2_scales(m, 0.9, {2, 5}) if mech == "M2" else np.full(m - 1, 1 / 0.9)) / 2
    assert (
        max(
            laplace_log_ratio(spec, x, y, s) - guarantee(spec, (x,), (y,))
            for x in range(1, m + 1)
            for y in range(1, m + 1)
        )
        > 0.1
    )


def test_laplace_noise_law():
    spec = GroupSpec((DimSpec(0, 1, 3, 1.0),), mechanism="M3", grid_bits=4)
    rep = perturb_buckets(np.full(100_000, 2), spec, SeededSource(5))
    z = rep - np.array([0, 16])  # x = 2: 1[2 <= 1] = 0, 1[2 <= 2] = 1 (times K = 16)
    v = column_variances(spec)[0]
    se = math.sqrt(v / len(z))
    assert abs(z.mean()) < 4 * se
    # Var of the sample variance ~ (kurtosis excess 3 for Laplace-like) -> 5% is > 6 SE here
    assert np.var(z, axis=0) == pytest.approx([v, v], rel=0.05)
    assert v / 16**2 == pytest.approx(2.0, rel=0.01)  # -> 2 s^2 for s = 1/eps = 1


def test_m2_closed_form_matches_numeric_and_fig1():
    m, eps = 12, 1.0
    for S in ({1}, {1, 2, 3}, set(range(1, 7)), set()):
        closed = m2_scales(m, eps, S)
        num = m2_scales_numeric(es_metric(m, eps, S))
        assert m2_total_error(num) == pytest.approx(m2_total_error(closed), rel=1e-6)
        E = es_metric(m, eps, S)
        t = 1 / closed
        assert np.all(t[:, None] + t[None, :] <= E + 1e-12 + np.eye(m) * 9)
    # spec 2.1 / 6.1 table for m = 100 (independent of n and eps)
    table = {
        1: 0.4452,
        2: 0.5057,
        5: 0.6171,
        10: 0.7305,
        20: 0.8661,
        30: 0.9443,
        40: 0.9865,
        50: 1.0,
        80: 1.0,
    }
    for k, ref in table.items():
        assert fig1_ratio(100, k, eps=0.7) == pytest.approx(ref, abs=6e-5)
    assert she_total_error(100, 2.0, 10) == 8 * 10 * 100 / 4
