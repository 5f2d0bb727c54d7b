"""The numbers of a local-table plan (Xiang et al. 2020; metric-LDP spec §3.5, §3.9-3.11, §4.2, §8): the
rewriter plans a statement symbolically (:class:`rewriter.local_weights.Weight`,
:class:`rewriter.local_weights.LocalQuery`); here :mod:`mechanisms.metric_ldp` turns it into
numeric queries (bucket weights, the private-weight query of paper §4.3.2, prefix indicators)
and the estimators' affine coefficients, which reach :func:`rewriter.local_sql.to_sql` as
plain numbers (the rewriter imports no mechanism code, the mechanisms write no SQL).

A plan's numbers are computed once (cached with the plan); the bucket weights of one
predicate once per (weight, dimension).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from mechanisms.metric_ldp import (
    GroupSpec,
    Query,
    affine_terms,
    prefix_queries,
    private_weight_sum_query,
    report_columns,
    variance_queries,
)
from mechanisms.metric_ldp.weights import bucket_weights, prefix_indicator
from rewriter import dialects
from rewriter.dialects import SQLDialect
from rewriter.local import LocalPlan
from rewriter.local_sql import (
    AggNumbers,
    Estimate,
    ScanColumns,
    estimate_sql,
    quantile_sql,
    to_sql,
    variance_sql,
)
from rewriter.local_weights import LocalQuery, Prefix, Weight
from rewriter.lru import LRU

from ..ingest.ldp_specs import group_spec
from ..wire.api import SqlError

__all__ = [
    "BoundAgg",
    "bind",
    "scan",
    "weights_of",
    "numeric_query",
    "estimate_numbers",
    "spec_columns",
    "estimate_text",
    "variance_text",
    "quantile_text",
]

_BOUND: LRU = LRU(512)  # id(plan) -> (plan, numbers): read by scans on several threads


@dataclass(frozen=True)
class BoundAgg:
    """One aggregate's numeric queries (None / () where the kind has none) and estimators."""

    spec: GroupSpec | None
    query: Query | None
    den: Query | None
    prefixes: tuple
    numbers: AggNumbers


@functools.lru_cache(maxsize=4096)
def _weights(w: Weight, dim, col_type: str) -> np.ndarray:
    out = bucket_weights(dim, col_type, w.tree, w.kind, w.breaks, w.edges)
    out.setflags(write=False)
    return out


def weights_of(w: Weight, lay) -> np.ndarray:
    """The bucket weights of ``w`` over its column's dimension (read-only array)."""
    return _weights(w, lay.dim(w.column), lay.col_type(w.column))


def numeric_query(lq: LocalQuery, lay, group: int) -> Query:
    """The :class:`mechanisms.metric_ldp.Query` of a symbolic query over group ``group``."""
    grp = lay.groups[group]
    ws = []
    for dim, factors in zip(grp.dims, lq.factors):
        w = None
        for f in factors:
            v = prefix_indicator(dim.m, f.k) if isinstance(f, Prefix) else weights_of(f, lay)
            w = v if w is None else v * w
        ws.append(w)
    q = Query(tuple(ws))
    return private_weight_sum_query(group_spec(grp), q) if lq.private_weight else q


def estimate_numbers(spec: GroupSpec, query: Query, estimator: str) -> Estimate:
    """The estimator of ``query`` as the plain numbers :func:`rewriter.local_sql.estimate_sql` prints."""
    return Estimate(*affine_terms(spec, query, estimator))


def _agg(plan: LocalPlan, a) -> BoundAgg:
    if a.kind == "exact":
        return BoundAgg(None, None, None, (), AggNumbers())
    lay = plan.layout
    spec, est = group_spec(lay.groups[a.group]), lay.estimator
    q = numeric_query(a.query, lay, a.group) if a.query is not None else None
    den = numeric_query(a.den, lay, a.group) if a.den is not None else None
    prefixes = tuple(numeric_query(p, lay, a.group) for p in a.prefixes)
    value = estimate_numbers(spec, q, est) if q is not None else None
    var = None
    if a.kind == "est":
        if q is None:  # the planner gives every estimate its query
            raise SqlError("XX000", "internal error: a local estimate without its query; nothing was run")
        qa, qb = variance_queries(spec, q, est)
        var = (estimate_numbers(spec, qa, est), estimate_numbers(spec, qb, est))
    den_n = estimate_numbers(spec, den, est) if den is not None and not a.den.trivial else None
    pre = tuple(estimate_numbers(spec, p, est) for p in prefixes)
    return BoundAgg(spec, q, den, prefixes, AggNumbers(value, var, den_n, pre))


def bind(plan: LocalPlan) -> tuple[BoundAgg, ...]:
    """Per aggregate of ``plan``, its numbers (computed once per plan object)."""
    key = id(plan)
    hit = _BOUND.get(key)
    if hit is not None and hit[0] is plan:
        return hit[1]
    out = tuple(_agg(plan, a) for a in plan.aggs)
    _BOUND.put(key, (plan, out))
    return out


def scan(plan: LocalPlan, dialect: str | SQLDialect) -> tuple[str, ScanColumns]:
    """The plan's ONE report scan (:func:`rewriter.local_sql.to_sql` with its numbers),
    written in the backend's ``text_dialect`` and read as the backend reads it
    (``SQLDialect.from_text``: Spark's is transpiled from Postgres spelling)."""
    d = dialects.get(dialect)
    text, cols = to_sql(plan, d.text_dialect, tuple(b.numbers for b in bind(plan)))
    return d.from_text(text), cols


def scan_columns(plan: LocalPlan) -> ScanColumns:
    """Where each value is in the scan's row: the same on every backend (the text is
    generated in sqlglot's own dialect here, and dropped)."""
    return to_sql(plan, "", tuple(b.numbers for b in bind(plan)))[1]


# -- the estimators of any GroupSpec as SQL text (M2/M3/M4; tests and benches) ---------------
def spec_columns(spec: GroupSpec) -> tuple:
    """Per dimension, its report column names (:func:`mechanisms.metric_ldp.report_columns`)."""
    names = [c for c, _ in report_columns(spec)]
    return tuple(tuple(names[s]) for s in spec.column_slices())


def estimate_text(
    spec: GroupSpec, query: Query, estimator: str = "known_n", row_weight: str | None = None
) -> str:
    """ONE aggregate expression over ``spec``'s report columns estimating ``query``."""
    return estimate_sql(spec_columns(spec), estimate_numbers(spec, query, estimator), row_weight)


def variance_text(
    spec: GroupSpec, query: Query, estimator: str = "known_n", row_weight: str | None = None
) -> str:
    """The unbiased variance estimate of :func:`estimate_text`'s estimate."""
    a, b = (estimate_numbers(spec, v, estimator) for v in variance_queries(spec, query, estimator))
    return variance_sql(spec_columns(spec), a, b, row_weight)


def quantile_text(spec: GroupSpec, d: int, estimator: str = "known_n") -> list:
    """Select-list of the one prefix query of dimension ``d`` (§3.10)."""
    return quantile_sql(
        spec_columns(spec), [estimate_numbers(spec, q, estimator) for q in prefix_queries(spec, d)]
    )
