import math
from fractions import Fraction

import numpy as np
import pytest
from mech_testutil import ALLOWED, RecordingSource, dlap_chisq_pvalue

import mechanisms.rng as rng
from mechanisms import (
    GeometricCount,
    LaplaceSum,
    Release,
    SeededSource,
    dlap_half_width,
    dlap_logpmf,
    dlap_pmf,
    dlap_tail,
)

EPS = [0.1, 0.5, 1.0, 2.0]


def max_log_ratio(scale, shift, width):
    """max over outputs o of |log P(o | x) - log P(o | x + shift)| for DLap(scale).

    Outputs: every integer if the range is small, else 4001 evenly spread
    integers plus the kinks of |o| - |o - shift| (0 and shift, +-1).
    """
    if 2 * width + 1 <= 4001:
        o = np.arange(-width, width + 1)
    else:
        o = np.unique(
            np.concatenate(
                [np.linspace(-width, width, 4001).round(), [-1, 0, 1, shift - 1, shift, shift + 1]]
            )
        )
    return float(np.max(np.abs(dlap_logpmf(o, scale) - dlap_logpmf(o - shift, scale))))


@pytest.mark.parametrize("eps", EPS)
def test_geometric_count_dp_ratio(eps):
    m = GeometricCount(eps)
    assert m.scale == 1 / Fraction(eps) and m.epsilon == eps
    width = int(60 * float(m.scale)) + 10
    # neighbouring counts n, n + 1: pmf ratio <= e^eps on every output
    assert max_log_ratio(m.scale, 1, width) <= eps + 1e-12
    # a halved scale must violate the bound (guards against scale bugs)
    assert max_log_ratio(m.scale / 2, 1, width) > eps + 1e-6


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("bounds", [(0, 10), (-7, 3), (-500_000, 500_000)])
def test_laplace_sum_integer_dp_ratio(eps, bounds):
    m = LaplaceSum(eps, *bounds, integer=True)
    delta = max(abs(b) for b in bounds)
    assert m.sensitivity == delta and m.grid == 1 and m.epsilon == eps
    width = int(30 * float(m.scale)) + delta
    # worst-case neighbours: sums S and S + delta
    assert max_log_ratio(m.scale, delta, width) <= eps + 1e-12
    assert max_log_ratio(m.scale / 2, delta, width) > eps + 1e-6


@pytest.mark.parametrize("eps", [0.3, 1.0])
@pytest.mark.parametrize("bounds", [(0.0, 1.0), (-2.5, 1000.25), (-1e-3, 0.0), (0.0, 3e9)])
def test_laplace_sum_float_grid(eps, bounds):
    m = LaplaceSum(eps, *bounds)
    delta = max(abs(b) for b in bounds)
    g = m.grid
    assert g == 2.0 ** round(math.log2(g))  # power of two
    assert 2**20 <= delta / g < 2**21
    assert m.sensitivity == math.floor(delta / g) + 1
    assert m.privacy_map(1) == eps and m.privacy_map(3) == pytest.approx(3 * eps)
    # rounding claim: |round(S/g) - round(S'/g)| <= sensitivity when |S - S'| <= delta
    rs = np.random.default_rng(0)
    s = rs.uniform(-1e3, 1e3, 20_000) * delta
    s2 = s + rs.uniform(-1, 1, s.size) * delta
    assert max(abs(round(a / g) - round(b / g)) for a, b in zip(s, s2)) <= m.sensitivity
    # DP ratio in grid units at the worst-case shift, and a halved scale fails
    width = int(20 * float(m.scale))
    assert max_log_ratio(m.scale, m.sensitivity, width) <= eps + 1e-9
    assert max_log_ratio(m.scale / 2, m.sensitivity, width) > eps + 1e-6
    r = m.release(0.37 * delta, SeededSource(5))
    assert isinstance(r.value, float) and (r.value / g).is_integer()
    assert r.scale == pytest.approx(float(m.scale) * g)


@pytest.mark.parametrize("m,true", [(GeometricCount(0.5), 1234), (LaplaceSum(1.0, -3, 2, integer=True), -17)])
def test_release_noise_follows_declared_scale(m, true):
    src = SeededSource(99)
    noise = [m.release(true, src).value - true for _ in range(50_000)]
    assert all(type(z) is int for z in noise[:100])
    assert dlap_chisq_pvalue(noise, m.scale) > 1e-4


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(2), Fraction(37, 10), Fraction(20)])
def test_tail_formula_matches_pmf_sum(scale):
    k = np.arange(0, 40)
    direct = np.array([1 - dlap_pmf(np.arange(-j, j + 1), scale).sum() for j in k])
    assert np.allclose(dlap_tail(k, scale), direct, rtol=1e-9, atol=1e-13)


@pytest.mark.parametrize(
    "scale",
    [
        Fraction(1, 2),
        Fraction(1),
        Fraction(37, 10),
        Fraction(20),
        Fraction(10**6),
        Fraction(500_000) / Fraction(0.1),
    ],
)
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_half_width_is_minimal(scale, level):
    k = dlap_half_width(scale, level)
    assert dlap_tail(k, scale) <= 1 - level  # P(|Z| <= k) >= level
    if k > 0:
        assert dlap_tail(k - 1, scale) > 1 - level  # k - 1 covers < level


@pytest.mark.parametrize(
    "m",
    [
        GeometricCount(0.5),
        GeometricCount(0.05),
        LaplaceSum(0.7, 0.0, 3.5),
        LaplaceSum(1.0, -4, 9, integer=True),
    ],
)
def test_half_width_empirical_coverage(m):
    n, true = 100_000, 1000
    hw = m.half_width()
    src = SeededSource(2024)
    cover = sum(abs(m.release(true, src).value - true) <= hw for _ in range(n)) / n
    exact = 1 - float(dlap_tail(round(hw / m.grid), m.scale))
    assert exact >= 0.95
    # empirical >= exact coverage minus 5 binomial SE, sqrt(c (1 - c) / n)
    assert cover >= exact - 5 * math.sqrt(exact * (1 - exact) / n)


def test_release_is_frozen_and_carries_metadata():
    r = GeometricCount(1.0).release(10, SeededSource(0))
    assert isinstance(r, Release) and r.mechanism == "geometric_count"
    assert r.epsilon == 1.0 and r.half_width == dlap_half_width(1, 0.95) and r.scale == 1.0
    with pytest.raises(Exception):
        r.value = 3


def test_measurements_draw_only_through_given_source(monkeypatch):
    import os
    import random
    import secrets

    def boom(*a, **k):
        raise AssertionError("hidden randomness source used")

    for mod, fn in [
        (os, "urandom"),
        (secrets, "randbelow"),
        (secrets, "randbits"),
        (random, "random"),
        (random, "getrandbits"),
        (random, "randrange"),
    ]:
        monkeypatch.setattr(mod, fn, boom)
    ms = [
        (GeometricCount(0.5), 7),
        (LaplaceSum(0.5, 0, 9, integer=True), 40),
        (LaplaceSum(0.5, -1.5, 2.0), 3.25),
    ]
    runs = []
    for _ in range(2):
        src = RecordingSource(31)
        runs.append([m.release(v, src).value for m, v in ms for _ in range(50)])
        assert src.calls and {c[0] for c in src.calls} <= ALLOWED
        assert all(type(a) is int for c in src.calls for a in c[1:])
    assert runs[0] == runs[1]  # same seed -> same output: no other entropy


def test_source_none_means_csprng(monkeypatch):
    used = []
    orig = rng.SystemRandomSource.randbelow
    monkeypatch.setattr(rng.SystemRandomSource, "randbelow", lambda self, n: used.append(n) or orig(self, n))
    GeometricCount(1.0).release(3)
    assert used


def test_privacy_map_group_privacy_and_validation():
    m = GeometricCount(0.25)
    assert m.privacy_map(0) == 0 and m.privacy_map(4) == 1.0
    assert m.privacy_map_exact(3) == 3 * Fraction(0.25)
    for bad in [0, -1, float("nan"), float("inf")]:
        with pytest.raises(ValueError):
            GeometricCount(bad)
    with pytest.raises(ValueError):
        m.privacy_map(-1)
    with pytest.raises(ValueError):
        LaplaceSum(1.0, 0, 0, integer=True)
    with pytest.raises(ValueError):
        LaplaceSum(1.0, 5, 1, integer=True)
    with pytest.raises(TypeError):
        LaplaceSum(1.0, 0.5, 1, integer=True)
    assert LaplaceSum(1.0, 0.0, 10.0, integer=True).upper == 10  # integral floats ok


def test_clamp_sum():
    assert LaplaceSum(1.0, 0, 10, integer=True).clamp_sum([-5, 3, 50]) == 13
    assert LaplaceSum(1.0, -1.0, 1.0).clamp_sum([0.1] * 10 + [5.0, -9.0]) == math.fsum([0.1] * 10)
    with pytest.raises(ValueError):
        LaplaceSum(1.0, -1.0, 1.0).clamp_sum([float("nan")])
