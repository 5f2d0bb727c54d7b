"""Reading a public table as-is: ``[tables.stores] public = true``.

A public table holds no personal data (the owner says so in the config), so its rows are
answered exactly, with no noise and no charge. The statement is still parsed and rebuilt,
never forwarded: ``SELECT`` of declared columns (or ``*``: the declared columns), plain
aggregates of them (COUNT, SUM, AVG, MIN, MAX), ``WHERE`` under the same predicate rules
as every statement, ``GROUP BY`` / ``ORDER BY`` declared columns or output positions,
``LIMIT`` / ``OFFSET``. Only declared columns are ever read; anything else is refused.
SQL only: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from config import Config, Table

from . import predicate, shape
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import Refusal
from .plan import ColumnType, source_relation
from .scope import Ctx
from .select import limit_offset

__all__ = ["PublicQuery", "plan_public"]

_AGGS: dict[type[exp.Expression], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
}


@dataclass(frozen=True)
class PublicQuery:
    """The rebuilt statement and its result columns ``(name, type)`` (type: a config
    column type, or "float" for AVG)."""

    table: str
    select: exp.Select
    columns: tuple[tuple[str, ColumnType | None], ...]

    def sql(self, dialect: str) -> str:
        return self.select.sql(dialect=dialect, identify=True)


def plan_public(tree: exp.Expression, config: Config, params: list[Any] | None = None) -> PublicQuery:
    select = shape.check_statement(normalize_identifiers(tree.copy(), dialect="postgres"))
    shape.check_clauses(select)
    shape.check_nesting(select)
    name, quals = shape.resolve_table(select, config)
    table = config.tables[name]
    if not table.public:
        raise Refusal("42501", f"{name} is not a public table.")
    ctx = Ctx(name, table, quals, list(params or []))
    items: list[exp.Expr] = []
    cols: list[tuple[str, ColumnType | None]] = []
    for node in select.expressions:
        alias = node.alias if isinstance(node, exp.Alias) else None
        inner = node.this if isinstance(node, exp.Alias) else node
        if isinstance(inner, exp.Star) or (
            isinstance(inner, exp.Column) and isinstance(inner.this, exp.Star)
        ):
            for c, spec in table.columns.items():
                items.append(exp.column(c, quoted=True))
                cols.append((c, spec.type))
            continue
        expr, name_, typ = _item(inner, ctx, table)
        items.append(exp.alias_(expr, alias or name_, quoted=True))
        cols.append((alias or name_, typ))
    q = exp.select(*items).from_(source_relation(config.source_of(name)))
    w = select.args.get("where")
    if w is not None:
        q = q.where(predicate.where(w.this, ctx), copy=False)
    group = select.args.get("group")
    if group is not None:
        q = q.group_by(*[_ref(g, ctx, items) for g in group.expressions], copy=False)
    order = select.args.get("order")
    if order is not None:
        q = q.order_by(
            *[
                exp.Ordered(
                    this=_ref(o.this, ctx, items),
                    desc=o.args.get("desc"),
                    nulls_first=o.args.get("nulls_first"),
                )
                for o in order.expressions
            ],
            copy=False,
        )
    limit, offset = limit_offset(select, ctx)
    if limit is not None:
        q = q.limit(limit, copy=False)
    if offset:
        q = q.offset(offset, copy=False)
    return PublicQuery(name, q, tuple(cols))


def _item(node: exp.Expression, ctx: Ctx, table: Table) -> tuple[exp.Expression, str, ColumnType | None]:
    if isinstance(node, exp.Column):
        t = ctx.column(node)
        return t.node, node.name, t.type
    func = _AGGS.get(type(node))
    if func is not None and not node.args.get("distinct"):
        arg = node.this
        if func == "count" and isinstance(arg, exp.Star):
            return exp.Count(this=exp.Star()), "count", "int"
        if isinstance(arg, exp.Column):
            t = ctx.column(arg)
            typ: ColumnType | None = "int" if func == "count" else "float" if func == "avg" else t.type
            if func in ("sum", "avg") and t.type not in ("int", "float"):
                raise Refusal(UNSUPPORTED, f"{func.upper()}({arg.name}) needs a numeric column.")
            return type(node)(this=t.node), func, typ
    raise Refusal(
        UNSUPPORTED,
        "a public table is read with its columns and COUNT/SUM/AVG/MIN/MAX of them.",
        hint=f"SELECT * FROM {ctx.name} [WHERE …] [ORDER BY …] [LIMIT n]",
    )


def _ref(node: exp.Expression, ctx: Ctx, items: list[exp.Expr]) -> exp.Expr:
    if isinstance(node, exp.Literal) and node.is_int and 1 <= int(node.this) <= len(items):
        item = items[int(node.this) - 1]
        return item.this.copy() if isinstance(item, exp.Alias) else item.copy()
    if isinstance(node, exp.Column):
        for item in items:
            if isinstance(item, exp.Alias) and item.alias == node.name and not node.table:
                return exp.column(node.name, quoted=True)
        return ctx.column(node).node
    raise Refusal(UNSUPPORTED, "GROUP BY / ORDER BY on a public table take columns or output positions.")
