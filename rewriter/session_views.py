"""Temporary views: ``CREATE TEMPORARY VIEW v AS <query>`` names a statement for one
connection, and a statement that reads ``v`` is the statement with ``v`` replaced by its
definition as a derived table (``FROM (<query>) AS v``), exactly as if the user had
written it so; it is planned, charged and released as that statement (a repeat is free).
Nothing is read or charged when a view is created or dropped.

Read from the parse: :func:`view_statement` recognises the two statements, :func:`inline`
replaces the references. SQL only: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from .errors import FEATURE_NOT_SUPPORTED, Refusal
from .parsing import parse, tokenize
from .route import explain_body

TEMP_SCHEMA = "pg_temp"  # pg_temp.v: the session's own schema, whatever its number
MAX_VIEWS = 64
"""Temporary views one connection may hold at a time."""


@dataclass(frozen=True)
class ViewStatement:
    """``CREATE [OR REPLACE] TEMP[ORARY] VIEW name AS query`` (``query``: its text) or
    ``DROP VIEW [IF EXISTS] name, …``."""

    action: Literal["create", "drop"]
    names: tuple[str, ...]
    query: exp.Query | None = None
    replace: bool = False
    if_exists: bool = False


def _name(t: exp.Expression) -> str | None:
    """A view's name as Postgres resolves it (unquoted: lower case), if it may be a
    temporary view's: unqualified or in ``pg_temp``."""
    if not isinstance(t, exp.Table) or not isinstance(t.this, exp.Identifier) or t.args.get("catalog"):
        return None
    db = t.text("db")
    if db and db != TEMP_SCHEMA:
        return None
    return t.name


def view_statement(sql: str) -> ViewStatement | None:
    """The temporary-view statement ``sql`` is, or None. A CREATE VIEW that is not
    temporary is None (refused where other statements are); a temporary one with options
    this reading does not know is refused (0A000). Only a statement whose text begins with
    CREATE or DROP is read further (the statement splitter has replaced comments by blanks): the
    others, nearly every statement, cost no tokenizing here."""
    if not sql.lstrip()[:6].upper().startswith(("CREATE", "DROP")):
        return None
    tokens = tokenize(sql)
    if not tokens or tokens[0].text.upper() not in ("CREATE", "DROP"):
        return None
    try:
        tree = normalize_identifiers(parse(sql), dialect="postgres")
    except Refusal:
        return None  # not parsed: the statement's own path says why
    if isinstance(tree, exp.Drop) and str(tree.args.get("kind") or "").upper() == "VIEW":
        names = [_name(t) for t in tree.args.get("tables") or []]
        if not names or None in names or tree.args.get("materialized"):
            return None
        return ViewStatement("drop", tuple(n for n in names if n), if_exists=bool(tree.args.get("exists")))
    if not (isinstance(tree, exp.Create) and str(tree.args.get("kind") or "").upper() == "VIEW"):
        return None
    props = tree.args.get("properties")
    props = props.expressions if props is not None else []
    if not any(isinstance(p, exp.TemporaryProperty) for p in props):
        return None
    target, query = tree.this, tree.expression
    name = _name(target)
    if (
        len(props) != 1
        or isinstance(target, exp.Schema)  # a column list: CREATE TEMP VIEW v (a, b)
        or not isinstance(query, exp.Query)
        or name is None
        or any(tree.args.get(k) for k in ("exists", "unique", "refresh", "concurrently"))
    ):
        raise Refusal(
            FEATURE_NOT_SUPPORTED,
            "CREATE TEMPORARY VIEW takes a name and a query: CREATE [OR REPLACE] TEMPORARY VIEW v AS "
            "SELECT …; name the columns in the SELECT (… AS n) rather than after the view's name.",
            hint=None,
        )
    return ViewStatement("create", (name,), query=query, replace=bool(tree.args.get("replace")))


def inline(sql: str, views: dict[str, exp.Query]) -> str | None:
    """``sql`` with each reference to a view of ``views`` (name -> definition) replaced by its
    definition as a derived table under the reference's alias (or the view's name); None when
    ``sql`` reads none of them. A WITH query of the same name hides the view, as in Postgres;
    EXPLAIN's statement is inlined the same way."""
    body = explain_body(sql)
    if body is not None:
        inner = inline(body, views)
        return None if inner is None else f"EXPLAIN {inner}"
    try:
        tree = normalize_identifiers(parse(sql), dialect="postgres")
    except Refusal:
        return None
    if not isinstance(tree, exp.Query):
        return None
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    hit = False
    for t in list(tree.find_all(exp.Table)):
        name = _name(t)
        if name is None or name not in views or (name in ctes and not t.text("db")):
            continue
        alias = t.args.get("alias") or exp.TableAlias(this=exp.to_identifier(name, quoted=True))
        t.replace(exp.Subquery(this=views[name].copy(), alias=alias.copy()))
        hit = True
    return tree.sql("postgres") if hit else None
