"""The one-scan SQL of a local-table plan (metric-LDP spec §3.5 product form, §4.2, §3.10): group
keys, then per aggregate its estimator and variance estimate over the report columns.
Split from :mod:`rewriter.local`, which plans the statement.

The estimators are written from PLAIN numbers: an :class:`Estimate` is
``sum_i scale * prod_d (const_d + sum_j coef_dj * col_dj)`` with, per dimension d, the
affine form G_{i,d} of spec §3.5 / §3.11 (summation by parts). The proxy computes those
coefficients with :func:`mechanisms.metric_ldp.affine_terms` (and the variance's two
queries with :func:`mechanisms.metric_ldp.variance_queries`) and passes them here
(:mod:`proxy.pipeline.local_bind`); this module only prints them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from .local_plan import LocalPlan
    from .local_weights import LocalQuery

_T = TypeVar("_T")
#: per dimension d, its report columns (SQL identifiers)
Columns = Sequence[Sequence[str]]

__all__ = [
    "qcol",
    "sql_literal",
    "Estimate",
    "AggNumbers",
    "ScanColumns",
    "estimate_sql",
    "variance_sql",
    "quantile_sql",
    "to_sql",
]


def qcol(name: str) -> str:
    """``name`` as a double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def sql_literal(x: float) -> str:
    """Numeric literal in exponent form: DOUBLE in DuckDB, exact NUMERIC in Postgres."""
    return format(float(x), ".17e")


@dataclass(frozen=True)
class Estimate:
    """A separable query's estimator as plain numbers (spec §3.5): ``scale`` and, per
    dimension, ``(const, ((j, coef), …))`` with j the 0-based index of the dimension's report
    column (sorted by j, zero coefficients left out)."""

    scale: float
    dims: tuple[tuple[float, tuple[tuple[int, float], ...]], ...]


@dataclass(frozen=True)
class AggNumbers:
    """The estimators of one aggregate of a :class:`rewriter.local.LocalPlan`: ``value``;
    ``var`` = (a, b), the unbiased variance estimate a − b (§4.2); ``den`` (None: the exact
    count); ``prefixes`` P̂_1..P̂_{m−1} (percentiles, §3.10)."""

    value: Estimate | None = None
    var: tuple[Estimate, Estimate] | None = None
    den: Estimate | None = None
    prefixes: tuple[Estimate, ...] = ()


@dataclass(frozen=True)
class ScanColumns:
    """Where each aggregate's numbers sit in the scan's row."""

    keys: int  # group keys first
    n: int  # COUNT(*) of the cell
    slots: tuple[dict[str, Any], ...]  # per aggregate: dict of name -> column index


def estimate_sql(columns: Columns, est: Estimate, row_weight: str | None = None) -> str:
    """ONE aggregate expression over the report columns (``columns[d]``: dimension d's)
    estimating the query.

    Form: ``COALESCE(SUM(scale * prod_d (c_d + sum_j a_dj * col_dj) [* (row_weight)]), 0)``;
    when at most one factor is non-constant (1-D queries, known-n queries with one
    constrained dimension) the equal linear form ``(c * COUNT(*) + sum_j a_j *
    COALESCE(SUM(col_j), 0))`` is emitted instead (integer sums, faster). ``row_weight``:
    SQL expression of a public per-record weight (SUM(w) with public w, paper 4.3.2 /
    spec 3.9). The caller may add WHERE/GROUP BY on public columns; empty input gives 0.
    """
    scale = float(est.scale)
    factors: list[tuple[float, list[tuple[str, float]]]] = []
    for d, (const, cs) in enumerate(est.dims):
        if not cs:
            scale *= const
            continue
        factors.append((const, [(columns[d][j], a) for j, a in cs]))
    if row_weight is None and len(factors) <= 1:
        # linear in the columns: exact integer SUMs, combined once (faster, same value)
        const, terms = factors[0] if factors else (1.0, [])
        parts = [f"{sql_literal(scale * const)} * COUNT(*)"]
        parts += [f"{sql_literal(scale * a)} * COALESCE(SUM({c}), 0)" for c, a in terms]
        return "(" + " + ".join(parts) + ")"
    prod = [sql_literal(scale)]
    for const, terms in factors:
        prod.append(
            "(" + " + ".join([sql_literal(const)] + [f"{sql_literal(a)} * {c}" for c, a in terms]) + ")"
        )
    if row_weight is not None:
        prod.append(f"({row_weight})")
    return f"COALESCE(SUM({' * '.join(prod)}), 0)"


def variance_sql(columns: Columns, a: Estimate, b: Estimate, row_weight: str | None = None) -> str:
    """Unbiased SQL estimate of the exact variance (§4.2): the separable queries a (weights
    V_d + w_d²) minus b (weights w_d²), with the squared row weight. Noisy and possibly
    negative: the proxy clamps it into the exact bounds."""
    rw = None if row_weight is None else f"({row_weight}) * ({row_weight})"
    return f"({estimate_sql(columns, a, rw)} - {estimate_sql(columns, b, rw)})"


def quantile_sql(columns: Columns, prefixes: Sequence[Estimate]) -> list[str]:
    """Select-list of the one prefix query of §3.10: ["COUNT(*)", P̂_1, …, P̂_{m−1}]."""
    return ["COUNT(*)"] + [estimate_sql(columns, e) for e in prefixes]


def to_sql(plan: LocalPlan, dialect: str, numbers: Sequence[AggNumbers]) -> tuple[str, ScanColumns]:
    """ONE aggregate scan over the report table: group keys, COUNT(*), then per
    aggregate its estimate(s), the unbiased variance estimate and public-weight maxima.
    ``numbers``: one :class:`AggNumbers` per aggregate of ``plan`` (from the proxy)."""
    lay = plan.layout
    sel = [qcol(g.column) for g in plan.group_by]
    sel.append("COUNT(*)")
    slots: list[dict[str, Any]] = []

    def add(sql: str) -> int:
        sel.append(sql)
        return len(sel) - 1

    if len(numbers) != len(plan.aggs):
        raise ValueError("one AggNumbers per aggregate of the plan")
    for a, nums in zip(plan.aggs, numbers):
        s: dict[str, Any] = {}
        if a.kind == "exact":
            s["value"] = add(_given(a.exact_sql, "exact_sql"))
        else:
            cols = lay.groups[_given(a.group, "group")].dim_columns()
            if a.kind == "est":
                s["value"] = add(estimate_sql(cols, _given(nums.value, "value"), a.row_weight))
                s["var"] = add(variance_sql(cols, *_given(nums.var, "var"), a.row_weight))
                if a.row_weight is not None:
                    s["wmax"] = add(f"COALESCE(MAX(ABS({a.row_weight})), 0)")
            elif a.kind == "avg":
                s["value"] = add(estimate_sql(cols, _given(nums.value, "value"), a.row_weight))
                s["den"] = add(_den_sql(cols, a.den, nums.den, a.den_weight))
                if a.row_weight is not None:
                    s["wmax"] = add(f"COALESCE(MAX(ABS({a.row_weight})), 0)")
            elif a.kind == "pct":
                s["den"] = add(_den_sql(cols, a.den, nums.den, None))
                s["prefix"] = [add(estimate_sql(cols, e)) for e in nums.prefixes]
        slots.append(s)
    sql = f"SELECT {', '.join(sel)} FROM {qcol(lay.reports)}"
    if plan.where is not None:
        sql += f" WHERE {plan.where.sql(dialect=dialect, identify=True)}"
    if plan.group_by:
        sql += " GROUP BY " + ", ".join(qcol(g.column) for g in plan.group_by)
    return sql, ScanColumns(len(plan.group_by), len(plan.group_by), tuple(slots))


def _den_sql(columns: Columns, q: LocalQuery | None, est: Estimate | None, weight: str | None) -> str:
    """Denominator of AVG / percentiles: the exact (public) count when no private
    predicate applies, else the range estimate."""
    if _given(q, "den query").trivial:
        return "COUNT(*)" if weight is None else f"COALESCE(SUM({weight}), 0)"
    return estimate_sql(columns, _given(est, "den"), weight)


def _given(value: _T | None, name: str) -> _T:
    """``value``, which the plan or the proxy's numbers must supply for this aggregate."""
    if value is None:
        raise ValueError(f"the aggregate's {name} is missing")
    return value
