"""Serving entry point svt_select, the SVT loop, and the exact integer samplers (SVT spec Sec. 2.4, 7)."""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from mechanisms import SeededSource
from mechanisms.rng import RandomSource
from mechanisms.svt import QueryShape, SvtExp, geometric, run_passes, svt_select
from mechanisms.svt.exact import to_grid


class IntOnlySource(RandomSource):
    """Seeded source that fails if a float generator is requested (exact path must not)."""

    def __init__(self, seed):
        self._s = SeededSource(seed)

    def randbelow(self, n):
        return self._s.randbelow(n)

    def getrandbits(self, k):
        return self._s.getrandbits(k)

    def generator(self):
        raise AssertionError("exact path asked for a float generator")


# ------------------------------------------------------------------ monotonicity / shape
def test_monotone_refused_for_non_monotone_shape():
    vals = [3, 0, 7]
    for shape in (
        QueryShape("count", "replace"),
        QueryShape("sum", "add_remove", lower=-5, upper=5, single_group=False),
        QueryShape("sum", "replace", lower=0, upper=5),
    ):
        assert not shape.monotone
        with pytest.raises(ValueError, match="monotone"):
            svt_select(vals, 2, 1, 1.0, shape.sensitivity, True, SeededSource(1), shape=shape)
        # the general (non-monotone) scale is accepted for the same shape
        svt_select(vals, 2, 1, 1.0, shape.sensitivity, False, SeededSource(1), shape=shape)
    for shape in (
        QueryShape("count"),
        QueryShape("count_distinct"),
        QueryShape("sum", lower=0, upper=5, single_group=False),
        QueryShape("sum", lower=-5, upper=5, single_group=True),
    ):
        assert shape.monotone
        svt_select(vals, 2, 1, 1.0, shape.sensitivity, True, SeededSource(1), shape=shape)


def test_shape_sensitivity():
    assert QueryShape("count", cap=3).sensitivity == 3
    assert QueryShape("sum", lower=-2, upper=5).sensitivity == 5
    assert QueryShape("sum", "replace", lower=-2, upper=5).sensitivity == 7
    assert QueryShape("sum", "replace", lower=1, upper=5).sensitivity == 5
    with pytest.raises(ValueError, match="sensitivity"):
        svt_select([1, 2], 1, 1, 1.0, 1, True, SeededSource(1), shape=QueryShape("count", cap=3))


# ------------------------------------------------------------------ privacy accounting
def test_epsilon_never_depends_on_outcome():
    src = SeededSource(5)
    none_pass = svt_select([0] * 40, 1000, 5, 0.8, 1, True, src)
    all_pass = svt_select([5000] * 40, 1000, 5, 0.8, 1, True, src)
    assert none_pass.indices == [] and len(all_pass.indices) == 5
    assert none_pass.epsilon == all_pass.epsilon == pytest.approx(0.8, abs=1e-15)
    assert svt_select([], 3, 2, 0.8, 1, True, src).epsilon == pytest.approx(0.8)
    # privacy map from the scales actually used (Thm. 3), including RESAMPLE's c eps1 + eps2
    for resample in (False, True):
        for mono in (False, True):
            m = SvtExp(Fraction(1, 3), 7, 2, monotone=mono, resample=resample, exact=True)
            n_rho = 7 if resample else 1
            assert m.privacy_map_exact(1) == Fraction(1, 3)
            assert m.privacy_map_exact(1) == n_rho * m.epsilon1 + m.epsilon2
            assert m.epsilon1 == 2 / m.b and m.epsilon2 == (1 if mono else 2) * 7 * 2 / m.theta
            assert m.privacy_map_exact(3) == 1


# ------------------------------------------------------------------ behaviour
def test_threshold_and_top_c_selection():
    # well separated data, generous eps: the true set is found (noise << gap)
    vals = [0] * 95 + [1000] * 5
    res = svt_select(vals, 500, 5, 20.0, 1, True, SeededSource(3))
    assert res.indices == [95, 96, 97, 98, 99] and res.incomplete
    assert res.mechanism == "svt_exp_discrete" and res.params["grid"] == 1.0
    # more true positives than c: at most c returned, flagged incomplete
    res = svt_select([1000] * 30, 500, 4, 20.0, 1, True, SeededSource(4))
    assert len(res.indices) == 4 and res.incomplete and res.passes_used == 1
    # fewer than c: all passes run, not incomplete
    res = svt_select(vals, 500, 10, 20.0, 1, True, SeededSource(5), max_passes=3)
    assert res.indices == [95, 96, 97, 98, 99] and not res.incomplete and res.passes_used == 3
    # per-candidate thresholds: the same count passes or not depending on its own threshold
    res = svt_select([1000, 1000, 1000], [500, 5000, 500], 3, 20.0, 1, True, SeededSource(6))
    assert res.indices == [0, 2]
    # the cutoff is clamped to the number of candidates (at most n tops can occur); c < 1 refused
    assert res.params["c"] == 3
    assert svt_select([1, 2], 1, 50, 1.0, 1, True, SeededSource(6)).params["c"] == 2
    with pytest.raises(ValueError):
        svt_select([1, 2], 1, 0, 1.0, 1, True, SeededSource(6))
    # continuous path
    res = svt_select(vals, 500.0, 5, 20.0, 1.0, True, SeededSource(7), exact=False)
    assert res.indices == [95, 96, 97, 98, 99] and res.mechanism == "svt_exp"


def test_exact_path_uses_integer_randomness_only():
    res = svt_select([3, 9, 1, 12, 0, 7], 6, 2, 1.0, 1, True, IntOnlySource(8))
    assert len(res.indices) <= 2
    with pytest.raises(AssertionError, match="float generator"):
        svt_select([3, 9, 1], 6, 2, 1.0, 1, True, IntOnlySource(8), exact=False)


def test_strict_and_grid_mapping():
    # integers: COUNT > T  <=>  COUNT >= T + 1 (SVT spec Sec. 6 item 12)
    assert to_grid([4, 5], [5, 5], 1, False, Fraction(1)) == ([4, 5], [5, 5], 1)
    assert to_grid([4, 5], [5, 5], 1, True, Fraction(1)) == ([4, 5], [6, 6], 1)
    # reals on g = 2^-10: values rounded, sensitivity floor(D/g) + 1, thresholds ceil / floor + 1
    g = Fraction(1, 1024)
    v, t, d = to_grid([1.5, 0.7], [0.5, 0.5], 1.0, False, g)
    assert v == [1536, round(Fraction(0.7) * 1024)] and t == [512, 512] and d == 1025
    assert to_grid([1.5], [0.5], 1.0, True, g)[1] == [513]
    # strict threshold actually changes the decision for a count sitting exactly at T
    hits = [
        svt_select([5], 5, 1, 40.0, 1, True, SeededSource(s), strict=st).indices
        for st in (False, True)
        for s in range(30)
    ]
    assert sum(map(len, hits[:30])) > sum(map(len, hits[30:]))


def test_run_passes_logic():
    # deterministic draws: zero noise, values vs thresholds decide
    vals, thr = np.array([5.0, 1.0, 7.0, 0.0]), np.zeros(4) + 3
    z = lambda m: np.zeros(m)
    t = run_passes(
        vals, thr, np.arange(4), c=5, r=0.0, draw_rho=lambda: 0.0, draw_noise=z, max_passes=3, k_max=100
    )
    assert t.selected == [0, 2] and t.comparisons == 4 + 2 + 2 and t.reason == "passes"
    assert t.per_pass == [2, 2, 2] and not t.incomplete
    t = run_passes(
        vals,
        thr,
        np.array([3, 2, 1, 0]),
        c=1,
        r=0.0,
        draw_rho=lambda: 0.0,
        draw_noise=z,
        max_passes=3,
        k_max=100,
    )
    assert t.selected == [2] and t.comparisons == 2 and t.reason == "cutoff" and t.incomplete
    t = run_passes(
        vals, thr, np.arange(4), c=5, r=0.0, draw_rho=lambda: 0.0, draw_noise=z, max_passes=3, k_max=5
    )
    assert t.comparisons == 5 and t.reason == "k_max"
    # RESAMPLE: rho redrawn after each top (rho sequence 0, 100: the second item cannot pass)
    rhos = iter([0.0, 100.0, 100.0])
    t = run_passes(
        vals,
        thr,
        np.arange(4),
        c=5,
        r=0.0,
        draw_rho=lambda: next(rhos),
        draw_noise=z,
        max_passes=1,
        k_max=100,
        resample=True,
    )
    assert t.selected == [0] and t.comparisons == 4


@pytest.mark.parametrize("scale", [Fraction(3, 2), Fraction(7), Fraction(1, 3)])
def test_geometric_sampler(scale):
    src = SeededSource(int(scale * 6))
    n = 20000
    x = np.array([geometric(scale, src) for _ in range(n)])
    p = math.exp(-1 / float(scale))  # P[Y = y] = (1-p) p^y
    kmax = int(np.floor(np.log(5 / (n * (1 - p))) / np.log(p)))  # expected count >= 5
    probs = np.concatenate([(1 - p) * p ** np.arange(kmax + 1), [p ** (kmax + 1)]])
    obs = np.concatenate([np.bincount(np.minimum(x, kmax + 1), minlength=kmax + 2)])
    assert stats.chisquare(obs, probs * n).pvalue > 1e-4
    # power: the same data against the wrong scale is rejected
    p2 = math.exp(-1 / (1.3 * float(scale)))
    probs2 = np.concatenate([(1 - p2) * p2 ** np.arange(kmax + 1), [p2 ** (kmax + 1)]])
    assert stats.chisquare(obs, probs2 * n).pvalue < 1e-6
