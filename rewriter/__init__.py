"""dpgate's SQL rewriter: parse, validate and type one SELECT into a :class:`Plan`,
and emit the single-scan backend SQL for it.

The rules run in order, sqlglot-optimizer style: derived tables and CTEs
(:mod:`.inline`: inlined, or an aggregating one planned with the outer query as
post-processing, :mod:`.postprocess`), statement shape (:mod:`.shape`), select list / GROUP BY (:mod:`.select`), row predicate
(:mod:`.predicate`, :mod:`.arith`), ORDER BY / LIMIT; :mod:`.emit` writes SQL.
SQL only: no I/O, no numbers are released here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from config import Config

from . import (
    cost,
    dates,
    emit,
    fixed_point,
    histogram,
    inline,
    joins,
    keyfilter,
    keys,
    lookup_domains,
    planner,
    postprocess,
    predicate,
    selection,
    semijoin,
    shape,
)
from . import select as select_
from .cells import cell_positions, complete
from .errors import FEATURE_NOT_SUPPORTED, Refusal
from .parsing import parse, tokenize
from .plan import Plan, UnitBounds, UnitLookup, source_sql
from .scope import Ctx
from .unit import caps

if TYPE_CHECKING:
    from .dialects import SQLDialect

__all__ = [
    "Plan",
    "Refusal",
    "build_plan",
    "cell_positions",
    "complete",
    "param_types",
    "parse",
    "source_sql",
    "to_sql",
    "tokenize",
    "typed_plan",
]


def build_plan(
    expr: exp.Expression, config: Config, params: list[Any] | None = None, *, copy: bool = True
) -> Plan:
    """Validate and type a SELECT; ``params`` are the values of $1..$n. With
    ``copy=False`` the rewriter may modify ``expr`` (a fresh parse nobody reuses)."""
    return _build(expr, config, list(params or []), copy)[0]


def param_types(expr: exp.Expression, config: Config) -> list[str | None]:
    """The type of each $n inferred from its context (None if unknown)."""
    ctx = _build(expr, config, None)[1]
    return [ctx.types.get(i) for i in range(1, max(ctx.used, default=0) + 1)]


def typed_plan(expr: exp.Expression, config: Config) -> Plan:
    """The plan of a statement whose parameters have no values yet (each takes the type
    its context gives it; a parameter that must be a literal takes a stand-in of the
    same type, e.g. date_trunc's unit): for describing its columns only."""
    return _build(expr, config, None)[0]


def to_sql(
    plan: Plan,
    dialect: str | SQLDialect,
    salt: str = "",
    frozen: bool = False,
    rows: bool = False,
    decimals: Mapping[str, tuple[int, int]] | None = None,
    cells: bool = False,
) -> str:
    """The backend SQL: one row per group the data has, columns (k_1..k_k, m_1..m_j);
    :func:`complete` makes them one row per public cell. ``salt``: the privacy unit's
    bounding key (:mod:`.unit`). ``dialect``: the backend's :class:`~rewriter.dialects.SQLDialect`
    or its name. ``frozen``: the backend keeps relations made from the source, which cannot
    change meanwhile (the unit's heavy units, :func:`.unit.heavy_set`; :func:`.params.needs`);
    ``rows``: and their rows (:func:`.unit.heavy_rows`); ``cells``: and, for a total-mode statement
    without a WHERE, their (unit, cell) rows with running sums (:func:`.unit.per_unit_scan`'s
    ``heavy_cells``). ``decimals``: the source's columns the
    backend stores as DECIMAL(w, s), column → (w, s): a SUM of one is clamped and summed in it
    (:mod:`.fixed_point`)."""
    if decimals:
        plan = fixed_point.fixed_point(plan, decimals)
    return emit.to_sql(plan, dialect, salt, frozen, rows, cells)


def _build(
    expr: exp.Expression, config: Config, params: list[Any] | None, copy: bool = True
) -> tuple[Plan, Ctx]:
    cost.check(expr, config, params)  # per-row cost caps first (54000 / 54001)
    expr = normalize_identifiers(expr.copy() if copy else expr, dialect="postgres")
    postprocess.named_windows(expr)  # WINDOW w AS (…): each OVER w spelled out
    expr = inline.inline(inline.expand_ctes(expr))  # derived tables and CTEs
    outer = inline.split_outer(expr)
    if outer is None:
        plan, ctx = _plan(expr, config, params)
        ctx.check_count()
        return plan, ctx
    inner, wrapper = outer
    per = histogram.inner(inner, inline.derived_alias(wrapper), config, params)
    if per is not None:  # over a per-unit relation: a histogram
        if planner.extreme_in(wrapper):
            raise Refusal(
                FEATURE_NOT_SUPPORTED,
                "MAX / MIN / percentiles of per-unit counts are not "
                "available; ask the histogram (… GROUP BY n) and read them off it.",
                hint=histogram.HINT,
            )
        plan, ctx = _plan(histogram.over(wrapper, per), config, params, per)
        plan = histogram.finish(plan, per)
        ctx.check_count()
        return plan, ctx
    # over an aggregating subquery: its release, post-processed
    plan, ctx = _plan(inner, config, params)
    plan = inline.apply_outer(plan, wrapper, ctx)
    ctx.check_count()
    return plan, ctx


def _plan(
    expr: exp.Expression, config: Config, params: list[Any] | None, per: histogram.PerUnit | None = None
) -> tuple[Plan, Ctx]:
    select = shape.check_statement(expr)
    keys.distinct_to_group(select)  # SELECT DISTINCT g: GROUP BY g
    having = selection.split_having(select)
    top = selection.top_order(select)
    spelled = None
    if per is not None:  # the per-unit relation (rewriter.histogram)
        rel = per.rel
        select.set("joins", None)
    else:
        spelled = lookup_domains.capture(select, config)  # the public tables as written
        rel = joins.resolve(select, config)  # one table, or a lookup join (consumed here)
    shape.check_clauses(select)
    shape.check_nesting(select, windows=True)  # windows over released cells: rewriter.postprocess
    name = rel.name
    ctx = Ctx(name, rel.table, rel.qualifiers, params, owners=rel.owners, date_part=keys.date_part)
    ctx.semijoin = semijoin.Semijoin(config, [name, *(j[0] for j in rel.joins)], predicate.where).check
    if per is not None:  # $n shared with the inner WHERE
        ctx.types, ctx.used = per.types, per.used
    if per is None:  # one row per order or per person: refused first, with that reason
        keys.refuse_single_rows(select, ctx, [name, *(j[0] for j in rel.joins)], config.tables)
    items = select_.items(select, ctx)
    groups = select_.group_by(select, items, ctx)
    postprocess.check_windows(select, groups)
    histogram.refuse_unit_key(groups, rel, config)  # one row per person: never partition selection
    thresholded = having is not None or top is not None
    measures, aggregates, outputs = select_.outputs(items, groups, ctx, need_aggregate=not thresholded)
    row_filter = None
    if having is not None:  # HAVING: a filter on the released rows (post-processing)
        row_filter, measures, aggregates = postprocess.resolve_filter(
            postprocess.having_filter(having, ctx), groups, ctx, measures, aggregates
        )
    w = select.args.get("where")
    where = predicate.where(w.this, ctx) if w is not None else None
    tuples = keys.key_tuples(w.this, groups, ctx) if w is not None and per is None else None
    if tuples is not None:  # a WHERE over several keys: the cells whose key tuple it keeps
        f, measures, aggregates = postprocess.resolve_filter(
            postprocess.having_filter(tuples, ctx), groups, ctx, measures, aggregates
        )
        row_filter = f if row_filter is None else ("op", "and", row_filter, f)
    key_filter: tuple[str, ...] = ()
    key_tuples: keyfilter.KeyTuples = ()
    if per is None:  # a per-unit bucket at the cap means "cap or more": its WHERE is read in the scan
        types = {c: spec.type for c, spec in ctx.table.columns.items()}
        groups, key_filter = keyfilter.restrict(groups, where, types)  # WHERE on a group key: fewer cells
        groups = dates.restrict_years(groups, where)  # a date range: the years it meets
        groups, key_tuples, on_tuples = keyfilter.tuples(groups, where)  # … on several: fewer tuples
        key_filter += tuple(c for c in on_tuples if c not in key_filter)
    lookups = lookup_domains.queries(groups, where, spelled, rel.renamed, rel.owners, config)
    ms, ags = list(measures), list(aggregates)
    order = select_.order_by(
        select, items, outputs, ctx, hidden=lambda node: postprocess.resolve_sort(node, groups, ctx, ms, ags)
    )
    measures, aggregates = tuple(ms), tuple(ags)
    limit, offset = select_.limit_offset(select, ctx)
    sel = None
    if thresholded and groups:  # the sparse vector's form of it, if it has one (Liu et al.)
        try:
            measures, aggregates, sel = selection.plan_selection(
                having, top, ctx, groups, measures, aggregates, outputs, limit
            )
        except Refusal:
            sel = None  # answered from the released cells only
    plan = Plan(
        table=name,
        source=config.source_of(name),
        where=where,
        group_by=groups,
        measures=measures,
        aggregates=aggregates,
        outputs=outputs,
        order_by=order,
        limit=limit,
        offset=offset,
        selection=sel,
        row_filter=row_filter,
        joins=rel.joins,
        relation=rel.relation,
        key_filter=key_filter,
        consistent=rel.table.consistent,
        key_tuples=key_tuples,
        lookups=lookups,  # keys read from public tables: their domains are the tables' (the proxy asks)
    )
    declared_unit = config.tables[name].privacy_unit or ""
    if len(rel.joins) == 1 and rel.joins[0][3] == "unit" and declared_unit.count(".") == 1:
        ref, fk, key, _ = rel.joins[0]  # the unit through one reference, nothing else joined
        lookup = UnitLookup(fk, config.source_of(ref), key, declared_unit.rsplit(".", 1)[1])
        plan = dataclasses.replace(plan, unit_lookup=lookup)
    t = ctx.table
    if t.privacy_unit is not None:  # per person, not per row
        label = (
            config.tables[name].unit_name or t.privacy_unit
        )  # the declared unit (customer), or the column as written (orders.customer_id)
        one_cell = bool(groups) and all(
            g.expr is None and g.column in t.columns and t.columns[g.column].per_unit for g in groups
        )  # a person has one value of each key: L0 = 1
        max_groups, max_rows = caps(name, t)
        plan = dataclasses.replace(
            plan,
            unit=UnitBounds(
                t.privacy_unit,
                1 if one_cell else max_groups,
                max_rows,
                "" if label == t.privacy_unit else label,
                t.max_rows_scope == "total",
            ),
        )
    if ctx.__dict__.get("clock"):  # now() / current_date: planned afresh each time
        plan = dataclasses.replace(plan, clock=ctx.__dict__["clock"].isoformat(sep=" "))
    return plan, ctx
