"""Bucket weights of a predicate or expression over ONE private column (metric-LDP spec §8,
"interpolate" edge policy): its average over each bucket's possible values.

The expression arrives as a small SQL-free tree (built by :mod:`rewriter.local_weights`):

* values: ``("const", c)``, ``("x",)`` (the column), ``("neg", a)``, ``("add"|"sub"|"mul", a, b)``,
  ``("div", a, c)``, ``("case", ((cond, value), …), default)``;
* conditions: ``("bool", b)``, ``("and"|"or", p, q)``, ``("not", p)``,
  ``("eq"|"ne"|"gt"|"ge"|"lt"|"le", a, b)``, ``("between", v, lo, hi)``, ``("in", v, (c, …))``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from .spec import DimSpec

__all__ = ["FLOAT_STEPS", "MAX_INT_POINTS", "points", "evaluate", "bucket_weights", "prefix_indicator"]

FLOAT_STEPS = 64  # evaluation points per bucket of a float column (plus breakpoints)
MAX_INT_POINTS = 1 << 20  # int columns with more integers in [lo, hi) are treated as float

_CMP = {
    "eq": np.equal,
    "ne": np.not_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "lt": np.less,
    "le": np.less_equal,
}


def points(dim: DimSpec, col_type: str, breaks: Iterable[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Evaluation points of a private column: (values, bucket index 0..m-1, weight in bucket).

    Int columns: the integers of [lo, hi), each weighing 1/(integers in its bucket).
    Float columns: FLOAT_STEPS sub-intervals per bucket, also cut at ``breaks``,
    each represented by its midpoint and weighing its share of the bucket width.
    """
    m, lo, hi = dim.m, dim.lo, dim.hi
    if col_type == "int" and math.ceil(hi) - math.ceil(lo) <= MAX_INT_POINTS:
        v = np.arange(math.ceil(lo), math.ceil(hi), dtype=float)
        v = v[v < hi]
        b = np.clip(np.floor((v - lo) * m / (hi - lo)).astype(np.int64), 0, m - 1)
        cnt = np.bincount(b, minlength=m).astype(float)
        return v, b, 1.0 / cnt[b]
    edges = lo + (hi - lo) * np.arange(m * FLOAT_STEPS + 1) / (m * FLOAT_STEPS)
    cuts = np.array([x for x in breaks if lo < x < hi], dtype=float)
    edges = np.unique(np.concatenate([edges, cuts]))
    mid = (edges[:-1] + edges[1:]) / 2
    b = np.clip(np.floor((mid - lo) * m / (hi - lo)).astype(np.int64), 0, m - 1)
    return mid, b, (edges[1:] - edges[:-1]) / dim.g


def evaluate(tree: tuple[Any, ...], x: np.ndarray) -> Any:
    """The tree's value (or truth) at every point ``x``."""
    op = tree[0]
    if op == "const":
        return np.full(x.shape, float(tree[1]))
    if op == "x":
        return x
    if op == "neg":
        return -evaluate(tree[1], x)
    if op in ("add", "sub", "mul"):
        a, b = evaluate(tree[1], x), evaluate(tree[2], x)
        return a + b if op == "add" else a - b if op == "sub" else a * b
    if op == "div":
        return evaluate(tree[1], x) / tree[2]
    if op == "case":
        out = evaluate(tree[2], x)
        for cond, val in reversed(tree[1]):
            out = np.where(evaluate(cond, x), evaluate(val, x), out)
        return out
    if op == "bool":
        return np.full(x.shape, bool(tree[1]))
    if op in ("and", "or"):
        p, q = evaluate(tree[1], x), evaluate(tree[2], x)
        return p & q if op == "and" else p | q
    if op == "not":
        return ~evaluate(tree[1], x)
    if op in _CMP:
        return _CMP[op](evaluate(tree[1], x), evaluate(tree[2], x))
    if op == "between":
        v = evaluate(tree[1], x)
        return (v >= evaluate(tree[2], x)) & (v <= evaluate(tree[3], x))
    if op == "in":
        v = evaluate(tree[1], x)
        out = np.zeros(x.shape, bool)
        for c in tree[2]:
            out |= v == c
        return out
    raise ValueError(f"unknown node {op!r}")


def bucket_weights(
    dim: DimSpec,
    col_type: str,
    tree: tuple[Any, ...],
    kind: str,
    breaks: Iterable[float] = (),
    edges: str = "interpolate",
) -> np.ndarray:
    """Per-bucket weight of a condition (kind "truth") or value (kind "value"): its average
    over the bucket's values (points cut at the constants ``breaks``). ``edges="whole"``
    (conditions only, spec §8): 1 on every bucket where the condition holds somewhere —
    the §3.5 range estimate over whole buckets."""
    if edges not in ("interpolate", "whole"):
        raise ValueError(f"edges must be 'interpolate' or 'whole', not {edges!r}")
    x, b, w = points(dim, col_type, breaks)
    f = evaluate(tree, x).astype(float)
    out = np.bincount(b, weights=f * w, minlength=dim.m)
    out = np.where(np.abs(out) < 1e-12, 0.0, out)
    if kind == "truth" and edges == "whole":
        out = (out > 0).astype(float)
    return out


def prefix_indicator(m: int, k: int) -> np.ndarray:
    """Weights of the prefix "bucket ≤ k" over m buckets (percentile prefixes, §3.10)."""
    return (np.arange(1, m + 1) <= k).astype(float)
