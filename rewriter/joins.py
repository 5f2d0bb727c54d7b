"""The relation a DP statement reads: one declared table, or a private table with one
LOOKUP join.

A lookup join attaches to each row of the private (base) table at most one row of another
table, found by that table's declared unique ``key``::

    FROM purchases p [LEFT] JOIN stores s ON p.store = s.store_id

so every base row stays one row (its person's contribution is unchanged) and the planner
sees one virtual table: the base table's columns plus the looked-up table's. Allowed:

* the looked-up table is **public** (``public = true``): any base columns may hold its key,
  one equality per column of a composite key (``ps_partkey = l_partkey AND ps_suppkey =
  l_suppkey``);
* it is **private with the same unit**: two tables hold the same people when they reach
  the same unit entity (:attr:`config.models.Table.unit`, derived by the config from
  ``[units.X]`` and the tables' ``references``), never because two columns share a name.
  The join runs along the path to the unit: on the unit (``orders.o_custkey =
  customer.c_custkey``, the looked-up table keyed by its unit), or by a reference on the
  path (``lineitem.l_orderkey = orders.o_orderkey``, ``lineitem`` reaching the customer
  through ``orders``): a person's rows meet only that person's row. Anything else is
  refused naming the equalities the path needs.

The looked-up side is read as ``SELECT key, MIN(c) AS c, … GROUP BY key`` so that even a
key that is not unique in the data can never duplicate a base row (with a unique key it
is the table itself). A base table whose unit is reached through references
(``orders.o_custkey``, or ``lineitem.orders.o_custkey`` along two) reads it by plain joins on the keys, without that
grouping (a hash aggregate over the whole referenced table, about as costly as the
bounded scan itself on TPC-H): every row the join yields belongs to the unit it reached,
and the contribution bounding runs *after* the join, so each unit's contribution stays
bounded even if a key the owner declared unique were repeated in the data (its rows would
then count once per matching unit — each copy bounded with its own unit — and the exact
answer would differ from the analyst's; with the declared unique key it is the same). When
the statement itself joins the table that holds the unit along that reference (``lineitem ⋈
orders ON l_orderkey = o_orderkey`` for ``privacy_unit = "orders.o_custkey"``), its join is
that plain join and each joined row carries its unit (``o_custkey`` of the very row it met):
the scan reads the table once, with no grouping and no second lookup. A
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

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from sqlglot import exp

from config.models import Column, Table, unit_chain

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
    renamed: tuple[tuple[str, str, str], ...] = ()  # (qualifier, column, its name in the relation)


Edge = tuple[tuple[exp.EQ, ...], str, str]  # a.x = b.y [AND a.z = b.w], a, b
Pair = tuple[str, str]  # (column of the relation so far, key column of the looked-up table)
Graph = tuple[dict[str, exp.Table], list[Edge], list[exp.Expression]]


def resolve(select: exp.Select, config: Declared) -> Relation:
    """The statement's relation (module docstring); the JOIN clause is consumed. Inner
    joins are first put in an order the lookup rules accept (:func:`normalize`)."""
    if select.args.get("joins"):
        rel = normalize(select, config)
        _rename(select, rel)
        return rel
    return _resolve(select, config)


def _rename(select: exp.Select, rel: Relation) -> None:
    """Columns the relation reads under another name (:func:`_joined`): a public table read
    twice under two aliases (``nation n1, nation n2``: the second copy's columns have their
    own names), and a same-unit table's unit column in an inner join (``c.c_custkey`` is
    ``o.o_custkey``, or the unit ``__dpgate_unit`` read through the reference, on every row:
    so ``COUNT(DISTINCT c_custkey)`` counts people and ``GROUP BY c_custkey`` is the unit).
    The statement's columns are read as those (in this SELECT, not in nested ones); an
    unaliased output keeps its name (``n_name``), as Postgres names it."""
    names = {(q, c): new for q, c, new in rel.renamed}
    if not names:
        return
    for (q, c), new in list(names.items()):  # c_custkey → o_custkey → the unit: the last name
        seen = {c}
        while (q, new) in names and new not in seen:
            seen.add(new)
            new = names[(q, new)]
        names[(q, c)] = new
    ambiguous = set()
    for c in {c for _, c, _ in rel.renamed}:  # unqualified: when every reading is renamed alike
        readings = {q for q, x in names if x == c}
        targets = {names[(q, c)] for q in readings}
        if len(targets) == 1 and (rel.owners or {}).get(c, set()) <= readings:
            names[("", c)] = targets.pop()
        else:  # n_name with nation n1 and nation n2: two columns, as Postgres says
            ambiguous.add(c)
    for node in list(
        select.walk(prune=lambda n: n is not select and isinstance(n, (exp.Select, exp.Subquery)))
    ):
        if isinstance(node, exp.Column) and not node.table and node.name in ambiguous:
            raise Refusal(
                "42702",
                f"column reference {node.name} is ambiguous (it is a column of several joined tables); "
                "qualify it with the table's alias.",
                hint=None,
            )
        if isinstance(node, exp.Column) and (node.table, node.name) in names:
            col: exp.Expr = exp.column(names[(node.table, node.name)], node.table or None, quoted=True)
            if node.parent is select and node.arg_key == "expressions":
                col = exp.alias_(col, node.name)
            node.replace(col)


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
    for base in tables:
        for seq in _trees(base, tables, edges, config):
            tried += 1
            if tried > MAX_ORDERS:
                break
            used = [x for step, _ in seq for x in step]
            trial = _ordered(
                select, tables, base, seq, [e for e in edges if all(e is not x for x in used)], rest
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
        if j.args.get("on") is not None:  # one equality, or several between the same two tables
            found = [_edge(c, tables, config) for c in conjuncts(j.args["on"])]
            on = [e for e in found if e is not None]
            if not on or len(on) != len(found) or len({frozenset(e[1:]) for e in on}) != 1:
                return None
            a, b = on[0][1], on[0][2]
            edges.append((tuple(q for e in on for q in _flip(e, a)), a, b))
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
    return (exp.EQ(this=sides[0], expression=sides[1]),), sides[0].table, sides[1].table


def _flip(e: Edge, a: str) -> tuple[exp.EQ, ...]:
    """``e``'s equalities with ``a``'s column on the left."""
    return tuple(q if q.this.table == a else exp.EQ(this=q.expression, expression=q.this) for q in e[0])


Step = tuple[list[Edge], str]  # the equalities that attach a table, and the table


def _trees(
    base: str, tables: Mapping[str, exp.Table], edges: list[Edge], config: Declared
) -> Iterator[list[Step]]:
    """Each order of attaching the other tables to ``base`` by one equality each (a table
    with a composite key: one per key column, from tables attached before): a list of
    (edges, table attached), every edge joining the table to one attached before. Private
    tables are attached before public ones where the equalities allow (a private table is
    looked up along the unit's path, which lookups of public tables never extend), so the
    orders the lookup rules accept come first among the many a six-table join has."""

    def key_edges(e: Edge, new: str, done: list[str]) -> list[Edge]:
        keys = config.tables[tables[new].name].key_columns
        if len(keys) < 2:
            return [e]
        step, covered = [e], {_side(e, new)}
        for x in edges:
            col = _side(x, new) if new in (x[1], x[2]) and ({x[1], x[2]} - {new}) <= set(done) else None
            if x is not e and len(x[0]) == 1 and col in keys and col not in covered:
                step.append(x)
                covered.add(col)
        return step

    def grow(done: list[str], seq: list[Step]) -> Iterator[list[Step]]:
        if len(done) == len(tables):
            yield list(seq)
            return
        steps = []
        for e in edges:
            _, a, b = e
            new = b if a in done and b not in done else a if b in done and a not in done else None
            if new is not None:
                steps.append((config.tables[tables[new].name].public, e, new))
        for _, e, new in sorted(steps, key=lambda s: s[0]):  # private tables first: see above
            seq.append((key_edges(e, new, done), new))
            yield from grow(done + [new], seq)
            seq.pop()

    yield from grow([base], [])


def _side(e: Edge, q: str) -> str | None:
    """The column of table ``q`` in a one-equality edge (None for several)."""
    if len(e[0]) != 1:
        return None
    eq = e[0][0]
    return next((c.name for c in (eq.this, eq.expression) if c.table == q), None)


def _ordered(
    select: exp.Select,
    tables: Mapping[str, exp.Table],
    base: str,
    seq: list[Step],
    unused: list[Edge],
    rest: list[exp.Expression],
) -> exp.Select:
    trial = select.copy()
    trial.set("from_", exp.From(this=tables[base].copy()))
    trial.set(
        "joins", [exp.Join(this=tables[q].copy(), on=_and([c for e in es for c in e[0]])) for es, q in seq]
    )
    conds = [c.copy() for e in unused for c in e[0]] + [c.copy() for c in rest]
    where: exp.Expr | None = None
    for c in conds:
        term = exp.Paren(this=c) if isinstance(c, exp.Or) else c
        where = term if where is None else exp.and_(where, term)
    trial.set("where", exp.Where(this=where) if where is not None else None)
    return trial


def _and(conds: list[exp.EQ]) -> exp.Expr:
    out: exp.Expr = conds[0].copy()
    for c in conds[1:]:
        out = exp.and_(out, c.copy())
    return out


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
    pairs = _on(join, left_q, right_q)
    side = (join.side or "").upper()
    kind = (join.kind or "").upper()
    if kind not in ("", "INNER", "OUTER") or side not in ("", "LEFT") or (kind == "OUTER" and side != "LEFT"):
        raise Refusal(
            DENIED, f"{(side + ' ' + kind).strip()} JOIN is not allowed; use JOIN or LEFT JOIN.", hint=HINT
        )
    left, right = config.tables[left_name], config.tables[right_name]
    base, look, bq, lq = left_name, right_name, left_q, right_q
    if left.public and not right.public and side == "":  # FROM stores JOIN purchases: same join
        base, look, bq, lq = right_name, left_name, right_q, left_q
        pairs = [(r, c) for c, r in pairs]
    elif left.public:
        raise Refusal(
            DENIED,
            "a public table on the left of a LEFT JOIN would keep rows with no person; "
            "put the private table first.",
            hint=HINT,
        )
    _check_lookup(config, base, look, pairs)
    rel = _joined(
        config,
        Relation(base, config.tables[base], set(bq), {c: set(bq) for c in config.tables[base].columns}),
        look,
        lq,
        pairs,
        "left" if side else "inner",
    )
    for join in rest:  # a chain of lookups (each from the relation so far)
        rel = _chained(config, rel, join)
    return _with_unit_path(rel, config)


def _chained(config: Declared, rel: Relation, join: exp.Join) -> Relation:
    """One more lookup onto the relation so far: ``… JOIN t ON x.col = t.key`` where ``x.col``
    is any column of the relation (a public ``t``, by all of its key's columns), or, for a
    private ``t`` of the same unit, a column that holds the person looked up by ``t``'s
    unit (``orders.o_custkey = customer.c_custkey``), or a joined table's reference on its
    path to the unit (``lineitem.l_orderkey = orders.o_orderkey``): ``lineitem ⋈ orders ⋈
    customer``, ``purchases ⋈ stores ⋈ regions``. Each step attaches at most one row per
    row, so the base rows stay one each."""
    right_name, right_q = _right_table(join, config)
    if right_q & rel.qualifiers:
        raise Refusal(
            "42712",
            f"table name {'/'.join(sorted(right_q))} specified more than once; give each "
            "joined table its own alias.",
            hint=HINT,
        )
    names = {(q, c): new for q, c, new in rel.renamed}
    pairs = [
        (names.get((lq, lcol), lcol), rcol)
        for (lcol, rcol), lq in zip(
            _on(join, rel.qualifiers, right_q), _left_qualifiers(join, rel.qualifiers)
        )
    ]
    owners = rel.owners if rel.owners is not None else {c: set(rel.qualifiers) for c in rel.table.columns}
    for (lcol, _), lq in zip(pairs, _left_qualifiers(join, rel.qualifiers)):
        if lcol not in rel.table.columns or lq not in owners.get(lcol, set()):
            raise Refusal("42703", f"column {lq}.{lcol} does not exist in the joined tables.", hint=None)
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if kind not in ("", "INNER", "OUTER") or side not in ("", "LEFT") or (kind == "OUTER" and side != "LEFT"):
        raise Refusal(
            DENIED, f"{(side + ' ' + kind).strip()} JOIN is not allowed; use JOIN or LEFT JOIN.", hint=HINT
        )
    t = config.tables[right_name]
    if not t.public:
        (lcol, kcol), unit = pairs[0], rel.table.unit
        read = [rel.name, *(j[0] for j in rel.joins)]
        owner = next((n for n in read if lcol in config.tables[n].columns), None)
        o = config.tables[owner] if owner is not None else None
        on_unit = o is not None and o.privacy_unit == lcol and _keyed_by_unit(t)
        via_ref = o is not None and _on_path(o, lcol, right_name)
        same = t.unit is not None and t.unit == unit and o is not None and o.unit == unit
        if len(pairs) != 1 or kcol != t.key or not (same and (on_unit or via_ref)):
            raise Refusal(DENIED, _private_refusal(config, owner or rel.name, right_name, unit), hint=HINT)
    _check_key(t, right_name, pairs, rel.name)
    return _joined(config, rel, right_name, right_q, pairs, "left" if side else "inner")


def _left_qualifiers(join: exp.Join, left_q: set[str]) -> list[str]:
    """The qualifier of the left column of each equality of ``join``'s ON, in order."""
    out = []
    for cond in conjuncts(join.args["on"]):
        while isinstance(cond, exp.Paren):
            cond = cond.this
        out.append(next(c.table for c in (cond.this, cond.expression) if c.table in left_q))
    return out


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


def _on(join: exp.Join, left_q: set[str], right_q: set[str]) -> list[Pair]:
    """[(left column, right column)] of ``ON l.x = r.y [AND l.z = r.w …]`` (either order in
    each equality), qualified columns only; several equalities look a composite key up."""
    out: list[Pair] = []
    for cond in conjuncts(join.args["on"]):
        while isinstance(cond, exp.Paren):
            cond = cond.this
        if not isinstance(cond, exp.EQ) or not all(
            isinstance(c, exp.Column) and c.table for c in (cond.this, cond.expression)
        ):
            raise Refusal(
                DENIED,
                "a join condition is an equality of qualified columns (ON a.col = b.key), or one per "
                "column of a composite key joined by AND.",
                hint=HINT,
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
        out.append((a.name, b.name))
    return out


def _check_key(t: Table, look: str, pairs: list[Pair], base: str) -> None:
    """``look`` is looked up by all of its key's columns, each once."""
    keys = t.key_columns
    got = [k for _, k in pairs]
    if not keys or sorted(got) != sorted(keys):
        on = ", ".join(got)
        raise Refusal(
            DENIED,
            f"{look} is looked up by its key{' ' + ', '.join(keys) if keys else ' (none declared)'}, "
            f"not {on}: a join on another column could repeat {base}'s rows.",
            hint=HINT
            if len(keys) < 2
            else f"Join on every column of {look}'s key: "
            + " AND ".join(f"… = {look}.{k}" for k in keys)
            + ".",
        )


def _keyed_by_unit(t: Table) -> bool:
    """A private table whose key is its own unit column (the unit's table: customer.c_custkey)."""
    return t.privacy_unit is not None and t.key == t.privacy_unit


def _on_path(t: Table, col: str, look: str) -> bool:
    """Is ``col`` the reference by which ``t`` reaches its unit through ``look``?"""
    u = t.privacy_unit
    return t.references.get(col) == look and u is not None and u.split(".", 1)[0] == look


def _path(config: Declared, name: str) -> str:
    """How ``name`` reaches its unit, in words: ``lineitem.l_orderkey = orders.o_orderkey,
    orders.o_custkey (unit customer)``."""
    t = config.tables[name]
    if t.privacy_unit is None:
        return f"{name} has no privacy unit (each row is protected)"
    steps = [f"{a}.{fk} = {b}.{key}" for a, fk, b, key in unit_chain(config.tables, name)]
    last = steps and unit_chain(config.tables, name)[-1][2] or name
    col = config.tables[last].privacy_unit
    steps.append(f"{last}.{col} (unit {_unit_name(t.unit)})")
    return ", ".join(steps)


def _unit_name(unit: str | None) -> str:
    return "none" if unit is None else unit


def _private_refusal(config: Declared, base: str, look: str, unit: str | None) -> str:
    """Why ``look`` (private) cannot be looked up from ``base``, naming the path it needs."""
    t, b = config.tables[look], config.tables[base]
    if t.unit is None or unit is None or t.unit != unit or b.unit != unit:
        return (
            f"{look} is a private table of unit {_unit_name(t.unit)} and {base} of unit "
            f"{_unit_name(b.unit if b.unit is not None else unit)}: tables of different people are "
            f"not joined (paths: {_path(config, base)}; {_path(config, look)})."
        )
    return (
        f"{look} is a private table of the same unit ({unit}): it is looked up by its key only along "
        f"the references that reach the unit: {_between(config, base, look)}."
    )


def _between(config: Declared, a: str, b: str) -> str:
    """The equalities that join ``a`` and ``b`` (same unit) along their paths to the unit."""

    def steps(name: str, stop: str | None) -> list[str]:
        out = []
        for x, fk, n, key in unit_chain(config.tables, name):
            out.append(f"{x}.{fk} = {n}.{key}")
            if n == stop:
                return out
        last = unit_chain(config.tables, name)[-1][2] if unit_chain(config.tables, name) else name
        return out + [f"{last}.{config.tables[last].privacy_unit}"]

    for x, y in ((a, b), (b, a)):
        if any(n == y for _, _, n, _ in unit_chain(config.tables, x)):
            return " AND ".join(steps(x, y))
    for x, y in ((a, b), (b, a)):
        t = config.tables[y]
        if _keyed_by_unit(t):
            return " AND ".join(steps(x, None)) + f" = {y}.{t.key}"
    return f"{' AND '.join(steps(a, None))} = {' AND '.join(steps(b, None))}"


def _check_lookup(config: Declared, base: str, look: str, pairs: list[Pair]) -> None:
    b, t = config.tables[base], config.tables[look]
    if b.public or b.mode != "central" or b.privacy is not None:
        raise Refusal(
            DENIED,
            f"joins read a central table with a lookup table; {base} is "
            f"{'public' if b.public else 'a local or per-record table'}.",
            hint=HINT,
        )
    for bcol, _ in pairs:
        if bcol not in b.columns:
            raise Refusal("42703", f"column {bcol} is not declared for table {base}.", hint=None)
    if not t.public:  # the same unit, along its path (named when refused), before the key
        bcol, kcol = pairs[0]
        on_unit = bcol == b.privacy_unit and _keyed_by_unit(t)
        same = t.unit is not None and t.unit == b.unit
        if len(pairs) != 1 or kcol != t.key or not (same and (on_unit or _on_path(b, bcol, look))):
            raise Refusal(DENIED, _private_refusal(config, base, look, b.unit), hint=HINT)
    _check_key(t, look, pairs, base)


def _joined(
    config: Declared, rel: Relation, look: str, lq: set[str], pairs: list[Pair], how: str
) -> Relation:
    """``rel`` with ``look``'s columns attached by ``rel.bcol = look.kcol`` for each pair (one row per key)."""
    t = config.tables[look]
    cols = dict(rel.table.columns)
    owners = {c: set(q) for c, q in (rel.owners or {c: set(rel.qualifiers) for c in cols}).items()}
    taken: list[tuple[str, str]] = []  # (the looked-up column, its name in the relation)
    renamed = list(rel.renamed)
    again = t.public and look in (rel.name, *(j[0] for j in rel.joins))  # nation n1, nation n2
    (q,) = lq
    same = {k: b for b, k in pairs if how == "inner" and not t.public and k == t.privacy_unit}
    for c, spec in t.columns.items():
        if (c, c) in pairs:
            owners[c] |= set(lq)  # the join column: equal on both sides (a match)
            continue
        if c in same:  # the looked-up unit column is the base's on every row of an inner join
            renamed.append((q, c, same[c]))
            owners[same[c]] = owners.get(same[c], set()) | set(lq)
            continue
        name = c
        if c in cols and again:  # the same public table under another alias: its own names
            name = f"{c}__{q}"
            renamed.append((q, c, name))
        if name in cols:
            raise Refusal(
                UNSUPPORTED,
                f"column {c} is declared in both {look} and another joined table; dpgate "
                "needs distinct names across joined tables.",
                hint="Rename one in the config (a view as its source) or query the tables separately.",
            )
        cols[name] = spec if how == "inner" else spec.model_copy(update={"nullable": True})
        owners[name] = set(lq)
        taken.append((c, name))
    inner = rel.relation if rel.relation is not None else source_relation(config.source_of(rel.name))
    plain = how == "inner" and _unit_step(config, rel, look, pairs)
    relation = _lookup_sql(config, inner, look, pairs, taken, how, plain)
    table = rel.table.model_copy(update={"columns": cols})
    step = (look, ",".join(b for b, _ in pairs), ",".join(k for _, k in pairs), how)
    return Relation(
        rel.name, table, rel.qualifiers | lq, owners, relation, rel.joins + (step,), tuple(renamed)
    )


def _unit_step(config: Declared, rel: Relation, look: str, pairs: list[Pair]) -> bool:
    """``look`` joined by ``pairs`` is the one reference from ``rel``'s base table to the
    table that holds its unit (``lineitem.l_orderkey = orders.o_orderkey`` for ``privacy_unit
    = "orders.o_custkey"``): the join itself reads each row's unit (:func:`_with_unit_path`)."""
    u = rel.table.privacy_unit
    if u is None or u.count(".") != 1 or config.tables[look].public:
        return False
    if u.rsplit(".", 1)[1] not in config.tables[look].columns:  # the join must carry the unit
        return False
    chain = unit_chain(config.tables, rel.name)
    return len(chain) == 1 and [(chain[0][1], chain[0][3])] == pairs and chain[0][2] == look


MAX_UNIT_CHAIN = 8
"""References followed from a table to its unit in one scan (each one a join in the scan)."""


def _with_unit_path(rel: Relation, config: Declared) -> Relation:
    """A base table whose unit is reached through references (``privacy_unit =
    "orders.o_custkey"``, or a longer chain ``"lineitem.orders.o_custkey"``) reads it through
    the chain of lookups, as the column ``__dpgate_unit``."""
    u = rel.table.privacy_unit
    if u is None or "." not in u:
        return rel
    chain = unit_chain(config.tables, rel.name)
    if not chain or len(chain) != u.count(".") or len(chain) > MAX_UNIT_CHAIN:
        raise Refusal(
            DENIED,
            f"{rel.name}'s privacy unit {u!r} is not reached by a chain of at most {MAX_UNIT_CHAIN} "
            "declared references to tables with a one-column key.",
            hint=HINT,
        )
    last = chain[-1][2]
    col = u.rsplit(".", 1)[1]
    b = rel.table
    unit_col = Column(type=config.tables[last].columns[col].type, description=f"privacy unit ({u})")
    cols = {**b.columns, UNIT_COLUMN: unit_col}
    inner = rel.relation if rel.relation is not None else source_relation(config.source_of(rel.name))
    _, fk, ref, key = chain[0]
    if len(chain) == 1 and (ref, fk, key, "inner") in rel.joins and col in b.columns:
        # the statement's own join along the reference (a plain join, :func:`_unit_step`)
        # brought the unit's table: each row's unit is its column, no second lookup
        rel_sql = exp.select(
            exp.Column(this=exp.Star(), table=exp.to_identifier("__dpgate_b")),
            exp.alias_(exp.column(col, "__dpgate_b", quoted=True), UNIT_COLUMN, quoted=True),
        ).from_(
            exp.Subquery(this=_as_select(inner), alias=exp.TableAlias(this=exp.to_identifier("__dpgate_b")))
        )
        return _unit_relation(rel, config, rel_sql, cols, chain)
    lookup = exp.Subquery(
        this=_unit_lookup(config, chain), alias=exp.TableAlias(this=exp.to_identifier("__dpgate_u"))
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
    return _unit_relation(rel, config, rel_sql, cols, chain)


def _unit_relation(
    rel: Relation,
    config: Declared,
    rel_sql: exp.Select,
    cols: dict[str, Column],
    chain: list[tuple[str, str, str, str]],
) -> Relation:
    """``rel`` read as ``rel_sql``, which carries each row's unit as ``__dpgate_unit``."""
    _, fk, ref, key = chain[0]
    col = (rel.table.privacy_unit or "").rsplit(".", 1)[-1]
    b = rel.table
    table = b.model_copy(update={"columns": cols, "privacy_unit": UNIT_COLUMN})
    owners = None if rel.owners is None else {**rel.owners, UNIT_COLUMN: set(rel.qualifiers)}
    renamed = list(rel.renamed)
    if len(chain) == 1 and (ref, fk, key, "inner") in rel.joins and owners is not None:
        # the referenced table looked up on the same key: its unit column is the unit on every row
        renamed += [(q, col, UNIT_COLUMN) for q in owners.get(col, set())]
    return Relation(
        rel.name,
        table,
        rel.qualifiers,
        owners,
        exp.Subquery(this=rel_sql, alias=exp.TableAlias(this=exp.to_identifier("__dpgate_rel"))),
        rel.joins + ((ref, fk, key, "unit"),),
        tuple(renamed),
    )


def _unit_lookup(config: Declared, chain: list[tuple[str, str, str, str]]) -> exp.Select:
    """``SELECT key, <unit> AS __dpgate_unit FROM ref`` for the first referenced table of
    ``chain``, its unit read through the rest of the chain (one LEFT JOIN per reference)."""
    _, _, ref, key = chain[0]
    alias = "__dpgate_r0"
    q = exp.select(exp.column(key, alias, quoted=True)).from_(
        exp.alias_(source_relation(config.source_of(ref)), alias, table=True)
    )
    prev = alias
    for i, (_, fk, nxt, nkey) in enumerate(chain[1:], 1):
        a = f"__dpgate_r{i}"
        q = q.join(
            exp.alias_(source_relation(config.source_of(nxt)), a, table=True),
            on=exp.EQ(this=exp.column(fk, prev, quoted=True), expression=exp.column(nkey, a, quoted=True)),
            join_type="left",
        )
        prev = a
    last = chain[-1][2]
    col = config.tables[last].privacy_unit
    assert col is not None and "." not in col
    return q.select(exp.alias_(exp.column(col, prev, quoted=True), UNIT_COLUMN, quoted=True))


def _as_select(rel: exp.Expression) -> exp.Select:
    if isinstance(rel, exp.Subquery):
        inner: exp.Select = rel.this
        return inner
    return exp.select(exp.Star()).from_(rel)


def _keyed(config: Declared, name: str, keys: list[str], cols: list[str]) -> exp.Subquery:
    """``(SELECT key…, MIN(c) AS c, … FROM source GROUP BY key…) AS __dpgate_u``: one row per key."""
    items = [exp.column(k, quoted=True) for k in keys] + [
        exp.alias_(exp.Min(this=exp.column(c, quoted=True)), c, quoted=True) for c in cols if c not in keys
    ]
    q = (
        exp.select(*items)
        .from_(source_relation(config.source_of(name)))
        .group_by(*[exp.column(k, quoted=True) for k in keys])
    )
    return exp.Subquery(this=q, alias=exp.TableAlias(this=exp.to_identifier("__dpgate_u")))


def _lookup_sql(
    config: Declared,
    inner: exp.Expression,
    look: str,
    pairs: list[Pair],
    cols: list[tuple[str, str]],
    how: str,
    plain: bool = False,
) -> exp.Subquery:
    """``(SELECT b.*, u.c, … FROM inner b [LEFT] JOIN (one row per key) u ON b.bcol = u.key …)``;
    ``plain``: the table itself (the reference to the unit's table: each joined row is then
    bounded with the unit it carries, so a repeated key duplicates rows of distinct units only,
    each bounded on its own — as the unit lookup of :func:`_with_unit_path`)."""
    lookup: exp.Expr = (
        exp.alias_(source_relation(config.source_of(look)), "__dpgate_u", table=True)
        if plain
        else _keyed(config, look, [k for _, k in pairs], [c for c, _ in cols])
    )
    source = (
        exp.Subquery(this=_as_select(inner), alias=exp.TableAlias(this=exp.to_identifier("__dpgate_b")))
        if isinstance(inner, exp.Subquery)
        else exp.alias_(inner, "__dpgate_b", table=True)
    )
    on = _and(
        [
            exp.EQ(
                this=exp.column(b, "__dpgate_b", quoted=True),
                expression=exp.column(k, "__dpgate_u", quoted=True),
            )
            for b, k in pairs
        ]
    )
    q = (
        exp.select(
            exp.Column(this=exp.Star(), table=exp.to_identifier("__dpgate_b")),
            *[
                exp.column(c, "__dpgate_u", quoted=True)
                if c == name
                else exp.alias_(exp.column(c, "__dpgate_u", quoted=True), name, quoted=True)
                for c, name in cols
            ],
        )
        .from_(source)
        .join(lookup, on=on, join_type="left" if how == "left" else "inner")
    )
    return exp.Subquery(this=q, alias=exp.TableAlias(this=exp.to_identifier("__dpgate_rel")))
