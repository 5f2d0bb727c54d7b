"""Matrix form of M4 (paper Eq. (5)-(9), spec 3.2-3.4): for tests and small benches only.

B_{m,1}[k, j] = +1 if j <= k else -1; B_{m,D} = B_{m_D,1} (x) ... (x) B_{m_1,1} (Kronecker,
dimension 1 fastest as in ind(x), paper 4 "Notations"); its inverse is the Kronecker product
of the B_{m,1}^-1 (Eq. (9), Lemma 2). Never materialise these for large m^D (spec 7.14):
:func:`cell_estimates_matrix` applies B^-1 axis-wise to the observation tensor o
(Eq. (4)); :func:`cell_estimates` uses the product form sum_i (x)_d g_{i,d} (spec 3.5).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import reduce

import numpy as np

from .estimators import prefix_matrix
from .spec import GroupSpec

__all__ = [
    "B1",
    "B1_inv",
    "B_kron",
    "B_kron_inv",
    "observations",
    "cell_estimates_matrix",
    "cell_estimates",
    "cell_counts",
]


def B1(m: int) -> np.ndarray:
    """B_{m,1}: +1 on and below the diagonal, -1 above (Eq. (5))."""
    k = np.arange(m)
    return np.where(k[None, :] <= k[:, None], 1.0, -1.0)


def B1_inv(m: int) -> np.ndarray:
    """B_{m,1}^-1 (Eq. (9) base case): 1/2 [row 1: +1 at cols 1 and m; row k: -1 at k-1, +1 at k]."""
    A = np.zeros((m, m))
    A[0, 0] += 0.5
    A[0, m - 1] += 0.5  # "+=" so m = 1 gives 1 (spec 7.13)
    for k in range(1, m):
        A[k, k - 1], A[k, k] = -0.5, 0.5
    return A


def B_kron(ms: Iterable[int]) -> np.ndarray:
    out: np.ndarray = reduce(np.kron, [B1(m) for m in reversed(list(ms))])
    return out


def B_kron_inv(ms: Iterable[int]) -> np.ndarray:
    out: np.ndarray = reduce(np.kron, [B1_inv(m) for m in reversed(list(ms))])
    return out


def _pm(reports: np.ndarray, spec: GroupSpec) -> list[np.ndarray]:
    return [2.0 * np.asarray(reports)[:, s] - 1.0 for s in spec.column_slices()]


def _outer_rows(mats: list[np.ndarray]) -> np.ndarray:
    """Row-wise outer product: (n x m_1), ..., (n x m_k) -> n x (m_1 ... m_k), dim 1 slowest."""
    out: np.ndarray = mats[0]
    for M in mats[1:]:
        out = np.einsum("ni,nj->nij", out, M).reshape(out.shape[0], -1)
    return out


def _sum_outer(mats: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """sum_i (x)_d mats[d][i] as a tensor of the given shape (half/half split + matmul)."""
    h = max(1, len(mats) // 2)
    A = _outer_rows(mats[:h])
    C = _outer_rows(mats[h:]) if len(mats) > h else np.ones((A.shape[0], 1))
    out: np.ndarray = (A.T @ C).reshape(shape)
    return out


def observations(reports: np.ndarray, spec: GroupSpec) -> np.ndarray:
    """o_x = sum_i prod_d R_i[d, x_d] as a tensor indexed [x_1-1, ..., x_D-1] (Eq. (4))."""
    return _sum_outer(_pm(reports, spec), spec.ms)


def cell_estimates_matrix(reports: np.ndarray, spec: GroupSpec) -> np.ndarray:
    """Paper estimator Eq. (7): kappa^D B^-1 o, applying B_{m_d,1}^-1 along axis d."""
    c = observations(reports, spec)
    for d, dim in enumerate(spec.dims):
        c = np.moveaxis(np.tensordot(B1_inv(dim.m), c, axes=([1], [d])), 0, d) * dim.kappa
    return c


def cell_estimates(reports: np.ndarray, spec: GroupSpec, estimator: str = "paper") -> np.ndarray:
    """All single-cell estimates via the product form: g_{i,d}[x] = Phat_x - Phat_{x-1}."""
    gs = []
    for d, R in enumerate(_pm(reports, spec)):
        P = prefix_matrix(R, spec, d, estimator)
        gs.append(np.diff(P, axis=1, prepend=0.0))
    return _sum_outer(gs, spec.ms)


def cell_counts(buckets: np.ndarray, spec: GroupSpec) -> np.ndarray:
    """True count tensor c_x from 1-based buckets (n x D)."""
    x = np.asarray(buckets, dtype=np.int64).reshape(len(buckets), -1) - 1
    flat = np.ravel_multi_index(tuple(x.T), spec.ms)
    return np.bincount(flat, minlength=int(np.prod(spec.ms))).reshape(spec.ms).astype(float)
