"""Alg. 1 chains (spec 2.3, 9, 10, 11): marginals, joint = post-processing of the top, bridges."""

import math

import numpy as np
import pytest
from mt_testutil import chisq_pvalue
from scipy import stats

from mechanisms.multitier import SumGrid, get_family, make_ladder, nearest_lower_level
from mechanisms.rng import SeededSource

LEVELS = [0.5, 2.0, 1.0]  # any order; the ladder sorts


@pytest.fixture(scope="module")
def tsg_draws():
    lad, src = make_ladder("tsg", LEVELS), SeededSource(2026)
    rows = [lad.release(0, src) for _ in range(100_000)]
    return lad, {e: np.array([r[e] for r in rows]) for e in lad.levels}


def test_chain_reproduces_each_tier_marginal(tsg_draws):
    lad, d = tsg_draws
    f = lad.family
    for e in lad.levels:
        assert chisq_pvalue(d[e], lambda k: f.pmf(e, k)) > 1e-3
        # MSE check against 2p/(1-p)^2 (spec 11 numbers 0.3620/1.8413/...), 4.5 standard errors
        sq = d[e].astype(float) ** 2
        assert abs(sq.mean() - f.variance(e)) < 4.5 * sq.std() / math.sqrt(sq.size)
    # power: tier 1.0 is not TSG at eps 1.1
    assert chisq_pvalue(d[1.0], lambda k: f.pmf(1.1, k)) < 1e-6


def test_residual_is_independent_of_the_top_draw(tsg_draws):
    lad, d = tsg_draws
    top, nxt = d[2.0], d[1.0]
    res = nxt - top
    assert chisq_pvalue(res, lambda k: lad.family.residual_pmf(2.0, 1.0, k)) > 1e-3
    # contingency table of bucket(top) x bucket(residual): independence (Thm 4.1 kernel is data-free)
    tb, rb = np.clip(top, -2, 2), np.clip(res, -3, 3)
    table = np.array([[np.sum((tb == i) & (rb == j)) for j in range(-3, 4)] for i in range(-2, 3)])
    assert stats.chi2_contingency(table).pvalue > 1e-3


def _joint_max_log_ratio(joint):
    q0, q1 = joint(0), joint(1)
    m = (q0 > 1e-300) & (q1 > 1e-300)
    return np.max(np.abs(np.log(q0[m]) - np.log(q1[m])))


def test_joint_of_two_tiers_is_max_eps_dp_by_enumeration():
    f, e1, e2 = get_family("tsg"), 2.0, 1.0
    r = np.arange(-60, 61)
    R1, R2 = np.meshgrid(r, r, indexing="ij")
    chain = lambda q: f.pmf(e1, R1 - q) * f.residual_pmf(e1, e2, R2 - R1)
    indep = lambda q: f.pmf(e1, R1 - q) * f.pmf(e2, R2 - q)
    assert chain(0).sum() == pytest.approx(1, abs=1e-12)
    assert _joint_max_log_ratio(chain) == pytest.approx(e1, abs=1e-9)  # = max eps, not more
    assert _joint_max_log_ratio(indep) == pytest.approx(e1 + e2, abs=1e-9)  # naive: sum eps > max eps
    assert _joint_max_log_ratio(indep) > max(e1, e2) + 0.5


def test_coalition_without_the_root_costs_its_own_max():
    # tiers {1.0, 0.5} of a 3-level chain: marginalise the unreleased root 2.0 by convolution
    f, r = get_family("tsg"), np.arange(-400, 401)
    res = f.residual_pmf(2.0, 1.0, np.arange(-400, 401))
    for q in (0, 1):
        mid = np.convolve(f.pmf(2.0, r - q), res, mode="same")
        assert np.max(np.abs(mid - f.pmf(1.0, r - q))) < 1e-12  # marginal of r_2 is TSG(eps_2)
    R2, R3 = np.meshgrid(np.arange(-40, 41), np.arange(-40, 41), indexing="ij")
    joint = lambda q: f.pmf(1.0, R2 - q) * f.residual_pmf(1.0, 0.5, R3 - R2)
    assert _joint_max_log_ratio(joint) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize(
    "fam,D", [("tsg", 1), ("tsg", 3), ("msdlap", 2), ("laplace", 2), ("gaussian", 1), ("skellam", 1)]
)
def test_composed_variance_equals_single_tier(fam, D):
    lad = make_ladder(fam, [3.0, 2.0, 1.0, 0.3], sensitivity=D)
    for e in lad.levels:
        assert lad.variance(e) == pytest.approx(lad.family.variance(e), rel=1e-9)
    if (fam, D) == ("tsg", 1):
        assert lad.variance(0.3) == pytest.approx(22.0563, abs=1e-4)  # spec 3.1


def test_msdlap_chain_marginal():
    lad, src = make_ladder("msdlap", [2.5, 1.2], sensitivity=2), SeededSource(8)
    x = np.array([lad.release(0, src)[1.2] for _ in range(30_000)])
    k = np.arange(-300, 301)
    unit = get_family("tsg")
    y1 = unit.pmf(1.2, k)  # 1*Y1
    y2 = np.zeros_like(y1)
    y2[::2][np.abs(k[::2]) <= 300] = unit.pmf(1.2, k[::2] // 2)  # 2*Y2 lives on even k
    pmf = np.convolve(y1, y2, mode="same")
    assert chisq_pvalue(x, lambda z: np.interp(z, k, pmf)) > 1e-3


def test_laplace_chain_marginals_and_atom():
    lad, src = make_ladder("laplace", [2.0, 1.0, 0.5], sensitivity=1), SeededSource(9)
    rows = [lad.release(0.0, src) for _ in range(20_000)]
    for e in lad.levels:
        x = np.array([r[e] for r in rows])
        assert stats.kstest(x, stats.laplace(scale=1 / e).cdf).pvalue > 1e-3
    same = np.mean([r[2.0] == r[1.0] for r in rows])  # P(s = 0) = (1/2)^2 (spec 3.2)
    assert abs(same - 0.25) < 4.5 * math.sqrt(0.25 * 0.75 / len(rows))


def test_gaussian_chain_marginal_and_map():
    lad, src = make_ladder("gaussian", [1.0, 0.3], sensitivity=1, delta=1e-5), SeededSource(10)
    x = np.array([lad.release(0.0, src)[0.3] for _ in range(5000)])
    assert stats.kstest(x, stats.norm(scale=lad.family.sigma(0.3)).cdf).pvalue > 1e-3
    assert lad.privacy_map() == 1.0 and lad.family.delta == 1e-5


def test_privacy_map_and_tier_lookup():
    lad = make_ladder("tsg", [0.5, 2.0, 1.0, 1.0])
    out = lad.release(10, SeededSource(1))
    assert set(out) == {2.0, 1.0, 0.5}
    assert lad.privacy_map(released=[1.0, 0.5]) == 1.0 and lad.privacy_map(2, [0.5]) == 1.0
    assert lad.independent_loss() == pytest.approx(3.5)
    assert nearest_lower_level(lad.levels, 1.7) == 1.0 and nearest_lower_level(lad.levels, 0.1) is None
    with pytest.raises(ValueError):
        make_ladder("tsg", [1.0, -0.5])


def test_bridge_insert_matches_forward_generation():
    n = 20_000
    fwd, bridged = make_ladder("tsg", [2.0, 1.0, 0.5]), make_ladder("tsg", [2.0, 0.5])
    s1, s2 = SeededSource(21), SeededSource(22)
    F = np.array([[r[2.0], r[1.0], r[0.5]] for r in (fwd.release(0, s1) for _ in range(n))])
    B = []
    for _ in range(n):
        r = bridged.release(0, s2)
        B.append([r[2.0], bridged.bridge_insert(r, 1.0, s2), r[0.5]])
    B = np.array(B)
    for stat in (lambda M: M[:, 1] == M[:, 0], lambda M: M[:, 1] == M[:, 2]):
        pf, pb = stat(F).mean(), stat(B).mean()
        assert abs(pf - pb) < 4.5 * math.sqrt(2 * pf * (1 - pf) / n)
    assert chisq_pvalue(B[:, 1], lambda k: fwd.family.pmf(1.0, k)) > 1e-3
    cf, cb = np.cov(F[:, 1], F[:, 2])[0, 1], np.cov(B[:, 1], B[:, 2])[0, 1]
    assert abs(cf - cb) < 0.1 * fwd.family.variance(1.0)


def test_bridge_edges_and_loosen():
    lad, src = make_ladder("tsg", [1.0]), SeededSource(30)
    with pytest.raises(ValueError, match="above the stored root"):
        lad.bridge_insert({1.0: 5}, 2.0, src)
    below = np.array([lad.bridge_insert({1.0: 0}, 0.4, src) for _ in range(20_000)])
    f = lad.family
    assert chisq_pvalue(below, lambda k: f.residual_pmf(1.0, 0.4, k)) > 1e-3
    # spec 9c: eps 2.0 after 1.0 -> Var 0.362, P(new = old) 0.568
    new, old = [], []
    for _ in range(20_000):
        v = lad.release(0, src)[1.0]
        new.append(lad.loosen({1.0: v}, 2.0, 0, src))
        old.append(v)
    new, old = np.array(new), np.array(old)
    assert chisq_pvalue(new, lambda k: f.pmf(2.0, k)) > 1e-3
    p = np.mean(new == old)
    assert abs(p - f.residual_weights(2.0, 1.0)[0] - f.residual_weights(2.0, 1.0)[1] * f.pmf(1.0, 0)) < 0.02
    assert chisq_pvalue(old - new, lambda k: f.residual_pmf(2.0, 1.0, k)) > 1e-3
    with pytest.raises(ValueError, match="tsg and gaussian"):
        make_ladder("laplace", [2.0, 0.5]).bridge_insert({2.0: 0.0, 0.5: 1.0}, 1.0, src)


def test_sum_grid():
    g = SumGrid(lo=-2.5, hi=10.0, decimals=2, contributions=2)
    assert g.sensitivity == 2000
    assert g.to_grid([1.234, 50, -7, 0.005]) == 123 + 1000 - 250 + 0  # round half-even of 0.5 -> 0
    lad = make_ladder("tsg", [1.0, 0.1], sensitivity=g.sensitivity)
    out = lad.release(g.to_grid([1.0, 2.0]), SeededSource(4))
    assert all(isinstance(v, int) for v in out.values()) and g.from_grid(300) == 3.0
