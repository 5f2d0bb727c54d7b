"""Multi-tier Subset mechanism (spec 4, 11): corrected beta (E1), Expansion, templates, E3, estimator."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from bench.baselines.multitier import subset_ideal_variance
from mechanisms.multitier import (
    SubsetLadder,
    estimate_counts,
    optimal_k,
    rescale_beta,
    rescale_beta_paper,
    subset_sample,
    subset_t_f,
    subset_variance,
)
from mechanisms.multitier.bounds import GLOBAL_BOUND, thm53_bound, thm54_bound
from mechanisms.rng import SeededSource


def subset_pmf(d, k, rho, x):
    """Exact Subset(x, k, ln rho) pmf over all k-subsets (Sec. 2.2), Fractions."""
    N = math.comb(d - 1, k - 1) * rho + math.comb(d - 1, k)
    return {S: (rho if x in S else 1) / N for S in itertools.combinations(range(d), k)}


def ldp_level(pmfs):
    """max over x, x', S of P(S|x)/P(S|x') (exact)."""
    return max(max(p[S] / q[S] for S in p) for p in pmfs for q in pmfs)


@pytest.mark.parametrize("d", [6, 7, 8])
def test_corrected_beta_hits_target_exactly(d):
    rho, target = Fraction(37, 10), Fraction(9, 5)  # e^eps and e^eps' (rational, exact)
    for k in range(1, d):
        beta = rescale_beta(rho, target, k, d)
        M = math.comb(d, k)
        out = [{S: beta * p + (1 - beta) / M for S, p in subset_pmf(d, k, rho, x).items()} for x in range(d)]
        assert ldp_level(out) == target  # Lemma 5.2 with E1: exactly eps'
        assert out[0] == subset_pmf(d, k, target, 0)  # and the law is Subset(k, eps')
        bp = Fraction(rescale_beta_paper(float(rho), float(target), k, d))
        if 0 <= bp <= 1:
            wrong = [
                {S: bp * p + (1 - bp) / M for S, p in subset_pmf(d, k, rho, x).items()} for x in range(2)
            ]
            assert abs(float(ldp_level(wrong)) - float(target)) > 1e-3  # the paper's beta misses


def test_paper_beta_reference_values():
    r, r2 = math.exp(1.3), math.exp(0.6)
    assert float(rescale_beta(r, r2, 2, 7)) == pytest.approx(0.439619, abs=1e-6)
    assert rescale_beta_paper(r, r2, 2, 7) == pytest.approx(0.784501, abs=1e-6)
    assert rescale_beta_paper(9.0, 4.0, 1, 10) == pytest.approx(1.08)  # > 1: not a probability
    assert 0 <= rescale_beta(9, 4, 1, 10) <= 1
    with pytest.raises(ValueError):
        rescale_beta(Fraction(2), Fraction(3), 1, 10)  # cannot go up


def test_expansion_lemma_by_enumeration():
    d, k, rho = 7, 2, Fraction(18, 5)
    base = subset_pmf(d, k, rho, 0)
    out = {}
    for S, p in base.items():
        for j in set(range(d)) - set(S):
            T = tuple(sorted(S + (j,)))
            out[T] = out.get(T, 0) + p / (d - k)
    assert out == subset_pmf(d, k + 1, (k * rho + 1) / (k + 1), 0)  # Lemma 5.1


def test_estimator_closed_forms_and_kstar():
    for d, k, eps in [(10, 1, 1.0), (15, 4, 0.7), (128, 20, 1.9)]:
        t, f = (float(v) for v in subset_t_f(Fraction(math.exp(eps)), k, d))
        assert subset_variance(eps, k, d) == pytest.approx(
            (t * (1 - t) + (d - 1) * f * (1 - f)) / (t - f) ** 2
        )
    assert [round(subset_variance(math.log(10 / k - 1), k, 10), 5) for k in (1, 2, 3)] == [
        3.65625,
        13.5,
        41.625,
    ]
    assert optimal_k(math.log(6.4), 10) == 1 and optimal_k(math.log(5), 10) == 2


def test_worked_example_d8():
    L = [2.5, 1.6, 1.0, 0.5, 0.2]
    want = {
        1: [(2.5, 1, 1.700), (1.0986, 2, 17.5), (0.5108, 3, 91.0), (0.4055, 4, 152.25), (0.2, 4, 615.712)],
        2: [(2.5, 1, 1.700), (1.3863, 2, 10.241), (1.0, 2, 21.736), (0.4055, 4, 152.25), (0.2, 4, 615.712)],
    }
    for v, rows in want.items():
        sl = SubsetLadder(8, L, variant=v)
        got = [(round(sl.match[e].level, 4), sl.match[e].k, round(sl.tier_variance(e), 3)) for e in L]
        assert got == rows
    sl = SubsetLadder(15, [2.0, 1.0, 0.5], variant=1)
    assert [(round(t.level, 4), t.k) for t in sl.templates] == [
        (2.6391, 1),
        (1.8718, 2),
        (1.3863, 3),
        (1.0116, 4),
        (0.6931, 5),
        (0.4055, 6),
        (0.1335, 7),
    ]


@pytest.mark.parametrize("d", [2, 3, 4, 5, 9, 10])
def test_e3_expansion_only_for_even_d(d):
    sl = SubsetLadder(d, [3.0, 1.0, 0.3, 0.05], variant=1)
    kmax = max(t.k for t in sl.templates)
    assert kmax == (max(1, d // 2) if d % 2 == 0 else max(1, (d - 1) // 2))
    if d == 4:
        assert [(round(t.level, 4), t.k) for t in sl.templates[:3]] == [
            (3.0, 1),
            (math.log(3).__round__(4), 1),
            (round(math.log(2), 4), 2),
        ]


def test_single_tier_worst_ratios_within_theorems():
    for d in (5, 8, 15, 16):
        for eps in np.round(np.arange(0.05, 6.0, 0.05), 2):
            for v, bound in ((1, thm53_bound), (2, thm54_bound)):
                r = SubsetLadder(d, [eps], variant=v).tier_variance(eps) / subset_ideal_variance(eps, d)
                assert r <= bound(eps, d) * (1 + 1e-9) and r <= GLOBAL_BOUND


def test_random_lists_within_theorems():
    rng = np.random.default_rng(0)
    for d in (6, 15, 128):
        for _ in range(20):
            L = list(np.round(rng.uniform(0.01, 6, size=8), 4))
            for v, bound in ((1, thm53_bound), (2, thm54_bound)):
                sl = SubsetLadder(d, L, variant=v)
                for e in sl.levels:
                    assert sl.match[e].level <= e + 1e-12
                    assert sl.tier_variance(e) / subset_ideal_variance(e, d) <= bound(e, d) * (1 + 1e-9)


def test_perturb_per_tier_law_and_estimator_mse():
    d, L, x, n = 8, [2.5, 1.6, 1.0, 0.5, 0.2], 3, 20_000
    sl, src = SubsetLadder(d, L, variant=2), SeededSource(77)
    rows = [sl.perturb(x, src) for _ in range(n)]
    for e in L:
        tpl = sl.match[e]
        S = [r[e][0] for r in rows]
        assert all(len(s) == tpl.k for s in S[:200])
        t, f = (float(v) for v in tpl.t_f(d))
        hit = np.mean([x in s for s in S])
        assert abs(hit - t) < 4.5 * math.sqrt(t * (1 - t) / n)  # P(x in S) = t (spec 11)
        other = np.mean([0 in s for s in S])
        assert abs(other - f) < 4.5 * math.sqrt(f * (1 - f) / n)
        onehot = np.zeros((n, d))
        onehot[:, x] = 1
        ind = np.zeros((n, d))
        for i, s in enumerate(S):
            ind[i, list(s)] = 1
        sq = (((ind - f) / (t - f) - onehot) ** 2).sum(axis=1)
        assert abs(sq.mean() - sl.tier_variance(e)) < 4.5 * sq.std() / math.sqrt(n)  # MSE = V(level, k)


def test_group_by_count_estimator_is_unbiased():
    d, n, src = 6, 6000, SeededSource(5)
    truth = np.array([3000, 1500, 900, 400, 200, 0])
    xs = np.repeat(np.arange(d), truth)
    sl = SubsetLadder(d, [1.5, 0.4], variant=2)
    rep = [sl.perturb(int(x), src) for x in xs]
    for e in (1.5, 0.4):
        tpl = sl.match[e]
        t, f = (float(v) for v in tpl.t_f(d))
        est = sl.estimate_counts([r[e][0] for r in rep], e)
        var = (truth * t * (1 - t) + (n - truth) * f * (1 - f)) / (t - f) ** 2
        assert np.max(np.abs(est - truth) / np.sqrt(var)) < 4.5
    # independent base sampler has the same per-category law
    S = [subset_sample(2, 3, Fraction(4), 10, src) for _ in range(20_000)]
    t, f = (float(v) for v in subset_t_f(Fraction(4), 3, 10))
    est = estimate_counts(S, 10, Fraction(4), 3) / len(S)
    assert abs(est[2] - 1) < 4.5 * math.sqrt(t * (1 - t)) / (t - f) / math.sqrt(len(S))


def _exact_joint(sl, x):
    """Exact joint law of the reports of every tier for input x: the program's Markov
    chain over subsets (Expansion: uniform free element; Rescale: keep w.p. beta, else a
    uniform |s|-subset), snapshotted at the matched template steps. {(S_step...): p}."""
    from collections import defaultdict

    d, steps = sl.d, sorted({t.step for t in sl.match.values()})
    dist = {(frozenset([x]), ()): 1.0}
    for i, op in enumerate(sl.ops, start=1):
        new = defaultdict(float)
        for (s, hist), p in dist.items():
            if op[0] == "expand":
                free = [j for j in range(d) if j not in s]
                for j in free:
                    new[(s | {j}, hist)] += p / len(free)
            else:
                beta = float(op[1])
                new[(s, hist)] += p * beta
                subs = list(itertools.combinations(range(d), len(s)))
                for c in subs:
                    new[(frozenset(c), hist)] += p * (1 - beta) / len(subs)
        if i in steps:
            merged = defaultdict(float)
            for (s, hist), p in new.items():
                merged[(s, hist + (s,))] += p
            new = merged
        dist = new
    joint = defaultdict(float)
    for (_, hist), p in dist.items():
        joint[hist] += p
    return joint, steps


@pytest.mark.parametrize("batched", [False, True])
def test_joint_law_of_all_tiers_matches_the_exact_chain(batched):
    """perturb (row by row) and perturb_many (all rows stepped at once) both draw the
    joint report of every tier from the program's exact law: Pearson chi-square over
    the joint outcomes (cells with expectation < 5 pooled) stays below the chi-square
    0.9999 quantile for its degrees of freedom, fixed seeds."""
    from scipy.stats import chi2

    d, L, x, n = 5, [2.2, 1.0, 0.3], 1, 40_000
    sl = SubsetLadder(d, L, variant=2)
    joint, steps = _exact_joint(sl, x)
    by_step = {t.step: e for e, t in sl.match.items()}
    src = SeededSource(2026 + batched)
    if batched:
        mats = sl.perturb_many(np.full(n, x), src)
        keys = zip(*[[frozenset(np.flatnonzero(r).tolist()) for r in mats[by_step[st]]] for st in steps])
    else:
        reps = [sl.perturb(x, src) for _ in range(n)]
        keys = (tuple(r[by_step[st]][0] for st in steps) for r in reps)
    from collections import Counter

    seen = Counter(keys)
    assert set(seen) <= set(joint)  # nothing outside the law's support
    big = [h for h, p in joint.items() if n * p >= 5]
    small = [h for h in joint if h not in big]
    obs = [seen[h] for h in big] + [sum(seen[h] for h in small)]
    exp_ = [n * joint[h] for h in big] + [n * sum(joint[h] for h in small)]
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp_) if e > 0)
    assert len(big) > 20 and stat < chi2.ppf(0.9999, len(obs) - 1)


def test_perturb_many_shapes_and_refusals():
    sl = SubsetLadder(8, [2.0, 0.5], variant=1)
    out = sl.perturb_many([0, 7, 3] * 30_000, SeededSource(4), chunk=10_000)  # several chunks
    for e, bits in out.items():
        assert bits.shape == (90_000, 8) and bits.dtype == bool
        assert (bits.sum(axis=1) == sl.match[e].k).all()  # every report has k members
    assert sl.perturb_many([], SeededSource(1))[2.0].shape == (0, 8)
    with pytest.raises(ValueError, match="outside"):
        sl.perturb_many([0, 8], SeededSource(1))
