"""A group key read from public lookup tables takes only the values those tables can give
it under the statement's WHERE.

TPC-H's Q5 groups by ``n_name`` with ``s_nationkey = n_nationkey AND n_regionkey =
r_regionkey AND r_name = 'ASIA'`` (supplier, nation and region public): Postgres returns
ASIA's five nations, never the other twenty. Every row of the statement's relation carries,
for each public table it looks up, one row of that table found by its key (the lookup
reads ``SELECT key, MIN(c) AS c … GROUP BY key``, :mod:`rewriter.joins`), and those rows
satisfy every equality between the public tables and every WHERE conjunct that reads only
their columns. So the key values a row that passes the WHERE can have are among

    SELECT DISTINCT <keys> FROM <each public table, read as the lookup reads it>
    WHERE <the equalities between them> AND <the conjuncts over their columns only>

a query over public data only: exact, free, and independent of the private rows. The
proxy runs it (:mod:`proxy.pipeline.lookup_domains`) and :func:`apply` keeps of each key's
declared domain the values it returns; keys it returns together (``n1.n_name``,
``n2.n_name`` under an OR over both: Q7) keep the value tuples it returns
(:attr:`Plan.key_tuples`), so the cells are no longer the whole product.

Tables are joined by their equalities into components; each component that holds a key
is one query (components share nothing, so the cells are the product of their answers).
A component without a key only filters (its rows exist or not) and is left out: the
domain is then larger, never smaller. The conjuncts are the checked WHERE's
(:mod:`rewriter.predicate`), spelled for the backend by the scan's own rules, so the
query computes each conjunct as the scan does. Left out — the domain stays as declared
or as the other rules cut it — whenever the statement has a LEFT join, a conjunct reads
a private column, a subquery, or a function whose value is not fixed by its arguments;
and when the backend cannot answer the query. SQL only: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from . import dialects
from .cells import sql_key
from .emit import group_key_sql
from .plan import GroupKey, LookupDomain, Plan, conjuncts, source_relation
from .shape import Declared

__all__ = ["MAX_ROWS", "Spelled", "apply", "capture", "queries", "to_sql"]

MAX_ROWS = 100_000
"""A query returning more rows than this restricts nothing (the cells are capped below it)."""

_VOLATILE = (exp.Rand, exp.Subquery, exp.Select, exp.Exists, exp.Placeholder, exp.Parameter)
_VOLATILE_NAMES = frozenset({"random", "setseed", "gen_random_uuid", "uuid", "nextval", "now"})


@dataclass(frozen=True)
class Spelled:
    """The statement's tables as written: ``aliases`` (qualifier -> public table) and the
    equalities between columns of two public tables (``(qa, ca, qb, cb)``), in ON or WHERE."""

    aliases: dict[str, str]
    equalities: tuple[tuple[str, str, str, str], ...]


def capture(select: exp.Select, config: Declared) -> Spelled | None:
    """The public tables and their equalities of ``select`` before its joins are resolved;
    None when nothing is looked up from public tables (or a LEFT join: its rows need not
    carry a public row)."""
    joins = select.args.get("joins") or []
    from_ = select.args.get("from_")
    if not joins or from_ is None:
        return None
    if any(j.side or (j.kind or "").upper() not in ("", "INNER") for j in joins):
        return None
    tables: dict[str, str] = {}
    for node in [from_.this, *(j.this for j in joins)]:
        if not isinstance(node, exp.Table) or node.name not in config.tables:
            return None
        tables[node.alias_or_name] = node.name
    public = {q: t for q, t in tables.items() if config.tables[t].public}
    if not public:
        return None
    terms = [c for j in joins if j.args.get("on") is not None for c in conjuncts(j.args["on"])]
    w = select.args.get("where")
    terms += list(conjuncts(w.this)) if w is not None else []
    eqs: list[tuple[str, str, str, str]] = []
    for term in terms:
        if not isinstance(term, exp.EQ):
            continue
        sides = [_qualified(c, tables, config) for c in (term.this, term.expression)]
        a, b = sides
        if a is not None and b is not None and a[0] != b[0] and a[0] in public and b[0] in public:
            eqs.append((a[0], a[1], b[0], b[1]))
    return Spelled(public, tuple(eqs))


def _qualified(node: exp.Expression, tables: dict[str, str], config: Declared) -> tuple[str, str] | None:
    """(qualifier, column) of a column of one of ``tables`` (unqualified: its one owner)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Column) or node.args.get("db"):
        return None
    if node.table:
        return (node.table, node.name) if node.table in tables else None
    owners = [q for q, t in tables.items() if node.name in config.tables[t].columns]
    return (owners[0], node.name) if len(owners) == 1 else None


def queries(
    groups: Sequence[GroupKey],
    where: exp.Expression | None,
    spelled: Spelled | None,
    renamed: Sequence[tuple[str, str, str]] | Mapping[tuple[str, str], str],
    owners: dict[str, set[str]] | None,
    config: Declared,
) -> tuple[LookupDomain, ...]:
    """The public queries of the keys of ``groups`` read from public tables (module doc).
    ``renamed`` and ``owners`` are the relation's (:class:`rewriter.joins.Relation`): the
    name each public table's column has in the relation, and who may carry it."""
    if spelled is None or owners is None:
        return ()
    names = (  # (alias, column) -> its name in the relation
        dict(renamed) if isinstance(renamed, Mapping) else {(q, c): new for q, c, new in renamed}
    )
    columns: dict[str, dict[str, str]] = {}  # alias -> {its table's column: its name in the relation}
    where_is: dict[str, str] = {}  # a name in the relation -> the public alias that gives it
    for q, t in spelled.aliases.items():
        cols = {c: names.get((q, c), c) for c in config.tables[t].columns}
        if any(q not in owners.get(r, set()) for r in cols.values()):
            continue  # not read as this module reads it: leave the alias out
        columns[q] = cols
        for r in cols.values():
            where_is.setdefault(r, q)
    parent = {q: q for q in columns}

    def find(q: str) -> str:
        while parent[q] != q:
            q = parent[q]
        return q

    def union(qs: set[str]) -> None:
        roots = sorted({find(q) for q in qs})
        for r in roots[1:]:
            parent[r] = roots[0]

    edges = [
        (exp.column(columns[a][x], a, quoted=True), exp.column(columns[b][y], b, quoted=True), {a, b})
        for a, x, b, y in spelled.equalities
        if a in columns and b in columns and x in columns[a] and y in columns[b]
    ]
    for _, _, qs in edges:
        union(qs)
    conds: list[tuple[exp.Expr, set[str]]] = []
    for c in conjuncts(where) if where is not None else ():
        read = {n.name for n in c.find_all(exp.Column)}
        if read and read <= where_is.keys() and _fixed(c):
            qs = {where_is[r] for r in read}
            conds.append((_qualify(c, where_is), qs))
            union(qs)
    keys: list[tuple[int, exp.Expr, str]] = []
    for i, g in enumerate(groups):
        if g.domain is None:
            continue
        expr = group_key_sql(g)
        read = {n.name for n in expr.find_all(exp.Column)}
        if read and read <= where_is.keys() and _fixed(expr):
            qs = {where_is[r] for r in read}
            union(qs)
            keys.append((i, _qualify(expr, where_is), find(next(iter(qs)))))
    out = []
    for root in dict.fromkeys(find(q) for _, _, q in keys):
        mine = [(i, e) for i, e, r in keys if find(r) == root]
        terms: list[exp.Expr] = [
            exp.EQ(this=a, expression=b) for a, b, qs in edges if find(next(iter(qs))) == root
        ]
        terms += [c for c, qs in conds if find(next(iter(qs))) == root]
        used = {(n.table, n.name) for t in [*terms, *(e for _, e in mine)] for n in t.find_all(exp.Column)}
        query = exp.select(*[e for _, e in mine]).distinct()
        for n, q in enumerate(q for q in columns if find(q) == root):
            sub = _read(
                config, spelled.aliases[q], {c: r for c, r in columns[q].items() if (q, r) in used}, q
            )
            query = query.from_(sub, copy=False) if n == 0 else query.join(sub, join_type="cross", copy=False)
        if terms:
            query = query.where(*terms, copy=False)
        out.append(LookupDomain(tuple(i for i, _ in mine), query.limit(MAX_ROWS + 1, copy=False)))
    return tuple(out)


def _fixed(node: exp.Expression) -> bool:
    """A value fixed by the row (no subquery, parameter or volatile function)."""
    for n in node.walk():
        if isinstance(n, _VOLATILE):
            return False
        if (
            isinstance(n, exp.Func)
            and (n.name if isinstance(n, exp.Anonymous) else n.sql_name()).lower() in _VOLATILE_NAMES
        ):
            return False
    return True


def _qualify(node: exp.Expression, where_is: dict[str, str]) -> exp.Expr:
    def q(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column):
            return exp.column(n.name, where_is[n.name], quoted=True)
        return n

    return node.copy().transform(q)


def _read(config: Declared, table: str, cols: dict[str, str], alias: str) -> exp.Subquery:
    """``(SELECT key AS k, MIN(c) AS c, … FROM source GROUP BY key) AS alias``: the public
    table as a lookup reads it (one row per key), its columns named as in the relation."""
    keys = config.tables[table].key_columns
    items = [
        exp.alias_(
            exp.column(c, quoted=True) if c in keys else exp.Min(this=exp.column(c, quoted=True)),
            r,
            quoted=True,
        )
        for c, r in cols.items()
    ]
    if not items:  # read for its rows only (a join that no key or conjunct reads a column of)
        items = [exp.alias_(exp.Literal.number(1), "__dpgate_row", quoted=True)]
    q = exp.select(*items).from_(source_relation(config.source_of(table)))
    if keys:
        q = q.group_by(*[exp.column(k, quoted=True) for k in keys])
    return exp.Subquery(this=q, alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))


def to_sql(lookup: LookupDomain, dialect: str) -> str:
    """The query as the backend reads it (the scan's spelling rules)."""
    return dialects.get(dialect).sql(lookup.query.copy())


def apply(plan: Plan, answers: Sequence[Sequence[Sequence[Any]] | None]) -> Plan:
    """``plan`` with each lookup's keys restricted to the rows of its query (``answers``,
    one per :attr:`Plan.lookups`; None: not answered — the domain stays). A value outside
    the key's domain has no cell; several keys keep the tuples returned together."""
    groups = list(plan.group_by)
    tuples = list(plan.key_tuples)
    for look, rows in zip(plan.lookups, answers):
        if rows is None or len(rows) > MAX_ROWS:
            continue
        keys = [groups[i] for i in look.keys]
        index = [{sql_key(v, g.type): v for v in g.domain or ()} for g in keys]
        kept: set[tuple[Any, ...]] = set()
        for row in rows:
            cell = tuple(ix.get(sql_key(v, g.type), _MISSING) for ix, g, v in zip(index, keys, row))
            if _MISSING not in cell:
                kept.add(cell)
        for j, i in enumerate(look.keys):
            seen = {c[j] for c in kept}
            g = groups[i]
            groups[i] = dataclasses.replace(g, domain=tuple(v for v in g.domain or () if v in seen))
        if len(look.keys) > 1:
            tuples.append((look.keys, frozenset(kept)))
    return dataclasses.replace(
        plan,
        group_by=tuple(groups),
        key_tuples=tuple(tuples),
        lookups_done=True,
    )


_MISSING = object()
