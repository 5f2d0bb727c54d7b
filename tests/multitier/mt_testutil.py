"""Shared helpers for tests/multitier (not a test module)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def chisq_pvalue(samples, pmf, kmax: int = 400) -> float:
    """Chi-square GOF p-value of integer samples vs pmf(k) on Z.

    Cells: single integers whose expected count is >= 5 (Cochran's rule); the
    remaining mass is pooled into one 'other' cell.
    """
    x = np.asarray(samples, dtype=np.int64)
    n = x.size
    k = np.arange(-kmax, kmax + 1)
    p = np.asarray(pmf(k), dtype=float)
    keep = n * p >= 5
    ks, ps = k[keep], p[keep]
    obs = np.array([(x == v).sum() for v in ks] + [0])
    obs[-1] = n - obs[:-1].sum()
    exp_ = np.concatenate([n * ps, [n * max(1.0 - ps.sum(), 0.0)]])
    if exp_[-1] < 5:  # fold a tiny remainder into the largest cell
        obs, exp_ = obs[:-1].copy(), exp_[:-1].copy()
        obs[np.argmax(exp_)] += n - obs.sum()
        exp_ *= n / exp_.sum()
    return float(stats.chisquare(obs, exp_).pvalue)


def empirical_cf(samples, ts):
    """Real part of the empirical CF (all residuals here are symmetric)."""
    x = np.asarray(samples, dtype=float)
    return np.array([np.cos(t * x).mean() for t in ts])
