"""What the serving path needs from mechanisms/multitier: residuals on large
fixed-point grids (fast and exact), closed-form bridges, the AVG privacy argument
(Algorithm 3 + a discrete-Laplace chain per coordinate at FULL ε), and one
independent chain per GROUP BY cell."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from config import parse_config
from mechanisms.mean import LaplaceTransformedMean
from mechanisms.measurements import as_epsilon
from mechanisms.multitier import TSG, make_ladder
from mechanisms.multitier.families import _bern_ratio, _bern_ratio_small, tsg_residual
from mechanisms.multitier.ladder import tsg_bridge_closed
from mechanisms.rng import SeededSource
from proxy.pipeline.multitier import _sensitivity, _slots, answer_at, draw_ladder
from rewriter import build_plan, parse
from support.service import make_config


# -- residual Bernoulli on large grids -----------------------------------------
@pytest.mark.parametrize("a,b", [(Fraction(1, 4), Fraction(1, 10)), (Fraction(9, 10), Fraction(1, 3))])
def test_fast_ratio_bernoulli_is_exact(a, b):
    r = (1 - math.exp(-b)) / (1 - math.exp(-a))
    src, n = SeededSource(1), 40_000
    for fn in (_bern_ratio_small, _bern_ratio):
        hits = sum(fn(a, b, src) for _ in range(n))
        assert abs(hits / n - r) < 4.5 * math.sqrt(r * (1 - r) / n)


def test_residual_on_a_million_unit_grid_is_fast_and_right():
    D = 1 << 20  # the AVG grid M; SUM grids are of the same order
    fam, src = TSG(D), SeededSource(2)
    hi, lo = 2.0, 0.5
    w0, w1 = fam.residual_weights(hi, lo)
    a, b = as_epsilon(hi) / D, as_epsilon(lo) / D
    s = np.array([tsg_residual(a, b, src) for _ in range(20_000)])  # ~1 s (was ~6 s per draw)
    assert abs(np.mean(s == 0) - w0) < 4.5 * math.sqrt(w0 * w1 / s.size)
    nz = np.abs(s[s != 0]) / (D / lo)  # |TSG(e^-lo/D)| / scale ~ Exp(1)
    assert stats.kstest(nz, "expon").pvalue > 1e-3


# -- bridges ---------------------------------------------------------------------
@pytest.mark.parametrize("D,va,vb", [(1, 0, 3), (1, 2, -1), (1, 0, 0), (20, 10, -60)])
def test_closed_form_bridge_equals_enumeration(D, va, vb):
    ea, en, eb = 2.0, 0.7, 0.3
    fam = make_ladder("tsg", [ea, en, eb], D).family
    T = int(math.ceil(40 * D / eb)) + 1
    y = np.arange(min(va, vb) - T, max(va, vb) + T + 1)
    w = fam.residual_pmf(ea, en, y - va) * fam.residual_pmf(en, eb, vb - y)
    w /= w.sum()
    src, n = SeededSource(3), 40_000
    xs = np.array([tsg_bridge_closed(fam, va, vb, ea, en, eb, src) for _ in range(n)])
    cats = y[n * w >= 5]
    obs = np.array([(xs == c).sum() for c in cats] + [0])
    obs[-1] = n - obs[:-1].sum()
    exp_ = np.array([n * w[y == c].sum() for c in cats] + [0.0])
    exp_[-1] = n - exp_[:-1].sum()
    if exp_[-1] < 5:
        obs, exp_ = obs[:-1], exp_[:-1] * n / exp_[:-1].sum()
        obs[np.argmax(exp_)] += n - obs.sum()
    assert stats.chisquare(obs, exp_).pvalue > 1e-3


def test_large_grid_bridge_matches_forward_generation():
    """Spec §9b check on the AVG grid: P(new = a), P(new = b), Var(new - a) as if
    the level had been generated forward."""
    D, (ea, en, eb) = 1 << 20, (2.0, 1.0, 0.5)
    fwd = make_ladder("tsg", [ea, en, eb], D)
    two = make_ladder("tsg", [ea, eb], D)
    src, n = SeededSource(4), 6000
    same_a = same_b = 0
    diffs = []
    for _ in range(n):
        r = two.release(0, src)
        y = two.bridge_insert(r, en, src)  # closed form (grid too large to enumerate)
        same_a += y == r[ea]
        same_b += y == r[eb]
        diffs.append(y - r[ea])
    w0a, _ = fwd.family.residual_weights(ea, en)
    w0b, _ = fwd.family.residual_weights(en, eb)
    assert abs(same_a / n - w0a) < 4.5 * math.sqrt(w0a * (1 - w0a) / n)
    assert abs(same_b / n - w0b) < 4.5 * math.sqrt(w0b * (1 - w0b) / n)
    v = fwd.family.residual_variance(ea, en)
    assert abs(np.var(diffs) / v - 1) < 0.12


# -- AVG: Algorithm 3 + a TSG chain per transformed coordinate at FULL ε ---------
def _cfg():
    return parse_config(make_config({"kind": "duckdb", "path": "/nonexistent/x.duckdb"}), "t")


@pytest.mark.parametrize("lo,hi,integer", [(0, 100, True), (0.0, 500000.0, False), (-3.5, 12.25, False)])
def test_avg_grid_input_neighbours_shift_by_a_and_M_minus_a(lo, hi, integer):
    """Adding one row moves the chain's input (A, nM - A) by (a, M - a), 0 <= a <= M:
    l1 distance M = the chain's sensitivity, so each level is ε-DP at FULL ε."""
    m = LaplaceTransformedMean(1.0, lo, hi, integer=integer)
    M = m.grid
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randrange(0, 50)
        if integer:
            xs = [rng.randint(lo, hi) for _ in range(n)]
            x = rng.randint(lo, hi)
        else:
            xs = [rng.uniform(lo, hi) for _ in range(n)]
            x = rng.choice([lo, hi, rng.uniform(lo, hi)])
        s = sum(xs) if integer else math.fsum(xs)
        A, n0 = m.grid_input((s, n))
        B, n1 = m.grid_input((s + x if integer else math.fsum(xs + [x]), n + 1))
        d1, d2 = B - A, (n1 * M - B) - (n0 * M - A)
        assert 0 <= d1 <= M and 0 <= d2 <= M and d1 + d2 == M


def test_avg_chain_privacy_by_enumeration():
    """Small grid M = 8 (the argument does not depend on M): one level of the
    2-coordinate TSG(sensitivity M) chain is ε-DP for every shift (a, M - a),
    tight; the joint of two levels has exactly the top level's likelihood ratio
    (the residual kernel cancels), so two tiers together lose max ε — whereas
    fresh noise for both would lose up to ε_hi + ε_lo."""
    M, e_hi, e_lo = 8, 1.0, 0.4
    fam = TSG(M)
    y = np.arange(-120, 121)
    q = np.array([5, 11])
    worst_top, worst_joint, worst_indep = 0.0, 0.0, 0.0
    K = fam.residual_pmf(e_hi, e_lo, y[None, :] - y[:, None])  # K[r1, r2] for one coordinate
    for a in range(M + 1):
        shift = np.array([a, M - a])
        top = [np.log(fam.pmf(e_hi, y - q[c])) - np.log(fam.pmf(e_hi, y - q[c] - shift[c])) for c in range(2)]
        lratio = top[0][:, None] + top[1][None, :]  # over (r1_x, r1_y)
        worst_top = max(worst_top, np.abs(lratio).max())
        # joint over (r1, r2) of coordinate 0: P(r1|q) K(r1, r2) vs P(r1|q') K(r1, r2)
        j0 = np.log(fam.pmf(e_hi, y - q[0]))[:, None] + np.log(K)
        j1 = np.log(fam.pmf(e_hi, y - q[0] - shift[0]))[:, None] + np.log(K)
        assert np.allclose(j0 - j1, top[0][:, None])  # the kernel cancels
        worst_joint = max(worst_joint, np.abs(j0 - j1).max() + np.abs(top[1]).max())
        lo = [np.log(fam.pmf(e_lo, y - q[c])) - np.log(fam.pmf(e_lo, y - q[c] - shift[c])) for c in range(2)]
        worst_indep = max(worst_indep, np.abs(top[0] + lo[0]).max() + np.abs(top[1] + lo[1]).max())
    assert worst_top == pytest.approx(e_hi) and worst_joint <= e_hi + 1e-9
    assert worst_indep == pytest.approx(e_hi + e_lo)


def test_avg_chain_levels_have_the_single_tier_law():
    """The proxy's AVG chain uses sensitivity M = the mean's grid, so each level's
    noise is DLap(M/ε) per coordinate: exactly LaplaceTransformedMean's law at ε."""
    cfg = _cfg()
    plan = build_plan(parse("SELECT AVG(income), SUM(income), COUNT(income) FROM pums"), cfg)
    (slot,) = _slots(plan)
    assert slot.kind == "avg" and slot.members
    m = LaplaceTransformedMean(0.5, 0.0, 500000.0, integer=False)
    assert _sensitivity(slot) == m.grid
    assert TSG(m.grid).scale(0.5) == pytest.approx(float(m.noise_scale))
    # one draw end to end: AVG, SUM and COUNT are post-processing of the same level
    cells = [(12_345_678.0, 100, 100)]
    body = draw_ladder(plan, [tuple(c) for c in cells], [2.0, 0.5, 0.1], SeededSource(6))
    ans = answer_at(plan, body, 0.5, 0.5)
    avg, total, count = ans["values"][0]
    assert avg == pytest.approx(min(max(total / count, 0.0), 500000.0), rel=0.01)  # COUNT is rounded
    assert ans["epsilon"] == [0.5, 0.5, 0.5] and ans["mechanism"][0] == "multitier_laplace_transformed_mean"


def test_each_group_by_cell_draws_its_own_chain():
    cfg = _cfg()
    plan = build_plan(parse("SELECT educ, COUNT(*) FROM pums GROUP BY educ"), cfg)
    levels = [2.0, 0.5, 0.1]
    cells = [(e, 100) for e in range(1, 17)]
    src, n = SeededSource(7), 800
    noise = {e: [] for e in levels}
    for _ in range(n):
        body = draw_ladder(plan, cells, levels, src)
        for e in levels:
            noise[e].append([c["raw"]["count(*)#0"][repr(e)] - 100 for c in body["cells"]])
    fam = TSG(1)
    for e in levels:
        arr = np.array(noise[e], dtype=float)  # n x 16
        assert abs(arr.var() / fam.variance(e) - 1) < 0.1  # marginal of every level
        corr = np.corrcoef(arr.T)[np.triu_indices(16, 1)]
        assert np.abs(corr).max() < 5 / math.sqrt(n)  # cells independent
    res = np.array(noise[0.1]) - np.array(noise[2.0])
    corr = np.corrcoef(res.T)[np.triu_indices(16, 1)]
    assert np.abs(corr).max() < 5 / math.sqrt(n)  # residuals independent per cell


def test_multi_aggregate_statement_splits_each_level():
    cfg = _cfg()
    plan = build_plan(parse("SELECT COUNT(*), SUM(age) FROM pums"), cfg)
    body = draw_ladder(plan, [(1000, 40_000)], [2.0, 0.5], SeededSource(8))
    ans = answer_at(plan, body, 0.5, 0.5)
    assert ans["epsilon"] == [0.25, 0.25]  # the tier's ε split as for single tiers
    assert body["slots"]["sum(age)#0"]["sensitivity"] == 100
