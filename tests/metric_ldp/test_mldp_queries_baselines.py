"""Edge-bucket policies, private-weight SUM, guarantee text, and the bench baselines."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.linalg import hadamard

from bench.baselines.metric_ldp import (
    HH,
    HIO2D,
    FlatOUE,
    HaarHRR,
    fwht,
    olh_frequencies,
    oue_estimate_counts,
    oue_variance,
)
from mechanisms.metric_ldp import (
    DimSpec,
    GroupSpec,
    bucketize,
    estimate_numpy,
    guarantee_text,
    perturb,
    private_weight_sum_query,
    range_query,
    range_weights,
    value_range_query,
    variance,
)
from mechanisms.rng import SeededSource

AGE = DimSpec(0, 100, 100, 1.0, "age")


def test_lower_edge_policy_is_exact_on_unit_integer_buckets():
    ages = np.arange(0, 101)
    b = bucketize(ages, AGE)
    for lo, hi, li, ui in [
        (30, 60, True, True),
        (30, 60, False, False),
        (None, 30, True, True),
        (None, 30, True, False),
        (99, None, True, True),
        (40, 40, True, True),
        (40, 40, False, True),
        (70, 20, True, True),
    ]:
        w = range_weights(AGE, lo, hi, li, ui)  # default policy "lower_edge"
        sel = np.ones(len(ages), bool)
        if lo is not None:
            sel &= (ages >= lo) if li else (ages > lo)
        if hi is not None:
            sel &= (ages <= hi) if ui else (ages < hi)
        assert w[b - 1].sum() == sel.sum(), (lo, hi, li, ui)


def test_inner_and_interpolate_policies():
    d = DimSpec(0, 10, 5, 1.0)  # buckets [0,2) [2,4) [4,6) [6,8) [8,10]
    assert range_weights(d, 3, 7, policy="outer").tolist() == [0, 1, 1, 1, 0]
    assert range_weights(d, 3, 7, policy="lower_edge").tolist() == [0, 0, 1, 1, 0]
    assert range_weights(d, 2, 6, False, False, "outer").tolist() == [0, 1, 1, 0, 0]
    assert range_weights(AGE, 30, 60, False, False, "outer").sum() == 30  # overcounts age 30
    assert range_weights(d, 3, 7, policy="inner").tolist() == [0, 0, 1, 0, 0]
    assert range_weights(d, 3, 7, policy="interpolate").tolist() == [0, 0.5, 1, 0.5, 0]
    assert range_weights(d, None, 1, policy="interpolate").tolist() == [0.5, 0, 0, 0, 0]
    assert range_weights(d, None, None, policy="inner").tolist() == [1] * 5
    with pytest.raises(ValueError):
        range_weights(d, 1, 2, policy="nearest")
    # interpolated linear query is unbiased for its (fractional) target
    spec = GroupSpec((d,))
    x = np.random.default_rng(0).integers(1, 6, 300)[:, None]
    q = value_range_query(spec, {0: (3, 7)}, policy="interpolate")
    assert q.truth(spec, x) == pytest.approx(0.5 * np.sum(x == 2) + np.sum(x == 3) + 0.5 * np.sum(x == 4))


def test_private_weight_sum_unbiased():
    spec = GroupSpec((DimSpec(0, 10, 5, 1.0), DimSpec(0, 20.0, 2, 1.0, "amount", kind="weight")))
    rng = np.random.default_rng(1)
    n, reps = 100, 2000
    vals = np.stack([rng.uniform(0, 10, n), rng.uniform(0, 20, n)], axis=1)
    base = range_query(spec, {0: (2, 4)})
    q = private_weight_sum_query(spec, base)
    truth = vals[
        (bucketize(vals[:, 0], spec.dims[0]) >= 2) & (bucketize(vals[:, 0], spec.dims[0]) <= 4), 1
    ].sum()
    rep = perturb(np.tile(vals, (reps, 1)), spec, SeededSource(2))
    from mldp_testutil import per_record

    est = per_record(rep, spec, q, "known_n").reshape(reps, n).sum(axis=1)
    # variance: noise (worst case, rounding at w/Delta) is bounded by 2 x every record at bucket 2
    vmax = variance(spec, q, np.tile([3, 2], (n, 1)), "known_n") + 20.0**2 * n / 4
    assert abs(est.mean() - truth) <= 4 * math.sqrt(vmax / reps)
    assert "Delta 20" in guarantee_text(spec)


def test_guarantee_text_mentions_units():
    spec = GroupSpec((AGE, DimSpec(0, 1e5, 50, 0.5, "income")))
    t = guarantee_text(spec)
    assert "1*|bucket(age) diff|" in t and "bucket width 2000" in t and "epsilon 0 charged" in t


def test_fwht_matches_hadamard():
    a = np.random.default_rng(2).normal(size=16)
    assert np.allclose(fwht(a), hadamard(16) @ a)


def test_oue_and_olh_unbiased():
    rng = np.random.default_rng(3)
    counts = np.array([500, 300, 0, 200])
    est = np.array([oue_estimate_counts(counts, 1.0, rng) for _ in range(4000)])
    for v in range(4):
        sd = math.sqrt(oue_variance(1000, 1.0, counts[v]))
        assert abs(est[:, v].mean() - counts[v]) <= 4 * sd / math.sqrt(4000)
        assert est[:, v].var() == pytest.approx(sd**2, rel=0.1)
    x = np.repeat(np.arange(4), counts)
    olh = np.array([olh_frequencies(x, 4, 1.0, rng) for _ in range(300)])
    sd = math.sqrt(oue_variance(1000, 1.0))  # OLH ~ OUE variance (spec 5.1), +-20%
    assert np.all(np.abs(olh.mean(axis=0) - counts) <= 4 * 1.2 * sd / math.sqrt(300) + 1)


@pytest.mark.parametrize("cls", ["HH", "HHnc", "HaarHRR", "Flat"])
def test_1d_range_baselines_unbiased(cls):
    rng = np.random.default_rng(4)
    m, n, reps, eps = 20, 2000, 300, 1.0
    x = rng.integers(1, m + 1, n)
    c = np.bincount(x - 1, minlength=m)
    make = {
        "HH": lambda: HH(x, m, 4, eps, rng),
        "HHnc": lambda: HH(x, m, 4, eps, rng, consistency=False),
        "HaarHRR": lambda: HaarHRR(x, m, eps, rng),
        "Flat": lambda: FlatOUE(c, eps, rng),
    }[cls]
    ranges = [(3, 11), (1, 20), (7, 7)]
    est = np.array([[o.range(l, r) for l, r in ranges] for o in (make() for _ in range(reps))])
    for (l, r), e in zip(ranges, est.T):
        truth = c[l - 1 : r].sum()
        assert abs(e.mean() - truth) <= 4 * e.std(ddof=1) / math.sqrt(reps) + 1e-6


def test_hio2d_unbiased_and_matrix_estimate_consistency():
    rng = np.random.default_rng(5)
    m, n, reps = 8, 3000, 200
    x = rng.integers(1, m + 1, (n, 2))
    truth = np.sum((x[:, 0] >= 2) & (x[:, 0] <= 6) & (x[:, 1] <= 3))
    est = np.array([HIO2D(x, m, 2, 1.0, rng).range(2, 6, 1, 3) for _ in range(reps)])
    assert abs(est.mean() - truth) <= 4 * est.std(ddof=1) / math.sqrt(reps)
    assert HIO2D(x, m, 2, 1.0, rng).range(1, m, 1, m) == n  # root is known
    spec = GroupSpec((DimSpec(0, 1, m, 1.0), DimSpec(0, 1, m, 1.0)))
    assert estimate_numpy(np.ones((3, 2 * m)), spec, range_query(spec, {}), "known_n") == 3
