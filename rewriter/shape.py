"""Statement-shape rules: one plain SELECT over one declared table.

Each rule takes the parsed statement and raises :class:`Refusal` or returns.
They run before any typing, so later rules may assume a single-table SELECT.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sqlglot import exp

from config import Table

from .args import sql_name, understood
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .errors import UNDEFINED_TABLE, Refusal

_SET_OPS = (exp.Union, exp.Intersect, exp.Except)
_WRITES = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Copy,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.TruncateTable,
    exp.Command,
    exp.Set,
    exp.Transaction,
    exp.Commit,
    exp.Rollback,
    exp.Use,
    exp.Describe,
    exp.Grant,
    exp.Revoke,
)

# Select clauses and the refusal for each; expressions/from_/where/group/order/limit/offset pass.
_CLAUSES = {
    "with_": (DENIED, "CTEs (WITH …) are not allowed; query the declared table directly."),
    "joins": (DENIED, "joins and multiple tables are not allowed; query one declared table."),
    "laterals": (DENIED, "LATERAL is not allowed; query one declared table."),
    "into": (DENIED, "SELECT … INTO is not allowed; dpgate is read-only."),
    "locks": (DENIED, "SELECT … FOR UPDATE/SHARE is not allowed; dpgate is read-only."),
    "distinct": (
        UNSUPPORTED,
        "SELECT DISTINCT is not supported; use GROUP BY on a column with a declared public domain.",
    ),
    "having": (UNSUPPORTED, "HAVING is not available on this table; filter rows with WHERE."),
    "qualify": (DENIED, "QUALIFY and window functions are not allowed."),
    "windows": (DENIED, "window functions are not allowed."),
    "sample": (UNSUPPORTED, "TABLESAMPLE is not supported."),
    "pivots": (DENIED, "PIVOT is not allowed."),
}
VIEW_HINT = (
    "Name the query for this connection: CREATE TEMPORARY VIEW v AS <query>; or run the SELECT "
    "itself, or wrap it as a derived table: SELECT … FROM (<query>) AS q."
)
_PASS = {"expressions", "from_", "where", "group", "order", "limit", "offset"}


def check_statement(expr: exp.Expr) -> exp.Select:
    """Refuse anything but a single SELECT statement."""
    if isinstance(expr, _SET_OPS):
        raise Refusal(DENIED, "UNION/INTERSECT/EXCEPT are not allowed; run one SELECT at a time.")
    if isinstance(expr, (exp.Subquery, exp.Paren)) and isinstance(expr.unnest(), exp.Select):
        return check_statement(expr.unnest())
    if isinstance(expr, exp.Create) and str(expr.args.get("kind") or "").upper() == "VIEW":
        raise Refusal(
            DENIED,
            "CREATE VIEW is not allowed: dpgate keeps no views beyond a connection, and a "
            "statement is charged when it is answered, not when it is named.",
            hint=VIEW_HINT,
        )
    if isinstance(expr, _WRITES) or not isinstance(expr, exp.Select):
        kind = sql_name(expr).upper() if isinstance(expr, exp.Expression) else "statement"
        raise Refusal(
            DENIED, f"{kind} statements are not allowed; dpgate only answers aggregate SELECT queries."
        )
    return expr


def check_clauses(select: exp.Select) -> None:
    """Refuse clauses other than SELECT/FROM/WHERE/GROUP BY/ORDER BY/LIMIT/OFFSET."""
    for key, value in select.args.items():
        if value in (None, [], False) or key in _PASS:
            continue
        state, msg = _CLAUSES.get(
            key, (UNSUPPORTED, f"the {key.rstrip('_').upper()} clause is not supported.")
        )
        raise Refusal(state, msg)


def check_nesting(select: exp.Select, windows: bool = False) -> None:
    """Refuse subqueries, window functions and nested statements anywhere; with ``windows``,
    window functions are left to :mod:`rewriter.postprocess` (computed over released cells).
    ``EXISTS (…)`` and ``x IN (SELECT …)`` in a WHERE are left to the row predicate's rules
    (:mod:`rewriter.semijoin`, which refuses what it does not read)."""
    subqueries = [
        s if isinstance(s, exp.Exists) else s.args.get("query")
        for w in select.find_all(exp.Where)  # the statement's, and each FILTER (WHERE …)
        for s in w.find_all(exp.Exists, exp.In)
    ]
    semi = {id(n) for s in subqueries if isinstance(s, exp.Expression) for n in s.walk()}
    for node in select.walk():
        if node is select or id(node) in semi:
            continue
        if isinstance(node, (exp.Select, exp.Subquery, exp.Exists, exp.Query, exp.DDL, exp.DML)):
            raise Refusal(
                DENIED,
                "subqueries are not allowed (also not in WHERE … IN (SELECT …)); "
                "use a single SELECT over one declared table.",
            )
        if isinstance(node, exp.Window) and not windows:
            raise Refusal(
                UNSUPPORTED,
                "window functions (… OVER …) are not answered in this kind of statement.",
                hint="a window over the released cells of a GROUP BY statement is answered, e.g. "
                "SUM(COUNT(*)) OVER (ORDER BY month).",
            )
        if isinstance(node, exp.Lateral):
            raise Refusal(DENIED, "LATERAL is not allowed.")


class Declared(Protocol):
    """What the table rules read of a Config: the declared tables and their sources."""

    @property
    def tables(self) -> Mapping[str, Table]: ...

    def source_of(self, table: str) -> str: ...


def resolve_table(select: exp.Select, config: Declared) -> tuple[str, set[str]]:
    """The declared table name and the names a column may be qualified with."""
    from_ = select.args.get("from_")
    if from_ is None:
        raise Refusal(DENIED, "SELECT without FROM is not allowed; select aggregates FROM a declared table.")
    table = from_.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        what = "table functions" if isinstance(table, exp.Table) else "this FROM item"
        raise Refusal(DENIED, f"{what} are not allowed in FROM; name one declared table.")
    name = table.name
    schema = table.args.get("db")
    if table.args.get("catalog") is not None or (schema is not None and schema.name != "public"):
        raise Refusal(
            UNDEFINED_TABLE,
            f"table {table.sql('postgres')} is not declared in "
            f"dpgate's config; declared tables: {', '.join(sorted(config.tables))}.",
        )
    if name not in config.tables:
        raise Refusal(
            UNDEFINED_TABLE,
            f"table {name} is not declared in dpgate's config; "
            f"declared tables: {', '.join(sorted(config.tables))}.",
        )
    if table.args.get("sample") is not None:
        raise Refusal(UNSUPPORTED, "TABLESAMPLE is not supported; dpgate answers over the whole table.")
    if table.args.get("joins") or table.args.get("pivots") or table.args.get("laterals"):
        raise Refusal(DENIED, "joins are not allowed; query one declared table.")
    if table.args.get("alias") is not None and table.args["alias"].columns:
        raise Refusal(
            UNSUPPORTED,
            "column aliases on the table (FROM t AS x(a, b)) are not "
            "supported; alias the select items instead.",
        )
    understood(table)  # ONLY, hints, AS OF …: forms dpgate does not interpret
    alias = table.alias
    qualifiers = {alias} if alias else {name}
    return name, qualifiers
