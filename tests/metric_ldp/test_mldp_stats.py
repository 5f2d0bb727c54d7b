"""Unbiasedness, exact variances (spec 4.2), known-n <= paper, variance estimate and bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mldp_testutil import per_record, spec_known_n_variance, spec_paper_variance

from mechanisms.metric_ldp import (
    DimSpec,
    GroupSpec,
    Query,
    linear_query,
    perturb_buckets,
    range_query,
    variance,
    variance_bounds,
)
from mechanisms.metric_ldp.estimators import variance_queries
from mechanisms.rng import SeededSource

R = 3000  # repetitions (>= 2000)


def _zipf(rng, m, size, a=1.1):
    p = np.arange(1, m + 1) ** -a
    return rng.choice(np.arange(1, m + 1), size=size, p=p / p.sum())


def _buckets(spec, n, seed):
    rng = np.random.default_rng(seed)
    return np.stack([_zipf(rng, m, n) for m in spec.ms], axis=1)


def _simulate(spec, x, queries, estimator, seed, reps=R):
    """reps independent perturbations of the same data -> (len(queries), reps) estimates."""
    rep = perturb_buckets(np.tile(x, (reps, 1)), spec, SeededSource(seed))
    return np.array([per_record(rep, spec, q, estimator).reshape(reps, len(x)).sum(axis=1) for q in queries])


SPEC1 = GroupSpec((DimSpec(0, 1, 8, 1.0),))
SPEC2 = GroupSpec((DimSpec(0, 1, 6, 1.0), DimSpec(0, 1, 5, 1.5)))
Q1 = [
    range_query(SPEC1, {0: (3, 6)}),
    range_query(SPEC1, {0: (1, 4)}),
    range_query(SPEC1, {0: (5, 8)}),
    linear_query(SPEC1, {0: np.linspace(0, 7, 8) ** 1.5}),
]
Q2 = [
    range_query(SPEC2, {0: (2, 4), 1: (3, 5)}),
    range_query(SPEC2, {0: (1, 3)}),
    range_query(SPEC2, {0: (4, 4), 1: (1, 2)}),
    linear_query(SPEC2, {0: np.arange(6.0), 1: np.ones(5) * 2}),
]


@pytest.mark.parametrize("spec,queries,n,seed", [(SPEC1, Q1, 300, 1), (SPEC2, Q2, 200, 2)])
@pytest.mark.parametrize("estimator", ["paper", "known_n"])
def test_unbiased_and_exact_variance(spec, queries, n, seed, estimator):
    x = _buckets(spec, n, seed)
    est = _simulate(spec, x, queries, estimator, seed + 10)
    for q, e in zip(queries, est):
        truth, var = q.truth(spec, x), variance(spec, q, x, estimator)
        assert abs(e.mean() - truth) <= 4 * math.sqrt(var / R)  # CLT: SE = sqrt(Var/R)
        # sample variance: relative SE ~ sqrt(2/R) = 2.6% for near-normal sums; 10% = 3.9 SE
        assert np.var(e, ddof=1) == pytest.approx(var, rel=0.10)
    # the check can fail: kappa from a 10% larger eps biases an interior box by ~(kappa'/kappa)^D
    wrong = GroupSpec(tuple(DimSpec(0, 1, d.m, d.epsilon * 1.1) for d in spec.dims))
    q = range_query(spec, {d: (2, m - 1) for d, m in enumerate(spec.ms)})
    rep = perturb_buckets(np.tile(x, (R, 1)), spec, SeededSource(seed + 10))
    e_bad = per_record(rep, wrong, q, estimator).reshape(R, n).sum(axis=1)
    assert abs(e_bad.mean() - q.truth(spec, x)) > 4 * math.sqrt(variance(spec, q, x, estimator) / R)


def test_counterexample_to_thm3_constant_one():
    """Spec 4.3: D=2, eps=3, R=([2,5],[3,9]), 300 users inside: exact 69.8 vs Thm-3 36.7."""
    spec = GroupSpec((DimSpec(0, 1, 10, 3.0), DimSpec(0, 1, 10, 3.0)))
    x = np.tile([3, 5], (300, 1))
    q = range_query(spec, {0: (2, 5), 1: (3, 9)})
    v = variance(spec, q, x, "paper")
    assert v == pytest.approx(69.8, abs=0.05)
    lam = math.tanh(1.5)
    thm3 = lam**-4 * 2**-2 * (1 - lam**4) * 300
    assert thm3 == pytest.approx(36.7, abs=0.05)
    e = _simulate(spec, x, [q], "paper", 31)[0]
    assert np.var(e, ddof=1) == pytest.approx(v, rel=0.10)
    assert not np.var(e, ddof=1) == pytest.approx(thm3, rel=0.10)


def test_variance_matches_spec_formulas():
    rng = np.random.default_rng(4)
    for D in (1, 2, 3):
        spec = GroupSpec(tuple(DimSpec(0, 1, int(m), 1.2) for m in rng.integers(2, 7, D)))
        x = _buckets(spec, 150, D)
        for _ in range(20):
            ranges = {}
            for d, m in enumerate(spec.ms):
                l, r = sorted(rng.integers(1, m + 1, 2))
                ranges[d] = (int(l), int(r))
            q = range_query(spec, ranges)
            assert variance(spec, q, x, "paper") == pytest.approx(
                spec_paper_variance(spec, ranges, x), rel=1e-6
            )
            assert variance(spec, q, x, "known_n") == pytest.approx(
                spec_known_n_variance(spec, ranges, x), rel=1e-6
            )


def test_1d_constants_table():
    """Spec 6.2: Var/n = (kappa^2-1)/2 (paper, any nontrivial range); known-n prefix half."""
    table = {0.1: 199.83, 0.5: 7.835, 1: 1.841, 2: 0.362, 3: 0.1103, 4: 0.0380, 5: 0.0137}
    x = np.arange(1, 11)[:, None]
    for eps, ref in table.items():  # the table is printed to 3-4 significant digits: rel 5e-3
        spec = GroupSpec((DimSpec(0, 1, 10, eps),))
        for l, r in ((1, 4), (3, 7), (2, 10)):
            assert variance(spec, range_query(spec, {0: (l, r)}), x, "paper") / 10 == pytest.approx(
                ref, rel=5e-3
            )
        assert variance(spec, range_query(spec, {0: (1, 4)}), x, "known_n") / 10 == pytest.approx(
            ref / 2, rel=5e-3
        )
        assert variance(spec, range_query(spec, {0: (3, 7)}), x, "known_n") / 10 == pytest.approx(
            ref, rel=5e-3
        )


def test_known_n_never_worse_than_paper():
    rng = np.random.default_rng(6)
    for D in (1, 2, 3):
        spec = GroupSpec(tuple(DimSpec(0, 1, 5, float(e)) for e in rng.uniform(0.3, 3, D)))
        x = _buckets(spec, 100, D + 20)
        for _ in range(30):
            ranges = {
                d: tuple(sorted(int(v) for v in rng.integers(1, 6, 2)))
                for d in range(D)
                if rng.random() < 0.7
            }
            q = range_query(spec, ranges)
            assert variance(spec, q, x, "known_n") <= variance(spec, q, x, "paper") * (1 + 1e-12)
    # empirically too (trivial second dimension: paper pays ~kappa^2, spec 7.7)
    x = _buckets(SPEC2, 200, 3)
    q = range_query(SPEC2, {0: (2, 4)})
    ek, ep = (_simulate(SPEC2, x, [q], est, 41)[0] for est in ("known_n", "paper"))
    assert np.var(ek) < np.var(ep) / 2


def test_variance_estimate_unbiased_and_bounds_tight():
    x = _buckets(SPEC2, 200, 8)
    q = Q2[0]
    v = variance(SPEC2, q, x, "known_n")
    qa, qb = variance_queries(SPEC2, q, "known_n")
    est = _simulate(SPEC2, x, [qa, qb], "known_n", 51)
    vest = est[0] - est[1]
    assert abs(vest.mean() - v) <= 4 * vest.std(ddof=1) / math.sqrt(R)
    lo, hi = variance_bounds(SPEC2, q, 200, "known_n")
    assert lo <= v <= hi
    # tight: attained with everybody in a cell inside (max) / outside (min) the box
    assert variance(SPEC2, q, np.tile([3, 4], (200, 1)), "known_n") == pytest.approx(hi)
    assert variance(SPEC2, q, np.tile([6, 1], (200, 1)), "known_n") == pytest.approx(lo)
    # a trivial known-n query (COUNT(*)) is exact: n with variance 0
    assert variance_bounds(SPEC2, Query((None, None)), 200, "known_n") == (0.0, 0.0)


@pytest.mark.parametrize("mech", ["M3", "M2"])
def test_laplace_mechanisms_unbiased_with_exact_variance(mech):
    m, n, eps = 8, 100, 1.0
    spec = GroupSpec((DimSpec(0, 1, m, eps),), mechanism=mech, sensitive={1, 2} if mech == "M2" else None)
    x = _buckets(spec, n, 12)
    q = range_query(spec, {0: (3, 6)})
    v = variance(spec, q, x)
    if mech == "M3":  # spec 2.2: (2n/eps^2)(1[l>=2] + 1[r<=m-1]); grid K = 2^10 changes it by ~1e-7
        assert v == pytest.approx(2 * n / eps**2 * 2, rel=1e-5)
    else:  # Prop. 3: 2n sum_x w_x^2 s_x^2
        from mechanisms.metric_ldp.laplace import m2_scales

        assert v == pytest.approx(2 * n * np.sum(m2_scales(m, eps, {1, 2})[2:6] ** 2), rel=1e-5)
    e = _simulate(spec, x, [q], "known_n", 61, reps=2000)[0]
    assert abs(e.mean() - q.truth(spec, x)) <= 4 * math.sqrt(v / 2000)
    assert np.var(e, ddof=1) == pytest.approx(v, rel=0.12)  # Laplace sums: ~3.2% SE at R = 2000
