"""The relation a DP statement reads: one declared table, or a private table with one
LOOKUP join.

A lookup join attaches to each row of the private (base) table at most one row of another
table, found by that table's declared unique ``key``::

    FROM purchases p [LEFT] JOIN stores s ON p.store = s.store_id

so every base row stays one row (its person's contribution is unchanged) and the planner
sees one virtual table: the base table's columns plus the looked-up table's. Allowed:

* the looked-up table is **public** (``public = true``): any base column may hold its key;
* it is **private with the same unit**: joined on the unit (``orders.customer_id =
  customers.customer_id``, customers' key being its unit), or along the reference that
  defines the base table's unit (``privacy_unit = "orders.customer_id"`` with
  ``references.order_id = "orders"``): a person's rows meet only that person's row.

The looked-up side is read as ``SELECT key, MIN(c) AS c, … GROUP BY key`` so that even a
key that is not unique in the data can never duplicate a base row (with a unique key it
is the table itself). A base table whose unit is a column of a referenced table
(``orders.customer_id``) reads that column by a plain join on the key, without that
grouping (a hash aggregate over the whole referenced table, about as costly as the
bounded scan itself on TPC-H): every row the join yields belongs to the unit it reached,
and the contribution bounding runs *after* the join, so each unit's contribution stays
bounded even if a key the owner declared unique were repeated in the data (its rows would
then count once per matching unit — each copy bounded with its own unit — and the exact
answer would differ from the analyst's; with the declared unique key it is the same). A
row-level lookup keeps the grouping: there nothing bounds a duplicated row. Every other join —
RIGHT/FULL/CROSS, USING, non-equality conditions, a private table joined
off its unit — is refused with a hint. SQL only: no I/O.

**Chains of lookups** (``order_items ⋈ orders ⋈ customers``, ``purchases ⋈ stores ⋈
regions``): each further join is one more lookup onto the relation so far
(:func:`_chained`) — a public table by its key from any column, or a private table by its
unit from a column that holds the same person (the unit of the base table or of a private
table already looked up, which the first join checked holds the same people). Each step
attaches at most one row to each row, so the base rows stay one each and the bounding
after the joins sees each person's rows exactly once.

**Order and spelling** do not matter for inner joins (:func:`normalize`): ``orders ⋈
order_items`` spelled from either side, or as a comma join with its equality in WHERE, is
searched for the base table and the lookup order the rules above accept, so every
spelling is the same relation and the same release.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field

from sqlglot import exp

from config.models import Column, Table

from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .errors import Refusal
from .plan import conjuncts, source_relation
from .shape import Declared, resolve_table

UNIT_COLUMN = "__dpgate_unit"
HINT = (
    "Join a private table to a public lookup table on its key (FROM purchases p JOIN stores s ON "
    "p.store = s.store_id), or to a table of the same people on the privacy unit."
)

__all__ = ["Relation", "UNIT_COLUMN", "base_table", "normalize", "resolve"]


@dataclass(frozen=True)
class Relation:
    """What the planner reads: the base table's name, its (virtual) config, the names a
    column may be qualified with (``owners``: column -> qualifiers it may carry), the
    backend relation (None: the base table's ``source``) and the join's canonical text."""

    name: str
    table: Table
    qualifiers: set[str]
    owners: dict[str, set[str]] | None = None
    relation: exp.Expression | None = None
    joins: tuple[tuple[str, str, str, str], ...] = ()  # (table, base column, its key, how)
    renamed: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (alias, column) -> name


Edge = tuple[exp.EQ, str, str]  # a.x = b.y, a, b
Graph = tuple[dict[str, exp.Table], list[Edge], list[exp.Expression]]


def resolve(select: exp.Select, config: Declared) -> Relation:
    """The statement's relation (module docstring); the JOIN clause is consumed. Inner
    joins are first put in an order the lookup rules accept (:func:`normalize`)."""
    if select.args.get("joins"):
        return normalize(select, config)
    return _resolve(select, config)


MAX_ORDERS = 256
"""Join orders tried for one statement (a handful of tables gives a few dozen)."""


def normalize(select: exp.Select, config: Declared) -> Relation:
    """Inner joins are one join whatever their spelling: ``FROM a JOIN b ON …``, ``FROM b
    JOIN a ON …`` and ``FROM a, b WHERE a.k = b.k`` read the same rows (an inner join is
    commutative and associative, and a condition in ON or in WHERE filters the same
    pairs). So the tables and their equalities (each ON, and for comma joins the WHERE
    conjuncts that equate columns of two of the tables) are read as a graph, and the base
    table and the order of lookups are searched for: the spelled order first, then every
    other table as the base, each tree of equalities in spelled order. The first order
    the lookup rules accept (:func:`_resolve`) is the relation — the same plan, so the
    same release, for every spelling; equalities no lookup used stay in WHERE. A LEFT
    join keeps its spelling (its left side is the one whose rows are kept); if no order
    is accepted, the spelled one's refusal is raised. In place: ``select``'s FROM, JOINs
    and WHERE become the accepted order's."""
    spec = _graph(select, config)
    if spec is None:
        return _resolve(select, config)
    tables, edges, rest = spec
    first = None
    tried = 0
    public = {q for q, t in tables.items() if config.tables[t.name].public}
    for base in tables:
        for seq in _trees(base, tables, edges, public):
            tried += 1
            if tried > MAX_ORDERS:
                break
            trial = _ordered(
                select, tables, base, seq, [e for e in edges if e not in {x for x, _ in seq}], rest
            )
            try:
                rel = _resolve(trial, config)
            except Refusal as r:
                first = first or r
                continue
            for key in ("from_", "joins", "where"):
                select.set(key, trial.args.get(key))
            return rel
    raise (
        first
        if first is not None
        else Refusal(
            DENIED,
            "every joined table needs an equality with another "
            "(ON a.col = b.key, or a.col = b.key in WHERE).",
            hint=HINT,
        )
    )


def _graph(select: exp.Select, config: Declared) -> Graph | None:
    """(tables: qualifier -> Table node in spelled order, edges: [(EQ, qa, qb)], the other
    WHERE conjuncts) of a statement whose joins are all inner; None otherwise (a LEFT join,
    a table function, USING …: the spelled order decides, and refuses what it must)."""
    joins = select.args.get("joins") or []
    if any(
        j.side or (j.kind or "").upper() not in ("", "INNER") or j.args.get("using") or j.args.get("method")
        for j in joins
    ):
        return None
    from_ = select.args.get("from_")
    nodes = [from_.this if from_ is not None else None] + [j.this for j in joins]
    tables: dict[str, exp.Table] = {}
    for t in nodes:
        if not (isinstance(t, exp.Table) and isinstance(t.this, exp.Identifier) and t.name in config.tables):
            return None
        q = t.alias or t.name
        if q in tables:
            return None
        tables[q] = t
    comma = any(j.args.get("on") is None for j in joins)
    edges: list[Edge] = []
    rest: list[exp.Expression] = []
    for j in joins:
        if j.args.get("on") is not None:
            conds = list(conjuncts(j.args["on"]))
            if len(conds) != 1 or (e := _edge(conds[0], tables, config)) is None:
                return None
            edges.append(e)
    w = select.args.get("where")
    for c in conjuncts(w.this) if w is not None else ():
        e = _edge(c, tables, config) if comma else None
        if e is not None:
            edges.append(e)
        else:
            rest.append(c)
    return tables, edges, rest


def _edge(cond: exp.Expression, tables: Mapping[str, exp.Table], config: Declared) -> Edge | None:
    """``a.x = b.y`` between two of the joined tables (a column named by one table only may
    be unqualified, as TPC-H writes ``c_custkey = o_custkey``), with both sides qualified."""
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if not isinstance(cond, exp.EQ):
        return None
    sides: list[exp.Column] = []
    for c in (cond.this, cond.expression):
        if not isinstance(c, exp.Column) or c.is_star or c.args.get("db"):
            return None
        q = c.table
        if not q:
            owners = [k for k, t in tables.items() if c.name in config.tables[t.name].columns]
            if len(owners) != 1:
                return None
            q = owners[0]
        if q not in tables:
            return None
        sides.append(exp.column(c.name, q))
    if sides[0].table == sides[1].table:
        return None
    return exp.EQ(this=sides[0], expression=sides[1]), sides[0].table, sides[1].table


def _trees(
    base: str, tables: Mapping[str, exp.Table], edges: list[Edge], public: Collection[str] = ()
) -> Iterator[list[tuple[Edge, str]]]:
    """Each order of attaching the other tables to ``base`` by one equality each: a list
    of (edge, table attached), every edge joining the table to one attached before. Private
    tables are attached before public ones where the equalities allow (a private table is
    looked up along the unit's path, which the lookups of public tables never extend), so
    the orders the lookup rules accept come first among the many a six-table join has."""

    def grow(done: list[str], seq: list[tuple[Edge, str]]) -> Iterator[list[tuple[Edge, str]]]:
        if len(done) == len(tables):
            yield list(seq)
            return
        steps = []
        for e in edges:
            _, a, b = e
            new = b if a in done and b not in done else a if b in done and a not in done else None
            if new is not None:
                steps.append((new in public, e, new))
        for _, e, new in sorted(steps, key=lambda s: s[0]):
            seq.append((e, new))
            yield from grow(done + [new], seq)
            seq.pop()

    yield from grow([base], [])


def _ordered(
    select: exp.Select,
    tables: Mapping[str, exp.Table],
    base: str,
    seq: list[tuple[Edge, str]],
    unused: list[Edge],
    rest: list[exp.Expression],
) -> exp.Select:
    trial = select.copy()
    trial.set("from_", exp.From(this=tables[base].copy()))
    trial.set("joins", [exp.Join(this=tables[q].copy(), on=e[0].copy()) for e, q in seq])
    conds = [e[0].copy() for e in unused] + [c.copy() for c in rest]
    where: exp.Expr | None = None
    for c in conds:
        term = exp.Paren(this=c) if isinstance(c, exp.Or) else c
        where = term if where is None else exp.and_(where, term)
    trial.set("where", exp.Where(this=where) if where is not None else None)
    return trial


def base_table(select: exp.Select, tables: Mapping[str, Table]) -> str | None:
    """The base table :func:`normalize` chooses for ``select`` given the declared tables
    (the router's view of a join); None if no order is accepted."""
    try:
        return normalize(select.copy(), _Declared(tables)).name
    except Refusal:
        return None


class _Declared:
    """The part of a Config the join rules read: the declared tables and their sources."""

    def __init__(self, tables: Mapping[str, Table]) -> None:
        self.tables = tables

    def source_of(self, table: str) -> str:
        return self.tables[table].source or table


def _resolve(select: exp.Select, config: Declared) -> Relation:
    joins = select.args.get("joins") or []
    if not joins:
        name, quals = resolve_table(select, config)
        table = config.tables[name]
        if table.public:
            raise Refusal(
                DENIED,
                f"{name} is a public table: read it directly (SELECT … FROM {name}), or "
                "join it to a private table.",
            )
        return _with_unit_path(Relation(name, table, quals), config)
    join, rest = joins[0], joins[1:]
    select.set("joins", None)
    left_name, left_q = resolve_table(select, config)
    right_name, right_q = _right_table(join, config)
    lcol, rcol = _on(join, left_q, right_q)
    side = (join.side or "").upper()
    kind = (join.kind or "").upper()
    if kind not in ("", "INNER", "OUTER") or side not in ("", "LEFT") or (kind == "OUTER" and side != "LEFT"):
        raise Refusal(
            DENIED, f"{(side + ' ' + kind).strip()} JOIN is not allowed; use JOIN or LEFT JOIN.", hint=HINT
        )
    left, right = config.tables[left_name], config.tables[right_name]
    base, look, bq, lq, bcol, kcol = left_name, right_name, left_q, right_q, lcol, rcol
    if left.public and not right.public and side == "":  # FROM stores JOIN purchases: same join
        base, look, bq, lq, bcol, kcol = right_name, left_name, right_q, left_q, rcol, lcol
    elif left.public:
        raise Refusal(
            DENIED,
            "a public table on the left of a LEFT JOIN would keep rows with no person; "
            "put the private table first.",
            hint=HINT,
        )
    _check_lookup(config, base, look, bcol, kcol)
    rel = _joined(
        config,
        Relation(base, config.tables[base], set(bq), {c: set(bq) for c in config.tables[base].columns}),
        look,
        lq,
        bcol,
        kcol,
        "left" if side else "inner",
    )
    for join in rest:  # a chain of lookups (each from the relation so far)
        rel = _chained(config, rel, join)
    return _with_unit_path(rel, config)


def _chained(config: Declared, rel: Relation, join: exp.Join) -> Relation:
    """One more lookup onto the relation so far: ``… JOIN t ON x.col = t.key`` where ``x.col``
    is any column of the relation (a public ``t``), or a column that holds the person (the
    base table's unit, or the unit of a same-person table looked up before, ``t`` being
    looked up by its unit): ``order_items ⋈ orders ⋈ customers``, ``purchases ⋈ stores ⋈
    regions``. Each step attaches at most one row per row, so the base rows stay one each."""
    right_name, right_q = _right_table(join, config)
    if right_q & rel.qualifiers:
        raise Refusal(
            "42712",
            f"table name {'/'.join(sorted(right_q))} specified more than once; give each "
            "joined table its own alias.",
            hint=HINT,
        )
    lcol, rcol = _on(join, rel.qualifiers, right_q)
    cond = join.args["on"]
    while isinstance(cond, exp.Paren):
        cond = cond.this
    lq = next(c.table for c in (cond.this, cond.expression) if c.table in rel.qualifiers)
    lcol = rel.renamed.get((lq, lcol), lcol)  # a column of a table read a second time
    owners = rel.owners if rel.owners is not None else {c: set(rel.qualifiers) for c in rel.table.columns}
    if lcol not in rel.table.columns or lq not in owners.get(lcol, set()):
        raise Refusal("42703", f"column {lq}.{lcol} does not exist in the joined tables.", hint=None)
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if kind not in ("", "INNER", "OUTER") or side not in ("", "LEFT") or (kind == "OUTER" and side != "LEFT"):
        raise Refusal(
            DENIED, f"{(side + ' ' + kind).strip()} JOIN is not allowed; use JOIN or LEFT JOIN.", hint=HINT
        )
    t = config.tables[right_name]
    if t.key is None or rcol != t.key:
        raise Refusal(
            DENIED,
            f"{right_name} is looked up by its key{' ' + t.key if t.key else ' (none declared)'}, "
            f"not {rcol}: a join on another column could repeat {rel.name}'s rows.",
            hint=HINT,
        )
    if not t.public:
        owner = next(
            (
                n
                for n, _, _, _ in ((rel.name, None, None, None), *rel.joins)
                if config.tables[n].privacy_unit == lcol and lcol in config.tables[n].columns
            ),
            None,
        )
        if not (owner is not None and t.privacy_unit == rcol):  # owner: the base, or a same-person table
            raise Refusal(
                DENIED,
                f"{right_name} is a private table: after the first join it can be looked up only "
                "by its unit, from a column that holds the same person.",
                hint=HINT,
            )
    return _joined(config, rel, right_name, right_q, lcol, rcol, "left" if side else "inner")


def _right_table(join: exp.Join, config: Declared) -> tuple[str, set[str]]:
    if join.args.get("using") or join.args.get("method") or not join.args.get("on"):
        raise Refusal(
            DENIED,
            "a join needs ON a.col = b.key, or for inner comma joins a.col = b.key in WHERE "
            "(not USING, NATURAL, CROSS or POSITIONAL; a comma join beside a LEFT JOIN is not read).",
            hint=HINT,
        )
    t = join.this
    if (
        not isinstance(t, exp.Table)
        or not isinstance(t.this, exp.Identifier)
        or t.args.get("db")
        or t.args.get("catalog")
        or t.args.get("joins")
        or t.args.get("laterals")
    ):
        raise Refusal(
            DENIED, "a join takes one declared table (no subqueries, functions or schemas).", hint=HINT
        )
    if t.name not in config.tables:
        raise Refusal(
            "42P01",
            f"table {t.name} is not declared in dpgate's config; declared tables: "
            f"{', '.join(sorted(config.tables))}.",
        )
    return t.name, {t.alias or t.name}


def _on(join: exp.Join, left_q: set[str], right_q: set[str]) -> tuple[str, str]:
    """(left column, right column) of ``ON l.x = r.y`` (either order), qualified columns only."""
    cond = join.args["on"]
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if not isinstance(cond, exp.EQ) or not all(
        isinstance(c, exp.Column) and c.table for c in (cond.this, cond.expression)
    ):
        raise Refusal(
            DENIED, "a join condition is one equality of qualified columns: ON a.col = b.key.", hint=HINT
        )
    a, b = cond.this, cond.expression
    if a.table in right_q and b.table in left_q:
        a, b = b, a
    if a.table not in left_q or b.table not in right_q:
        raise Refusal(
            "42P01",
            f"the join condition must compare a column of each table "
            f"({'/'.join(sorted(left_q))} and {'/'.join(sorted(right_q))}).",
            hint=HINT,
        )
    return a.name, b.name


def _check_lookup(config: Declared, base: str, look: str, bcol: str, kcol: str) -> None:
    b, t = config.tables[base], config.tables[look]
    if b.public or b.mode != "central" or b.privacy is not None:
        raise Refusal(
            DENIED,
            f"joins read a central table with a lookup table; {base} is "
            f"{'public' if b.public else 'a local or per-record table'}.",
            hint=HINT,
        )
    if bcol not in b.columns:
        raise Refusal("42703", f"column {bcol} is not declared for table {base}.", hint=None)
    if t.key is None or kcol != t.key:
        raise Refusal(
            DENIED,
            f"{look} is looked up by its key{' ' + t.key if t.key else ' (none declared)'}, "
            f"not {kcol}: a join on another column could repeat {base}'s rows.",
            hint=HINT,
        )
    if t.public:
        return
    on_unit = bcol == b.privacy_unit and t.privacy_unit == kcol
    via_ref = (
        b.references.get(bcol) == look and b.privacy_unit is not None and b.privacy_unit.split(".")[0] == look
    )
    if not (on_unit or via_ref):
        raise Refusal(
            DENIED,
            f"{look} is a private table: it can be joined only on the privacy unit of both "
            f"tables, or along the reference that defines {base}'s unit.",
            hint=HINT,
        )


def _joined(
    config: Declared, rel: Relation, look: str, lq: set[str], bcol: str, kcol: str, how: str
) -> Relation:
    """``rel`` with ``look``'s columns attached by ``rel.bcol = look.kcol`` (one row per key)."""
    t = config.tables[look]
    cols = dict(rel.table.columns)
    owners = {c: set(q) for c, q in (rel.owners or {c: set(rel.qualifiers) for c in cols}).items()}
    taken: list[str] = []
    renamed = dict(rel.renamed)
    (alias,) = lq
    for c, spec in t.columns.items():
        if c == kcol and c == bcol:
            owners[c] |= set(lq)  # the join column: equal on both sides (a match)
            continue
        if c in cols and t.public and f"{c}__{alias}" not in cols:  # a public table read again (Q7's n2)
            renamed[alias, c] = f"{c}__{alias}"
            cols[f"{c}__{alias}"] = spec if how == "inner" else spec.model_copy(update={"nullable": True})
            owners[f"{c}__{alias}"] = set(lq)
            taken.append(c)
            continue
        if c in cols:
            raise Refusal(
                UNSUPPORTED,
                f"column {c} is declared in both {look} and another joined table; dpgate "
                "needs distinct names across joined tables.",
                hint="Rename one in the config (a view as its source) or query the tables separately.",
            )
        cols[c] = spec if how == "inner" else spec.model_copy(update={"nullable": True})
        owners[c] = set(lq)
        taken.append(c)
    inner = rel.relation if rel.relation is not None else source_relation(config.source_of(rel.name))
    names = {c: renamed.get((alias, c), c) for c in taken}
    relation = _lookup_sql(config, inner, look, bcol, kcol, taken, how, names)
    table = rel.table.model_copy(update={"columns": cols})
    return Relation(
        rel.name,
        table,
        rel.qualifiers | lq,
        owners,
        relation,
        rel.joins + ((look, bcol, kcol, how),),
        renamed,
    )


def _with_unit_path(rel: Relation, config: Declared) -> Relation:
    """A base table whose unit is a referenced table's column reads it through the lookup."""
    u = rel.table.privacy_unit
    if u is None or "." not in u:
        return rel
    ref, col = u.split(".", 1)
    b = rel.table
    fk = next(c for c, t in b.references.items() if t == ref)
    other = config.tables[ref]
    key = other.key
    if key is None:
        raise Refusal(DENIED, f"{ref} defines {rel.name}'s privacy unit and needs a declared key.", hint=HINT)
    unit_col = Column(type=other.columns[col].type, description=f"privacy unit ({u})")
    cols = {**b.columns, UNIT_COLUMN: unit_col}
    inner = rel.relation if rel.relation is not None else source_relation(config.source_of(rel.name))
    lookup = exp.Subquery(
        this=exp.select(
            exp.column(key, quoted=True),
            exp.alias_(exp.column(col, quoted=True), UNIT_COLUMN, quoted=True),
        ).from_(source_relation(config.source_of(ref))),
        alias=exp.TableAlias(this=exp.to_identifier("__dpgate_u")),
    )
    rel_sql = (
        exp.select(
            exp.Column(this=exp.Star(), table=exp.to_identifier("__dpgate_b")),
            exp.column(UNIT_COLUMN, "__dpgate_u", quoted=True),
        )
        .from_(
            exp.Subquery(this=_as_select(inner), alias=exp.TableAlias(this=exp.to_identifier("__dpgate_b")))
        )
        .join(
            lookup,
            on=exp.EQ(
                this=exp.column(fk, "__dpgate_b", quoted=True),
                expression=exp.column(key, "__dpgate_u", quoted=True),
            ),
            join_type="left",
        )
    )
    table = b.model_copy(update={"columns": cols, "privacy_unit": UNIT_COLUMN})
    owners = None if rel.owners is None else {**rel.owners, UNIT_COLUMN: set(rel.qualifiers)}
    return Relation(
        rel.name,
        table,
        rel.qualifiers,
        owners,
        exp.Subquery(this=rel_sql, alias=exp.TableAlias(this=exp.to_identifier("__dpgate_rel"))),
        rel.joins + ((ref, fk, key, "unit"),),
        rel.renamed,
    )


def _as_select(rel: exp.Expression) -> exp.Select:
    if isinstance(rel, exp.Subquery):
        inner: exp.Select = rel.this
        return inner
    return exp.select(exp.Star()).from_(rel)


def _keyed(config: Declared, name: str, key: str, cols: list[str]) -> exp.Subquery:
    """``(SELECT key, MIN(c) AS c, … FROM source GROUP BY key) AS __dpgate_u``: one row per key."""
    items = [exp.column(key, quoted=True)] + [
        exp.alias_(exp.Min(this=exp.column(c, quoted=True)), c, quoted=True) for c in cols if c != key
    ]
    q = (
        exp.select(*items)
        .from_(source_relation(config.source_of(name)))
        .group_by(exp.column(key, quoted=True))
    )
    return exp.Subquery(this=q, alias=exp.TableAlias(this=exp.to_identifier("__dpgate_u")))


def _lookup_sql(
    config: Declared,
    inner: exp.Expression,
    look: str,
    bcol: str,
    kcol: str,
    cols: list[str],
    how: str,
    names: Mapping[str, str] | None = None,
) -> exp.Subquery:
    """``(SELECT b.*, u.c [AS name], … FROM inner b [LEFT] JOIN (one row per key) u ON b.bcol =
    u.key)``; ``names``: a looked-up column's name in the relation where it differs."""
    lookup = _keyed(config, look, kcol, cols)
    source = (
        exp.Subquery(this=_as_select(inner), alias=exp.TableAlias(this=exp.to_identifier("__dpgate_b")))
        if isinstance(inner, exp.Subquery)
        else exp.alias_(inner, "__dpgate_b", table=True)
    )
    q = (
        exp.select(
            exp.Column(this=exp.Star(), table=exp.to_identifier("__dpgate_b")),
            *[
                exp.alias_(exp.column(c, "__dpgate_u", quoted=True), names[c], quoted=True)
                if names and names.get(c, c) != c
                else exp.column(c, "__dpgate_u", quoted=True)
                for c in cols
            ],
        )
        .from_(source)
        .join(
            lookup,
            on=exp.EQ(
                this=exp.column(bcol, "__dpgate_b", quoted=True),
                expression=exp.column(kcol, "__dpgate_u", quoted=True),
            ),
            join_type="left" if how == "left" else "inner",
        )
    )
    return exp.Subquery(this=q, alias=exp.TableAlias(this=exp.to_identifier("__dpgate_rel")))
