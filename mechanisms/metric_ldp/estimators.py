"""Estimators as affine terms over the report columns + numpy reference + exact variance.

Product form (spec 3.5 [DERIVED], equal to the paper's Eq. (8) kappa^D B^-1 o): for a
separable query sum_i prod_d w_d[x_i[d]] the estimate is sum_i prod_d G_{i,d} with

    G_{i,d} = sum_{k=1}^{m} (w_k - w_{k+1}) Phat_k,   w_{m+1} = 0   (summation by parts, 3.11)

and the per-record prefix estimate Phat_k = (phi(k) - phi(0))/2, affine in the bits
b_j = (r_j + 1)/2 (r = the paper's +-1 report):

* ``estimator="paper"``  : phi(k) = kappa r_k (1 <= k <= m), phi(0) = -kappa r_m, so
  Phat_k = kappa (b_k + b_m - 1) for k < m and Phat_m = kappa (2 b_m - 1).
* ``estimator="known_n"``: phi(0) = -1, phi(m) = +1 exact, so Phat_k = kappa b_k + (1-kappa)/2
  for k < m and Phat_m = 1 (trivial dimensions cost nothing; post-processing, spec 3.5).

M3: Phat_k = y_k / K (k < m), Phat_m = 1. M2: G = sum_x w_x y_x / K.
So each G is ``const + sum_j coef_j * col_j`` (:func:`dim_affine`, all dims:
:func:`affine_terms`) and the whole query is ``SUM(scale * prod_d (const_d + sum_j coef_dj *
col_dj))`` -- ONE aggregate over the report table, printed as SQL by
:func:`rewriter.local_sql.estimate_sql` from these plain numbers (this package writes no SQL).

Exact variance [DERIVED, generalises spec 4.2]: report columns are independent with a
data-independent variance v_c (q~(1-q~) for bits, Var Z_c / K^2 for M2/M3), so
Var G_d = V_d := sum_j coef_j^2 v_j, E G_d = w_d[x_d], and per record

    Var = prod_d (V_d + w_d[x_d]^2) - prod_d w_d[x_d]^2     (independent dimensions).

It is increasing in every w_d[x_d]^2, which gives tight data-independent bounds, and it is
itself a separable query (weights V_d + w_d^2 and w_d^2: :func:`variance_queries`), so it has
an unbiased estimate of the same shape.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np

from .laplace import column_variances
from .queries import Query
from .spec import GroupSpec

__all__ = [
    "ESTIMATORS",
    "dim_affine",
    "affine_terms",
    "estimate_numpy",
    "variance",
    "variance_bounds",
    "variance_queries",
    "variance_estimate_numpy",
    "notice_std",
    "column_variance",
]

ESTIMATORS = ("paper", "known_n")


def _est(estimator: str) -> str:
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}")
    return estimator


# A per-record linear form of one dimension's report columns: (const, {column index: coef}).
Affine: TypeAlias = "tuple[float, dict[int, float]]"


def _prefix(spec: GroupSpec, d: int, k: int, estimator: str) -> Affine:
    """Per-record Phat_k (1 <= k <= m) as (const, {local column index: coef})."""
    m = spec.dims[d].m
    if spec.mechanism == "M3":
        return (1.0, {}) if k == m else (0.0, {k - 1: 1.0 / spec.grid})
    kap = spec.dims[d].kappa
    if estimator == "known_n":
        return (1.0, {}) if k == m else ((1.0 - kap) / 2.0, {k - 1: kap})
    if k == m:
        return (-kap, {m - 1: 2.0 * kap})
    return (-kap, {k - 1: kap, m - 1: kap})


def dim_affine(spec: GroupSpec, d: int, w: np.ndarray, estimator: str = "known_n") -> Affine:
    """G_{i,d} for weights w as (const, {local column index: coef})."""
    _est(estimator)
    w = np.asarray(w, dtype=float)
    if spec.mechanism == "M2":
        return 0.0, {j: float(w[j]) / spec.grid for j in range(len(w)) if w[j] != 0}
    dw = w - np.append(w[1:], 0.0)
    const = 0.0
    coefs: dict[int, float] = {}
    for k in np.nonzero(dw)[0] + 1:
        c, cs = _prefix(spec, d, int(k), estimator)
        const += dw[k - 1] * c
        for j, a in cs.items():
            coefs[j] = coefs.get(j, 0.0) + dw[k - 1] * a
    return const, {j: a for j, a in coefs.items() if a != 0.0}


def column_variance(spec: GroupSpec, d: int) -> np.ndarray:
    """Variance of each report column of dimension d (grid units^2 for M2/M3)."""
    if spec.mechanism == "M4":
        q = spec.dims[d].q
        return np.full(spec.dims[d].m, q * (1.0 - q))
    return column_variances(spec)


def _V(spec: GroupSpec, d: int, aff: Affine) -> float:
    v = column_variance(spec, d)
    return float(sum(a * a * v[j] for j, a in aff[1].items()))


def affine_terms(
    spec: GroupSpec, query: Query, estimator: str = "known_n"
) -> tuple[float, tuple[tuple[float, tuple[tuple[int, float], ...]], ...]]:
    """(scale, per dimension (const, ((j, coef), ...))) of the query's estimator: the
    per-record term is scale * prod_d (const_d + sum_j coef_dj * col_dj) over the report
    columns of dimension d (j = 0-based index among them, sorted; zero coefficients dropped)."""
    _est(estimator)
    dims = []
    for d in range(spec.D):
        const, cs = dim_affine(spec, d, query.weight(spec, d), estimator)
        dims.append((float(const), tuple((int(j), float(a)) for j, a in sorted(cs.items()))))
    return float(query.scale), tuple(dims)


def prefix_matrix(R: np.ndarray, spec: GroupSpec, d: int, estimator: str) -> np.ndarray:
    """Reference per-record Phat_1..Phat_m (n x m) from phi (spec 3.5), on +-1 reports."""
    n, m = R.shape[0], spec.dims[d].m
    if spec.mechanism == "M3":
        return np.concatenate([R / spec.grid, np.ones((n, 1))], axis=1)
    kap = spec.dims[d].kappa
    phi = np.empty((n, m + 1))
    phi[:, 1:] = kap * R
    if estimator == "paper":
        phi[:, 0] = -kap * R[:, m - 1]
    else:
        phi[:, 0], phi[:, m] = -1.0, 1.0
    return (phi[:, 1:] - phi[:, [0]]) / 2.0


def estimate_numpy(
    reports: np.ndarray,
    spec: GroupSpec,
    query: Query,
    estimator: str = "known_n",
    row_weights: np.ndarray | None = None,
) -> float:
    """Pure-numpy reference estimator (independent of the SQL path's affine coefficients)."""
    _est(estimator)
    rep = np.asarray(reports)
    prod = np.ones(rep.shape[0])
    for d, s in enumerate(spec.column_slices()):
        w = query.weight(spec, d)
        if spec.mechanism == "M2":
            prod = prod * ((rep[:, s] / spec.grid) @ w)
            continue
        R = 2.0 * rep[:, s] - 1.0 if spec.mechanism == "M4" else rep[:, s].astype(float)
        prod = prod * (prefix_matrix(R, spec, d, estimator) @ (w - np.append(w[1:], 0.0)))
    if row_weights is not None:
        prod = prod * np.asarray(row_weights, dtype=float)
    return float(query.scale * prod.sum())


def _var_parts(spec: GroupSpec, query: Query, estimator: str) -> list[tuple[float, np.ndarray]]:
    return [
        (_V(spec, d, dim_affine(spec, d, query.weight(spec, d), estimator)), query.weight(spec, d))
        for d in range(spec.D)
    ]


def variance(
    spec: GroupSpec,
    query: Query,
    buckets: np.ndarray,
    estimator: str = "known_n",
    row_weights: np.ndarray | None = None,
) -> float:
    """Exact Var of the estimate given the true buckets (n x D, 1-based)."""
    x = np.asarray(buckets, dtype=np.int64).reshape(len(buckets), -1)
    a = np.ones(x.shape[0])
    b = np.ones(x.shape[0])
    for d, (V, w) in enumerate(_var_parts(spec, query, _est(estimator))):
        w2 = w[x[:, d] - 1] ** 2
        a, b = a * (V + w2), b * w2
    v = a - b
    if row_weights is not None:
        v = v * np.asarray(row_weights, dtype=float) ** 2
    return float(query.scale**2 * v.sum())


def variance_bounds(
    spec: GroupSpec, query: Query, n: int, estimator: str = "known_n", max_abs_row_weight: float | None = None
) -> tuple[float, float]:
    """(min, max) of the exact variance over all datasets of n records (tight: attained
    when every record sits in the cell minimising/maximising each w_d^2). With public row
    weights bounded by ``max_abs_row_weight`` the max scales by its square and min is 0."""
    parts = _var_parts(spec, query, _est(estimator))
    hi = np.prod([V + np.max(w**2) for V, w in parts]) - np.prod([np.max(w**2) for _, w in parts])
    lo = np.prod([V + np.min(w**2) for V, w in parts]) - np.prod([np.min(w**2) for _, w in parts])
    s2 = query.scale**2 * n
    if max_abs_row_weight is not None:
        return 0.0, float(s2 * hi * max_abs_row_weight**2)
    return float(s2 * lo), float(s2 * hi)


def variance_queries(spec: GroupSpec, query: Query, estimator: str = "known_n") -> tuple[Query, Query]:
    """(qa, qb): the exact variance is E[qa] - E[qb] per record (module doc), so the
    estimate of qa minus that of qb is an unbiased variance estimate (same estimator)."""
    parts = _var_parts(spec, query, _est(estimator))
    qa = Query(tuple(V + w**2 for V, w in parts), query.scale**2)
    qb = Query(tuple(w**2 for _, w in parts), query.scale**2)
    return qa, qb


def variance_estimate_numpy(
    reports: np.ndarray,
    spec: GroupSpec,
    query: Query,
    estimator: str = "known_n",
    row_weights: np.ndarray | None = None,
) -> float:
    """Numpy reference of the unbiased variance estimate (the estimates of
    :func:`variance_queries`)."""
    qa, qb = variance_queries(spec, query, estimator)
    rw = None if row_weights is None else np.asarray(row_weights, dtype=float) ** 2
    return estimate_numpy(reports, spec, qa, estimator, rw) - estimate_numpy(reports, spec, qb, estimator, rw)


def notice_std(var_estimate: float | None, bounds: tuple[float, float]) -> float:
    """Std for the NOTICE: sqrt of the variance estimate clamped into the exact bounds
    (the upper bound alone if no estimate is available)."""
    lo, hi = bounds
    v = hi if var_estimate is None else min(max(float(var_estimate), lo), hi)
    return float(np.sqrt(v))
