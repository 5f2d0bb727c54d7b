"""Sum extension (spec 4, Eq. (9)), Algorithm 2 sum/max (spec 5, 6.3, 6.4)."""

import math

import numpy as np
import pytest
from scipy import stats

from mechanisms.per_record import (
    ExtensionSum,
    FrameworkMax,
    FrameworkSum,
    LevelHistogram,
    Levels,
    ValueBuckets,
    inverse_function,
    shifted_rank_max,
    universal_sum,
)
from mechanisms.per_record.framework import clipped_sum
from mechanisms.rng import SeededSource

PF = inverse_function(1e4, 10**9, 10.0)  # eps_min = 1e-5, L = 20
LV, VB = Levels.for_function(PF), ValueBuckets(PF.U)


def _data(n=20000, mu=5e4, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(mu, mu, 3 * n)
    return np.rint(x[x >= 0][:n]).astype(np.int64)


def _hist(x):
    h = LevelHistogram(LV.L, VB.B)
    lvl, b = LV.level(PF(x)) - 1, VB.bucket(x)
    np.add.at(h.cnt, (lvl, b), 1)
    for i, j, v in zip(lvl, b, x):
        h.sums[i, j] += int(v)
    return h


X = _data()
H = _hist(X)


def test_extension_eq9_bound_holds_in_1_minus_beta_of_runs():
    """Spec 8: |err| <= 4 b_k ln(L/beta), k = first non-empty level; >= 1 - beta of runs."""
    beta, runs = 0.1, 300
    k = int(np.flatnonzero(np.array(H.level_counts()))[0]) + 1
    total = int(X.sum())

    def violations(m):
        src = SeededSource(21)
        bound = 4 * ext.b[k - 1] * math.log(LV.L / beta)
        errs = np.array([m.release(H, src).value - total for _ in range(runs)])
        return int(np.sum(np.abs(errs) > bound))

    ext = ExtensionSum(PF, beta)
    assert violations(ext) <= beta * runs + 3 * math.sqrt(runs * beta * (1 - beta))
    assert ext.error_bound(k) <= 4 * ext.b[k - 1] * math.log(LV.L / beta) * 1.01 + 2 * LV.L
    bad = ExtensionSum(PF, beta)
    bad.scan.scales = [s * 16 for s in bad.scan.scales]  # wrong (too much) noise: check fails
    assert violations(bad) > beta * runs + 3 * math.sqrt(runs * beta * (1 - beta))


def test_extension_accepts_level_dict_and_rejects_non_integers():
    ext = ExtensionSum(PF)
    r = ext.release(dict(enumerate(H.level_sums(), start=1)), SeededSource(1))
    assert abs(r.value - int(X.sum())) < 0.01 * X.sum()
    with pytest.raises(TypeError):
        ext.release({3: 1.5}, SeededSource(1))


def test_clipped_sum_from_histogram_is_exact():
    """min(v, tau_j) from (bucket -> count, sum) equals the direct clipped sum for every j."""
    C = np.bincount(VB.bucket(X), minlength=VB.B + 1)
    S = [int(X[VB.bucket(X) == b].sum()) for b in range(VB.B + 1)]
    for j in range(VB.B + 1):
        assert clipped_sum(C, S, j, VB) == int(np.minimum(X, VB.tau[j]).sum())


def test_universal_sum_accuracy_and_collapse():
    """Spec 6.3: w.h.p. error <= Max * #{x > tau} + (2 tau/eps) ln(2/beta) with tau <~ 2 Max;
    and the radius collapses (output ~ 0) when n < (6/eps) ln(2/beta) (naive sum, spec 11.13)."""
    C = np.bincount(VB.bucket(X), minlength=VB.B + 1)
    S = [int(X[VB.bucket(X) == b].sum()) for b in range(VB.B + 1)]
    src = SeededSource(3)
    eps, beta = 0.1, 0.1
    outs = [universal_sum(C, S, eps, beta, VB, src) for _ in range(100)]
    taus = np.array([t for _, t, _ in outs])
    errs = np.array([abs(v - X.sum()) for v, _, _ in outs])
    assert np.all(taus <= 2 * 2 * X.max())
    # #{x > tau} <= SVT offset (6/eps_r) ln(2/beta_r) = (12/eps) ln(4/beta), doubled for the SVT noise
    lim = X.max() * 2 * 12 / eps * math.log(4 / beta) + 2 * taus / eps * math.log(2 / beta)
    assert np.mean(errs > lim) <= 0.1
    tiny = [universal_sum(C, S, 1e-7, beta, VB, src)[1] for _ in range(20)]
    assert max(tiny) <= 2  # tau collapsed to 1 or 2


def test_framework_sum_ignores_records_below_ell():
    """Stage 2 sees only levels >= ell (spec 11.8): with the same seed, changing the SUMS of
    levels below ell (counts unchanged) cannot change the output."""
    fw = FrameworkSum(LV, PF.U)
    r1 = fw.release(H, SeededSource(9))
    H2 = _hist(X)
    for i in range(r1.ell - 1):
        for j in range(VB.B + 1):
            H2.sums[i, j] += 10**9 * int(H2.cnt[i, j] > 0)
    r2 = fw.release(H2, SeededSource(9))
    assert r1.value == r2.value and r1.ell == r2.ell
    assert abs(r1.value - X.sum()) < 0.05 * X.sum()
    assert fw.record_epsilon(PF.eps_max) <= PF.eps_max


def _em_pmf(values, counts, eps, beta, U):
    y = np.arange(U + 1)
    c = np.array([counts[np.array(values) > t].sum() for t in y])
    k0 = math.ceil(2 / eps * math.log((U + 1) / beta))
    w = np.exp(-eps * np.abs(c - k0) / 2)
    return w / w.sum()


def test_shifted_rank_max_samples_the_exponential_mechanism():
    vals, cnts = [3, 7, 12, 20], np.array([5, 4, 3, 2])
    eps, beta, U, N = 0.8, 0.5, 30, 20000
    src = SeededSource(4)
    draws = np.array([shifted_rank_max(vals, cnts, eps, beta, U, src)[0] for _ in range(N)])
    obs = np.bincount(draws, minlength=U + 1)
    crit = stats.chi2.ppf(1 - 1e-4, U)  # chi-square, 30 dof, p = 1e-4

    def chi2(pmf):
        e = N * pmf
        return float(((obs - e) ** 2 / np.maximum(e, 1e-9)).sum())

    assert chi2(_em_pmf(vals, cnts, eps, beta, U)) < crit
    assert chi2(_em_pmf(vals, cnts, 2 * eps, beta, U)) > crit  # a wrong eps is detected


def test_framework_max_two_step_rank_error():
    """Spec 6.4: w.p. >= 1 - beta the rank error #{x > y} <= 2 k0 + ties + dropped records."""
    fm = FrameworkMax(LV, PF.U, beta=0.1)
    src = SeededSource(6)
    srt = np.sort(X)
    bad = 0
    for _ in range(60):
        ell = fm.select_level({i + 1: c for i, c in enumerate(H.level_counts())}, src)
        keep = X[LV.level(PF(X)) >= ell]
        v, c = np.unique(keep, return_counts=True)
        r = fm.release(ell, zip(v.tolist(), c.tolist()), src)  # SQL round 2 rows (v, cnt)
        rank = X.size - np.searchsorted(srt, r.value, side="right")
        bad += rank > r.noise_half_width + (X.size - keep.size) + c.max()
        assert r.half_width_units == "rank" and r.value <= PF.U
    assert bad <= 6 + 3 * math.sqrt(60 * 0.1 * 0.9)
