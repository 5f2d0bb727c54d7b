"""Routing from the parse: which path answers a statement, and which declared
table it reads.

The proxy decides a statement's path — a DP release over a declared table, an
INSERT of local reports, EXPLAIN, dpgate's own views, or the emulated catalog —
from the parsed statement only, never from its text: an alias, a string
literal or a comment that names a table is not a reference to it. Every
relation the statement reads (subqueries, CTE bodies and set operations
included) is classified; a statement that reads a declared table together
with the catalog or the views, two declared tables, or a CTE named like a
declared table is refused here, before any path sees it.
SQL only: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.tokenizer_core import Token

from . import joins, lookup, scalar
from .copy import COPY_HINT, CopyOut, copy_statement
from .errors import FEATURE_NOT_SUPPORTED, INSUFFICIENT_PRIVILEGE, SYNTAX_ERROR, Refusal
from .lru import LRU
from .parsing import parse, tokenize
from .planner import Planner, planner_of

Tables = Mapping[str, Any] | Collection[str]  # the declared tables by name (Config.tables), or their names
Names = Collection[str]
Kind = Literal["dp", "insert", "explain", "views", "catalog", "unparsed", "public", "copy"]

CATALOG_SCHEMAS = frozenset({"pg_catalog", "information_schema"})
VIEW_SCHEMA = "dpgate"
_EXPLAIN_OPTIONS = frozenset({"ANALYZE", "VERBOSE"})
_COPY_INNER = frozenset(
    {"dp", "public", "catalog", "views", "unparsed"}
)  # unparsed: the catalog's, or refused


@dataclass(frozen=True)
class Route:
    """The path of one statement. ``table`` is the declared table it reads (or
    writes, for INSERT); ``body`` is the explained statement's text for EXPLAIN
    and ``inner`` its route. ``planner``: for a DP statement, which planner plans it on a
    central table (:func:`rewriter.planner.planner_of`: cells, or MAX/MIN/percentiles) — it
    depends on the statement's shape only, so a route kept by shape keeps it."""

    kind: Kind
    table: str | None = None
    body: str | None = None
    inner: Route | None = None
    catalog: bool = False  # reads catalog relations (pg_catalog, information_schema …)
    error: Refusal | None = None  # for ``unparsed``: the parser's refusal
    copy: CopyOut | None = None  # for ``copy``: the query (``body``) and the output format
    planner: Planner = "central"
    scalars: bool = False  # holds scalar subqueries: released first, then bound (:mod:`rewriter.scalar`)
    lookup: bool = False  # a public table looked up by a release's keys (:mod:`rewriter.lookup`)


def route(sql: str, tables: Tables, catalog_relations: Names = frozenset()) -> Route:
    """The route of ``sql`` given the declared table names ``tables`` and the
    unqualified names the emulated catalog answers (``pg_class`` …)."""
    return parse_route(sql, tables, catalog_relations)[0]


def parse_route(
    sql: str, tables: Tables, catalog_relations: Names = frozenset()
) -> tuple[Route, exp.Expression | None]:
    """:func:`route`, and the parse it was decided from — of the explained statement for
    EXPLAIN, of the query for COPY (None for an unparsed statement) — to be handed to the
    statement's planner, so a statement is parsed once (identifiers normalised for Postgres)."""
    body = explain_body(sql)
    if body is not None:
        inner, tree = parse_route(body, tables, catalog_relations)
        if inner.kind in ("explain", "copy"):
            raise Refusal(
                FEATURE_NOT_SUPPORTED, f"EXPLAIN takes a query, not {inner.kind.upper()}.", hint=None
            )
        return Route("explain", inner.table, body=body, inner=inner), tree
    cp = copy_statement(sql)
    if cp is not None:  # COPY (query) TO STDOUT: the query's route, framed as COPY
        inner, tree = parse_route(cp.query, tables, catalog_relations)
        if inner.kind not in _COPY_INNER:
            raise Refusal(
                FEATURE_NOT_SUPPORTED,
                f"COPY takes a query (SELECT …), not {inner.kind.upper()}.",
                hint=COPY_HINT,
            )
        return Route("copy", inner.table, body=cp.query, inner=inner, copy=cp), tree
    try:
        tree = parse(sql)
    except Refusal as r:
        if r.sqlstate != SYNTAX_ERROR:  # too large: refused before any other look
            raise
        return Route("unparsed", error=r), None
    return classify(tree, tables, catalog_relations), tree


def classify(tree: exp.Expression, tables: Tables, catalog_relations: Names = frozenset()) -> Route:
    """The route of a parsed statement (see :func:`route`)."""
    tree = normalize_identifiers(tree, dialect="postgres")
    public_only = _public_only(tree, tables)  # answered whole and exactly (rewriter.public)
    _refuse_public_rows_chosen_privately(tree, tables)
    if isinstance(tree, exp.Query) and not public_only and scalar.has_scalars(tree):
        with_scalars = _with_scalars(tree, tables, catalog_relations)
        if with_scalars is not None:
            return with_scalars
    if isinstance(tables, Mapping) and not public_only and (found := lookup.split(tree, tables)) is not None:
        released = classify(parse(found.released), tables, catalog_relations)
        return Route("dp", released.table, planner=released.planner, lookup=True)
    declared: set[str] = set()
    views, catalog = set(), False
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    semi = _semijoined(tree)
    looked_into: set[str] = set()  # read only by EXISTS / IN (SELECT …) in a WHERE
    for t in tree.find_all(exp.Table):
        if not isinstance(t.this, exp.Identifier):
            continue  # a table function: the path's rules decide
        name, db = t.name, t.text("db")
        if not db and name in ctes:
            if name in tables:
                raise Refusal(
                    INSUFFICIENT_PRIVILEGE,
                    f"a WITH query may not be named {name}, like a declared table; choose another name.",
                    hint=None,
                )
            continue
        if db == VIEW_SCHEMA:
            views.add(name)
        elif db in CATALOG_SCHEMAS or (not db and name in catalog_relations and name not in tables):
            catalog = True
        elif db in ("", "public") and name in tables:
            (looked_into if id(t) in semi else declared).add(name)
    if (declared or looked_into) and (views or catalog):
        raise Refusal(
            INSUFFICIENT_PRIVILEGE,
            "a statement reads either declared tables or the catalog "
            "and dpgate's views, not both; run them as separate statements.",
            hint=None,
        )
    looked_into -= declared
    public = {n for n in declared if _is_public(tables, n)}
    private = declared - public
    if declared and not private and not isinstance(tree, exp.Insert):  # exact (rewriter.public)
        return Route(
            "public", _base(_joining(tree), public, tables) if len(public) > 1 else next(iter(public))
        )
    if len(declared) > 1 and not _lookup_joins(_joining(tree), len(declared)):
        raise Refusal(
            INSUFFICIENT_PRIVILEGE,
            f"this statement reads {', '.join(sorted(declared))}: a statement "
            "reads one declared table, or a private table with lookup joins (JOIN t ON a.col = t.key).",
            hint=None,
        )
    table = (
        _base(_joining(tree), private, tables) if len(private) > 1 else next(iter(private or declared), None)
    )
    if isinstance(tree, exp.Insert):
        target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        target_name = target.name if isinstance(target, exp.Table) else None
        return Route("insert", target_name if target_name in tables else table)
    if table is not None:
        return Route("dp", table, planner=planner_of(tree))
    if views:
        return Route("views")
    return Route("dp", catalog=catalog)


def _semijoined(tree: exp.Expression) -> set[int]:
    """The ids of the nodes inside ``EXISTS (…)`` and ``x IN (SELECT …)`` subqueries: a
    table read there is a row predicate's (:mod:`rewriter.semijoin`), not a join."""
    subs = [
        s if isinstance(s, exp.Exists) else s.args.get("query") for s in tree.find_all(exp.Exists, exp.In)
    ]
    return {id(n) for s in subs if isinstance(s, exp.Expression) for n in s.walk()}


def _with_scalars(tree: exp.Expression, tables: Tables, catalog_relations: Names) -> Route | None:
    """The route of a statement holding scalar subqueries that read declared tables: each is
    routed as the statement of its own it is released as, and the statement around them with
    a constant in their place (as it is planned once their values are released). None when no
    part reads a declared table (the catalog's or the views' statement: routed as a whole)."""
    outer = tree.copy()
    found = scalar.find(outer)
    if not any(
        t.name in tables and t.text("db") in ("", "public") for n in found for t in n.find_all(exp.Table)
    ):
        return None
    declared = tables if isinstance(tables, Mapping) else None  # with columns: outer columns told apart
    inner = [classify(parse(scalar.statement(outer, n, declared)), tables, catalog_relations) for n in found]
    scalar.bind(outer, found, [exp.Null() for _ in found])
    around = classify(outer, tables, catalog_relations)
    if any(r.kind not in ("dp", "public") or r.catalog for r in (*inner, around)) and any(
        r.table is not None for r in (*inner, around)
    ):
        raise Refusal(
            INSUFFICIENT_PRIVILEGE,
            "a statement reads either declared tables or the catalog "
            "and dpgate's views, not both; run them as separate statements.",
            hint=None,
        )
    table = around.table if around.table is not None else next((r.table for r in inner if r.table), None)
    return Route("dp", table, planner=around.planner, scalars=True)


def _refuse_public_rows_chosen_privately(tree: exp.Expression, tables: Tables) -> None:
    """Refuse a statement that reads public tables only, but for ``EXISTS`` / ``IN (SELECT …)``
    subqueries that read a private one (TPC-H Q20: suppliers chosen by their lineitems)."""
    if isinstance(tree, exp.Insert):
        return
    semi = _semijoined(tree)
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    outside: set[str] = set()
    inside: set[str] = set()
    for t in tree.find_all(exp.Table):
        db = t.text("db")
        if not isinstance(t.this, exp.Identifier) or db not in ("", "public") or t.name not in tables:
            continue
        if not db and t.name in ctes:
            continue
        (inside if id(t) in semi else outside).add(t.name)
    hidden = sorted(n for n in inside - outside if not _is_public(tables, n))
    if outside and hidden and all(_is_public(tables, n) for n in outside):
        raise Refusal(
            INSUFFICIENT_PRIVILEGE,
            f"this statement returns rows of public tables ({', '.join(sorted(outside))}) chosen by "
            f"private data ({', '.join(hidden)} in a subquery): which rows come back would tell "
            "about the people's rows. dpgate answers aggregates of private tables, and public "
            "tables on their own.",
            hint="Ask the aggregate itself (SELECT s_name, SUM(l_quantity) FROM lineitem JOIN supplier … "
            "GROUP BY s_name), or read the public tables without the private subquery.",
        )


def _public_only(tree: exp.Expression, tables: Tables) -> bool:
    """Whether every declared table the statement reads, in any subquery, is public (its WITH
    queries aside): such a statement is one exact read (:mod:`rewriter.public`), its scalar
    subqueries part of it (TPC-H Q2's correlated minimum, Q11's HAVING threshold)."""
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    names = [
        t.name
        for t in tree.find_all(exp.Table)
        if isinstance(t.this, exp.Identifier)
        and t.text("db") in ("", "public")
        and not (not t.text("db") and t.name in ctes)
        and t.name in tables
    ]
    return bool(names) and all(_is_public(tables, n) for n in names)


def _is_public(tables: Tables, name: str) -> bool:
    t = tables.get(name) if isinstance(tables, dict) else None
    return bool(getattr(t, "public", False))


def _joining(tree: exp.Expression) -> exp.Expression:
    """The SELECT whose FROM holds the joins: the statement, or the derived table it reads
    (a per-unit subquery over a join)."""
    if isinstance(tree, exp.Select) and not tree.args.get("joins"):
        inner = next((s for s in tree.find_all(exp.Select) if s.args.get("joins")), None)
        return inner if inner is not None else tree
    return tree


def _lookup_joins(tree: exp.Expression, tables: int) -> bool:
    """``tables`` declared tables read through the joins of one SELECT, at least one join
    per further table, each ON an equality of columns (beside other conditions) or a comma
    join (its equality in WHERE); the joins planner checks the rest."""
    joins = tree.args.get("joins") or [] if isinstance(tree, exp.Select) else []
    ons = [j.args.get("on") for j in joins]
    comma = [
        on is None and not j.side and not j.kind and not j.args.get("using") and not j.args.get("method")
        for j, on in zip(joins, ons)
    ]
    w = tree.args.get("where") if isinstance(tree, exp.Select) else None
    return (
        len(joins) >= tables - 1
        and _equalities(w.this if w is not None else None) >= sum(comma)
        and all(c or _equalities(on) for c, on in zip(comma, ons))
    )


def _equalities(cond: exp.Expression | None) -> int:
    """How many conjuncts of ``cond`` equate two columns."""
    if cond is None:
        return 0
    conj = cond.flatten() if isinstance(cond, exp.And) else [cond]
    return sum(
        1
        for c in conj
        if isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column)
    )


def _base(tree: exp.Expression, private: set[str], tables: Tables) -> str:
    """The base table of a join between private tables: the one the joins planner reads
    from whatever the spelling (:func:`rewriter.joins.base_table`), else the FROM table."""
    if isinstance(tree, exp.Select) and isinstance(tables, dict):
        base = joins.base_table(tree, tables)
        if base is not None and base in private:
            return str(base)
    from_ = tree.args.get("from_") if isinstance(tree, exp.Select) else None
    name = from_.this.name if from_ is not None and isinstance(from_.this, exp.Table) else None
    return name if name is not None and name in private else sorted(private)[0]


def explain_body(sql: str) -> str | None:
    """The statement after ``EXPLAIN [ANALYZE] [VERBOSE]`` (from the tokens), or None
    if ``sql`` is not an EXPLAIN."""
    tokens = tokenize(sql)
    if not tokens or tokens[0].text.upper() != "EXPLAIN":
        return None
    rest = sql[tokens[0].end + 1 :]  # the tokenizer keeps a command's rest as one string
    tokens = tokenize(rest) or []
    i = 0
    while i < len(tokens) and tokens[i].text.upper() in _EXPLAIN_OPTIONS:
        i += 1
    if i < len(tokens) and tokens[i].text == "(":
        raise Refusal(
            FEATURE_NOT_SUPPORTED,
            "EXPLAIN options in parentheses are not supported; write EXPLAIN <query>.",
            hint=None,
        )
    if i >= len(tokens):
        raise Refusal(SYNTAX_ERROR, "syntax error at end of input: EXPLAIN needs a statement.", hint=None)
    return rest[tokens[i].start :].strip()


_CACHED_KINDS = frozenset({"dp", "public"})
MAX_SHAPE_TOKENS = 512
"""Statements with more tokens are routed afresh each time (their key would be large)."""


def shape_key(tokens: list[Token] | None) -> tuple[object, ...] | None:
    """A statement's token sequence with every number token's text left out: two statements
    with the same key parse to trees that differ only in the values of number literals, and
    :func:`classify` reads no literal (only relations, CTE names, the INSERT target and the
    join's shape), so they route alike. None for a statement too long to key."""
    if not tokens or len(tokens) > MAX_SHAPE_TOKENS:
        return None
    return tuple("#" if t.token_type.name == "NUMBER" else (t.token_type.name, t.text) for t in tokens)


class Routes:
    """Routes remembered by :func:`shape_key` (a fresh statement that differs from
    an earlier one only in its numbers — ``age BETWEEN 31 AND 64``, then ``25 AND 70`` —
    skips the parse). The first statement of a key is parsed and classified as by
    :func:`route`; only DP and public-table routes are kept (EXPLAIN keeps its body text,
    INSERTs are long, a route without a table may be the catalog's). Refusals are never
    kept. LRU-bounded; safe across threads."""

    def __init__(self, tables: Tables, catalog_relations: Names = frozenset(), size: int = 4096) -> None:
        self.tables, self.catalog_relations, self.size = tables, catalog_relations, size
        self._map: LRU[tuple[object, ...], Route] = LRU(size)
        self.hits = 0  # routes served by key (for tests)

    def route(self, sql: str) -> Route:
        return self.parse_route(sql)[0]

    def parse_route(self, sql: str) -> tuple[Route, exp.Expression | None]:
        """The route of ``sql``, and its parse when it was parsed here (None: the route was
        kept by shape, or the statement does not parse): :func:`parse_route`."""
        key = shape_key(tokenize(sql))
        if key is not None:
            hit = self._map.get(key)
            if hit is not None:
                self.hits += 1
                return hit, None
        r, tree = parse_route(sql, self.tables, self.catalog_relations)
        if key is not None and r.kind in _CACHED_KINDS and r.table is not None:
            self._map.put(key, r)
        return r, tree
