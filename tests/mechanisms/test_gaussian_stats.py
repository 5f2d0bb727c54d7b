"""AVG on a zCDP budget (mechanisms.gaussian_stats): a discrete Gaussian SUM and COUNT at ρ/2 each,
the AVG their clamped ratio; its privacy map, its batch form's law, and its interval's coverage."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from mechanisms import SeededSource
from mechanisms.discrete_gaussian import GaussianCount, GaussianSum
from mechanisms.gaussian_stats import GaussianMean, GaussianVariance


def test_privacy_map_is_the_two_halves_composed():
    m = GaussianMean(Fraction(1, 10), 0, 100, contributions_sq=40)
    s = GaussianSum(Fraction(1, 20), 0, 100, contributions_sq=40)
    c = GaussianCount(Fraction(1, 20), 40)
    assert m.privacy_map_exact(1) == s.privacy_map_exact(1) + c.privacy_map_exact(1) <= Fraction(1, 10)
    assert m.privacy_map_exact(2) == 4 * m.privacy_map_exact(1)  # a group of 2 units: Δ₂ doubles


def test_value_is_the_clamped_ratio_of_its_parts_and_batch_equals_cell_by_cell():
    m = GaussianMean(Fraction(1, 2), 0, 100, integer=True)
    sums, counts = [500, 0, 9000, 3], [10, 0, 100, 1]
    noise = m.draw_many(4, SeededSource(3))
    batch = m.apply_many((np.array(sums), np.array(counts)), noise)
    for c in range(4):
        one = m.apply((sums[c], counts[c]), (int(noise[0][c]), int(noise[1][c])))
        assert batch.values[c] == one.value
        s, n = one.parts[0].value, one.parts[1].value
        assert one.value == (min(max(s / n, 0), 100) if n >= 1 else 50)


def test_the_interval_covers_the_true_average_at_least_95_percent():
    # the bound is a union of two 97.5% intervals: coverage ≥ 95% by construction; over 4,000
    # releases (fixed seed) the observed rate is ≥ 95% − 3 binomial standard deviations
    m = GaussianMean(Fraction(1, 20), 0, 100, contributions_sq=1)
    s, n, trials = 40 * 300, 300, 4000
    src = SeededSource(11)
    noise = m.draw_many(trials, src)
    rel = m.apply_many((np.full(trials, s), np.full(trials, n)), noise)
    cover = sum(
        abs(a - s / n) <= m._bound(float(ss), float(nn))  # each cell's own bound
        for a, ss, nn in zip(rel.values, rel.parts[0].values, rel.parts[1].values)
    )
    assert cover / trials >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / trials)
    assert rel.half_width >= max(
        m._bound(float(a), float(b)) for a, b in zip(rel.parts[0].values, rel.parts[1].values)
    )


def test_variance_map_is_its_three_moments_and_its_bound_covers():
    # VAR_POP of values in [0, 100] at ρ 1/2 over 500 rows: the three moments at ρ/6 each, the
    # bound from MomentVariance's Bonferroni box; over 1,000 releases (fixed seed) the true variance
    # lies within the bound at least 95% − 3 binomial standard deviations of the time
    v = GaussianVariance(Fraction(1, 2), 0, 100, integer=True, func="var_pop", contributions_sq=4)
    parts = v._parts
    assert (
        v.privacy_map_exact(1) == sum((p.privacy_map_exact(1) for p in parts), Fraction(0)) <= Fraction(1, 2)
    )
    assert all(p.name.startswith("discrete_gaussian") for p in parts)
    rng = np.random.default_rng(5)
    xs = rng.integers(0, 101, 500)
    y2 = 2 * xs - 100  # half units, as MomentVariance reads integer columns
    moments = (len(xs), int(y2.sum()), int((y2 * y2).sum()))
    truth = float(np.var(xs))
    src, trials = SeededSource(9), 1000
    hits = 0
    for _ in range(trials):
        r = v.release(moments, src)
        hits += abs(r.value - truth) <= r.half_width
    assert hits / trials >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / trials)
