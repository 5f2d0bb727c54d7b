"""Fail closed on the AST: a rule accepts a sqlglot node only if it understands every
argument the node carries.

sqlglot keeps meaning in node arguments — ``NOT LIKE`` is ``Like(negate=True)``,
``IS NOT NULL`` is ``Is(negate=True)``, Postgres's integer division is ``Div(typed=True)``.
A rule that rebuilds a node from the arguments it knows would silently drop the rest
(``NOT LIKE`` answered as ``LIKE``). So every rule calls :func:`understood`
on the node it accepts: an argument set to a truthy value that is not in the node
type's allow-list (:data:`ALLOWED`, or the rule's own ``allow``) is a refusal 0A000
naming the SQL construct, never a dropped meaning — also for arguments a future
sqlglot release adds. Arguments left None/False/empty are fine.

:func:`sql_name` names a node in SQL (``||``, ``SIMILAR TO``, ``NOT LIKE``): refusals
never show sqlglot class names. :func:`type_name` names a cast's target type whatever
sqlglot made of it (a type it does not know, ``regclass`` or a domain, is a bare string).
"""

from __future__ import annotations

from typing import TypeVar

from sqlglot import exp

from .errors import FEATURE_NOT_SUPPORTED, Refusal

E = TypeVar("E", bound=exp.Expr)

_BIN = frozenset({"this", "expression"})
_ONE = frozenset({"this"})

#: The arguments each accepted node type's rule understands.
ALLOWED: dict[type, frozenset[str]] = {
    # predicate.py
    exp.Paren: _ONE,
    exp.Not: _ONE,
    exp.And: _BIN,
    exp.Or: _BIN,
    exp.EQ: _BIN,
    exp.NEQ: _BIN,
    exp.GT: _BIN,
    exp.GTE: _BIN,
    exp.LT: _BIN,
    exp.LTE: _BIN,
    exp.NullSafeEQ: _BIN,
    exp.NullSafeNEQ: _BIN,
    exp.Is: _BIN | {"negate"},
    exp.Like: _BIN | {"negate"},
    exp.ILike: _BIN | {"negate"},
    exp.Escape: _BIN,
    exp.Between: frozenset({"this", "low", "high", "symmetric"}),
    exp.In: frozenset({"this", "expressions"}),
    # values.py / scope.py
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Boolean: _ONE,
    exp.Null: frozenset(),
    exp.Neg: _ONE,
    exp.Parameter: _ONE,
    exp.Column: frozenset({"this", "table", "db", "catalog"}),
    exp.Identifier: frozenset({"this", "quoted"}),
    # arith.py / casts.py
    exp.Add: _BIN,
    exp.Sub: _BIN,
    exp.Mul: _BIN,
    exp.Mod: _BIN,
    exp.Div: _BIN | {"typed"},
    exp.Abs: _ONE,
    exp.Floor: _ONE,
    exp.Ceil: _ONE,
    exp.Round: frozenset({"this", "decimals"}),
    exp.Lower: _ONE,
    exp.Upper: _ONE,
    exp.Length: _ONE,
    exp.Coalesce: frozenset({"this", "expressions"}),
    exp.Least: frozenset({"this", "expressions", "ignore_nulls"}),
    exp.Greatest: frozenset({"this", "expressions", "ignore_nulls"}),
    exp.Cast: frozenset({"this", "to"}),
    exp.TryCast: frozenset({"this", "to", "safe"}),
    exp.DataType: frozenset({"this", "expressions"}),
    # select.py / selection.py / extreme.py / per_record.py / local*.py
    exp.Count: frozenset({"this", "big_int"}),
    exp.Sum: _ONE,
    exp.Avg: _ONE,
    exp.Max: _ONE,
    exp.Min: _ONE,
    exp.Star: frozenset(),
    exp.VariancePop: _ONE,
    exp.Variance: _ONE,
    exp.Stddev: _ONE,
    exp.StddevPop: _ONE,
    exp.StddevSamp: _ONE,
    exp.Alias: frozenset({"this", "alias"}),  # variances: stats.py
    exp.Group: frozenset({"expressions"}),
    exp.Order: frozenset({"expressions"}),
    exp.Ordered: frozenset({"this", "desc", "nulls_first"}),
    exp.Limit: frozenset({"expression"}),
    exp.Offset: frozenset({"expression"}),
    exp.Where: _ONE,
    exp.Having: _ONE,
    exp.From: _ONE,
    exp.Table: frozenset({"this", "alias", "db", "catalog", "only"}),  # ONLY: no inheritance here
    exp.TableAlias: _ONE,
    exp.Case: frozenset({"this", "ifs", "default"}),
    exp.If: frozenset({"this", "true", "false"}),
    exp.WithinGroup: _BIN,
    exp.PercentileDisc: _ONE,
    exp.PercentileCont: _ONE,
    exp.Median: _ONE,  # extreme.py: median(col) = percentile 0.5
}

#: SQL spellings of node types whose generated text is not their class name.
SQL_NAMES: dict[type, str] = {
    exp.DPipe: "||",
    exp.SimilarTo: "SIMILAR TO",
    exp.RegexpLike: "~",
    exp.RegexpILike: "~*",
    exp.Escape: "LIKE … ESCAPE",
    exp.Like: "LIKE",
    exp.ILike: "ILIKE",
    exp.Is: "IS",
    exp.Not: "NOT",
    exp.And: "AND",
    exp.Or: "OR",
    exp.Paren: "( … )",
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.NullSafeEQ: "IS NOT DISTINCT FROM",
    exp.NullSafeNEQ: "IS DISTINCT FROM",
    exp.Between: "BETWEEN",
    exp.In: "IN",
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
    exp.Neg: "unary -",
    exp.IntDiv: "DIV",
    exp.BitwiseAnd: "&",
    exp.BitwiseOr: "|",
    exp.BitwiseXor: "#",
    exp.BitwiseNot: "~",
    exp.BitwiseLeftShift: "<<",
    exp.BitwiseRightShift: ">>",
    exp.Pow: "^",
    exp.Case: "CASE",
    exp.If: "CASE WHEN",
    exp.Cast: "CAST",
    exp.TryCast: "TRY_CAST",
    exp.Column: "column",
    exp.Literal: "literal",
    exp.Parameter: "parameter",
    exp.Boolean: "boolean literal",
    exp.Null: "NULL",
    exp.Star: "*",
    exp.Count: "COUNT",
    exp.Sum: "SUM",
    exp.Avg: "AVG",
    exp.Max: "MAX",
    exp.Min: "MIN",
    exp.Group: "GROUP BY",
    exp.Order: "ORDER BY",
    exp.Ordered: "ORDER BY item",
    exp.Limit: "LIMIT",
    exp.Offset: "OFFSET",
    exp.Where: "WHERE",
    exp.Having: "HAVING",
    exp.From: "FROM",
    exp.Table: "FROM table",
    exp.TableAlias: "table alias",
    exp.Alias: "AS",
    exp.Identifier: "identifier",
    exp.DataType: "type name",
    exp.Collate: "COLLATE",
    exp.Overlaps: "OVERLAPS",
    exp.Any: "ANY",
    exp.All: "ALL",
    exp.ArrayContains: "@>",
    exp.ArrayContainsAll: "@>",
    exp.ArrayContainedBy: "<@",
    exp.JSONExtract: "->",
    exp.JSONExtractScalar: "->>",
    exp.Dot: ".",
    exp.Bracket: "[ … ]",
    exp.Interval: "INTERVAL",
    exp.AtTimeZone: "AT TIME ZONE",
    exp.Tuple: "row constructor",
    exp.Array: "ARRAY",
    exp.Distinct: "DISTINCT",
    exp.Exists: "EXISTS",
    exp.Subquery: "subquery",
    exp.Filter: "FILTER",
    exp.Window: "OVER",
    exp.Anonymous: "function",
    exp.TruncateTable: "TRUNCATE",
    exp.Command: "command",
    exp.Describe: "DESCRIBE",
    exp.Transaction: "BEGIN",
    exp.Commit: "COMMIT",
    exp.Rollback: "ROLLBACK",
    exp.Use: "USE",
    exp.Insert: "INSERT",
    exp.Update: "UPDATE",
    exp.Delete: "DELETE",
    exp.Merge: "MERGE",
    exp.Copy: "COPY",
    exp.Create: "CREATE",
    exp.Drop: "DROP",
    exp.Alter: "ALTER",
    exp.Set: "SET",
    exp.Grant: "GRANT",
    exp.Revoke: "REVOKE",
    exp.Union: "UNION",
    exp.Intersect: "INTERSECT",
    exp.Except: "EXCEPT",
    exp.Select: "SELECT",
}
_NEGATED: dict[type[exp.Expr], str] = {exp.Is: "IS NOT", exp.Like: "NOT LIKE", exp.ILike: "NOT ILIKE"}


def sql_name(node: exp.Expr) -> str:
    """How SQL spells ``node``'s construct: ``||``, ``NOT LIKE``, ``SIMILAR TO``, ``lower()``."""
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    if node.args.get("negate") and type(node) in _NEGATED:
        return _NEGATED[type(node)]
    name = SQL_NAMES.get(type(node))
    if name is not None:
        return name
    if isinstance(node, exp.Anonymous):
        return f"{node.name.lower()}()"
    if isinstance(node, exp.Func):
        return f"{node.sql_name().lower()}()"
    text = node.sql("postgres")  # an operator we do not name: show the SQL itself
    return text if len(text) <= 40 else text[:37] + "…"


def understood(node: E, allow: frozenset[str] | set[str] | None = None) -> E:
    """``node`` if every argument it sets is understood (``allow``, else :data:`ALLOWED`
    for its exact type); otherwise Refusal 0A000 naming the construct and the argument.
    A node type with no allow-list is refused too: a rule only accepts what it knows."""
    known = allow if allow is not None else ALLOWED.get(type(node))
    if known is None:
        raise Refusal(FEATURE_NOT_SUPPORTED, f"{sql_name(node)} is not supported here.")
    extra = sorted(k for k, v in node.args.items() if k not in known and v not in (None, False, [], ""))
    if extra:
        raise Refusal(
            FEATURE_NOT_SUPPORTED,
            f"this form of {sql_name(node)} is not supported; "
            "write it in its plain form (dpgate does not interpret the rest).",
        )
    return node


def func_name(node: exp.Expression) -> str:
    """A function node's SQL name in lower case (``round``, ``coalesce``)."""
    return node.sql_name().lower() if isinstance(node, exp.Func) else sql_name(node)


def type_name(to: exp.Expression) -> str:
    """The upper-case name of a data type: the sqlglot type's (``INT``, ``DATE``), or for a
    type sqlglot does not know (``regclass``, ``oid``) the name as written; a rule compares
    it with the names it accepts, so an unknown type matches none and is refused."""
    t = to.this if isinstance(to, exp.DataType) else None
    if isinstance(t, exp.DataType.Type):
        return t.name
    return str(t).upper() if t is not None else ""
