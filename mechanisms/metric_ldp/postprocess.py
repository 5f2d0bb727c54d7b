"""Optional post-processing of local-table estimates (metric-LDP spec §3.12, §8: ``clip`` and
``isotonic_cdf``). Not in the paper; both bias the estimates but cannot increase the
distance to any truth in the target set, and cost no privacy (functions of the reports).

* :func:`clip_counts` -- counts (or prefix estimates P̂_k) into [0, n];
* :func:`isotonic` -- least-squares monotone fit (pool adjacent violators) of
  P̂_1..P̂_{m−1}, then clipped into [0, n]: the isotonic regression onto [0, n] of §3.12
  (clipping the unbounded fit gives the bounded one), so σ̂ = P̂/n is a CDF and the
  §3.10 search returns its first crossing of p (not any crossing, spec §7.11).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import isotonic_regression

__all__ = ["clip_counts", "pava", "isotonic"]


def clip_counts(values: ArrayLike, n: float) -> np.ndarray:
    """``values`` clipped into [0, n] (spec §3.12)."""
    out: np.ndarray = np.clip(np.asarray(values, dtype=float), 0.0, max(float(n), 0.0))
    return out


def pava(values: ArrayLike) -> np.ndarray:
    """The non-decreasing sequence nearest to ``values`` in squared error (equal weights;
    pool adjacent violators, :func:`scipy.optimize.isotonic_regression`)."""
    v = np.asarray(values, dtype=float)
    fitted: np.ndarray = isotonic_regression(v).x if len(v) else v
    return fitted


def isotonic(values: ArrayLike, n: float) -> np.ndarray:
    """Isotonic regression of prefix estimates onto [0, n] (spec §3.12)."""
    return clip_counts(pava(values), n)
