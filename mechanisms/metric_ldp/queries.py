"""Queries over a joint group: separable linear counting queries (spec 3.5, 3.9, 3.11).

A :class:`Query` is ``scale * sum_i prod_d w_d[x_i[d]]`` with one weight vector w_d per
dimension (``None`` = all ones, a *trivial* dimension). Ranges are 0/1 weights,
predicates not aligned to buckets give fractional edge weights (``policy="interpolate"``),
linear counting queries (SUM(f(x)), AVG numerators, CASE weights) are arbitrary w, and the
private-weight SUM of paper 4.3.2 is the range x [2,2] on the weight dimension times Delta.

Edge-bucket policy for value predicates (:func:`range_weights`), bucket k = [e_{k-1}, e_k)
with the first/last bucket also holding the clamped out-of-domain values:

* ``"lower_edge"`` (default): bucket k counts fully iff its lower edge e_{k-1} satisfies the
  predicate (each bucket represented by its lower edge). Exact for every comparison
  when each bucket holds a single possible value at its lower edge, e.g. integer data
  with unit buckets (age in [0,100], m = 100: ``age <= 30`` -> buckets 1..31,
  ``age > 30`` -> 32..100, ``age < 30`` -> 1..30).
* ``"outer"``: every bucket that contains at least one value satisfying the predicate
  counts fully (a superset; overcounts cut edge buckets).
* ``"inner"``: only buckets wholly inside the predicate.
* ``"interpolate"``: weight = fraction of the bucket width inside [lower, upper]
  (assumes values uniform within a bucket); a linear query (spec 8).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .spec import DimSpec, GroupSpec

__all__ = [
    "Query",
    "range_weights",
    "bucket_range_weights",
    "range_query",
    "linear_query",
    "value_range_query",
    "private_weight_sum_query",
    "POLICIES",
]

POLICIES = ("lower_edge", "outer", "inner", "interpolate")


@dataclass(frozen=True)
class Query:
    """scale * sum_i prod_d weights[d][x_i[d] - 1]; weights[d] None means all ones."""

    weights: tuple[np.ndarray | None, ...]
    scale: float = 1.0

    def weight(self, spec: GroupSpec, d: int) -> np.ndarray:
        w = self.weights[d]
        return np.ones(spec.dims[d].m) if w is None else np.asarray(w, dtype=float)

    def truth(self, spec: GroupSpec, buckets: np.ndarray, row_weights: np.ndarray | None = None) -> float:
        """The exact answer on true buckets (n x D, 1-based) -- for tests and benches."""
        x = np.asarray(buckets, dtype=np.int64).reshape(len(buckets), -1)
        v = np.ones(x.shape[0])
        for d in range(spec.D):
            v = v * self.weight(spec, d)[x[:, d] - 1]
        if row_weights is not None:
            v = v * np.asarray(row_weights, dtype=float)
        return float(self.scale * v.sum())


def _check(spec: GroupSpec, d: int, w: np.ndarray) -> np.ndarray:
    w = np.asarray(w, dtype=float)
    if w.shape != (spec.dims[d].m,) or not np.isfinite(w).all():
        raise ValueError(f"weights for dimension {d} must be {spec.dims[d].m} finite numbers")
    return w


def bucket_range_weights(m: int, l: int, r: int) -> np.ndarray:
    """Indicator of the bucket range [l, r] (1-based, inclusive; empty if l > r)."""
    k = np.arange(1, m + 1)
    return ((k >= l) & (k <= r)).astype(float)


def range_query(spec: GroupSpec, ranges: Mapping[int, tuple[int, int]]) -> Query:
    """Bucket box: {d: (l_d, r_d)} (1-based inclusive); unlisted dimensions are trivial."""
    ws: list[np.ndarray | None] = [None] * spec.D
    for d, (l, r) in ranges.items():
        ws[d] = bucket_range_weights(spec.dims[d].m, int(l), int(r))
    return Query(tuple(ws))


def linear_query(spec: GroupSpec, weights: Mapping[int, np.ndarray], scale: float = 1.0) -> Query:
    """Separable linear counting query {d: w_d}; e.g. SUM(x) uses w = bucket midpoints."""
    ws: list[np.ndarray | None] = [None] * spec.D
    for d, w in weights.items():
        ws[d] = _check(spec, d, w)
    return Query(tuple(ws), float(scale))


def _pos(dim: DimSpec, u: float) -> float:
    """Position of value u in bucket units: bucket k = [k-1, k) in these units."""
    return (u - dim.lo) * dim.m / (dim.hi - dim.lo)


def range_weights(
    dim: DimSpec,
    lower: float | None = None,
    upper: float | None = None,
    lower_inclusive: bool = True,
    upper_inclusive: bool = True,
    policy: str = "lower_edge",
) -> np.ndarray:
    """Bucket weights for the predicate lower <=(<) u <=(<) upper (None = unbounded)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}")
    m = dim.m
    a = -math.inf if lower is None else _pos(dim, float(lower))
    b = math.inf if upper is None else _pos(dim, float(upper))
    li = lower is None or lower_inclusive
    ui = upper is None or upper_inclusive
    k = np.arange(1, m + 1, dtype=float)
    if policy == "interpolate":  # |[k-1, k] cap [a, b]| (clamped values ignored)
        out: np.ndarray = np.clip(np.minimum(k, b) - np.maximum(k - 1.0, a), 0.0, 1.0)
        return out
    start = np.where(k == 1, -math.inf, k - 1.0)  # bucket k holds [start, end) incl. clamping
    end = np.where(k == m, math.inf, k)
    if not (a < b or (a == b and li and ui)):
        return np.zeros(m)
    if policy == "lower_edge":
        e = k - 1.0
        return (((e >= a) if li else (e > a)) & ((e <= b) if ui else (e < b))).astype(float)
    if policy == "outer":  # some satisfying value in [start, end)
        return ((end > a) & ((start <= b) if ui else (start < b))).astype(float)
    return (((start >= a) if li else (start > a)) & (end <= b)).astype(float)  # inner


def value_range_query(
    spec: GroupSpec, preds: Mapping[int, tuple[Any, ...]], policy: str = "lower_edge"
) -> Query:
    """{d: (lower, upper[, lower_inclusive, upper_inclusive])} on raw values -> Query."""
    ws: list[np.ndarray | None] = [None] * spec.D
    for d, p in preds.items():
        lower, upper = p[0], p[1]
        li = p[2] if len(p) > 2 else True
        ui = p[3] if len(p) > 3 else True
        ws[d] = range_weights(spec.dims[d], lower, upper, li, ui, policy)
    return Query(tuple(ws))


def private_weight_sum_query(spec: GroupSpec, base: Query) -> Query:
    """SUM(w) over ``base`` with a private weight dimension (paper 4.3.2, spec 3.9):
    Delta * c(R x [2, 2]); ``base`` must leave the weight dimension trivial."""
    wd = [d for d, dim in enumerate(spec.dims) if dim.kind == "weight"]
    if len(wd) != 1:
        raise ValueError("the group needs exactly one weight dimension")
    d = wd[0]
    if base.weights[d] is not None:
        raise ValueError("base query must not constrain the weight dimension")
    ws = list(base.weights)
    ws[d] = np.array([0.0, 1.0])
    return Query(tuple(ws), base.scale * spec.dims[d].hi)
