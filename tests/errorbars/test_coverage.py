"""Coverage of the error bars: over N = 10,000 releases with a fixed seed, each mechanism's
``level`` interval holds the true (bounded) value at its stated rate.

Tolerance: the empirical coverage of N independent releases is Binomial(N, c)/N with
standard deviation √(c(1 − c)/N) ≈ 0.0022 at c = 0.95; 4.5 of them (≈ 0.0098) is the
"95% ± 1%" asked. For integer noise the exact coverage c = P(|Z| ≤ k) is computed from the
law (it is ≥ level, at most one atom above it): the test checks the simulation against c,
and c against level at an ε where the atoms are small.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanisms import GeometricCount, LaplaceSum, SeededSource
from mechanisms.discrete_gaussian import GaussianCount, GaussianSum
from mechanisms.errorbars import consistent, dgauss_coverage, dlap_coverage, interval, variance_interval
from mechanisms.mean import make_mean
from mechanisms.mean.quantiles import hourglass_count_tail
from mechanisms.variance import MomentVariance
from proxy.pipeline.release import noisy_answer
from proxy.pipeline.rows import answer_rows
from rewriter.plan import Aggregate, GroupKey, Measure, Output, Plan

N = 10_000
LEVEL = 0.95
TOL = 4.5 * math.sqrt(LEVEL * (1 - LEVEL) / N)  # 4.5 binomial standard deviations ≈ 0.0098


def _binomial_ok(covered: np.ndarray, c: float) -> None:
    rate = float(np.mean(covered))
    assert abs(rate - c) <= 4.5 * math.sqrt(c * (1 - c) / N), (rate, c)


def test_geometric_count():
    m = GeometricCount(0.1)
    true = np.full(N, 500, dtype=np.int64)
    rel = m.apply_many(true, m.draw_many(N, SeededSource(1)))
    lo, hi = interval(m, np.asarray(rel.values), LEVEL)
    c = dlap_coverage(m.scale, LEVEL)
    assert LEVEL <= c <= LEVEL + 0.01
    _binomial_ok((lo <= 500) & (500 <= hi), c)


def test_geometric_count_clamped_at_zero_still_covers():
    """A COUNT made consistent (clamped at 0): both ends clamped, the value inside, coverage kept."""
    m = GeometricCount(0.1)
    true = np.full(N, 3, dtype=np.int64)
    rel = m.apply_many(true, m.draw_many(N, SeededSource(2)))
    raw = np.asarray(rel.values)
    lo, hi = consistent(*interval(m, raw, LEVEL), 0, None)
    shown = np.maximum(raw, 0)
    assert ((lo <= shown) & (shown <= hi)).all() and (lo >= 0).all()
    assert float(np.mean((lo <= 3) & (3 <= hi))) >= dlap_coverage(m.scale, LEVEL) - TOL


@pytest.mark.parametrize("integer", [True, False])
def test_laplace_sum(integer):
    m = LaplaceSum(0.1, 0, 10, integer=integer)
    s = 12_345 if integer else 12_345.678
    rel = m.apply_many(
        np.full(N, s, dtype=np.int64 if integer else np.float64), m.draw_many(N, SeededSource(3))
    )
    lo, hi = interval(m, np.asarray(rel.values), LEVEL)
    c = dlap_coverage(m.scale, LEVEL)
    assert LEVEL <= c <= LEVEL + 0.01
    _binomial_ok((lo <= s) & (s <= hi), c)


@pytest.mark.parametrize(
    "m",
    [
        GaussianCount(0.005, contributions_sq=10),
        GaussianSum(0.01, 0, 10, integer=True),
        GaussianSum(0.01, 0, 10),
    ],
    ids=["count", "int_sum", "float_sum"],
)
def test_discrete_gaussian(m):
    """zCDP tiers' COUNT / SUM (Canonne, Kamath, Steinke 2020): value ± k·grid, exact coverage
    P(|Z| ≤ k) from the law."""
    integer = not isinstance(m, GaussianSum) or m.integer
    s = 4_321 if integer else 4_321.5
    rel = m.apply_many(
        np.full(N, s, dtype=np.int64 if integer else np.float64), m.draw_many(N, SeededSource(9))
    )
    lo, hi = interval(m, np.asarray(rel.values), LEVEL)
    c = dgauss_coverage(m.sigma2, LEVEL)
    assert LEVEL <= c <= LEVEL + 0.01
    _binomial_ok((lo <= s) & (s <= hi), c)


@pytest.mark.parametrize("kind", ["hourglass", "laplace_transformed", "shifted_laplace"])
@pytest.mark.parametrize(("n", "mean"), [(60, 30.0), (1000, 80.0)])
def test_mean(kind, n, mean):
    """AVG by pivot inversion: exact for every n (up to the grid, 2^-21 of the range)."""
    m = make_mean(kind, 1.0, 0, 100)
    src = SeededSource(4)
    if m.draw_many(1, src) is not None:
        rel = m.apply_many((np.full(N, mean * n), np.full(N, n)), m.draw_many(N, src))
        avg, n_hat = np.asarray(rel.values), np.asarray(rel.parts[1].values)
    else:
        rels = [m.release((mean * n, n), src) for _ in range(N)]
        avg, n_hat = np.array([r.value for r in rels]), np.array([r.count for r in rels])
    lo, hi = interval(m, avg, LEVEL, n_hat=n_hat)
    assert ((lo <= avg) & (avg <= hi)).all()
    assert abs(float(np.mean((lo <= mean) & (mean <= hi))) - LEVEL) <= TOL


def test_mean_level_is_read():
    m = make_mean("hourglass", 1.0, 0, 100)
    rel = m.apply_many((np.full(N, 3000.0), np.full(N, 100)), m.draw_many(N, SeededSource(5)))
    avg, n_hat = np.asarray(rel.values), np.asarray(rel.parts[1].values)
    lo, hi = interval(m, avg, 0.8, n_hat=n_hat)
    assert abs(float(np.mean((lo <= 30) & (30 <= hi))) - 0.8) <= 4.5 * math.sqrt(0.8 * 0.2 / N)


def test_hourglass_count_and_sum_parts():
    """The SUM and COUNT released with an AVG (the same draw): their half-widths' coverage."""
    m = make_mean("hourglass", 0.5, 0, 100, integer=True)
    n, s = 400, 400 * 37
    rel = m.apply_many((np.full(N, s, dtype=np.int64), np.full(N, n)), m.draw_many(N, SeededSource(6)))
    hc = m.count_half_width(LEVEL)
    counts = np.asarray(rel.parts[1].values)
    c = 1.0 - hourglass_count_tail(hc, m.noise.eps, m.noise.G, m.noise.grid)
    _binomial_ok(np.abs(counts - n) <= hc, c)
    hs = m.sum_half_width(LEVEL)
    sums = np.asarray(rel.parts[0].values)
    assert abs(float(np.mean(np.abs(sums - s) <= hs)) - LEVEL) <= TOL


def test_variance_is_conservative():
    """VAR from three moments (Bonferroni box): covers at ≥ level (a bound, not exact)."""
    m = MomentVariance(1.0, 0, 100, integer=True, func="var_pop")
    rng = np.random.default_rng(7)
    x = rng.integers(0, 101, 300)
    y = 2 * x - 100  # half units (module docstring of mechanisms.variance)
    truth = float(np.var(x))
    src = SeededSource(7)
    covered = 0
    for _ in range(N):
        r = m.release((len(x), int(y.sum()), int((y * y).sum())), src)
        n, s1, s2 = (p.value for p in r.parts)
        lo, hi = variance_interval(m, n, s1, s2, LEVEL)
        covered += lo <= truth <= hi
    assert covered / N >= LEVEL


def test_release_functions_rows():
    """noisy_answer → answer_rows over 10,000 cells: dp_interval_low/high of COUNT(*) and AVG(x)
    as select items (the hidden COUNT(x) released with the AVG gives n^), coverage per cell."""
    cells_n = N
    g = GroupKey("g", "int", tuple(range(cells_n)))
    measures = (Measure("count_rows"), Measure("sum", "x", "float", 0.0, 100.0), Measure("count", "x"))
    aggs = (
        Aggregate("count", None, None, None, None, (0,)),
        Aggregate("avg", "x", "float", 0.0, 100.0, (1, 2), "hourglass"),
        Aggregate("count", "x", "float", None, None, (2,)),
    )
    outs = (
        Output("g", "group", 0, "int"),
        Output("count", "aggregate", 0, "int"),
        Output("lo", "expr", -1, "int", ("interval", "low", 0, LEVEL, -1)),
        Output("hi", "expr", -1, "int", ("interval", "high", 0, LEVEL, -1)),
        Output("avg", "aggregate", 1, "float"),
        Output("alo", "expr", -1, "float", ("interval", "low", 1, LEVEL, 2)),
        Output("ahi", "expr", -1, "float", ("interval", "high", 1, LEVEL, 2)),
    )
    plan = Plan("t", "t", None, (g,), measures, aggs, outs)
    n, mean = 80, 42.0
    cells = [(k, 2 * n, n * mean, n) for k in range(cells_n)]
    answer = noisy_answer(plan, cells, 2.0, SeededSource(8))
    rows = answer_rows(plan, answer)
    assert len(rows) == cells_n
    cnt = np.array([(r[2] <= 2 * n <= r[3]) for r in rows])
    c = dlap_coverage(GeometricCount(1.0).scale, LEVEL)
    _binomial_ok(cnt, c)
    assert all(r[2] <= r[1] <= r[3] and r[5] <= r[4] <= r[6] for r in rows)
    assert abs(float(np.mean([r[5] <= mean <= r[6] for r in rows])) - LEVEL) <= TOL


def test_ladder_levels():
    """A ladder (multi-tier release, Wang et al. 2026): each level's value has the marginal law
    of a geometric count at that level's ε, so its interval is that count's; one chain per cell."""
    from mechanisms.multitier.ladder import make_ladder

    levels = [2.0, 0.5, 0.1]
    lad = make_ladder("tsg", levels, 1)
    drawn = lad.release_many([500] * N, SeededSource(10))
    for eps in levels:
        m = GeometricCount(eps)
        lo, hi = interval(m, np.asarray(drawn[eps], dtype=np.int64), LEVEL)
        _binomial_ok((lo <= 500) & (500 <= hi), dlap_coverage(m.scale, LEVEL))


def test_partition_selected_keys():
    """Keys chosen by partition selection (Desfontaines et al. 2022): the values' noise is drawn
    apart from the selection's, so among the released keys the intervals cover at their rate.
    Units per key vary (20..60) so that selection keeps some keys and drops others."""
    from mechanisms.partition_selection import TruncatedGeometricSelection
    from proxy.pipeline.partitions import select_rows

    g = GroupKey("city", "text", None)
    plan = Plan(
        "t",
        "t",
        None,
        (g,),
        (Measure("count_rows"),),
        (Aggregate("count", None, None, None, None, (0,)),),
        (
            Output("city", "group", 0, "text"),
            Output("n", "aggregate", 0, "int"),
            Output("lo", "expr", -1, "int", ("interval", "low", 0, LEVEL, -1)),
            Output("hi", "expr", -1, "int", ("interval", "high", 0, LEVEL, -1)),
        ),
    )
    src = SeededSource(11)
    sel = TruncatedGeometricSelection(0.5, 1e-6)
    truth = {f"c{i}": 20 + i % 41 for i in range(3 * N)}
    kept = select_rows(sel, [(c, n, n) for c, n in sorted(truth.items())], 1, src)
    assert N <= len(kept) < 3 * N
    rows = answer_rows(plan, noisy_answer(plan, kept, 0.1, src))
    _binomial_ok(
        np.array([lo <= truth[c] <= hi for c, _, lo, hi in rows]),
        dlap_coverage(GeometricCount(0.1).scale, LEVEL),
    )


def test_gaussian_mean_is_conservative():
    """AVG on a zCDP tier (a discrete Gaussian SUM and COUNT): the union-bound box over both
    covers at ≥ level (a bound, not exact)."""
    from mechanisms.gaussian_stats import GaussianMean

    m = GaussianMean(0.05, 0, 100)
    n, mean = 200, 37.0
    rel = m.apply_many(
        (np.full(N, mean * n), np.full(N, n, dtype=np.int64)), m.draw_many(N, SeededSource(12))
    )
    avg, n_hat = np.asarray(rel.values), np.asarray(rel.parts[1].values)
    lo, hi = interval(m, avg, LEVEL, n_hat=n_hat)
    assert ((lo <= avg) & (avg <= hi)).all()
    assert float(np.mean((lo <= mean) & (mean <= hi))) >= LEVEL
