"""Batch (vectorised) exact samplers and the measurements' draw_many/apply_many.

Laws: chi-square goodness of fit against the EXACT pmf at a fixed seed, p > 1e-4 (Cochran
bins: every expected count >= 5; the threshold is the test's false-rejection rate under the
law, and the seed fixes the verdict); the same test must reject the sampler mutated by one
unit in its parameter (power). Scalar and batch paths: two-sample chi-square (homogeneity)
of the scalar sampler's draws and the batch's, p > 1e-4. Releases: apply_many equals
apply cell by cell for the same noise (exact equality, no tolerance).
"""

from __future__ import annotations

import ast
import decimal
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from mech_testutil import dlap_chisq_pvalue
from scipy import stats

import mechanisms.batch as batch
import mechanisms.exact_real as exact_real
import proxy.pipeline.release as release
from config import parse_config
from mechanisms import GeometricCount, LaplaceSum, SeededSource, SystemRandomSource, discrete_laplace
from mechanisms.batch import discrete_laplace_array, fits_int64, geometric_array
from mechanisms.exact_real import LazyUniform, exp_neg_interval, logistic_interval
from mechanisms.mean import HourglassMean
from mechanisms.mean.grid import GridHourglass
from mechanisms.samplers import geometric_exp
from rewriter import build_plan, parse
from support.service import make_config

N = 100_000
P_MIN = 1e-4


def _geo_pvalue(ys, gamma: float) -> float:
    """Chi-square GOF of draws vs P[Y = y] = (1 - b) b^y, b = e^-gamma (Cochran bins + tail)."""
    ys = np.asarray(ys)
    n, b = ys.size, math.exp(-gamma)
    k = 0
    while n * (1 - b) * b ** (k + 1) >= 5 and n * b ** (k + 2) >= 5:
        k += 1
    probs = np.append((1 - b) * b ** np.arange(k + 1), b ** (k + 1))
    obs = np.append(np.bincount(ys[ys <= k], minlength=k + 1), np.sum(ys > k))
    return float(stats.chisquare(obs, n * probs / probs.sum()).pvalue)


def _two_sample_pvalue(xs, ys) -> float:
    """Chi-square homogeneity of two integer samples (values pooled into bins of >= 10 each)."""
    xs, ys = np.asarray(xs), np.asarray(ys)
    vals, counts = np.unique(np.concatenate([xs, ys]), return_counts=True)
    edges, acc = [], 0
    for v, c in zip(vals, counts):
        acc += c
        if acc >= 20:
            edges.append(v)
            acc = 0
    bins = np.searchsorted(np.array(edges[:-1]), np.concatenate([xs, ys]), side="left")
    nb = len(edges)
    table = np.array([np.bincount(bins[: xs.size], minlength=nb), np.bincount(bins[xs.size :], minlength=nb)])
    table = table[:, table.sum(axis=0) > 0]
    return float(stats.chi2_contingency(table)[1])


# -- the exact intervals behind the thresholds ----------------------------------------------
@pytest.mark.parametrize("a,b", [(0, 1), (1, 2), (1, 16), (7, 3), (40, 1), (123457, 1000), (3, 10**9)])
@pytest.mark.parametrize("prec", [32, 96, 200])
def test_exp_neg_interval_brackets_the_true_value(a, b, prec):
    with decimal.localcontext() as ctx:
        ctx.prec = 120
        true = (-decimal.Decimal(a) / decimal.Decimal(b)).exp() * (decimal.Decimal(2) ** prec)
    lo, hi = exp_neg_interval(a, b, prec)
    assert lo <= true <= hi and hi - lo <= 3


@pytest.mark.parametrize("a,b", [(1, 2), (1, 16), (15, 16), (3, 10**9)])
def test_logistic_interval_brackets_the_true_value(a, b):
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        q = (-decimal.Decimal(a) / decimal.Decimal(b)).exp()
        true = q / (1 + q) * (decimal.Decimal(2) ** 64)
    lo, hi = logistic_interval(a, b, 64)
    assert lo <= true <= hi and hi - lo <= 3


def test_lazy_comparison_decides_ties_exactly():
    """A prefix inside the threshold's interval (the 32 bits cannot decide) is decided by the
    further bits of the same U: the verdict equals U < x computed in 150-digit decimals."""
    src = SeededSource(5)
    a, b = 1, 3
    lo, hi = exp_neg_interval(a, b, 32)
    with decimal.localcontext() as ctx:
        ctx.prec = 150
        x = (-decimal.Decimal(a) / decimal.Decimal(b)).exp()
        for prefix in range(lo - 1, hi + 1):
            for _ in range(50):
                lazy = LazyUniform(prefix, 32, src)
                verdict = lazy.below(lambda p: exp_neg_interval(a, b, p))
                u_low = decimal.Decimal(lazy.v) / decimal.Decimal(2) ** lazy.n
                u_high = decimal.Decimal(lazy.v + 1) / decimal.Decimal(2) ** lazy.n
                assert (u_high <= x) if verdict else (u_low >= x)


class _TieSource(SeededSource):
    """Every 32-bit word is ``word`` (forced into a threshold's ambiguous interval); the
    further bits come from the seeded generator."""

    def __init__(self, seed: int, word: int) -> None:
        super().__init__(seed)
        self.word = word

    def bits64(self, n: int):
        return np.full(n, self.word | (self.word << 32), dtype=np.uint64)


def test_geometric_rows_on_a_tie_have_the_conditional_law():
    """With every first word at lo_1 of B = exp(-1) (U within 2^-32 of B), the exact rule
    gives H = 1 when U < B and 0 otherwise: P[H = 1 | U in [lo, lo+1)/2^32] = 2^32 B - lo."""
    lo, _ = exp_neg_interval(1, 1, 32)
    src = _TieSource(9, lo)
    h = geometric_array(20_000, Fraction(1), src)
    assert set(np.unique(h)) <= {0, 1}
    frac = math.exp(-1) * 2**32 - lo  # the conditional probability
    # tolerance: 5 binomial standard errors
    assert abs(h.mean() - frac) <= 5 * math.sqrt(frac * (1 - frac) / h.size)


def test_digit_rows_on_a_tie_have_the_conditional_law():
    """gamma = 1/40 (two digits, then the table): every first word at lo of digit 0's
    threshold p = q/(1 + q), q = e^(-1/40): digit 0 is 1 exactly when the rest of U is below
    2^32 p - lo (the other thresholds are decided by the word: digit 1 is 0, H is 7)."""
    lo, _ = logistic_interval(1, 40, 32)
    ys = geometric_array(20_000, Fraction(1, 40), _TieSource(10, lo))
    q = math.exp(-1 / 40)
    frac = q / (1 + q) * 2**32 - lo
    assert set(np.unique(ys >> 1)) == {(7 << 1)}
    bit = ys & 1
    assert abs(bit.mean() - frac) <= 5 * math.sqrt(frac * (1 - frac) / bit.size)


def _counts_by_definition(u: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """(#{h : lo_h > u}, #{h : hi_h > u}) per row, compared entry by entry with the table."""
    neg_lo, neg_hi = batch._table(a, b)
    return (-neg_lo[None, :] > u[:, None]).sum(axis=1), (-neg_hi[None, :] > u[:, None]).sum(axis=1)


@pytest.mark.parametrize("a,b", [(1, 1), (1, 16), (32, 300), (5, 2), (1 << 20, 1)])
def test_the_bucket_lookup_counts_as_the_table_does(a, b):
    """:func:`batch.high_counts` (one lookup of u's top 16 bits, a binary search in the
    undecided buckets) against the count by definition, on every threshold's lo_h and hi_h
    and their neighbours, every bucket's first and last word, and 200,000 random words:
    where the two counts agree the lookup must give it exactly; where u lies in a threshold
    interval, one of the two (the exact comparison decides which). Its mutation — a bucket
    decided from its first word only — is counted below."""
    neg_lo, neg_hi = batch._table(a, b)
    edges = np.concatenate([-neg_lo, -neg_hi])
    starts = np.arange(1 << 16, dtype=np.int64) << 16
    u = np.unique(
        np.clip(
            np.concatenate(
                [
                    edges - 1,
                    edges,
                    edges + 1,
                    starts,
                    starts + 0xFFFF,
                    np.random.default_rng(a).integers(0, 1 << 32, 200_000),
                ]
            ),
            0,
            (1 << 32) - 1,
        )
    )
    got = batch.high_counts(u, a, b, SeededSource(7))
    low, high = _counts_by_definition(u, a, b)
    assert np.array_equal(got[low == high], low[low == high])
    tie = low != high
    assert np.all((got[tie] == low[tie]) | (got[tie] == high[tie]))
    assert tie.sum() <= 3 * neg_lo.size  # only the words inside an interval
    if a >= 1 << 20:  # B^1 < 2^-32: every count is 0, nothing to miscount
        return
    # the mutation: a bucket read from its first word alone miscounts the words after a threshold
    first_only = batch._buckets(a, b).copy()
    first_only[:] = np.searchsorted(neg_lo, -starts, side="left")
    assert not np.array_equal(first_only[u >> 16].astype(np.int64)[low == high], low[low == high])


# -- laws -----------------------------------------------------------------------------------
GAMMAS = [Fraction(1, 40), Fraction(1, 3), Fraction(1), Fraction(5, 2)]


@pytest.mark.parametrize("gamma", GAMMAS)
def test_batch_geometric_has_the_exact_law(gamma):
    ys = geometric_array(N, gamma, SeededSource(100 + gamma.denominator))
    assert ys.dtype == np.int64 and ys.min() >= 0
    assert _geo_pvalue(ys, float(gamma)) > P_MIN


SCALES = [Fraction(1, 2), Fraction(1), Fraction(37, 10), Fraction(20), Fraction(300)]


@pytest.mark.parametrize("scale", SCALES)
def test_batch_discrete_laplace_has_the_exact_law(scale):
    zs = discrete_laplace_array(N, scale, SeededSource(int(scale * 10)))
    assert dlap_chisq_pvalue(zs, scale) > P_MIN


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(2), Fraction(20)])
def test_an_off_by_one_parameter_is_rejected(scale, monkeypatch):
    """Mutation: the batch reads its rational parameter one unit off in the denominator
    (gamma = s/(t+1), i.e. scale (t+1)/s); the same chi-square must reject it."""
    real = batch._ratio
    monkeypatch.setattr(
        batch,
        "_ratio",
        lambda x, what: (lambda p, q: (p, q + 1) if what == "gamma" else (p, q))(*real(x, what)),
    )
    zs = discrete_laplace_array(N, scale, SeededSource(int(scale * 10)))
    assert dlap_chisq_pvalue(zs, scale) < P_MIN


def test_a_table_off_by_one_is_rejected(monkeypatch):
    """Mutation at scale 300 (gamma = 1/300: 5 binary digits, then the table of
    B = e^(-32/300)): the table's thresholds B^(h+1) for B^h; the chi-square must reject it."""
    real = batch.exp_neg_interval
    monkeypatch.setattr(batch, "exp_neg_interval", lambda a, b, p: real(a + 32, b, p))
    batch._table.cache_clear()
    batch._buckets.cache_clear()
    try:
        zs = discrete_laplace_array(N, Fraction(300), SeededSource(3000))
    finally:
        batch._table.cache_clear()
        batch._buckets.cache_clear()
    assert dlap_chisq_pvalue(zs, Fraction(300)) < P_MIN


def _odd_share() -> float:
    ys = geometric_array(1_000_000, Fraction(1, 40), SeededSource(41))
    return float((ys & 1).mean())


def test_the_low_digit_has_its_exact_law_and_an_off_by_one_digit_fails(monkeypatch):
    """The digits barely move a chi-square at large scales, so digit 0 is tested alone:
    P[Y odd] = b/(1 + b), b = e^(-1/40) (m = 2 digits). Tolerance: 5 binomial standard errors
    (sqrt(p(1-p)/n) = 5.0e-4 at n = 10^6). Mutation: digit i given digit i+1's probability
    (1/(1 + e^(2/40)): 12 standard errors away) must fall outside it."""
    b = math.exp(-1 / 40)
    p, tol = b / (1 + b), 5 * math.sqrt(0.25 / 1_000_000)
    assert abs(_odd_share() - p) <= tol
    real = batch.logistic_interval
    monkeypatch.setattr(batch, "logistic_interval", lambda a, c, prec: real(2 * a, c, prec))
    assert abs(_odd_share() - p) > tol


@pytest.mark.parametrize("gamma", [Fraction(1, 3), Fraction(1, 40)])
def test_scalar_and_batch_geometric_have_the_same_law(gamma):
    n = 30_000
    src = SeededSource(77)
    scalar = [geometric_exp(gamma, src) for _ in range(n)]
    assert _two_sample_pvalue(scalar, geometric_array(n, gamma, SeededSource(78))) > P_MIN


def test_scalar_and_batch_discrete_laplace_have_the_same_law():
    n, scale = 30_000, Fraction(37, 10)
    src = SeededSource(21)
    scalar = [discrete_laplace(scale, src) for _ in range(n)]
    assert _two_sample_pvalue(scalar, discrete_laplace_array(n, scale, SeededSource(22))) > P_MIN


@pytest.mark.parametrize("eps,grid", [(Fraction(1, 2), 16), (Fraction(1), 8), (Fraction(3, 10), 4)])
def test_hourglass_batch_has_the_grid_law(eps, grid):
    """(I, K) of ``sample_many``: I against the exact grid marginal P(I = i) = b^|J(i)|/Zs,
    K - J(I) against DLap(1/eps) (Lemma 4: independent of I), and the pair's sign agreement
    against the scalar ``sample_exact`` (two-sample)."""
    h = GridHourglass(eps, grid)
    i, k = h.sample_many(N, SeededSource(31))
    support = np.arange(-8 * grid, 8 * grid + 1)
    pmf = h.marginal_pmf(support)
    keep = pmf * N >= 5
    lo, hi = support[keep].min(), support[keep].max()
    probs = np.concatenate(
        [
            [pmf[support < lo].sum() + (1 - pmf.sum()) / 2],
            pmf[keep],
            [pmf[support > hi].sum() + (1 - pmf.sum()) / 2],
        ]
    )
    obs = np.concatenate(
        [
            [np.sum(i < lo)],
            np.bincount(i[(i >= lo) & (i <= hi)] - lo, minlength=hi - lo + 1),
            [np.sum(i > hi)],
        ]
    )
    assert stats.chisquare(obs, N * probs / probs.sum()).pvalue > P_MIN
    assert dlap_chisq_pvalue(k - h.step(i), 1 / eps) > P_MIN
    src = SeededSource(32)
    scalar = [h.sample_exact(src) for _ in range(20_000)]
    code = lambda ii, kk: np.sign(ii) * 3 + np.sign(kk)
    pairs = np.array(scalar)
    assert _two_sample_pvalue(code(pairs[:, 0], pairs[:, 1]), code(i[:20_000], k[:20_000])) > P_MIN
    assert _two_sample_pvalue(pairs[:, 1], k[:20_000]) > P_MIN


def test_batch_modules_are_float_free():
    for mod in (batch, exact_real):
        tree = ast.parse(Path(mod.__file__).read_text())
        assert not [
            n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, float)
        ]
        assert "random" not in {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_batch_refuses_floats_and_huge_scales():
    with pytest.raises(TypeError):
        discrete_laplace_array(3, 2.0, SeededSource(0))
    assert fits_int64(Fraction(2**40)) and not fits_int64(Fraction(2**60))
    assert GeometricCount(Fraction(1, 2**60)).draw_many(3, SeededSource(0)) is None


# -- releases: apply_many equals apply, cell by cell --------------------------------------------
def _cells(rng, n, lower, upper, integer):
    counts = [int(c) for c in rng.integers(0, 50, n)]
    counts[:3] = [0, 1, 2]
    sums = []
    for c in counts:
        v = rng.uniform(lower, upper, c)
        sums.append(int(np.round(v).sum()) if integer else math.fsum(v))
    sums[1] = upper if integer else float(upper)  # at the bounds
    sums[2] = 2 * lower if integer else float(2 * lower)
    return sums, counts


def _assert_many_equals_one(many, one) -> None:
    """A batch release equals the cell-by-cell releases: values, both parts, half-width."""
    assert many.values == [r.value for r in one]
    assert many.parts[0].values == [r.parts[0].value for r in one]
    assert many.parts[1].values == [r.parts[1].value for r in one]
    assert many.half_width == max(r.half_width for r in one)


@pytest.mark.parametrize(
    "lower,upper,integer", [(0, 100, True), (-7, 13, True), (0, 500000, False), (-2.5, 10.25, False)]
)
def test_hourglass_apply_many_equals_apply(lower, upper, integer):
    rng = np.random.default_rng(4)
    m = HourglassMean(Fraction(1, 2), lower, upper, integer=integer)
    sums, counts = _cells(rng, 3000, lower, upper, integer)
    noise = m.draw_many(len(sums), SeededSource(6))
    many = m.apply_many((sums, counts), noise)
    one = [m.apply((s, c), (int(a), int(b))) for s, c, a, b in zip(sums, counts, *noise)]
    _assert_many_equals_one(many, one)
    want = [m.grid_input((s, c)) for s, c in zip(sums, counts)]
    a, n = m.grid_inputs(sums, counts)
    assert [(int(x), int(y)) for x, y in zip(a, n)] == want
    a, n = m.grid_inputs(np.asarray(sums), np.asarray(counts, dtype=np.int64))  # as a columnar scan
    assert [(int(x), int(y)) for x, y in zip(a, n)] == want  # gives them


def test_grid_inputs_refuse_what_the_scalar_refuses():
    m = HourglassMean(1.0, 0, 10, integer=False)
    with pytest.raises(ValueError):
        m.grid_inputs([5.0] * 70 + [1000.0], [1] * 71)  # a sum beyond n * upper


@pytest.mark.parametrize(
    "meas", [GeometricCount(0.5), LaplaceSum(0.5, 0, 1000, integer=True), LaplaceSum(0.5, -3.5, 1000.25)]
)
def test_count_and_sum_apply_many_equal_apply(meas):
    rng = np.random.default_rng(8)
    vals = [int(v) for v in rng.integers(0, 10**6, 2000)]
    if isinstance(meas, LaplaceSum) and not meas.integer:
        vals = [v + 0.37 for v in vals]
    noise = meas.draw_many(len(vals), SeededSource(9))
    many = meas.apply_many(vals, noise)
    one = [meas.apply(v, int(z)) for v, z in zip(vals, noise)]
    assert many.values == [r.value for r in one]
    assert [type(v) for v in many.values] == [type(r.value) for r in one]
    assert many.half_width == max(float(r.half_width) for r in one)


def test_system_source_stream_words_are_uniform_and_fresh():
    """``SystemRandomSource.bits64`` of a release (>= 512 words: the ChaCha20 keystream under
    a fresh key): bytes uniform (chi-square on the 256 byte values; under uniform bytes the
    p-value is below 1e-9 with probability 1e-9) and two calls never repeat."""
    src = SystemRandomSource()
    a, b = src.bits64(100_000), src.bits64(100_000)
    assert a.dtype == np.uint64 and a.size == 100_000
    assert not np.array_equal(a[:4], b[:4])  # equal with probability 2^-256
    counts = np.bincount(a.view(np.uint8), minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-9


def test_noisy_answer_batch_path_has_the_cell_by_cell_shape():
    """200 cells (item 1..200): COUNT, AVG/SUM/COUNT(amount) (one hourglass release) and
    VAR(amount) (no batch form: cell by cell beside the batch). Same keys, value types and
    structure as the cell-by-cell path; the AVG's SUM and COUNT come from its one release
    (SUM = l' n^ + w' s1^ with AVG = SUM/COUNT whenever that ratio is inside the bounds)."""
    cfg = parse_config(make_config(purchases="rows"))
    plan = build_plan(
        parse(
            "SELECT item, COUNT(*), AVG(amount), SUM(amount), COUNT(amount), "
            "VAR_POP(amount) FROM purchases GROUP BY item"
        ),
        cfg,
    )
    assert [m.kind for m in plan.measures] == ["count_rows", "sum", "count", "csum", "csumsq"]
    rng = np.random.default_rng(12)
    cells = []
    for item in range(1, 201):
        x = rng.uniform(0, 500, int(rng.integers(0, 40)))
        mid = x - 250.0  # VAR's centred moments (centre 250)
        cells.append((item, x.size, math.fsum(x), x.size, math.fsum(mid), math.fsum(mid * mid)))
    assert plan.n_cells == 200 >= release.BATCH_MIN_CELLS
    batch_ans = release.noisy_answer(plan, cells, 1.0, SeededSource(1))
    saved = release.BATCH_MIN_CELLS
    release.BATCH_MIN_CELLS = 10**9
    try:
        cell_ans = release.noisy_answer(plan, cells, 1.0, SeededSource(1))
    finally:
        release.BATCH_MIN_CELLS = saved
    assert batch_ans["keys"] == cell_ans["keys"]
    assert [[type(v) for v in r] for r in batch_ans["values"]] == [
        [type(v) for v in r] for r in cell_ans["values"]
    ]
    for k in ("mechanism", "epsilon", "labels"):
        assert batch_ans[k] == cell_ans[k]


def test_float_epsilons_and_empty_batches():
    """ε from a config is a float taken exactly (Fraction(0.3): 2^54-sized terms): the batch
    draws it; a batch of 0 is empty; empty cells (n = 0, S = 0) have grid input 0."""
    src = SeededSource(3)
    assert GeometricCount(0.3).draw_many(0, src).size == 0
    z = GeometricCount(0.3).draw_many(50_000, src)
    assert dlap_chisq_pvalue(z, 1 / Fraction(0.3)) > P_MIN
    m = HourglassMean(0.3, 0, 500000)
    i, k = m.draw_many(0, src)
    assert i.size == k.size == 0
    a, n = m.grid_inputs([0] * 5 + [0.0] * 5, [0] * 10)
    assert a.tolist() == [0] * 10 == [m.grid_input((0, 0))[0]] * 10


def test_apply_many_beyond_float_exact_integers_goes_cell_by_cell():
    """Counts of 2^34 put M s1 beyond 2^53 (M = 2^20): apply_many takes the exact per-cell path
    for the grid inputs and the release, and still equals apply."""
    m = HourglassMean(Fraction(1, 2), 0, 100, integer=True)
    counts = [2**34 + c for c in range(40)]
    sums = [37 * c for c in counts]
    noise = m.draw_many(len(counts), SeededSource(14))
    many = m.apply_many((sums, counts), noise)
    one = [m.apply((s, c), (int(a), int(b))) for s, c, a, b in zip(sums, counts, *noise)]
    _assert_many_equals_one(many, one)


def test_noise_drawn_during_the_scan_is_the_live_draw():
    """``BatchNoise`` (drawn on its thread while the scan runs) gives the release exactly the
    draws ``noisy_answer`` would make after the scan: the same sampler calls in the same
    order, so with one seed the two answers are equal. The draws are taken once, and only
    for the domain's number of cells."""
    from proxy.pipeline.noise import BatchNoise

    cfg = parse_config(make_config(purchases="rows"))
    plan = build_plan(parse("SELECT item, COUNT(*), AVG(amount) FROM purchases GROUP BY item"), cfg)
    rng = np.random.default_rng(21)
    cells = [
        (item, n, float(rng.uniform(0, 500) * n), n)
        for item, n in zip(range(1, 201), rng.integers(0, 40, 200).tolist())
    ]
    live = release.noisy_answer(plan, cells, 1.0, SeededSource(5))
    pre = BatchNoise(plan, 1.0, SeededSource(5))
    assert pre.worthwhile and pre.cells == len(cells) == 200
    assert pre.take(len(cells)) is None  # not started: nothing to take
    pre.start()
    drawn = pre.take(len(cells))
    assert release.noisy_answer(plan, cells, 1.0, SeededSource(77), predrawn=drawn) == live
    assert pre.take(len(cells)) is None  # once
    other = BatchNoise(plan, 1.0, SeededSource(5))
    other.start()
    assert other.take(199) is None  # drawn for 200 cells: not for 199
    small = build_plan(parse("SELECT COUNT(*) FROM purchases"), cfg)
    assert not BatchNoise(small, 1.0, SeededSource(5)).worthwhile
