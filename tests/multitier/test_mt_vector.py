"""AVG via seed-001 Algorithm 3 with a Laplace chain per transformed coordinate (spec 10, full eps)."""

import math

import numpy as np
import pytest
from scipy import stats

from mechanisms.multitier import VectorLadder
from mechanisms.rng import SeededSource


def _log_ratio_top(eps, r, q, t):
    """log f(r | q) - log f(r | q + (t, 1-t)) for iid Laplace(1/eps) coordinates."""
    sh = np.array([t, 1 - t])
    return eps * (np.abs(r - q - sh).sum(-1) - np.abs(r - q).sum(-1))


def test_vector_laplace_full_eps_privacy_argument():
    e1, e2 = 1.0, 0.4
    rng = np.random.default_rng(0)
    q = np.array([30.0, 12.0])
    r = q + rng.uniform(-3, 3, size=(20_000, 2))
    ts = np.linspace(0, 1, 11)
    # chain: joint density = f_top(r1|q) * K(r2|r1) with K data-free, so the joint ratio is the top ratio:
    top = max(np.abs(_log_ratio_top(e1, r, q, t)).max() for t in ts)
    assert top <= e1 + 1e-12 and top > e1 - 1e-3  # tight at FULL eps: l1 sensitivity of (t, 1-t) is 1
    # naive independent release of both tiers: ratios add up to e1 + e2 > max eps
    indep = max(np.abs(_log_ratio_top(e1, r, q, t) + _log_ratio_top(e2, r, q, t)).max() for t in ts)
    assert indep > e1 + 0.3 and indep <= e1 + e2 + 1e-12


def test_vector_ladder_laws_and_postprocessing():
    vl, src, n = VectorLadder("laplace", [1.0, 0.4], sensitivity=1, dim=2), SeededSource(12), 10_000
    q = (30.0, 12.0)
    rows = [vl.release(q, src) for _ in range(n)]
    A = {e: np.array([r[e] for r in rows]) - np.array(q) for e in vl.levels}
    for e in vl.levels:
        for c in range(2):  # each coordinate is Laplace(1/eps): full eps, no split
            assert stats.kstest(A[e][:, c], stats.laplace(scale=1 / e).cdf).pvalue > 1e-3
        assert abs(stats.spearmanr(A[e][:, 0], A[e][:, 1])[0]) < 4.5 / math.sqrt(n)
    res = A[0.4] - A[1.0]
    for c in range(2):  # residual independent of the top draw (data-free kernel)
        assert abs(stats.spearmanr(A[1.0][:, c], res[:, c])[0]) < 4.5 / math.sqrt(n)
        assert abs(np.mean(res[:, c] == 0) - 0.16) < 4.5 * math.sqrt(0.16 * 0.84 / n)  # (0.4/1)^2 atom
    assert vl.privacy_map() == 1.0 and vl.privacy_map(released=[0.4]) == 0.4


def test_vector_ladder_family_restriction():
    with pytest.raises(ValueError, match="l1 family"):
        VectorLadder("gaussian", [1.0])
    out = VectorLadder("tsg", [2.0, 1.0], dim=2).release((5, 7), SeededSource(1))
    assert all(isinstance(v, int) for tup in out.values() for v in tup)
