"""Residual laws of the noise families (spec 2-3, 11): weights, pmfs, CF ratios, refusals."""

import math
from fractions import Fraction

import numpy as np
import pytest
from mt_testutil import chisq_pvalue, empirical_cf
from scipy import special

from mechanisms.multitier import get_family, make_ladder, tsg_residual, tsg_residual_weights
from mechanisms.multitier.validity import (
    bochner_min_eigenvalue,
    discrete_gaussian_cf,
    fft_residual_pmf,
    residual_is_valid,
    staircase_cf,
)
from mechanisms.rng import SeededSource


def test_tsg_weights_spec_values_and_identities():
    w0, w1 = tsg_residual_weights(2.0, 1.0)
    assert w0 == pytest.approx(0.196612, abs=1e-6) and w1 == pytest.approx(0.803388, abs=1e-6)  # spec 3.1
    f = get_family("tsg")
    for hi, lo in [(2, 1), (1, 0.3), (5, 0.01), (0.2, 0.19), (30, 2)]:
        w0, w1 = f.residual_weights(hi, lo)
        assert 0 <= w0 <= 1 and 0 <= w1 <= 1 and w0 + w1 == pytest.approx(1, abs=1e-15)
        # Var(s) = Var(eta_lo) - Var(eta_hi)  (spec 3.1 check)
        assert f.residual_variance(hi, lo) == pytest.approx(f.variance(lo) - f.variance(hi), rel=1e-9)


@pytest.mark.parametrize("hi,lo,D", [(2.0, 1.0, 1), (1.0, 0.3, 1), (3.0, 1.5, 2)])
def test_tsg_residual_pmf_nonneg_normalised_and_equals_cf_inversion(hi, lo, D):
    f = get_family("tsg", D)
    k, fft_p = fft_residual_pmf(lambda t: f.cf(lo, t) / f.cf(hi, t), 8192)
    p = f.residual_pmf(hi, lo, k)
    assert p.min() >= 0 and p.sum() == pytest.approx(1, abs=1e-12)
    assert np.max(np.abs(fft_p.real - p)) < 1e-12 and np.abs(fft_p.imag).max() < 1e-12
    if (hi, lo, D) == (2.0, 1.0, 1):  # spec 2.4 reference values
        assert p[k == 0][0] == pytest.approx(0.567871, abs=1e-6) and p[k == 2][0] == pytest.approx(
            0.050244, abs=1e-6
        )


def test_exact_tsg_residual_sampler_matches_eq1():
    src, a, b = SeededSource(11), Fraction(2), Fraction(1)
    s = [tsg_residual(a, b, src) for _ in range(100_000)]
    f = get_family("tsg")
    assert chisq_pvalue(s, lambda k: f.residual_pmf(2.0, 1.0, k)) > 1e-3
    # power: the atom-free TSG(e^-1) (naive "fresh noise") is rejected by the same test
    assert chisq_pvalue(s, lambda k: f.pmf(1.0, k)) < 1e-12


def test_exact_sampler_uses_integer_source_only():
    class NoFloat(SeededSource):
        def generator(self):
            raise AssertionError("float path used")

    src = NoFloat(3)
    for fam in ("tsg", "msdlap"):
        make_ladder(fam, [2.0, 1.0, 0.25], sensitivity=3).release(7, src)


FAMS = [
    ("tsg", 1, (1.5, 0.7)),
    ("msdlap", 3, (1.5, 0.7)),
    ("laplace", 1, (1.5, 0.7)),
    ("gaussian", 1, (1.5, 0.7)),
    ("skellam", 1, (1.5, 0.7)),
]


@pytest.mark.parametrize("name,D,pair", FAMS)
def test_residual_sampler_matches_cf_ratio(name, D, pair):
    hi, lo = pair
    f, src, n = get_family(name, D), SeededSource(5), 20_000
    s = np.array([f.residual(hi, lo, src) for _ in range(n)], dtype=float)
    ts = np.array([0.3, 0.7, 1.3, 2.1, 2.9]) / math.sqrt(f.variance(lo) - f.variance(hi))
    ratio = f.cf(lo, ts) / f.cf(hi, ts)
    emp = empirical_cf(s, ts)
    # |Re CF_emp - CF| has sd <= sqrt(1/n) (|cos| <= 1): allow 5 sd
    assert np.max(np.abs(emp - ratio)) < 5 / math.sqrt(n)
    # the same check rejects the wrong residual "fresh eta(lo)" (no division by the top CF)
    assert np.max(np.abs(emp - f.cf(lo, ts))) > 10 / math.sqrt(n)


@pytest.mark.parametrize("name", ["discrete_gaussian", "dgauss", "staircase"])
def test_refused_families(name):
    with pytest.raises(ValueError, match="no valid residual"):
        make_ladder(name, [1.0, 0.5])
    with pytest.raises(ValueError, match="unknown noise family"):
        make_ladder("cauchy", [1.0])


def test_dg_and_staircase_residuals_are_invalid():
    R = lambda t: discrete_gaussian_cf(1.1, t) / discrete_gaussian_cf(1.0, t)
    assert bochner_min_eigenvalue(R, [0, np.pi / 2, np.pi, 3 * np.pi / 2]) == pytest.approx(
        -0.1886953, abs=1e-6
    )
    k, p = fft_residual_pmf(R, 64)
    assert p.real[k == 2][0] == pytest.approx(-0.021410, abs=1e-6)
    assert not residual_is_valid(R, integer=True)
    S = lambda t: staircase_cf(1.0, t) / staircase_cf(2.8, t)
    assert S(np.array([5 * np.pi]))[0] == pytest.approx(-1.43887, abs=1e-5)
    assert not residual_is_valid(S, integer=False, ts=[0.0, 5 * np.pi])
    # valid families pass the same checks
    for fam in ("tsg", "skellam", "msdlap"):
        f = get_family(fam, 2)
        assert residual_is_valid(lambda t: f.cf(0.4, t) / f.cf(1.7, t), integer=True)


def test_skellam_paper_calibration_is_not_pure_dp():
    # E5: lambda = 1/(e^eps - 1) at eps = 1; P(k)/P(k+1) = I_k(2l)/I_{k+1}(2l) exceeds e^eps in the tail
    lam = 1 / math.expm1(1.0)
    k = np.arange(0, 30)
    ratio = special.ive(k, 2 * lam) / special.ive(k + 1, 2 * lam)
    assert ratio.max() > math.e and np.all(np.diff(ratio) > 0)
