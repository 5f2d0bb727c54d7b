"""Select-list, GROUP BY, ORDER BY and LIMIT rules.

Select items are group keys or COUNT/SUM/AVG of a declared column; duplicated
aggregates share one :class:`Aggregate`, and AVG shares its SUM/COUNT measures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from . import keys as derived
from . import postprocess, predicate, stats
from .aggregates import add_aggregate, aggregate, post_steps, post_type
from .args import understood
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .errors import Refusal
from .plan import Aggregate, GroupKey, Measure, OrderItem, Output
from .scope import Ctx

MAX_CELLS = 100_000
_BAD_POSITION = "42P10"


@dataclass(frozen=True)
class Item:
    """A select item by ``kind``: "column" (payload: its name), "agg" (payload: (func, column)),
    "key" (a derived group key: its GroupKey) or "expr" (a :mod:`.postprocess` tree)."""

    name: str
    kind: str
    payload: Any
    post: tuple[tuple[str, Any], ...] = ()  # display steps over an aggregate (see :func:`post_steps`)


def items(select: exp.Select, ctx: Ctx) -> list[Item]:
    out: list[Item] = []
    for item in select.expressions:
        alias = (
            item.alias
            if isinstance(understood(item) if isinstance(item, exp.Alias) else item, exp.Alias)
            else None
        )
        node = item.unalias()
        while isinstance(node, exp.Paren):
            node = understood(node).this
        if not isinstance(node, exp.Expression):  # every node sqlglot builds is one
            raise Refusal(UNSUPPORTED, f"select item {node.sql('postgres')} is not supported.")
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and node.is_star):
            raise Refusal(
                DENIED,
                "SELECT * returns raw rows and is not allowed; select "
                "aggregates such as COUNT(*), SUM(col), AVG(col).",
            )
        if isinstance(node, exp.Column):
            name = ctx.column(node).node.name
            out.append(Item(alias or name, "column", name))
        elif postprocess.wanted(node):  # an expression over aggregates / a constant
            out.append(Item(alias or postprocess.name(node), "expr", postprocess.tree(node, ctx)))
        elif isinstance(node, exp.AggFunc) or isinstance(node, exp.Filter):
            func, col = aggregate(node, ctx)
            out.append(Item(alias or stats.output_name(node, func), "agg", (func, col)))
        elif (post := post_steps(node)) is not None:
            inner, steps, post_name = post
            func, col = aggregate(inner, ctx)
            out.append(Item(alias or post_name or stats.output_name(inner, func), "agg", (func, col), steps))
        elif isinstance(node, exp.WithinGroup):  # percentiles: their own release (rewriter.extreme)
            aggregate(node, ctx)
        elif node.find(exp.AggFunc):
            raise Refusal(
                UNSUPPORTED,
                "expressions over aggregates are not supported; select the "
                "aggregate itself, or display steps over one aggregate: ROUND(agg[, n]), "
                "FLOOR(agg), CEIL(agg), CAST(agg AS integer | double precision | numeric).",
            )
        elif derived.derivable(node):  # CASE, bins, booleans, date parts
            g = derived.derive(node, ctx)
            out.append(Item(alias or derived.name_of(node), "key", g))
        else:
            predicate.check(node, ctx)  # unknown columns/functions get their own error
            raise Refusal(
                DENIED,
                f"select item {node.sql('postgres')} would return raw row "
                "values; select group keys and aggregates only.",
            )
    return out


def group_by(select: exp.Select, its: list[Item], ctx: Ctx) -> tuple[GroupKey, ...]:
    group = select.args.get("group")
    if group is None:
        return ()
    if any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets")):
        raise Refusal(UNSUPPORTED, "GROUP BY ROLLUP/CUBE/GROUPING SETS are not supported.")
    understood(group)
    aliases = {i.name: i.payload for i in its if i.kind == "column"}
    derived_aliases = {i.name: i.payload for i in its if i.kind == "key"}
    keys: dict[str, GroupKey] = {}
    for node in group.expressions:
        if isinstance(node, (exp.Rollup, exp.Cube, exp.GroupingSets)):
            raise Refusal(UNSUPPORTED, "ROLLUP/CUBE/GROUPING SETS are not supported.")
        if isinstance(node, exp.Literal) and node.is_int:
            pos = int(node.this)
            if not 1 <= pos <= len(its):
                raise Refusal(_BAD_POSITION, f"GROUP BY position {pos} is not in the select list.")
            if its[pos - 1].kind == "key":
                keys[its[pos - 1].payload.column] = its[pos - 1].payload
                continue
            node = exp.column(its[pos - 1].payload) if its[pos - 1].kind == "column" else None
        elif (
            isinstance(node, exp.Column)
            and not node.table
            and node.name in aliases
            and node.name not in ctx.table.columns
        ):
            node = exp.column(aliases[node.name])
        elif (
            isinstance(node, exp.Column)
            and not node.table
            and node.name in derived_aliases
            and node.name not in ctx.table.columns
        ):
            g = derived_aliases[node.name]
            keys[g.column] = g
            continue
        if node is not None and not isinstance(node, exp.Column) and derived.derivable(node):
            g = derived.derive(node, ctx)  # CASE, bins, booleans, date parts
            keys[g.column] = g
            continue
        if not isinstance(node, exp.Column):
            raise Refusal(
                DENIED,
                "GROUP BY takes columns with a declared public domain or "
                f"expressions with a public set of values: {derived.BIN_HINT}; not "
                "aggregates.",
            )
        name = ctx.column(node).node.name
        col = ctx.table.columns[name]
        if col.public_domain is None and col.type in ("date", "timestamp"):
            raise Refusal(
                DENIED,
                f"GROUP BY {name} is not allowed: group a {col.type} column by "
                f"date_trunc('month', {name}) (or 'day', 'week', 'quarter', 'year') or by "
                f"extract(month from {name}); their values follow from its bounds.",
            )
        central = ctx.table.mode == "central" and ctx.table.privacy is None
        if (
            col.public_domain is None
            and col.type in ("int", "float")
            and col.bounded
            and isinstance(col.lower, (int, float))
            and isinstance(col.upper, (int, float))
            and not central
        ):
            w = _bin_width(col.lower, col.upper)
            raise Refusal(
                DENIED,
                f"GROUP BY {name} is not allowed: column {name} has no public "
                f"domain (its distinct values are private); group by bins of its declared "
                f"range instead: GROUP BY floor({name} / {w:g}) * {w:g} (or width_bucket), "
                "every bin answered, or declare a public domain for it in the config.",
            )
        if col.public_domain is None and (col.type not in ("int", "text", "float") or not central):
            raise Refusal(
                DENIED,
                f"GROUP BY {name} is not allowed: column {name} has no public "
                f"domain; declare a public domain for it in the config.",
            )
        # no public domain: the released keys are chosen by DP partition selection
        keys[name] = GroupKey(name, col.type, col.public_domain)
    out = tuple(keys[k] for k in sorted(keys))
    cells = 1
    for g in out:
        if g.domain is None:  # the key tuples are chosen by partition selection
            return out
        cells *= len(g.domain)
    if cells > MAX_CELLS:
        raise Refusal(
            "54000",
            f"GROUP BY {', '.join(keys)} has {cells} cells; at most {MAX_CELLS} are allowed.",
            hint="Group by fewer or smaller columns.",
        )
    return out


def outputs(
    its: list[Item], groups: tuple[GroupKey, ...], ctx: Ctx, need_aggregate: bool = True
) -> tuple[tuple[Measure, ...], tuple[Aggregate, ...], tuple[Output, ...]]:
    """(measures, aggregates, outputs) for the select list."""
    measures: list[Measure] = []
    aggs: list[Aggregate] = []
    outs: list[Output] = []
    gidx = {g.column: i for i, g in enumerate(groups)}

    def agg_index(func: str, col: Any) -> tuple[int, str | None]:  # an aggregate inside an expression
        return postprocess.add_aggregate(func, col, ctx, measures, aggs)

    def key_index(name: str) -> tuple[int | str, str | None]:
        if name not in gidx:
            raise Refusal(
                DENIED,
                f"column {name} is used but not grouped; raw column values are "
                "never returned. Use group keys and aggregates only.",
            )
        return gidx[name], groups[gidx[name]].type

    for it in its:
        if it.kind == "key":
            if it.payload.column not in gidx:
                raise Refusal(
                    DENIED,
                    f"select item {it.name} is not in GROUP BY; group by it "
                    "(its values are public) or select aggregates only.",
                )
            outs.append(Output(it.name, "group", gidx[it.payload.column], it.payload.type))
            continue
        if it.kind == "expr":  # post-processing of released values
            tree, typ = postprocess.resolve(it.payload, agg_index, key_index)
            outs.append(Output(it.name, "expr", -1, postprocess.output_type(typ), tree))
            continue
        if it.kind == "column":
            if it.payload not in gidx:
                raise Refusal(
                    DENIED,
                    f"column {it.payload} is selected but not grouped; raw "
                    "column values are never returned. Select group keys (GROUP BY a "
                    "column with a public domain) and aggregates only.",
                )
            g = groups[gidx[it.payload]]
            outs.append(Output(it.name, "group", gidx[it.payload], g.type))
            continue
        func, col = it.payload
        index, typ = add_aggregate(func, col, ctx, measures, aggs)
        out_type = postprocess.output_type(post_type(typ, it.post))
        outs.append(Output(it.name, "aggregate", index, out_type, it.post))
    if not aggs and need_aggregate and not (groups and outs):  # no aggregate: the domain itself
        raise Refusal(UNSUPPORTED, "select at least one aggregate (COUNT, SUM or AVG).")
    if not aggs and need_aggregate and len({o.index for o in outs}) < len(groups):
        raise Refusal(UNSUPPORTED, "select at least one aggregate (COUNT, SUM or AVG).")
    return tuple(measures), tuple(aggs), tuple(outs)


def order_by(
    select: exp.Select,
    its: list[Item],
    outs: tuple[Output, ...],
    ctx: Ctx,
    hidden: Callable[[exp.Expression], postprocess.Tree] | None = None,
) -> tuple[OrderItem, ...]:
    """The sort keys: an output by position, alias or the same expression; else (with
    ``hidden(node)``, which resolves an expression over released values and group keys)
    a sort key that is not selected. ORDER BY an aggregate by expression, alias or
    position is one sort."""
    order = select.args.get("order")
    if order is None:
        return ()
    result: list[OrderItem] = []
    understood(order)
    for o in order.expressions:
        node, idx = understood(o).this, None
        if isinstance(node, exp.Literal) and node.is_int:
            idx = int(node.this) - 1
            if not 0 <= idx < len(outs):
                raise Refusal(_BAD_POSITION, f"ORDER BY position {idx + 1} is not in the select list.")
        elif isinstance(node, exp.Column) and not node.table and any(out.name == node.name for out in outs):
            idx = next(i for i, out in enumerate(outs) if out.name == node.name)
        else:
            key = (
                ("column", ctx.column(node).node.name)
                if isinstance(node, exp.Column)
                else (
                    ("agg", aggregate(node, ctx))
                    if isinstance(node, (exp.AggFunc, exp.Filter)) and isinstance(node, exp.Expression)
                    else (("key", derived.derive(node, ctx)) if derived.derivable(node) else None)
                )
            )
            idx = next((i for i, it in enumerate(its) if key == (it.kind, it.payload) and not it.post), None)
        if idx is None and hidden is not None and not isinstance(node, exp.Literal):
            tree = hidden(node)
            same = next((i for i, out in enumerate(outs) if out.source == "expr" and out.post == tree), None)
            if same is None:
                result.append(OrderItem(-1, bool(o.args.get("desc")), o.args.get("nulls_first"), tree))
                continue
            idx = same
        if idx is None:
            raise Refusal(
                UNSUPPORTED,
                "ORDER BY takes output columns: an alias, a position, or "
                "the same group key or aggregate as in the select list.",
            )
        result.append(OrderItem(idx, bool(o.args.get("desc")), o.args.get("nulls_first")))
    return tuple(result)


def _count(node: exp.Expression | None, ctx: Ctx, what: str, state: str) -> int | None:
    if node is None or (isinstance(node, exp.Var) and node.name.upper() == "ALL"):
        return None
    t = ctx.settle(predicate.check(node, ctx), "int")
    if t.param is not None:
        return None
    if not t.is_literal or t.value is None:
        if t.is_literal:
            return None
        raise Refusal(UNSUPPORTED, f"{what} takes a literal integer or a parameter.")
    if not isinstance(t.value, int) or t.value < 0:
        raise Refusal(state, f"{what} must be a non-negative integer.", hint=None)
    return t.value


def _fetch_as_limit(node: exp.Expr | None) -> exp.Expr | None:
    """``FETCH FIRST|NEXT [n] ROW[S] ONLY`` (SQL:2008, as BI tools write it) → ``LIMIT n``;
    WITH TIES and PERCENT are refused (their row count depends on the values)."""
    if not isinstance(node, exp.Fetch):
        return node
    opts = node.args.get("limit_options")
    extra = [k for k, v in node.args.items() if v and k not in ("direction", "count", "limit_options")]
    if (
        extra
        or (
            opts is not None
            and (
                opts.args.get("percent")
                or opts.args.get("with_ties")
                or [k for k, v in opts.args.items() if v and k not in ("percent", "rows", "with_ties")]
            )
        )
        or (str(node.args.get("direction") or "FIRST").upper() not in ("FIRST", "NEXT"))
    ):
        raise Refusal(
            UNSUPPORTED,
            "FETCH … WITH TIES / PERCENT is not supported; use FETCH FIRST n ROWS ONLY or LIMIT n.",
        )
    return exp.Limit(expression=node.args.get("count") or exp.Literal.number(1))


def limit_offset(select: exp.Select, ctx: Ctx) -> tuple[int | None, int]:
    lim, off = _fetch_as_limit(select.args.get("limit")), select.args.get("offset")
    for node in (lim, off):
        if node is not None and (
            not isinstance(node, (exp.Limit, exp.Offset))
            or any(v for k, v in node.args.items() if k != "expression")
        ):
            raise Refusal(UNSUPPORTED, "this LIMIT/FETCH form is not supported; use LIMIT n OFFSET m.")
    limit = _count(lim.expression if lim else None, ctx, "LIMIT", "2201W")
    offset = _count(off.expression if off else None, ctx, "OFFSET", "2201X")
    return limit, offset or 0


def _bin_width(lower: float, upper: float) -> float:
    """A round bin width giving about 10 bins over [lower, upper] (for the hint)."""
    span = max(float(upper) - float(lower), 1.0)
    w: float = 10 ** math.floor(math.log10(span / 10))
    return w * 5 if span / w > 50 else (w * 2 if span / w > 20 else w)
