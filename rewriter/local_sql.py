"""The one-scan SQL of a local-table plan (spec 002 §3.5 product form): group keys,
then per aggregate its estimator and variance estimate over the report columns.
Split from :mod:`rewriter.local`, which plans the statement."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mechanisms.metric_ldp import GroupSpec, Query, estimate_sql, variance_sql
from mechanisms.metric_ldp.estimators import dim_affine

if TYPE_CHECKING:
    from .local import LocalPlan

def qcol(name: str) -> str:
    """``name`` as a double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class ScanColumns:
    """Where each aggregate's numbers sit in the scan's row."""

    keys: int                      # group keys first
    n: int                         # COUNT(*) of the cell
    slots: tuple                   # per aggregate: dict of name -> column index


def to_sql(plan: LocalPlan, dialect: str) -> tuple[str, ScanColumns]:
    """ONE aggregate scan over the report table: group keys, COUNT(*), then per
    aggregate its estimate(s), the unbiased variance estimate and public-weight maxima."""
    lay = plan.layout
    sel = [qcol(g.column) for g in plan.group_by]
    sel.append("COUNT(*)")
    slots = []

    def add(sql: str) -> int:
        sel.append(sql)
        return len(sel) - 1

    for a in plan.aggs:
        s: dict[str, Any] = {}
        if a.kind == "exact":
            s["value"] = add(a.exact_sql)
        else:
            spec = lay.groups[a.group].spec
            est = lay.estimator
            if a.kind == "est":
                s["value"] = add(estimate_sql(spec, a.query, est, a.row_weight))
                s["var"] = add(variance_sql(spec, a.query, est, a.row_weight))
                if a.row_weight is not None:
                    s["wmax"] = add(f"COALESCE(MAX(ABS({a.row_weight})), 0)")
            elif a.kind == "avg":
                s["value"] = add(estimate_sql(spec, a.query, est, a.row_weight))
                s["den"] = add(_den_sql(spec, a.den, est, a.den_weight))
                if a.row_weight is not None:
                    s["wmax"] = add(f"COALESCE(MAX(ABS({a.row_weight})), 0)")
            elif a.kind == "pct":
                s["den"] = add(_den_sql(spec, a.den, est, None))
                s["prefix"] = [add(estimate_sql(spec, q, est)) for q in a.prefixes]
        slots.append(s)
    sql = f"SELECT {', '.join(sel)} FROM {qcol(lay.reports)}"
    if plan.where is not None:
        sql += f" WHERE {plan.where.sql(dialect=dialect, identify=True)}"
    if plan.group_by:
        sql += " GROUP BY " + ", ".join(qcol(g.column) for g in plan.group_by)
    return sql, ScanColumns(len(plan.group_by), len(plan.group_by), tuple(slots))


def _trivial(q: Query) -> bool:
    return all(w is None for w in q.weights) and q.scale == 1.0


def _den_sql(spec: GroupSpec, q: Query, est: str, weight: str | None) -> str:
    """Denominator of AVG / percentiles: the exact (public) count when no private
    predicate applies, else the range estimate."""
    if _trivial(q):
        return "COUNT(*)" if weight is None else f"COALESCE(SUM({weight}), 0)"
    return estimate_sql(spec, q, est, weight)


def prefix_width(spec: GroupSpec, queries, estimator: str) -> float:
    """Largest range of one record's term over the prefix queries (Hoeffding width)."""
    width = 0.0
    for q in queries:
        lo, hi = 1.0, 1.0
        for e in range(spec.D):
            c, cs = dim_affine(spec, e, q.weight(spec, e), estimator)
            a = c + sum(min(0.0, v) for v in cs.values())
            b = c + sum(max(0.0, v) for v in cs.values())
            prods = (lo * a, lo * b, hi * a, hi * b)
            lo, hi = min(prods), max(prods)
        width = max(width, hi - lo)
    return width
