"""The tsg chain drawn for many cells at once (mechanisms/multitier/chain_array.py).

Laws are checked against the EXACT pmfs at fixed seeds: chi-square goodness of fit with
Cochran cells (expected >= 5), p > 1e-4 (the test's false-rejection rate under the law; the
seed fixes the verdict), and the same test must reject a sampler off by one step (power).
Coins: an exact two-sided binomial test, p > 1e-4, and a perturbed p is rejected. The
scalar and the batch residual: chi-square homogeneity of the two samples, p > 1e-4.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import numpy as np
import pytest
from mt_testutil import chisq_pvalue
from scipy import stats

import mechanisms.multitier.chain_array as chain_array
from mechanisms.multitier import get_family, make_ladder, tsg_residual
from mechanisms.multitier.chain_array import (
    bernoulli_exp_array,
    bernoulli_ratio_array,
    ratio_interval,
    tsg_chain_array,
    tsg_residual_array,
)
from mechanisms.multitier.ladder import VectorLadder
from mechanisms.rng import SeededSource

P_MIN = 1e-4
N = 200_000


def _exact_ratio(an, ad, bn, bd, prec) -> decimal.Decimal:
    with decimal.localcontext() as ctx:
        ctx.prec = 150
        ea = (-decimal.Decimal(an) / decimal.Decimal(ad)).exp()
        eb = (-decimal.Decimal(bn) / decimal.Decimal(bd)).exp()
        return (1 - eb) / (1 - ea) * (decimal.Decimal(2) ** prec)


@pytest.mark.parametrize(
    "a,b",
    [
        (Fraction(2), Fraction(1)),
        (Fraction(1, 3), Fraction(1, 7)),
        (Fraction(1, 10**6), Fraction(1, 10**7)),
        (Fraction(40), Fraction(39)),
        (Fraction(0.1), Fraction(0.05)),
    ],
)
@pytest.mark.parametrize("prec", [32, 96, 200])
def test_ratio_interval_brackets_the_true_value_tightly(a, b, prec):
    lo, hi = ratio_interval(a.numerator, a.denominator, b.numerator, b.denominator, prec)
    true = _exact_ratio(a.numerator, a.denominator, b.numerator, b.denominator, prec)
    assert lo <= true <= hi and hi - lo <= 8


def _binom_p(coins, p: float) -> float:
    return stats.binomtest(int(np.sum(coins)), coins.size, p).pvalue


@pytest.mark.parametrize("c", [Fraction(1, 2), Fraction(1, 1000), Fraction(7, 3)])
def test_exp_coins_have_their_law_and_a_perturbed_law_is_rejected(c):
    coins = bernoulli_exp_array(N, c, SeededSource(1))
    p = math.exp(-float(c))
    assert _binom_p(coins, p) > P_MIN
    shift = 6 * math.sqrt(p * (1 - p) / N)  # a 6σ error must not pass
    assert _binom_p(coins, p + shift) < P_MIN and _binom_p(coins, p - shift) < P_MIN
    assert bernoulli_exp_array(5, Fraction(0), SeededSource(1)).all()


@pytest.mark.parametrize("a,b", [(Fraction(2), Fraction(1)), (Fraction(1, 10), Fraction(1, 20))])
def test_ratio_coins_have_their_law(a, b):
    coins = bernoulli_ratio_array(N, a, b, SeededSource(2))
    p = math.expm1(-float(b)) / math.expm1(-float(a))
    assert _binom_p(coins, p) > P_MIN
    shift = 6 * math.sqrt(p * (1 - p) / N)
    assert _binom_p(coins, p + shift) < P_MIN and _binom_p(coins, p - shift) < P_MIN
    with pytest.raises(ValueError):
        bernoulli_ratio_array(3, b, a, SeededSource(2))


@pytest.mark.parametrize("hi,lo,D", [(2.0, 1.0, 1), (1.0, 0.3, 1), (0.5, 0.1, 3)])
def test_batch_residual_has_the_eq1_law_and_fresh_noise_is_rejected(hi, lo, D):
    f = get_family("tsg", D)
    a, b = Fraction(hi) / D, Fraction(lo) / D
    s = tsg_residual_array(N, a, b, SeededSource(3))
    assert chisq_pvalue(s, lambda k: f.residual_pmf(hi, lo, k)) > P_MIN
    assert chisq_pvalue(s, lambda k: f.pmf(lo, k)) < 1e-12  # the atom-free TSG(lo): rejected
    assert chisq_pvalue(s, lambda k: f.residual_pmf(hi, lo * 1.1, k)) < P_MIN  # a 10% error in eps_lo


def test_scalar_and_batch_residuals_have_the_same_law():
    a, b = Fraction(3, 2), Fraction(7, 10)
    src = SeededSource(4)
    scalar = np.array([tsg_residual(a, b, src) for _ in range(20_000)])
    batch = tsg_residual_array(20_000, a, b, SeededSource(5))
    vals = np.arange(-3, 4)
    table = np.array([[np.sum(np.clip(x, -3, 3) == v) for v in vals] for x in (scalar, batch)])
    assert stats.chi2_contingency(table)[1] > P_MIN
    assert not tsg_residual_array(4, a, a, src).any()
    with pytest.raises(ValueError):
        tsg_residual_array(4, b, a, src)


def test_every_level_of_a_batch_chain_has_its_tier_law():
    """Alg. 1's invariant (Thm 4.1): level i is q + TSG(eps_i) whatever came above it."""
    lad = make_ladder("tsg", [1.0, 0.5, 0.2], 1)
    f = get_family("tsg")
    q = np.arange(N) % 7
    out = lad.release_many(q.tolist(), SeededSource(6))
    for eps, vals in out.items():
        assert vals.dtype == np.int64
        noise = vals - q
        assert chisq_pvalue(noise, lambda k: f.pmf(eps, k)) > P_MIN
        assert chisq_pvalue(noise, lambda k: f.pmf(eps * 1.05, k)) < P_MIN  # 5% off: rejected
    # the chain, not independent draws: each step is an Eq. (1) residual (an atom at 0)
    step = out[0.5] - out[1.0]
    assert chisq_pvalue(step, lambda k: f.residual_pmf(1.0, 0.5, k)) > P_MIN


def test_a_chain_beyond_int64_or_another_family_goes_cell_by_cell():
    lad = make_ladder("tsg", [1.0, 0.5], 1)
    big = [2**62, -(2**62), 5]
    out = lad.release_many(big, SeededSource(7))
    assert all(v.dtype == object for v in out.values())
    assert all(abs(int(x) - t) < 10**4 for v in out.values() for x, t in zip(v, big))
    lap = make_ladder("laplace", [1.0, 0.5], 1).release_many([1.0, 2.0], SeededSource(7))
    assert [v.shape for v in lap.values()] == [(2,), (2,)]
    assert make_ladder("tsg", [1.0], 1).release_many([], SeededSource(7))[1.0].size == 0
    with pytest.raises(OverflowError):
        tsg_chain_array(np.array([1]), [Fraction(1, 2**60)], SeededSource(7))
    with pytest.raises(OverflowError):  # |INT64_MIN| does not fit: abs() would wrap
        tsg_chain_array(np.array([-(2**63)]), [Fraction(1)], SeededSource(7))
    assert all(v.dtype == object for v in lad.release_many([-(2**62), 3], SeededSource(7)).values())


def test_vector_ladder_many_is_one_chain_per_coordinate():
    vl = VectorLadder("tsg", [1.0, 0.4], sensitivity=2, dim=2)
    out = vl.release_many([(10, 20), (30, 40)], SeededSource(8))
    assert set(out) == {1.0, 0.4} and all(len(v) == 2 and v[0].shape == (2,) for v in out.values())
    with pytest.raises(ValueError):
        vl.release_many([(1, 2, 3)], SeededSource(8))


def test_the_chain_module_is_float_free():
    import ast
    from pathlib import Path

    tree = ast.parse(Path(chain_array.__file__).read_text())
    assert not [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, float)]
