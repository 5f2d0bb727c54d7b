"""Quantiles (paper 4.4, spec 3.10): search, value mapping, error bound at rate >= 1 - delta."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanisms.metric_ldp import (
    DimSpec,
    GroupSpec,
    dim_affine,
    perturb_buckets,
    quantile,
    quantile_error,
    quantile_error_bound,
    search,
)
from mechanisms.metric_ldp.quantiles import prefix_queries
from mechanisms.rng import SeededSource


def test_search_exact_sigma_finds_true_quantile():
    rng = np.random.default_rng(1)
    for m in (1, 2, 7, 64, 300):
        x = rng.integers(1, m + 1, 500)
        sigma = np.array([np.mean(x <= k) for k in range(m + 1)])
        for p in (0.01, 0.25, 0.5, 0.9, 1.0):
            xhat, evals = search(sigma, p)
            assert sigma[xhat - 1] < p <= sigma[xhat]
            assert quantile_error(x, xhat, p) == 0.0
            assert evals <= math.ceil(math.log2(max(m, 2))) + 11


def test_search_non_monotone_keeps_invariant():
    sigma = np.array([0, 0.6, 0.3, 0.55, 0.7, 1.0])  # noisy, not monotone
    xhat, _ = search(sigma, 0.5)
    assert sigma[xhat - 1] < 0.5 <= sigma[xhat]


def test_value_mapping_disc_and_cont():
    spec = GroupSpec((DimSpec(0, 100, 10, 1.0),))
    row = [100.0] + [10.0 * k for k in range(1, 10)]  # sigma(k) = k/10: uniform
    r = quantile(row, 0.35, spec, 0)
    assert r.bucket == 4 and r.value == 35.0
    assert quantile(row, 0.35, spec, 0, represent="lower").value == 30.0
    assert quantile(row, 0.35, spec, 0, represent="upper").value == 40.0
    assert quantile(row, 0.35, spec, 0, kind="cont").value == pytest.approx(35.0)
    assert quantile(row, 0.32, spec, 0, kind="cont").value == pytest.approx(32.0)
    flat = [100.0, 10, 10, 10, 50, 50, 50, 50, 50, 50]  # sigma(2) = sigma(3): empty buckets
    assert quantile(flat, 0.3, spec, 0).bucket == 4
    bad = [100.0, 10, 40, 30, 50, 50, 50, 50, 50, 50]  # sigmahat(3) < sigmahat(2)
    r = quantile(bad, 0.35, spec, 0, kind="cont")  # sigmahat(1) < p <= sigmahat(2)
    assert r.bucket == 2 and r.value == pytest.approx(10 + 10 * (0.35 - 0.1) / (0.4 - 0.1))


@pytest.mark.parametrize("estimator", ["known_n", "paper"])
def test_error_bound_holds_at_rate(estimator):
    m, n, trials, delta, eps = 64, 400, 2000, 0.1, 1.0
    spec = GroupSpec((DimSpec(0, 1, m, eps),))
    rng = np.random.default_rng(3)
    pz = np.arange(1, m + 1) ** -1.1
    x = rng.choice(np.arange(1, m + 1), n, p=pz / pz.sum())
    rep = perturb_buckets(np.tile(x, trials), spec, SeededSource(4))
    sums = rep.reshape(trials, n, m).sum(axis=1, dtype=np.int64).astype(float)  # column sums
    affs = [dim_affine(spec, 0, q.weights[0], estimator) for q in prefix_queries(spec, 0)]
    P = np.array([[c * n + sum(a * s[j] for j, a in cs.items()) for c, cs in affs] for s in sums])
    t = quantile_error_bound(spec, 0, n, delta, estimator)
    lam = math.tanh(eps / 2)
    kap = 1 / lam
    T = math.ceil(math.log2(m)) + 11
    thm5 = 2 * kap * math.sqrt(2 / n * math.log(2 * T / delta))  # spec 6.3 (corrected Thm 5)
    for p in (0.5, 0.9):
        errs = np.array([quantile_error(x, quantile([n] + list(row), p, spec, 0).bucket, p) for row in P])
        assert np.mean(errs > t) <= delta
        assert np.mean(errs > thm5) <= delta
        assert np.mean(errs > t / 10) > delta  # a much smaller bound fails: the check has teeth
    assert t == pytest.approx(
        (2 if estimator == "paper" else 1) * kap * math.sqrt(math.log(2 * (m - 1) / delta) / (2 * n)),
        rel=1e-6,
    )
