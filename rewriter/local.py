"""Plan rules for local (metric-LDP) tables (Xiang et al. 2020, metric-LDP spec §8).

A local table stores no raw value of its private columns: every record was
perturbed once at ingestion (thermometer encoding + bit flips, spec §3.1) and only
the *reports* live in the backend table ``<table>_reports``. A query is
post-processing of those reports, so it costs no budget; this module turns a
SELECT into ONE aggregate scan over the report table (the product form of §3.5)
and says how to read the answer back. It is SQL only: the plan describes
its weights symbolically (:class:`rewriter.local_weights.Weight`, :class:`LocalQuery`);
the proxy evaluates them and computes the estimators' coefficients with
:mod:`mechanisms.metric_ldp` (:mod:`proxy.pipeline.local_bind`) and passes those plain
numbers to :func:`rewriter.local_sql.to_sql`.

Layout (:class:`Layout`, from the config's ``[tables.X.local]``):

* every private column (``local.columns``) is one dimension of a *joint group*;
  ``local.joint`` lists the groups, a private column in no group is a 1-D group of
  its own. Multi-column ranges need the columns in one group (spec §7.8).
* group ``k`` is stored as SMALLINT columns ``g{k}_{d}_{j}`` ∈ {0, 1} (dimension
  ``d`` of the group, threshold ``j`` = 1..m_d: the randomised bit "bucket ≤ j";
  :meth:`Group.report_columns`, the M4 layout of :func:`mechanisms.metric_ldp.report_columns`);
  public columns are stored as-is.
* ``local.weight`` naming a private column makes it the private weight of
  paper §4.3.2 (m = 2, lo = 0, hi = Δ): SUM(w) = Δ·ĉ(R × [2,2]). Naming a public
  column (or summing any public numeric column) uses public weights (§3.9).
* the guarantee per record: E(x, x') = Σ_d ε_d·|bucket_d(x) − bucket_d(x')|.

Query shapes (anything else is refused with a sentence saying what is allowed):

* ``COUNT(*)`` / ``COUNT(col)``; ``SUM(e)`` / ``AVG(e)`` where ``e`` is a public
  numeric column, the private weight column, or an expression of ONE private
  column (the column, numbers, + − * /, ``CASE WHEN … THEN … ELSE … END``) — a
  linear counting query (§3.11) with the expression averaged over each bucket;
  ``percentile_disc(p)`` / ``percentile_cont(p) WITHIN GROUP (ORDER BY col)``
  (§3.10: all prefixes in the one scan, binary search in Python);
* ``WHERE``: a conjunction of (a) any predicate over public columns and (b)
  predicates over one private column each (comparisons with numbers, BETWEEN,
  IN for int columns, AND/OR/NOT); private columns of one statement must share a
  joint group;
* ``GROUP BY`` public columns with a declared domain (the reports are partitioned;
  every domain value gets a row), ``ORDER BY`` outputs, ``LIMIT``/``OFFSET``.

Edge-bucket policy (``edges``, spec §8; the query-time options are in
:mod:`rewriter.local_options`). "interpolate" (default): a predicate or expression over a
private column becomes a weight per bucket = its average over the bucket's
possible values, assuming values spread uniformly inside a bucket. An int column
holds the integers of [lo, hi) (declare hi one past the largest value); a float
column the interval. So a range whose ends fall on bucket edges (int columns:
any integer range with unit buckets) is counted exactly; a cut bucket counts
with the fraction inside the range (a linear query, same variance formulas).
"whole": every bucket the predicate touches counts as a whole (the §3.5 range
estimate over whole buckets: the answer for the range widened to bucket edges).
Values outside [lo, hi] were clamped into the first/last bucket at ingestion and
count as the values of that bucket.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from config import Config

from . import cost, predicate, shape
from .args import understood
from .errors import DATATYPE_MISMATCH, GROUPING_ERROR, Refusal
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .local_clauses import LocalOutput, columns_in, plan_group_by, plan_limit, plan_order_by
from .local_layout import SQL_TYPES, Dim, Group, Layout, layout
from .local_options import resolve
from .local_plan import LocalAgg, LocalPlan
from .local_sql import qcol, to_sql
from .local_subset import SubsetPlan, plan_subset
from .local_weights import LOCAL_ALLOWED, Factors, LocalQuery, Prefix, Weight, compile_weight, refuse_local
from .scope import Ctx
from .values import literal_value

__all__ = [
    "Layout",
    "Group",
    "Dim",
    "layout",
    "LocalPlan",
    "LocalAgg",
    "LocalQuery",
    "plan_local",
    "to_sql",
    "LOCAL_ALLOWED",
    "SQL_TYPES",
]


def plan_local(
    expr: exp.Expression,
    config: Config,
    params: list[Any] | None = None,
    overrides: tuple[tuple[str, str | bool], ...] = (),
) -> LocalPlan | SubsetPlan:
    """Validate a SELECT over a local table and plan its one report scan (a statement that
    mentions a categorical Subset column is planned by :func:`rewriter.local_subset.plan_subset`).
    ``overrides``: session options (:func:`rewriter.local_options.session_overrides`)."""
    cost.check(expr, config, params)  # per-row cost caps first (54000 / 54001)
    expr = normalize_identifiers(expr.copy(), dialect="postgres")
    select = shape.check_statement(expr)
    shape.check_clauses(select)
    shape.check_nesting(select)
    name, qualifiers = shape.resolve_table(select, config)
    table = config.tables[name]
    if table.mode != "local":
        raise refuse_local(f"table {name} is not a local table.", DENIED)
    lay = layout(name, table, config.tiers)
    ctx = Ctx(name, table, qualifiers, None if params is None else list(params))
    cats = {c.name for c in lay.categories} & {c.name for c in select.find_all(exp.Column)}
    if cats:
        return plan_subset(select, ctx, lay, cats)
    if table.local is None:  # a local table has its local policy (config validation)
        raise refuse_local(f"table {name} has no local policy.", DENIED)
    opts = resolve(table.local, tuple(lay.where), overrides)

    # WHERE: public conjuncts stay SQL; private ones become bucket weights per column
    public_parts: list[exp.Expression] = []
    private_parts: dict[str, list[exp.Expression]] = {}
    w = select.args.get("where")
    if w is not None:
        conj = list(w.this.flatten()) if isinstance(w.this, exp.And) else [w.this]
        for c in conj:
            if not isinstance(c, exp.Expression):  # every condition node is an Expression
                raise refuse_local(f"WHERE {c.sql('postgres')} is not understood.")
            if c.find(exp.AggFunc):
                raise Refusal(GROUPING_ERROR, "aggregate functions are not allowed in WHERE.")
            cols = columns_in(c, ctx)
            priv = {x for x in cols if lay.is_private(x)}
            if not priv:
                public_parts.append(c)
                continue
            if len(priv) > 1 or cols - priv:
                raise refuse_local(
                    "each WHERE condition on a private column must mention that one "
                    f"column only ({', '.join(sorted(cols))} appear together); combine "
                    "conditions on different columns with AND."
                )
            col = priv.pop()
            if col == lay.weight:
                raise refuse_local(
                    f"{col} is a private weight; it can be summed (SUM({col})) but not filtered on."
                )
            private_parts.setdefault(col, []).append(c)
    where = None
    if public_parts:
        node = public_parts[0]
        for p in public_parts[1:]:
            node = exp.And(this=node, expression=p)
        where = predicate.where(node, ctx)
    private: dict[str, Weight] = {}
    for col, parts in sorted(private_parts.items()):
        node = parts[0]
        for p in parts[1:]:
            node = exp.And(this=node, expression=p)
        private[col] = compile_weight(ctx, lay, col, node, "truth", opts.edges[col])
    where_groups = {lay.where[c][0] for c in private}
    if len(where_groups) > 1:
        names = ", ".join(sorted(private))
        raise refuse_local(
            f"{names} are collected in different groups, so a range over them together "
            "cannot be estimated (spec §7.8); list them in one local.joint group, or "
            "query one group at a time."
        )

    # select list
    groups = plan_group_by(select, ctx, lay)
    gidx = {g.column: i for i, g in enumerate(groups)}
    aggs: list[LocalAgg] = []
    outs: list[LocalOutput] = []
    for item in select.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = item.unalias()
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and node.is_star):
            raise refuse_local(
                "SELECT * returns raw rows and is not allowed; select aggregates such as COUNT(*).", DENIED
            )
        if isinstance(node, exp.Column):
            col = ctx.column(node).node.name
            if col not in gidx:
                raise refuse_local(
                    f"column {col} is selected but not grouped; raw column values are never returned.", DENIED
                )
            g = groups[gidx[col]]
            outs.append(LocalOutput(alias or col, "group", gidx[col], g.type))
            continue
        agg = _aggregate(node, ctx, lay, private, where_groups, alias)
        if agg.kind == "pct":
            agg = _represent(agg, lay, opts.quantile_point)
        aggs.append(agg)
        outs.append(LocalOutput(alias or _default_name(node), "aggregate", len(aggs) - 1, agg.out_type))
    if not aggs:
        raise refuse_local("select at least one aggregate (COUNT, SUM, AVG, percentile_disc).")
    order = plan_order_by(select, outs)
    limit, offset = plan_limit(select, ctx)
    ctx.check_count()
    ptypes = tuple(ctx.types.get(i) for i in range(1, max(ctx.used, default=0) + 1))
    return LocalPlan(
        lay, where, private, groups, tuple(aggs), tuple(outs), order, limit, offset, ptypes, opts
    )


def _default_name(node: exp.Expression) -> str:
    if isinstance(node, exp.WithinGroup):
        return node.this.sql_name().lower() if not isinstance(node.this, exp.Anonymous) else node.this.name
    return node.key if isinstance(node, exp.AggFunc) else "?column?"


def _base(lay: Layout, g: int, private: dict[str, Weight]) -> Factors:
    """Per dimension of group ``g``, the factors of the WHERE weights (none: weight 1)."""
    return tuple((private[c],) if c in private else () for c in lay.groups[g].columns)


def _expr_private_col(node: exp.Expression, ctx: Ctx, lay: Layout) -> tuple[str | None, set[str]]:
    cols = columns_in(node, ctx)
    priv = {c for c in cols if lay.is_private(c)}
    return (next(iter(priv)) if len(priv) == 1 else None), cols


def _aggregate(
    node: exp.Expression,
    ctx: Ctx,
    lay: Layout,
    private: dict[str, Weight],
    where_groups: set[int],
    alias: str | None,
) -> LocalAgg:
    wg = next(iter(where_groups)) if where_groups else None
    if isinstance(node, exp.WithinGroup):
        return _percentile(node, ctx, lay, private, wg)
    if isinstance(node, exp.Filter):
        raise refuse_local("aggregate FILTER (WHERE …) is not supported; use WHERE.")
    if not isinstance(node, (exp.Count, exp.Sum, exp.Avg)):
        if isinstance(node, (exp.Max, exp.Min)):
            raise refuse_local(
                f"{node.key.upper()} is not served on a local table (a single extreme "
                "report says nothing); use percentile_disc(0.99) WITHIN GROUP "
                "(ORDER BY col)."
            )
        if isinstance(node, exp.AggFunc):
            raise refuse_local(f"aggregate {node.sql_name().lower()}() is not supported on a local table.")
        if node.find(exp.AggFunc):
            raise refuse_local("expressions over aggregates are not supported; select the aggregate itself.")
        raise refuse_local(
            f"select item {node.sql('postgres')} would return raw row values; select "
            "group keys and aggregates only.",
            DENIED,
        )
    func, arg = node.key, node.this
    if isinstance(arg, exp.Distinct):
        raise refuse_local(f"{func.upper()}(DISTINCT …) is not supported.")
    understood(node)
    label = node.sql("postgres").lower()
    if func == "count":
        star = isinstance(arg, exp.Star)
        if star or (isinstance(arg, exp.Column) and lay.is_private(ctx.column(arg).node.name)):
            # private columns are never NULL in the reports: COUNT(col) = COUNT(*)
            if wg is None:
                return LocalAgg("exact", label, "int", exact_sql="COUNT(*)", func="count")
            return LocalAgg(
                "est", label, "int", group=wg, query=LocalQuery(_base(lay, wg, private)), func="count"
            )
        if not isinstance(arg, exp.Column):
            raise refuse_local("COUNT takes * or a column.")
        col = ctx.column(arg).node.name
        q = qcol(col)
        if wg is None:
            return LocalAgg("exact", label, "int", exact_sql=f"COUNT({q})", func="count")
        return LocalAgg(
            "est",
            label,
            "int",
            group=wg,
            query=LocalQuery(_base(lay, wg, private)),
            row_weight=f"CASE WHEN {q} IS NULL THEN 0 ELSE 1 END",
            func="count",
        )
    pcol, cols = _expr_private_col(arg, ctx, lay)
    if len({c for c in cols if lay.is_private(c)}) > 1:
        raise refuse_local(
            f"{func.upper()} over an expression of several private columns is not "
            "served; use one private column per aggregate."
        )
    if pcol is None:  # public weight (§3.9)
        if not isinstance(arg, exp.Column):
            raise refuse_local(
                f"{func.upper()} takes a public numeric column or an expression of one private column."
            )
        col = ctx.column(arg).node.name
        if lay.col_type(col) not in ("int", "float"):
            raise Refusal(DATATYPE_MISMATCH, f"{func.upper()}({col}) needs a numeric column.")
        q = qcol(col)
        out_type = "int" if (func == "sum" and lay.col_type(col) == "int" and wg is None) else "float"
        if wg is None:
            sql = f"SUM({q})" if func == "sum" else f"AVG(CAST({q} AS DOUBLE PRECISION))"
            return LocalAgg("exact", label, out_type, exact_sql=sql, func=func)
        public_q = LocalQuery(_base(lay, wg, private))
        rw = f"COALESCE(CAST({q} AS DOUBLE PRECISION), 0)"
        if func == "sum":
            return LocalAgg("est", label, "float", group=wg, query=public_q, row_weight=rw, func="sum")
        return LocalAgg(
            "avg",
            label,
            "float",
            group=wg,
            query=public_q,
            row_weight=rw,
            den=public_q,
            den_weight=f"CASE WHEN {q} IS NULL THEN 0 ELSE 1 END",
            func="avg",
        )
    g, d = lay.where[pcol]
    if wg is not None and wg != g:
        raise refuse_local(
            f"{pcol} and the WHERE ranges are collected in different groups; a joint "
            "estimate needs one local.joint group (spec §7.8)."
        )
    base = _base(lay, g, private)
    if pcol == lay.weight:  # private weight (§3.9, paper 4.3.2)
        if not isinstance(arg, exp.Column):
            raise refuse_local(f"the private weight {pcol} can only be summed as SUM({pcol}).")
        weight_q = LocalQuery(base, private_weight=True)
        if func == "sum":
            return LocalAgg("est", label, "float", group=g, query=weight_q, column=pcol, func="sum")
        return LocalAgg(
            "avg", label, "float", group=g, query=weight_q, den=LocalQuery(base), column=pcol, func="avg"
        )
    f = compile_weight(ctx, lay, pcol, arg, "value")  # linear counting query (§3.11)
    ws = list(base)
    ws[d] = (f, *ws[d])
    value_q = LocalQuery(tuple(ws))
    if func == "sum":
        return LocalAgg("est", label, "float", group=g, query=value_q, column=pcol, func="sum")
    return LocalAgg(
        "avg", label, "float", group=g, query=value_q, den=LocalQuery(base), column=pcol, func="avg"
    )


def _percentile(
    node: exp.WithinGroup, ctx: Ctx, lay: Layout, private: dict[str, Weight], wg: int | None
) -> LocalAgg:
    fn = understood(node).this
    if not isinstance(fn, (exp.PercentileDisc, exp.PercentileCont)):
        raise refuse_local("WITHIN GROUP is served for percentile_disc and percentile_cont only.")
    understood(fn)
    order = node.expression
    if not isinstance(order, exp.Order) or len(order.expressions) != 1:
        raise refuse_local("percentile_… WITHIN GROUP takes ORDER BY one private column.")
    ordered = understood(understood(order).expressions[0])
    if not isinstance(ordered.this, exp.Column):
        raise refuse_local("percentile_… WITHIN GROUP (ORDER BY col) takes a private column.")
    col = ctx.column(ordered.this).node.name
    if not lay.is_private(col) or col == lay.weight:
        raise refuse_local(f"percentiles are served for private (non-weight) columns; {col} is not one.")
    p_node = fn.this
    ok, p = literal_value(p_node)
    if isinstance(p_node, exp.Parameter):
        t = ctx.settle(ctx.param(p_node), "float")
        ok, p = True, (t.value if t.is_literal else 0.5)
    if not ok or isinstance(p, (bool, str)) or p is None:
        raise refuse_local("percentile_…(p) takes a number p in [0, 1] (one fraction, not an array).")
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise Refusal("22003", f"percentile value {p:g} is not between 0 and 1.", hint=None)
    if ordered.args.get("desc"):
        p = 1.0 - p
    g, d = lay.where[col]
    if wg is not None and wg != g:
        raise refuse_local(
            f"{col} and the WHERE ranges are collected in different groups; a joint "
            "estimate needs one local.joint group (spec §7.8)."
        )
    dim = lay.groups[g].dims[d]
    base = _base(lay, g, private)
    prefixes = []
    for k in range(1, dim.m):
        ws = list(base)
        ws[d] = (Prefix(k), *ws[d])
        prefixes.append(LocalQuery(tuple(ws)))
    cont = isinstance(fn, exp.PercentileCont)
    is_int = lay.col_type(col) == "int"
    unit = is_int and float(dim.g) == 1.0 and float(dim.lo).is_integer()
    return LocalAgg(
        "pct",
        node.sql("postgres").lower(),
        "float" if cont or not is_int else "int",
        group=g,
        den=LocalQuery(base),
        dim=d,
        p=p,
        cont=cont,
        prefixes=tuple(prefixes),
        column=col,
        represent="lower" if unit else "mid",
        func="percentile_cont" if cont else "percentile_disc",
    )


def _represent(agg: LocalAgg, lay: Layout, point: str) -> LocalAgg:
    """The bucket value of percentile_disc (``quantile_point``, spec §8): "auto" keeps the
    planned one (the integer of a one-integer bucket, else the midpoint)."""
    if point == "auto" or agg.cont:
        return agg
    return replace(agg, represent={"midpoint": "mid", "upper": "upper"}[point])
