"""MomentVariance: privacy map, sensitivities, the estimator, and the coverage of its bound."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from mech_testutil import ALLOWED, RecordingSource

from mechanisms import SeededSource
from mechanisms.variance import VARIANCE_FUNCS, MomentVariance


def test_privacy_map_is_epsilon_and_thirds():
    m = MomentVariance(Fraction(3, 4), 0, 100, integer=True)
    assert m.privacy_map_exact(1) == Fraction(3, 4)
    assert m.privacy_map_exact(2) == Fraction(3, 2)
    assert all(p.privacy_map_exact(1) == Fraction(1, 4) for p in m._parts)
    # centred: Σ(2x-(L+U)) moves by ≤ U-L, Σ(2x-(L+U))² by ≤ (U-L)² (half units)
    assert (m.sum_measurement.delta, m.sumsq_measurement.delta) == (100, 100**2)
    f = MomentVariance(1.0, 10.0, 60.0)
    assert (f.sum_measurement.delta, f.sumsq_measurement.delta) == (25.0, 625.0)


def _moments(xs, lo, hi, integer):
    c = np.clip(np.asarray(xs, dtype=float), lo, hi)
    if integer:
        y = (2 * c - (lo + hi)).astype(np.int64)
        return len(c), int(y.sum()), int((y * y).sum())
    y = c - (lo + hi) / 2
    return len(c), math.fsum(y), math.fsum(y * y)


@pytest.mark.parametrize("func", VARIANCE_FUNCS)
def test_without_noise_it_is_the_clamped_statistic(func):
    xs = np.random.default_rng(1).integers(0, 101, 500)
    m = MomentVariance(1.0, 0, 100, integer=True, func=func)
    rel = m.apply(_moments(xs, 0, 100, True), (0, 0, 0))
    want = {
        "var_pop": np.var(xs),
        "var_samp": np.var(xs, ddof=1),
        "stddev_pop": np.std(xs),
        "stddev_samp": np.std(xs, ddof=1),
    }[func]
    assert rel.value == pytest.approx(want, rel=1e-12)
    assert 0 < rel.half_width <= m.cap


def test_estimate_is_clamped_to_the_possible_range():
    m = MomentVariance(1.0, 0, 10, integer=True)
    assert m.apply((1, 0, 0), (-50, 0, 10**6)).value == 25.0  # h² = 25
    assert m.apply((1, 0, 0), (0, 0, -(10**6))).value == 0.0


def test_noise_is_exact_integer_sampling_only():
    src = RecordingSource(7)
    MomentVariance(0.5, 0.0, 1000.0, func="stddev_samp").release((100, 0.0, 1000.0), src)
    assert src.calls and {c[0] for c in src.calls} <= ALLOWED


@pytest.mark.parametrize(
    "func, lo, hi, integer", [("var_pop", 0, 100, True), ("stddev_samp", 0.0, 500000.0, False)]
)
def test_stated_half_width_covers_the_truth(func, lo, hi, integer):
    """The bound holds with probability ≥ 95% (Bonferroni + interval arithmetic, so in fact
    more): over 400 seeded releases at n = 2000, ε = 1, at most 5% + 3σ miss."""
    rng = np.random.default_rng(3)
    xs = rng.gamma(2.0, (hi - lo) / 8, 2000) + lo
    if integer:
        xs = np.round(xs)
    c = np.clip(xs, lo, hi)
    truth = {"var_pop": np.var(c), "stddev_samp": np.std(c, ddof=1)}[func]
    m = MomentVariance(1.0, lo, hi, integer=integer, func=func)
    mom, src = _moments(xs, lo, hi, integer), SeededSource(11)
    trials = 400
    misses, widths = 0, []
    for _ in range(trials):
        rel = m.release(mom, src)
        misses += abs(rel.value - truth) > rel.half_width
        widths.append(rel.half_width)
    assert misses <= trials * 0.05 + 3 * math.sqrt(trials * 0.05 * 0.95)
    assert np.median(widths) < 0.5 * truth  # informative at n = 2000, ε = 1


def test_siblings_derive_from_the_same_moments():
    m = MomentVariance(1.0, 0, 100, integer=True, func="var_pop")
    rel = m.release((1000, 1000, 500000), SeededSource(2))
    sd = m.derive(rel, "stddev_pop")
    assert sd.value == pytest.approx(math.sqrt(rel.value)) and sd.parts == rel.parts
    assert m.derive(rel, "count") is rel.parts[0]
    samp = m.derive(rel, "var_samp")
    assert samp.value == pytest.approx(rel.value * rel.parts[0].value / (rel.parts[0].value - 1))
