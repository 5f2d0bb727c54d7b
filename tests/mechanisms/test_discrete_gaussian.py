"""The discrete Gaussian N_Z(0, σ²) (Canonne, Kamath, Steinke 2020; CKS): samplers, analysis,
privacy map, measurements.

Laws: chi-square goodness of fit of the scalar and the batch sampler against the EXACT pmf at
a fixed seed, p > 1e-4 (Cochran bins: every expected count >= 5; 1e-4 is the test's
false-rejection rate under the law, the seed fixes the verdict); the same test must reject
draws at a σ² 5% off (power). The reference pmf is computed here independently of the module
(term-by-term sums in ``math.fsum``). Frequencies: within 5 binomial standard errors,
5 sqrt(P (1 - P)/n). Variances: CKS Prop. 19, Var < σ².
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from fractions import Fraction

import numpy as np
import pytest
from mech_testutil import ALLOWED, RecordingSource
from scipy import stats

import mechanisms.discrete_gaussian as dg
import mechanisms.exact_real as exact_real
from mechanisms import SeededSource
from mechanisms.discrete_gaussian import (
    DiscreteGaussian,
    GaussianCount,
    GaussianSum,
    dgauss_cdf,
    dgauss_half_width,
    dgauss_pmf,
    dgauss_tail,
    dgauss_variance,
    discrete_gaussian_array,
    rho_of,
    sigma2_for,
)

P_MIN = 1e-4
SIGMA2S = [Fraction(1, 4), Fraction(1), Fraction(37, 10), Fraction(250), Fraction(3001, 3)]


def _weights(s2: float, radius: int) -> tuple[np.ndarray, float]:
    """exp(-y²/(2σ²)) for |y| <= radius, and C(σ²) summed term by term far into the tail."""
    far = int(40 * math.sqrt(s2)) + 2
    c = math.fsum(math.exp(-y * y / (2 * s2)) for y in range(-far, far + 1))
    ys = np.arange(-radius, radius + 1)
    return np.exp(-(ys.astype(float) ** 2) / (2 * s2)), c


def _ref_tail(k: int, s2: float) -> float:
    """P[|Z| > k] by direct summation (independent of the module's forms)."""
    far = k + int(40 * math.sqrt(s2)) + 2
    _, c = _weights(s2, 0)
    return 2 * math.fsum(math.exp(-y * y / (2 * s2)) for y in range(k + 1, far + 1)) / c


def _chisq_pvalue(samples, s2: float) -> float:
    """Chi-square GOF p-value vs N_Z(0, σ²): bins z in [-K, K] and two pooled tails, K the
    largest keeping every expected count >= 5 (Cochran)."""
    x = np.asarray(samples, dtype=np.int64)
    n = x.size
    far = int(40 * math.sqrt(s2)) + 2
    w, c = _weights(s2, far)
    pmf = w / c  # index y + far
    k = 0
    while n * pmf[far + k + 1] >= 5 and n * pmf[far + k + 2 :].sum() >= 5:
        k += 1
    tail = pmf[far + k + 1 :].sum()
    probs = np.concatenate([[tail], pmf[far - k : far + k + 1], [tail]])
    inner = np.bincount(x[np.abs(x) <= k] + k, minlength=2 * k + 1)
    observed = np.concatenate([[np.sum(x < -k)], inner, [np.sum(x > k)]])
    return float(stats.chisquare(observed, n * probs / probs.sum()).pvalue)


def _binned_pvalue(samples, s2: float, nbins: int = 200) -> float:
    """Chi-square GOF p-value vs N_Z(0, σ²) over ``nbins`` bins of nearly equal exact mass
    (for large σ, where one bin per integer would hold few draws)."""
    far = int(40 * math.sqrt(s2)) + 2
    w, c = _weights(s2, far)
    cdf = np.cumsum(w / c)  # P[Z <= y], index y + far
    cuts = np.unique(
        np.searchsorted(cdf, np.arange(1, nbins) / nbins)
    )  # bin i: y + far in (cuts[i-1], cuts[i]]
    mass = np.diff(np.concatenate([[0.0], cdf[cuts], [1.0]]))
    x = np.asarray(samples, dtype=np.int64) + far
    observed = np.bincount(np.searchsorted(cuts, x, side="left"), minlength=mass.size)
    return float(stats.chisquare(observed, x.size * mass / mass.sum()).pvalue)


# -- the samplers' laws ----------------------------------------------------------------------
@pytest.mark.parametrize("s2", SIGMA2S)
def test_scalar_sampler_has_the_exact_law(s2):
    src = SeededSource(100 + int(s2))
    d = DiscreteGaussian(s2)
    xs = [d.sample(src) for _ in range(40_000)]
    assert all(type(x) is int for x in xs[:100])
    assert _chisq_pvalue(xs, float(s2)) > P_MIN


@pytest.mark.parametrize("s2", SIGMA2S)
def test_batch_sampler_has_the_exact_law(s2):
    zs = discrete_gaussian_array(200_000, s2, SeededSource(200 + int(s2)))
    assert zs.dtype == np.int64 and zs.shape == (200_000,)
    assert _chisq_pvalue(zs, float(s2)) > P_MIN


@pytest.mark.parametrize("s2", [Fraction(1), Fraction(37, 10), Fraction(250)])
def test_the_chi_square_rejects_a_sigma2_five_percent_off(s2):
    """Power: the same test on draws at 1.05 σ² must reject (so the law tests can fail)."""
    zs = discrete_gaussian_array(200_000, s2 * Fraction(21, 20), SeededSource(300 + int(s2)))
    assert _chisq_pvalue(zs, float(s2)) < P_MIN


@pytest.mark.parametrize("s2", [Fraction(10**6) + Fraction(1, 7), Fraction(10**7, 3)])
def test_batch_sampler_with_wide_buckets_has_the_exact_law(s2):
    """σ >= 2^9: a bucket of the acceptance bounds spans several |y| (w = floor(σ) >> 8)."""
    assert dg._buckets(s2.numerator, s2.denominator, dg._t_of(s2)).w > 1
    zs = discrete_gaussian_array(200_000, s2, SeededSource(77))
    assert _binned_pvalue(zs, float(s2)) > P_MIN
    assert _binned_pvalue(zs, float(s2) * 1.05) < P_MIN  # power: 5% off in σ² is rejected


@pytest.mark.parametrize("s2", [Fraction(5, 3), Fraction(10**6) + Fraction(1, 7), Fraction(10**14, 3)])
def test_bucket_bounds_hold_every_value_in_the_bucket(s2):
    """lo_j <= 2^32 A(s) <= hi_j for every s of a bucket (each s's exact interval), on buckets
    below, across and above σ²/t and far in the tail."""
    p, q, t = s2.numerator, s2.denominator, dg._t_of(s2)
    bk = dg._Buckets(p, q, t)
    centre = (p // (q * t)) // bk.w
    for j in sorted({0, 1, centre - 1, centre, centre + 1, 2 * centre + 3, 9 * centre + 5}):
        if j < 0:
            continue
        lo, hi = bk.bounds(np.array([j * bk.w], dtype=np.int64))
        for s in range(j * bk.w, j * bk.w + bk.w, max(1, bk.w // 64)):
            a_lo, a_hi = exact_real.exp_neg_interval((s * q * t - p) ** 2, 2 * p * q * t * t, 32)
            assert lo[0] <= a_lo and min(a_hi, 1 << 32) <= hi[0], (j, s)  # A <= 1


def test_scalar_and_batch_draw_the_same_law():
    """Two-sample chi-square (homogeneity) of scalar and batch draws at σ² = 37/10."""
    s2 = Fraction(37, 10)
    src = SeededSource(41)
    xs = np.array([DiscreteGaussian(s2).sample(src) for _ in range(30_000)])
    ys = discrete_gaussian_array(30_000, s2, SeededSource(42))
    k = 6
    table = np.array([np.bincount(np.clip(v, -k, k) + k, minlength=2 * k + 1) for v in (xs, ys)])
    assert float(stats.chi2_contingency(table)[1]) > P_MIN


def test_batch_sampler_at_a_huge_sigma2_has_the_gaussian_spread():
    """Beyond the acceptance table (|y| computed one by one): σ² = 10^12 + 1/3. The sample
    variance is within 5 standard errors, SE = σ² sqrt(2/n) (Gaussian fourth moment)."""
    s2 = Fraction(10**12) + Fraction(1, 3)
    n = 20_000
    zs = discrete_gaussian_array(n, s2, SeededSource(5))
    assert abs(float(np.var(zs.astype(float))) - float(s2)) < 5 * float(s2) * math.sqrt(2 / n)


def test_acceptance_rate_is_above_two_fifths():
    """The batch is sized on an acceptance rate >= 2/5: P[accept] = sum_y DLap_t(y)
    exp(-(|y| - σ²/t)²/(2σ²)) = C(σ²) exp(-σ²/(2t²)) tanh(1/(2t)) (module doc), on a grid of
    σ from 0.01 to 10 (the small-σ minimum is about 0.445 near σ² = 0.09) and at large σ."""
    grid = [Fraction(i, 100) ** 2 for i in range(1, 1000)] + [Fraction(10**4), Fraction(10**6)]
    for s2 in grid:
        t = dg._t_of(s2)
        _, c = _weights(float(s2), 0)
        rate = c * math.exp(-float(s2) / (2 * t * t)) * math.tanh(1 / (2 * t))
        assert rate > 0.4, (s2, rate)


def test_the_samplers_use_integer_draws_only():
    src = RecordingSource(11)
    for s2 in [Fraction(1, 3), Fraction(37, 10), Fraction(10**6, 7)]:
        for _ in range(200):
            assert type(DiscreteGaussian(s2).sample(src)) is int
    assert src.calls and {c[0] for c in src.calls} <= ALLOWED
    assert all(type(a) is int for c in src.calls for a in c[1:])
    for fn in (DiscreteGaussian.sample, dg._accepted, dg.discrete_gaussian_array, dg._Buckets, dg._t_of):
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, float)]


def test_samplers_refuse_floats_and_non_positive_sigma2():
    with pytest.raises(TypeError):
        DiscreteGaussian(2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        DiscreteGaussian(Fraction(0))
    with pytest.raises(TypeError):
        discrete_gaussian_array(3, 1.0, SeededSource(1))  # type: ignore[arg-type]
    assert discrete_gaussian_array(0, Fraction(2), SeededSource(1)).shape == (0,)


# -- analysis ----------------------------------------------------------------------------------
@pytest.mark.parametrize("s2", [0.05, 0.25, 1.0, 3.7, 250.0, 1e4])
def test_pmf_cdf_tail_match_direct_summation(s2):
    w, c = _weights(s2, 30)
    assert np.allclose(dgauss_pmf(np.arange(-30, 31), s2), w / c, rtol=1e-12, atol=0)
    for k in [0, 1, 3, 10, 30]:
        ref = _ref_tail(k, s2)
        assert math.isclose(dgauss_tail(k, s2), ref, rel_tol=1e-9, abs_tol=1e-300)
        assert math.isclose(dgauss_cdf(-k - 1, s2), ref / 2, rel_tol=1e-9, abs_tol=1e-300)
        assert math.isclose(dgauss_cdf(k, s2), 1 - ref / 2, rel_tol=1e-12)


def test_tail_above_the_direct_range_matches_direct_summation():
    """σ = 2^16 (Euler-Maclaurin): against numpy's term-by-term sum of ~2.6 million terms."""
    s2 = float(1 << 32)
    sigma = math.sqrt(s2)
    y = np.arange(0, int(40 * sigma), dtype=np.float64)
    w = np.exp(-(y * y) / (2 * s2))
    c = 2 * w.sum() - 1
    for k in [0, int(sigma), int(1.96 * sigma), int(4 * sigma)]:
        ref = 2 * w[k + 1 :].sum() / c
        assert math.isclose(dgauss_tail(k, s2), ref, rel_tol=1e-9)


@pytest.mark.parametrize("s2", [0.01, 0.1, 0.5, 0.99, 1.0, 2.0, 37.0, 1e6])
def test_variance_is_below_sigma2_and_matches_direct_summation(s2):
    """CKS Prop. 19: Var[N_Z(0, σ²)] < σ²; the module's value equals the direct sum."""
    far = int(40 * math.sqrt(s2)) + 2
    _, c = _weights(s2, 0)
    ref = 2 * math.fsum(y * y * math.exp(-y * y / (2 * s2)) for y in range(1, far + 1)) / c
    v = dgauss_variance(s2)
    assert math.isclose(v, ref, rel_tol=1e-9)
    assert v <= s2


@pytest.mark.parametrize("s2", SIGMA2S)
def test_sample_variance_is_within_its_error_of_the_variance(s2):
    """Sample variance of 200,000 batch draws within 5 SE, SE = sqrt((m4 - Var²)/n), m4 the
    fourth moment by direct summation."""
    n = 200_000
    zs = discrete_gaussian_array(n, s2, SeededSource(7 + int(s2))).astype(float)
    far = int(40 * math.sqrt(float(s2))) + 2
    w, c = _weights(float(s2), far)
    ys = np.arange(-far, far + 1, dtype=float)
    var, m4 = float((ys**2 * w).sum() / c), float((ys**4 * w).sum() / c)
    assert abs(float(np.mean(zs**2)) - var) <= 5 * math.sqrt((m4 - var * var) / n)


@pytest.mark.parametrize("s2", [0.25, 1.0, 3.7, 250.0, 1e6])
@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.99])
def test_half_width_is_the_least_covering_integer(s2, level):
    h = dgauss_half_width(s2, level)
    assert _ref_tail(h, s2) <= 1 - level + 1e-12
    assert h == 0 or _ref_tail(h - 1, s2) > 1 - level - 1e-12


@pytest.mark.parametrize("s2", [Fraction(37, 10), Fraction(250)])
def test_half_width_covers_at_its_level(s2):
    """P[|Z| <= h] >= 0.95 holds for the draws: the empirical frequency of |Z| <= h is within 5
    binomial SEs of the exact P[|Z| <= h] (which is >= 0.95 and the least such)."""
    n = 200_000
    h = dgauss_half_width(s2, 0.95)
    p = 1 - _ref_tail(h, float(s2))
    zs = discrete_gaussian_array(n, s2, SeededSource(9))
    freq = float(np.mean(np.abs(zs) <= h))
    assert p >= 0.95
    assert abs(freq - p) <= 5 * math.sqrt(p * (1 - p) / n)


# -- privacy map ---------------------------------------------------------------------------------
def test_privacy_map_is_l2_squared_over_two_sigma2():
    assert rho_of(Fraction(50), 10) == Fraction(100, 100)
    assert rho_of(Fraction(9, 2), l2_squared=3) == Fraction(1, 3)
    for rho, l2sq in [(Fraction(1, 100), 10), (Fraction(3, 7), 1000), (Fraction(1, 2), 1)]:
        s2 = sigma2_for(rho, l2_squared=l2sq)
        assert s2 == Fraction(l2sq) / (2 * rho)
        assert rho_of(s2, l2_squared=l2sq) == rho
    assert sigma2_for(Fraction(1, 8), 3) == Fraction(36)


def test_sigma2_for_a_float_rho_rounds_toward_more_noise():
    rho = 0.0003  # a binary rational with a large denominator
    s2 = sigma2_for(rho, l2_squared=1000)
    assert s2.denominator <= 1 << 32
    assert s2 >= Fraction(1000) / (2 * Fraction(rho))
    assert Fraction(rho) * (1 - Fraction(1, 1 << 32)) <= rho_of(s2, l2_squared=1000) <= Fraction(rho)


def test_parameters_are_checked():
    with pytest.raises(TypeError):
        sigma2_for(Fraction(1, 2))
    with pytest.raises(TypeError):
        sigma2_for(Fraction(1, 2), 2, l2_squared=4)
    with pytest.raises(TypeError):
        rho_of(Fraction(1), 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        sigma2_for(0, 1)
    with pytest.raises(ValueError):
        sigma2_for(float("inf"), 1)


# -- measurements --------------------------------------------------------------------------------
def test_count_measurement_map_is_in_rho_from_the_noise_it_uses():
    """Per-cell mode: a unit in at most G = 10 groups, R = 10 rows each: Δ₂² = 10 x 10²."""
    m = GaussianCount(Fraction(1, 1000), contributions_sq=10 * 10**2)
    assert m.unit == "rho"
    assert m.sigma2 == Fraction(1000) / (2 * Fraction(1, 1000))
    assert m.privacy_map_exact(1) == m.l2_squared / (2 * m.noise.sigma2) == Fraction(1, 1000)
    assert m.privacy_map_exact(3) == 9 * m.privacy_map_exact(1)  # group privacy: ρ k²
    assert m.half_width() == dgauss_half_width(m.sigma2, 0.95)
    assert m.noise_variance <= float(m.sigma2)


def test_sum_measurement_bounds_one_row_on_its_grid():
    m = GaussianSum(Fraction(1, 10), 0, 1000.0, contributions_sq=4)
    assert 1 << 20 <= 1000.0 / m.grid < 1 << 21
    assert m.row_bound == math.floor(1000.0 / m.grid) + 1
    assert m.l2_squared == 4 * m.row_bound**2
    assert m.rho == rho_of(m.sigma2, l2_squared=m.l2_squared) <= Fraction(1, 10)
    mi = GaussianSum(Fraction(1, 10), -5, 3, integer=True)
    assert mi.l2_squared == 25 and mi.grid == 1


@pytest.mark.parametrize(
    "m",
    [
        GaussianCount(Fraction(1, 50), contributions_sq=10),
        GaussianSum(Fraction(1, 50), 0, 99, integer=True, contributions_sq=3),
        GaussianSum(Fraction(1, 50), -2.5, 40.0),
    ],
)
def test_apply_many_equals_apply_cell_by_cell(m):
    """Exact equality with apply per cell: lists and numpy columns, a value on a half grid step
    (round half to even on both paths), and values beyond int64's exact float range."""
    integer = getattr(m, "integer", True)
    rng = np.random.default_rng(5)
    if integer:
        columns = [[0, 5, 17, 123456], rng.integers(-(10**6), 10**6, 300), [2**62, 3]]
    else:
        half = 2.5 * m.grid
        columns = [[0.0, 1.25, -3.5, 1e6, half], rng.uniform(-1e4, 1e4, 300), np.array([1e30, 2.0])]
    for values in columns:
        noises = m.draw_many(len(values), SeededSource(3))
        batch = m.apply_many(values, noises)
        cells = values.tolist() if isinstance(values, np.ndarray) else values
        assert list(batch.values) == [m.apply(v, int(z)).value for v, z in zip(cells, noises)]
        assert batch.half_width == m.half_width()
