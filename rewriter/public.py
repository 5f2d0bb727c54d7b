"""Reading a public table as-is: ``[tables.stores] public = true``.

A public table holds no personal data (the owner says so in the config), so its rows are
answered exactly, with no noise and no charge. The statement is still parsed and rebuilt,
never forwarded: ``SELECT`` of declared columns (or ``*``: the declared columns), plain
aggregates of them (COUNT, SUM, AVG, MIN, MAX), ``WHERE`` under the same predicate rules
as every statement, ``GROUP BY`` / ``ORDER BY`` declared columns or output positions,
``LIMIT`` / ``OFFSET``. Only declared columns are ever read; anything else is refused.

A statement over **several public tables** — joins (comma or JOIN … ON), subqueries in
WHERE, HAVING or the select list (correlated or not), derived tables and WITH, HAVING,
DISTINCT, COUNT(DISTINCT …), CASE, the date and text functions of the allow-list (TPC-H
Q2, Q11, Q16) — is answered exactly too (:func:`_general`): every relation it names must be
a declared public table (or its own WITH query / derived table), every column resolves
(sqlglot's scope resolution against the declared columns only: an undeclared column is
refused, ``*`` is the declared columns), every node and function is on an allow-list (no
function that reads files, the catalog or the clock), and each table is read from its
``source``. Private tables never appear in it: the router sends a statement that reads
one to a DP path.
SQL only: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.optimizer.qualify import qualify

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
    tree = normalize_identifiers(tree.copy(), dialect="postgres")
    if _general_shape(tree):
        return _general(tree, config, params)
    select = shape.check_statement(tree)
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


# -- statements over several public tables ----------------------------------------------

_STRUCTURE = (
    exp.Select,
    exp.From,
    exp.Join,
    exp.Where,
    exp.Group,
    exp.Having,
    exp.Order,
    exp.Ordered,
    exp.Limit,
    exp.Offset,
    exp.Subquery,
    exp.TableAlias,
    exp.Table,
    exp.Identifier,
    exp.Alias,
    exp.Column,
    exp.Star,
    exp.Distinct,
    exp.Paren,
    exp.Tuple,
    exp.With,
    exp.CTE,
)
_LOGIC = (
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.And,
    exp.Or,
    exp.Not,
    exp.Is,
    exp.Null,
    exp.Boolean,
    exp.Like,
    exp.ILike,
    exp.Between,
    exp.In,
    exp.Exists,
)
_VALUES = (
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Neg,
    exp.Literal,
    exp.DPipe,
    exp.Case,
    exp.If,
    exp.Cast,
    exp.DataType,
    exp.DataTypeParam,
    exp.Var,
    exp.Interval,
    exp.Extract,
)
_FUNCS = (
    exp.Count,
    exp.Sum,
    exp.Avg,
    exp.Min,
    exp.Max,
    exp.Abs,
    exp.Round,
    exp.Floor,
    exp.Ceil,
    exp.Lower,
    exp.Upper,
    exp.Length,
    exp.Trim,
    exp.Coalesce,
    exp.Substring,
)
_ALLOWED = _STRUCTURE + _LOGIC + _VALUES + _FUNCS
_CASTS = frozenset(
    exp.DataType.INTEGER_TYPES
    | exp.DataType.REAL_TYPES
    | exp.DataType.TEXT_TYPES
    | {exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.BOOLEAN}
)
_TYPES = {
    "int": "BIGINT",
    "float": "DOUBLE",
    "text": "VARCHAR",
    "bool": "BOOLEAN",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
}
_OUT: tuple[tuple[frozenset[Any], ColumnType], ...] = (
    (frozenset(exp.DataType.INTEGER_TYPES), "int"),
    (frozenset(exp.DataType.REAL_TYPES), "float"),
    (frozenset(exp.DataType.TEXT_TYPES), "text"),
    (frozenset({exp.DataType.Type.BOOLEAN}), "bool"),
    (frozenset({exp.DataType.Type.DATE}), "date"),
    (frozenset({exp.DataType.Type.TIMESTAMP}), "timestamp"),
)
GENERAL_HINT = (
    "Over public tables: SELECT, joins (JOIN … ON or comma joins), WHERE with subqueries, "
    "GROUP BY, HAVING, ORDER BY, LIMIT over declared columns, with COUNT/SUM/AVG/MIN/MAX, "
    "CASE, CAST, EXTRACT, SUBSTRING, LIKE and arithmetic."
)


def _general_shape(tree: exp.Expression) -> bool:
    """Whether the statement needs the general planner: more than one relation, a nested
    query, WITH, HAVING or DISTINCT (the single-table planner reads the rest)."""
    if not isinstance(tree, exp.Select):
        return False
    return (
        len(list(tree.find_all(exp.Table))) > 1
        or any(tree.args.get(k) for k in ("joins", "with_", "having", "distinct"))
        or any(n is not tree for n in tree.find_all(exp.Select))
        or any(isinstance(n.this, exp.Distinct) for n in tree.find_all(exp.Count))
    )


def _general(tree: exp.Expression, config: Config, params: list[Any] | None) -> PublicQuery:
    if not isinstance(tree, exp.Select):
        raise Refusal(UNSUPPORTED, "a statement over public tables is one SELECT.", hint=GENERAL_HINT)
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    tables: list[exp.Table] = []
    for node in list(tree.walk()):
        if isinstance(node, exp.Parameter):
            node.replace(_param(node, params))
            continue
        if isinstance(node, exp.Placeholder) or not isinstance(node, _ALLOWED):
            what = (
                node.sql_name()
                if isinstance(node, exp.Func) and not isinstance(node, exp.Anonymous)
                else (node.name if isinstance(node, exp.Anonymous) else node.key)
            )
            raise Refusal(
                UNSUPPORTED,
                f"{what.upper()} is not answered in a statement over public tables.",
                hint=GENERAL_HINT,
            )
        if isinstance(node, exp.Var) and not isinstance(node.parent, (exp.Extract, exp.Interval)):
            raise Refusal(UNSUPPORTED, f"{node.name} is not answered over public tables.", hint=GENERAL_HINT)
        if isinstance(node, exp.DataType) and node.this not in _CASTS:
            raise Refusal(
                UNSUPPORTED, f"a cast to {node.sql('postgres')} is not answered here.", hint=GENERAL_HINT
            )
        if isinstance(node, exp.Join) and (node.args.get("method") or node.args.get("using")):
            raise Refusal(
                UNSUPPORTED, "write joins over public tables with ON or in WHERE.", hint=GENERAL_HINT
            )
        if isinstance(node, exp.Table):
            _declared_public(node, config, ctes)
            if node.name not in ctes or node.text("db"):
                tables.append(node)
    schema: dict[str, object] = {
        n: {c: _TYPES[spec.type] for c, spec in t.columns.items()}
        for n, t in config.tables.items()
        if t.public
    }
    try:
        q = qualify(
            tree, schema=schema, dialect="postgres", validate_qualify_columns=True, quote_identifiers=True
        )
        q = annotate_types(q, schema=schema)
    except SqlglotError as e:
        raise Refusal(
            "42703", f"{str(e).splitlines()[0]} (only declared columns of public tables are read).", hint=None
        ) from None
    if not isinstance(q, exp.Select):
        raise Refusal(UNSUPPORTED, "a statement over public tables is one SELECT.", hint=GENERAL_HINT)
    cols = tuple((e.alias_or_name, _out_type(e.type)) for e in q.expressions)
    for t in list(q.find_all(exp.Table)):
        if (
            t.name in config.tables
            and config.tables[t.name].public
            and not (t.name in ctes and not t.text("db"))
        ):
            t.replace(exp.alias_(source_relation(config.source_of(t.name)), t.alias or t.name, table=True))
    first = tables[0].name if tables else next(iter(ctes), "")
    return PublicQuery(first, q, cols)


def _declared_public(t: exp.Table, config: Config, ctes: set[str]) -> None:
    db = t.text("db")
    if not isinstance(t.this, exp.Identifier) or t.args.get("catalog") or db not in ("", "public"):
        raise Refusal("42P01", f"{t.sql('postgres')} is not a declared public table.", hint=GENERAL_HINT)
    if not db and t.name in ctes:
        return
    spec = config.tables.get(t.name)
    if spec is None or not spec.public:
        raise Refusal(
            "42501" if spec is not None else "42P01",
            f"{t.name} is not a public table: a statement that reads public tables only is answered "
            "exactly, one that reads a private table is a DP query.",
            hint=GENERAL_HINT,
        )
    if t.args.get("sample") or t.args.get("pivots") or t.args.get("laterals") or t.args.get("joins"):
        raise Refusal(UNSUPPORTED, f"this form of reading {t.name} is not supported.", hint=GENERAL_HINT)


def _param(node: exp.Parameter, params: list[Any] | None) -> exp.Expression:
    """``$n`` as the literal of its value (text, as the wire gives it; the backend casts an
    untyped literal to the column's type as Postgres does)."""
    n = node.this
    ok = isinstance(n, exp.Literal) and n.is_int and int(n.this) >= 1
    if not ok:
        raise Refusal("42601", f"invalid parameter {node.sql('postgres')}; use $1, $2, …", hint=None)
    i = int(n.this)
    if params is None or i > len(params):
        raise Refusal(
            "08P01",
            f"the statement uses ${i} but only {len(params or [])} parameter(s) were supplied.",
            hint=None,
        )
    v = params[i - 1]
    return exp.Null() if v is None else exp.Literal.string(str(v))


def _out_type(t: exp.DataType | None) -> ColumnType | None:
    if t is None:
        return None
    for types, name in _OUT:
        if t.this in types:
            return name
    if t.this in exp.DataType.NUMERIC_TYPES:
        return "float"
    return None
