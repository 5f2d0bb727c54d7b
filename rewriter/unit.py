"""The privacy unit: contribution bounding inside the one scan.

A table with ``privacy_unit = "customer_id"`` is protected per person: adding or removing
one unit and all of its rows changes every answer's distribution by at most e^ε. The
scan bounds what one unit can contribute, then the row-level mechanisms run unchanged on
the kept rows:

1. **L∞ (rows per cell).** Each unit keeps at most ``R = max_rows_per_unit`` of its rows
   in each cell, the first R by a keyed hash of (salt, unit, measured values) (ties: the
   values themselves, so the kept multiset is deterministic).
2. **L0 (cells per unit).** Each unit keeps at most ``G = max_groups_per_unit`` of its
   cells, the first G by a keyed hash of (salt, unit, cell) — skipped when the statement
   has at most G cells.

Rows whose unit is NULL belong to no known person and are left out (as ZetaSQL does).
Both choices depend on the unit's own rows only (and the salt, a secret per data
version from the ledger), never on other units: so the kept rows of two neighbouring
databases differ by at most ``k = min(G, cells) · R`` rows, all of one unit. Every
charged mechanism here is pure ε-DP with respect to adding or removing one row, so by
group privacy (Dwork & Roth 2014, Thm 2.2) running it at ε/k is ε-DP per unit. A count of
distinct units (``COUNT(DISTINCT <unit>)``) changes by at most one per cell: k = min(G, cells).

The scan, one backend query (the same shape on DuckDB, Postgres and Spark)::

    WITH kept AS (SELECT *,
                    ROW_NUMBER() OVER (PARTITION BY unit, keys ORDER BY h(salt, unit, values), values) AS rn,
                    DENSE_RANK() OVER (PARTITION BY unit ORDER BY h(salt, unit, keys), keys) AS gn
                  FROM source WHERE unit IS NOT NULL AND (pred))
    SELECT keys AS k1.., <the row-level measures> AS m1..
    FROM kept WHERE rn <= R AND gn <= G GROUP BY keys

so every measure (COUNT, SUM, the VAR moments, COUNT(DISTINCT …)) is the row-level
measure of the kept rows.

**Heavy units apart** (the plan of a single-table source where the dialect chooses it,
:attr:`rewriter.dialects.SQLDialect.unit_heavy_apart`). Both bounds keep every row of a unit
with at most T rows (T = R, or min(R, G) where the L0 bound ranks cells: such a unit has at most
R rows in any cell, or in all, and at most T ≤ G keys), so its bounded contribution is its exact
one. The scan therefore aggregates per (unit, cell) only the *heavy* units (more than T rows,
one aggregate per unit with ``HAVING COUNT(*) > T``, joined back to the rows), and adds to the
analyst's own aggregate (every unit's exact measures) the heavy units' bounded measures less
their exact ones::

    WITH all   AS (SELECT keys, <row measures> AS a.. FROM source WHERE unit IS NOT NULL AND (pred) GROUP BY keys),
         heavy AS (SELECT unit, COUNT(*) AS N FROM source WHERE … GROUP BY unit HAVING COUNT(*) > T),
         per   AS (<the per-(unit, cell) aggregate above> FROM source JOIN heavy ON unit = heavy.unit), …
    SELECT keys, SUM(m) FROM (all UNION ALL SELECT keys, <bounded> - a FROM per …) GROUP BY keys

The cells are those of the one-pass plan: the same function of each unit's own rows (counts
and integer sums exactly; a double sum up to the order of its additions), so the guarantee,
the keyed choice and the bias are unchanged. Its cost is the analyst's aggregate, one
aggregate per unit and a join to its few heavy rows, where the one-pass plan aggregates every
row per (unit, cell) (10^5–10^6 groups on TPC-H SF 1). The heavy aggregate's count is the
unit's total N of total mode wherever no cell is ranked away (every cell is kept), so N needs
no second aggregate there; and each (unit, cell) row of ``per`` gives its bounded less its exact
measures in one row, except where the L0 ranking drops rows of ``per`` (their exact measures
are then taken off apart). The heavy test is one hash aggregate of every row by the unit, a
group per unit where the analyst's query has a handful: any exact bound must compute it to
know which units it binds, so it is the floor of every such plan. A source that is a join is
read once (the one-pass plan): the split would run the join three times.

**Heavy units kept** (:func:`heavy_set`, ``to_sql(…, frozen=True)``). Where the source cannot
change while the backend keeps a relation made from it (``Backend.frozen``: a base table of a
DuckDB file held read-only, which no process can open for writing meanwhile), the heavy units of
the whole source — no WHERE — are made once into a relation (the backend's, shared by its scans)
and every later split scan reads them from it instead of aggregating every row by the unit. They
are a superset of any statement's heavy units (a WHERE only removes rows), and a unit in it with
at most T rows passing the statement's WHERE has its bounded measures equal to its exact ones
(nothing binds), so the cells are exactly the split plan's; the unit's total N of total mode is
then taken from its kept (unit, cell) rows where a WHERE may have changed it. Data that can change
(a file a role writes to, a server) keeps computing them per statement: a unit that became heavy
after the relation was made would be left unbounded.

**Their rows kept** (:func:`heavy_rows`, ``to_sql(…, frozen=True, rows=True)``). Where the heavy
units' rows are few enough to copy (:func:`rows_premise`, asked once of the frozen data), the kept
relation holds those rows themselves, each with its unit and N: a statement aggregates per (unit,
cell) the kept rows passing its WHERE instead of scanning the table a second time and joining every
row to the heavy units. They are exactly the rows that join would find, so the cells are the same;
the cost is memory (the heavy units' share of the table, ≈ 8–10% on TPC-H at the 95th percentile
bound), so where the premise fails, or until it is answered, the scan joins the table to the units.
Which of the two runs depends on one aggregate of the data (its heavy rows against the bound,
``[backend] kept_rows``), fixed while it is served; the cells do not.

**Their (unit, cell) rows kept** (``to_sql(…, frozen=True, rows=True, cells=True)``, total
mode). Without a WHERE, the heavy units' (unit, cell) rows with the running sums that share R among
a unit's cells are a function of the kept rows, the keys, the measures and their bounds — not of
the salt, which enters only through the unit's keyed offset. They are made once into a relation
from the kept rows (per statement shape: its text names it), and a statement reads them and adds
the offset: the window's own rows, so the same cells, at a fraction of the cost of the aggregate
and the window, each near the analyst's whole aggregate on DuckDB (docs/speed.md). The relations
hold at most ``[backend] kept_rows`` rows together (``Backend.keeps_cells``); a statement with a
WHERE, or beyond that, aggregates the kept rows itself. Which runs depends on the shapes served
before and their relations' sizes; the cells do not.

**A unit looked up, kept by its key** (:func:`lookup_splits`: ``lineitem`` whose customer is its
order's, ``privacy_unit = "orders.o_custkey"``, nothing else joined). The one-pass plan joins every
row to the looked-up table to find its unit, where the analyst's query reads the base table
alone. Where both tables are frozen, the kept relation holds the looked-up table's key of every
row of a heavy unit (the heavy customers' orders, with the customer and N), so a statement adds
to the analyst's own aggregate *over the base table alone* the bounded less exact measures of the
base rows joined to those keys (or, their rows kept, of the kept rows alone): a join of the few
heavy units' rows instead of every row. The
analyst's aggregate equals the one-pass plan's exact one only if the lookup neither drops nor
repeats a row — every base row finds exactly one looked-up row and it has a unit (the key unique
there, no reference dangling or NULL, no unit NULL): :func:`lookup_premise` is that fact, asked
once of the frozen data (with the kept relation's size), and where it fails the one-pass plan
runs. Which plan runs then depends on a fact of the data (its referential integrity), fixed while
it is served; the cells do not.

**The keyed hash** (DuckDB ``hash(salt, …)``, Spark ``xxhash64``, Postgres ``md5`` of the
row text; :func:`rewriter.emit.keyed_hash`). The ε guarantee does not rest on it: which
rows and cells a unit keeps is a function of that unit's own rows and the salt, a
constant of the data version, so two neighbouring databases differ only in that unit's
kept rows whatever the function is. The salt (a secret per data version from the ledger,
bound beside the SQL text, never written into it: :mod:`.params`)
buys two other things: repeats and retries keep the same rows (no ``random()``), and no
one without it can say in advance which rows are dropped, so a data contributor cannot
craft rows that are always kept or always dropped to steer the bias. DuckDB's ``hash`` is
not a keyed PRF — it mixes the salt's 64-bit hash into the combination — which is enough
for that (it moves the bias only, never ε); md5 on Postgres is slower but runs, in the
pre-aggregated scans, once per (unit, cell) row of a unit a bound binds (total mode's offset:
only where N > R; the L0 ranking: the (unit, cell) rows it ranks), never per source row. Profiled on TPC-H
(DuckDB, EXPLAIN ANALYZE) the hash is not the cost: the per-(unit, cell) hash aggregate
(10^4–10^5 groups instead of the analyst's ≤ 6) and the window sort over its rows are.

Bias: a unit with more than R rows in a cell, or in more than G cells, is under-counted.
The exact measures equal the analyst's own query whenever the bounds bind nothing (the
oracle test checks this).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlglot import exp

from . import params
from .errors import Refusal
from .plan import GroupKey, Measure, Plan, UnitBounds, UnitLookup, source_relation

__all__ = [
    "KEPT",
    "KEPT_CELLS",
    "KEPT_HEAVY",
    "KEPT_ROWS",
    "SALT_PARAM",
    "UnitBounds",
    "aggregatable",
    "caps",
    "chosen",
    "factor",
    "heavy_rows",
    "heavy_set",
    "heavy_units",
    "kept_rows",
    "per_unit_scan",
    "rows_premise",
    "salted",
    "spell_hashes",
    "lookup_premise",
    "lookup_splits",
    "splits",
]

SALT_PARAM = "unit_salt"  # the salt is a named parameter of the scan, never a literal (:mod:`.params`)
KEPT, RN, GN, U = "__dpgate_kept", "__dpgate_rn", "__dpgate_gn", "__dpgate_u"
NC, NT, CUM = (
    "__dpgate_nc",
    "__dpgate_nt",
    "__dpgate_c_",
)  # total mode: rows per (unit, cell), per unit; running sums
ALL, HEAVY, PRESENT = (
    "__dpgate_all",
    "__dpgate_heavy",
    "__dpgate_p",
)  # the split plan: every unit's cells; the heavy units
LK, REL = "__dpgate_k", "__dpgate_rel"  # a kept heavy unit's key in the looked-up table; the base table
KEPT_HEAVY, KEPT_ROWS = "__dpgate_heavy_", "__dpgate_rows_"  # the kept relations' names: units; their rows
KEPT_CELLS = "__dpgate_cells_"  # … their (unit, cell) rows (per_unit_scan: heavy_cells)
HO, HASH_P = "__dpgate_h", 2_147_483_647  # total mode: the unit's keyed hash mod a prime P ≫ N (o = h mod N)


def salted(
    sql: str, salt: str, dialect: str, names: frozenset[str], needs: tuple[tuple[str, str], ...] = ()
) -> str:
    """``sql`` with ``salt`` (lower-case hex) bound to its salt parameter, if ``names`` (the
    parameters the scan has, :func:`.params.spell`) holds it (a scan that bounds nothing
    by a hash has none): the text never holds the salt (:mod:`.params`); ``needs``: the
    relations it reads that the backend keeps (:func:`heavy_set`)."""
    if salt and not all(c in "0123456789abcdef" for c in salt):
        raise ValueError("the unit salt is lower-case hex")
    values = {params.key(SALT_PARAM, dialect): salt} if SALT_PARAM in names else {}
    return params.bound(sql, values, needs) if values or needs else sql


NOT_CHOSEN = "55000"  # object_not_in_prerequisite_state: a bound written "auto" not chosen yet


def caps(name: str, table: Any) -> tuple[int, int]:
    """``(max_groups_per_unit, max_rows_per_unit)`` of the declared table ``name``. A bound
    written ``"auto"`` is an integer once dpgate has chosen it (the service resolves the config
    per data version); one still ``"auto"`` could not be chosen, and the statement is refused."""
    g, r = table.max_groups_per_unit, table.max_rows_per_unit
    for field, v in (("max_groups_per_unit", g), ("max_rows_per_unit", r)):
        if not isinstance(v, int):
            raise Refusal(
                NOT_CHOSEN,
                f'{name}.{field} = "auto" could not be chosen for this data version '
                "(the proxy's log says why); nothing was charged.",
                hint=f"Write {field} = <an integer> for table {name} in the config, or raise "
                "[auto_bounds] budget.",
            )
    return g, r


def chosen(column: str, spec: Any) -> None:
    """Refuse (55000) a column whose ``lower``/``upper`` is still ``"auto"``: dpgate could not
    choose it for this data version (:func:`caps` says the same of a contribution bound)."""
    if getattr(spec, "auto_bounds", False):
        raise Refusal(
            NOT_CHOSEN,
            f'the bounds of column {column} (lower/upper = "auto") could not be chosen for this '
            "data version (the proxy's log says why); nothing was charged.",
            hint=f"Write lower = <a number> and upper = <a number> for column {column} in the "
            "config, or raise [auto_bounds] budget.",
        )


def factor(plan: Plan) -> int:
    """k: the most kept rows (or unit counts) one unit can move; mechanisms run at ε/k.
    Per cell: min(G, cells)·R rows; in total: R rows (in at most min(G, R, cells) cells)."""
    b = plan.unit
    if b is None:
        return 1
    cells = min(groups_bound(b), max(plan.n_cells, 1))
    units_only = all(m.kind == "count_distinct" and m.column == b.column for m in plan.measures)
    if units_only:
        return cells
    return b.max_rows if b.total else cells * b.max_rows


def groups_bound(b: UnitBounds) -> int:
    """The most cells (keys) one unit's kept rows can reach: G, and at most R in total mode."""
    return min(b.max_groups, b.max_rows) if b.total else b.max_groups


def describe(b: UnitBounds) -> str:
    """The bounds in words (NOTICE, EXPLAIN)."""
    if b.total:
        return (
            f"at most {b.max_rows} row(s) in all, in at most {b.max_groups} group(s) — one with more "
            "keeps that many in proportion across its groups"
        )
    return f"each contributes to at most {b.max_groups} group(s), at most {b.max_rows} row(s) per group"


COUNTS = ("count_rows", "count", "count_if")
AGGREGATABLE = (*COUNTS, "sum", "csum", "csumsq")
KeySql = Callable[[GroupKey], exp.Expression]  # a group key's scan expression (:mod:`.emit`)


def _bounds(plan: Plan) -> UnitBounds:
    """``plan``'s privacy unit and bounds: the bounded scans are built only for plans with one."""
    if plan.unit is None:
        raise ValueError("a bounded scan needs a privacy unit")
    return plan.unit


def aggregatable(plan: Plan) -> bool:
    """Every measure is a count or a sum (or the count of units): the bounded scan can
    pre-aggregate per (unit, cell) instead of ranking rows (:func:`per_unit_scan`)."""
    unit = plan.unit.column if plan.unit is not None else None
    return all(
        m.kind in AGGREGATABLE or (m.kind == "count_distinct" and m.column == unit) for m in plan.measures
    )


def per_unit_scan(
    plan: Plan,
    row_measure: Callable[[Measure], exp.Expression],
    base_count: Callable[[Measure], exp.Expression],
    integral: Callable[[Measure], bool],
    key_sql: KeySql,
    heavy_apart: bool = False,
    heavy_set: str | None = None,
    heavy_rows: str | None = None,
    heavy_cells: Callable[[exp.Select], str] | None = None,
) -> exp.Select:
    """The bounded scan by pre-aggregation (every measure a count or a sum), much cheaper
    than ranking rows (a hash aggregate, no window sort)::

        WITH per AS (SELECT keys AS k.., unit AS u, <row measures> AS a_j, <their row counts> AS n_j
                     FROM source WHERE unit IS NOT NULL AND (pred) GROUP BY keys, unit),
             ranked AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY u ORDER BY h(salt, u, k..), k..) AS gn
                        FROM per)                                     -- only when G < cells
        SELECT k.., SUM(bounded a_j) FROM ranked WHERE gn <= G GROUP BY k..

    A unit's contribution to a cell is that of at most R *pseudo-rows*: a count becomes
    min(n, R); a sum over n > R rows becomes sum·R/n (for an integer sum, rounded toward
    zero: still a sum of R integers within the bounds), i.e. R rows at the unit's mean.
    Removing a unit removes only its pseudo-rows, at most k = min(G, cells)·R of them, so
    group privacy gives ε per unit exactly as for kept rows (module docstring); the
    pseudo-rows are valid inputs of every mechanism (values within the bounds; the AVG
    pair (sum, count) is that of R such rows). ``row_measure(m)`` is a measure's row-level
    aggregate, ``base_count(m)`` the count its sum scales by, ``integral(m)`` whether it is
    an exact integer sum. ``heavy_apart``: the same cells with only the heavy units aggregated
    per (unit, cell) (module docstring), for a single-table source without COUNT(DISTINCT unit).

    **Total mode** (``max_rows_scope = "total"``, L1 like SmartNoise's ``max_ids``): a unit
    with N > R rows over its kept cells (N = its rows passing the WHERE, ``__dpgate_t``)
    keeps r_c = ⌊n_c·R/N⌋ pseudo-rows of cell c (n_c its rows there), so Σ_c r_c ≤ R. Every
    measure is scaled by the same factor R/N: a count of a column's non-NULL values m_c
    becomes ⌊m_c·R/N⌋ ≤ r_c, a sum over m_c values becomes that many values at their mean
    (sum·⌊m_c·R/N⌋/m_c), and the unit counts in a cell only where r_c ≥ 1 (so in at most
    min(R, G, cells) cells). All of that is realised by at most R rows within the bounds,
    chosen from the unit's own rows only: k = R (:func:`factor`). At the same k as per cell
    (R_total = min(G, cells)·R_cell) it leaves out fewer rows: only units with more than k
    rows in all lose any, where per cell a unit loses rows in any cell above R_cell. The
    floors are taken of running sums over the unit's cells plus a keyed offset
    (:func:`_total_values`), so the shares add up to exactly R (per cell floors would lose
    about half a row per cell: on TPC-H orders that doubled the bias); the window runs
    over the (unit, cell) rows, not the source rows (none without GROUP BY: there the
    (unit) row is its own total). ``heavy_cells`` names a relation the backend makes from a
    select (``needs``): with the rows kept, total mode without a WHERE reads its (unit, cell) rows
    and running sums from one (module docstring, "Their (unit, cell) rows kept")."""
    b = _bounds(plan)
    lookup = heavy_apart and heavy_set is not None and lookup_splits(plan)  # the unit kept by its key
    rows = heavy_rows if heavy_apart and heavy_set is not None else None  # … and its rows kept
    # the unit: the relation's column, or the kept heavy unit a (kept or looked-up) base row belongs to
    unit = (
        exp.column(U, table=HEAVY, quoted=True)
        if lookup or rows is not None
        else exp.column(b.column, quoted=True)
    )
    keys = [key_sql(g) for g in plan.group_by]
    knames = [f"k{i + 1}" for i in range(len(keys))]
    R = exp.Literal.number(b.max_rows)
    items = [*[exp.alias_(k, n) for k, n in zip(keys, knames)], exp.alias_(unit.copy(), U, quoted=True)]
    apart = heavy_apart and (splits(plan) or lookup)
    ranks = bool(keys) and b.max_groups < plan.n_cells  # the L0 bound ranks a unit's cells
    # N: the heavy aggregate's count — a kept heavy set's is the whole table's, N only without a WHERE
    heavy_total = apart and b.total and bool(keys) and not ranks and (heavy_set is None or plan.where is None)
    vals: list[exp.Expression] = []  # per (unit, cell) row: each measure's bounded contribution
    bases: dict[int | str, Any] = {}  # measure j: (its base count's name, integral); "canon": _canonical
    for j, m in enumerate(plan.measures):
        a, n = f"a{j + 1}", f"n{j + 1}"
        items.append(exp.alias_(row_measure(m), a))
        col_a = exp.column(a)
        v: exp.Expression
        if m.kind == "count_distinct":  # the unit itself: one per (unit, cell)
            v = col_a
        elif m.kind in COUNTS:
            v = exp.Least(this=col_a, expressions=[R.copy()])
        else:
            items.append(exp.alias_(base_count(m), n))
            bases[j] = (n, integral(m))
            v = exp.Case(
                ifs=[exp.If(this=exp.LTE(this=exp.column(n), expression=R.copy()), true=col_a.copy())],
                default=_scaled(col_a, exp.column(n), b.max_rows, integral(m)),
            )
        vals.append(v)
    if b.total or apart:  # the (unit, cell)'s rows
        items.append(exp.alias_(exp.Count(this=exp.Star()), NC, quoted=True))
    nt = exp.column(NT, table=HEAVY, quoted=True)
    if heavy_total:  # every unit here is heavy; its total N is the heavy aggregate's count
        # a group key beside the unit (one N per unit), not MAX(N): DuckDB pushes an aggregate of
        # the joined side below the join and combines its states per source row, ~2× the cost
        items.append(exp.alias_(nt.copy(), NT, quoted=True))
    if b.total and not keys:  # the unit's keyed offset, only where a share is taken (N > R)
        big = exp.GT(this=exp.Count(this=exp.Star()), expression=R.copy())
        items.append(exp.alias_(exp.Case(ifs=[exp.If(this=big, true=_offset(unit))]), HO, quoted=True))
    if b.total:
        bases["canon"] = _canonical(items)
        vals = _total_values(plan, bases)
    if rows is not None:  # the heavy units' rows, each with its unit and N, and no more
        per = exp.select(*items).from_(exp.alias_(exp.to_table(rows, quoted=True), HEAVY, table=True))
    else:
        per = exp.select(*items).from_(_base(plan) if lookup else plan.from_())
    per = per.where(exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null())), copy=False)
    if plan.where is not None:
        per = per.where(exp.Paren(this=plan.where.copy()), copy=False)
    ctes: list[tuple[str, exp.Expression]] = []
    if apart:  # only the heavy units' rows are aggregated per (unit, cell): kept, or joined to the units
        light = _light_apart(plan, row_measure, keys, knames, heavy_set, lookup)
        ctes += [c for c in light if rows is None or c[0] == ALL]  # their rows kept: no join, no units
    if apart and rows is None:
        on = exp.EQ(this=unit.copy(), expression=exp.column(U, table=HEAVY, quoted=True))
        if lookup and plan.unit_lookup is not None:  # the base rows whose key a kept heavy unit holds
            on = exp.EQ(
                this=exp.column(plan.unit_lookup.fk, table=REL, quoted=True),
                expression=exp.column(LK, table=HEAVY, quoted=True),
            )
        per = per.join(HEAVY, on=on, copy=False)
    per = per.group_by(*[k.copy() for k in keys], unit.copy(), *([nt] if heavy_total else []), copy=False)
    last = "per"
    ctes.append(("per", per))
    if ranks:
        kcols = [exp.column(n) for n in knames]
        order = [_hash([_salt(), exp.column(U, quoted=True), *[c.copy() for c in kcols]]), *kcols]
        gn = exp.Window(
            this=exp.RowNumber(),
            partition_by=[exp.column(U, quoted=True)],
            order=exp.Order(expressions=[exp.Ordered(this=o) for o in order]),
        )
        ranked = exp.select(exp.Star(), exp.alias_(gn, GN, quoted=True)).from_("per")
        ctes.append(
            (
                "ranked",
                exp.select(exp.Star())
                .from_(ranked.subquery("r"))
                .where(
                    exp.LTE(this=exp.column(GN, quoted=True), expression=exp.Literal.number(b.max_groups))
                ),
            )
        )
        last = "ranked"
    if b.total and keys:  # the unit's total and running sums over its kept cells
        cells = heavy_cells if rows is not None and heavy_total else None
        window = total_window(plan, bases, knames, last, known_heavy=heavy_total, offset=cells is None)
        sums = window[0][1]
        if cells is not None and isinstance(sums, exp.Select):  # made once; the offset added here
            name = cells(sums.with_("per", as_=per, copy=False))
            ctes = [c for c in ctes if c[0] != "per"]
            offset = exp.alias_(_offset(exp.column(U, quoted=True)), HO, quoted=True)
            window = [("cum", exp.select(exp.Star(), offset).from_(exp.to_table(name, quoted=True)))]
        ctes += window
        last = "cum"
    kcols = [exp.column(n) for n in knames]
    if apart:  # all units' exact measures, less the heavy units' exact ones, plus their bounded ones
        # p: the cell's rows of light units plus its kept (unit, cell) rows of heavy ones — the
        # cell is a group of the scan only where the one-pass plan has one (p > 0)
        p = exp.column(PRESENT, quoted=True)
        every = exp.select(
            *kcols, *[_m(exp.column(f"a{j + 1}"), j) for j in range(len(vals))], p.copy()
        ).from_(ALL)
        nc = exp.column(NC, quoted=True)
        if ranks:  # the ranking drops rows of per: their exact measures are taken off apart
            less = exp.select(
                *[c.copy() for c in kcols],
                *[_m(exp.Neg(this=exp.column(f"a{j + 1}")), j) for j in range(len(vals))],
                exp.alias_(exp.Neg(this=nc), PRESENT, quoted=True),
            ).from_("per")
            bounded = exp.select(
                *[c.copy() for c in kcols],
                *[_m(v, j) for j, v in enumerate(vals)],
                exp.alias_(exp.Literal.number(1), PRESENT, quoted=True),
            ).from_(last)
            parts = exp.union(exp.union(every, less, distinct=False), bounded, distinct=False)
        else:  # each row of per is in last: its bounded less its exact measures in one row
            folded = exp.select(
                *[c.copy() for c in kcols],
                *[
                    _m(exp.Sub(this=exp.Paren(this=v), expression=exp.column(f"a{j + 1}")), j)
                    for j, v in enumerate(vals)
                ],
                exp.alias_(exp.Sub(this=exp.Literal.number(1), expression=nc), PRESENT, quoted=True),
            ).from_(last)
            parts = exp.union(every, folded, distinct=False)
        vals = [exp.column(f"m{j + 1}") for j in range(len(vals))]
        out = exp.select(*[c.copy() for c in kcols], *_sums(plan, vals)).from_(parts.subquery("parts"))
        if keys:
            out = out.having(
                exp.GT(this=exp.Sum(this=p.copy()), expression=exp.Literal.number(0)), copy=False
            )
    else:
        out = exp.select(*kcols, *_sums(plan, vals)).from_(last)
    for name, q in ctes:
        out = out.with_(name, as_=q, copy=False)
    if keys:
        out = out.group_by(*[exp.column(n) for n in knames], copy=False)
    return out


def _offset(unit: exp.Expression) -> exp.Expression:
    """The unit's keyed hash mod P (total mode's offset o = this mod N, :func:`_total_values`)."""
    return exp.Anonymous(this="DPGATE_HASHMOD", expressions=[exp.Literal.number(HASH_P), _salt(), unit])


def _canonical(items: list[exp.Expr]) -> dict[str, str]:
    """Per aliased count of the (unit, cell) select: the first alias with the same
    expression (COUNT(*) and COUNT(col) of a NOT NULL column repeat): one running sum each."""
    seen: dict[str, str] = {}
    out: dict[str, str] = {}
    for it in items:
        if isinstance(it, exp.Alias) and isinstance(it.this, exp.Count):
            out[it.alias] = seen.setdefault(it.this.sql(), it.alias)
    return out


def _total_values(plan: Plan, bases: dict[int | str, Any]) -> list[exp.Expression]:
    """Each measure's contribution of one (unit, cell) row in total mode (:func:`per_unit_scan`): a unit whose total N
    exceeds R keeps, of each count x (its rows, a column's non-NULL values), the share
    ⌊(X_c·R + o)/N⌋ − ⌊((X_c − x_c)·R + o)/N⌋ in cell c, X_c the running sum of x over its
    cells in key order (:func:`total_window`; taken only where N > R) and o ∈ [0, N) the keyed hash of
    the unit (mod P = 2^31 − 1, then mod N: uniform up to N/P; any o ∈ [0, N) keeps the
    bound, the uniformity only makes the rounding unbiased): systematic sampling with a
    keyed start, so the shares add up to ⌊(X·R + o)/N⌋ ≤ R and each is x_c·R/N on average
    over o whatever the order of the cells (no rounding bias; which cells round up is the
    keyed o's choice; without GROUP BY, ⌊(x·R + o)/N⌋)."""
    b = _bounds(plan)
    R = exp.Literal.number(b.max_rows)
    keyed = bool(plan.group_by)
    N = exp.column(NT if keyed else NC, quoted=True)
    small = exp.LTE(this=N.copy(), expression=R.copy())

    offset = exp.Mod(this=exp.column(HO, quoted=True), expression=N.copy())  # the unit's keyed o ∈ [0, N)

    def share(name: str) -> exp.Expression:
        def part(c: exp.Expression) -> exp.Expression:
            return _idiv(
                exp.Add(this=exp.Mul(this=exp.Paren(this=c), expression=R.copy()), expression=offset.copy()),
                N.copy(),
            )

        if not keyed:
            return part(exp.column(name, quoted=True))
        run = exp.column(CUM + bases["canon"].get(name, name), quoted=True)
        return exp.Sub(
            this=part(run),
            expression=part(exp.Sub(this=run.copy(), expression=exp.column(name, quoted=True))),
        )

    vals: list[exp.Expression] = []
    for j, m in enumerate(plan.measures):
        a = exp.column(f"a{j + 1}")
        v: exp.Expression
        if m.kind == "count_distinct":  # the unit counts where it keeps a pseudo-row
            keep = exp.GTE(this=share(NC), expression=exp.Literal.number(1))
            v = exp.Case(
                ifs=[exp.If(this=exp.or_(small.copy(), keep), true=a.copy())], default=exp.Literal.number(0)
            )
        elif j not in bases:  # a count: its share
            v = exp.Case(ifs=[exp.If(this=small.copy(), true=a.copy())], default=share(f"a{j + 1}"))
        else:  # a sum over x_c values: its share of them at their mean
            n, integral = exp.column(bases[j][0]), bases[j][1]
            v = exp.Case(
                ifs=[
                    exp.If(
                        this=exp.or_(small.copy(), exp.EQ(this=n.copy(), expression=exp.Literal.number(0))),
                        true=a.copy(),
                    )
                ],
                default=_scaled(a, n, share(bases[j][0]), integral),
            )
        vals.append(v)
    return vals


def _m(v: exp.Expression, j: int) -> exp.Expr:
    return exp.alias_(v, f"m{j + 1}")


def _sums(plan: Plan, vals: list[exp.Expression]) -> list[exp.Expr]:
    """The cell's measures: the sum of each measure's per-(unit, cell) values (a count stays a bigint)."""
    outs: list[exp.Expr] = []
    for j, (m, v) in enumerate(zip(plan.measures, vals)):
        total: exp.Expression = exp.Sum(this=v)
        if m.kind == "count_distinct" or m.kind in COUNTS:
            total = exp.Cast(this=total, to=exp.DataType.build("bigint"))
        outs.append(_m(total, j))
    return outs


def heavy_threshold(plan: Plan) -> int:
    """T: a unit with at most T rows (passing the WHERE) is kept whole by both bounds — at most
    R rows (in a cell, or in all) and, where the L0 bound ranks cells (G < cells), at most G
    cells, as it has at most T ≤ G distinct keys."""
    b = _bounds(plan)
    ranks = bool(plan.group_by) and b.max_groups < plan.n_cells
    return min(b.max_rows, b.max_groups) if ranks else b.max_rows


def _light_apart(
    plan: Plan,
    row_measure: Callable[[Measure], exp.Expression],
    keys: list[exp.Expression],
    knames: list[str],
    heavy_set: str | None = None,
    lookup: bool = False,
) -> list[tuple[str, exp.Expression]]:
    """The two CTEs of the split plan (:func:`per_unit_scan`): ``__dpgate_all``, the cells'
    exact measures over every unit (the analyst's own aggregate, rows with a NULL unit left
    out), and ``__dpgate_heavy``, the units with more than T rows (:func:`heavy_threshold`) —
    read from the relation ``heavy_set`` where the backend keeps it (:func:`heavy_set`).
    ``lookup``: the unit is looked up (:func:`lookup_splits`) and every base row has one, so the
    analyst's aggregate reads the base table alone, and the kept units carry their keys."""
    b = _bounds(plan)
    unit = exp.column(b.column, quoted=True)
    rows = exp.select(
        *[exp.alias_(k.copy(), n) for k, n in zip(keys, knames)],
        *[exp.alias_(row_measure(m), f"a{j + 1}") for j, m in enumerate(plan.measures)],
        exp.alias_(exp.Count(this=exp.Star()), PRESENT, quoted=True),
    ).from_(_base(plan) if lookup else plan.from_())
    if not lookup:
        rows.where(exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null())), copy=False)
    if plan.where is not None:
        rows.where(exp.Paren(this=plan.where.copy()), copy=False)
    if keys:
        rows = rows.group_by(*[k.copy() for k in keys], copy=False)
    if heavy_set is not None:
        kept = [exp.column(c, quoted=True) for c in ((LK, U, NT) if lookup else (U, NT))]
        heavy = exp.select(*kept).from_(exp.to_table(heavy_set, quoted=True))
    else:
        heavy = heavy_units(plan, plan.where)
    return [(ALL, rows), (HEAVY, heavy)]


def heavy_units(plan: Plan, where: exp.Expression | None) -> exp.Select:
    """The units with more than T rows passing ``where`` (:func:`heavy_threshold`), each with its
    row count: ``SELECT unit, COUNT(*) FROM source WHERE unit IS NOT NULL AND (where) GROUP BY
    unit HAVING COUNT(*) > T``."""
    unit = exp.column(_bounds(plan).column, quoted=True)
    heavy = exp.select(
        exp.alias_(unit.copy(), U, quoted=True), exp.alias_(exp.Count(this=exp.Star()), NT, quoted=True)
    ).from_(plan.from_())
    heavy.where(exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null())), copy=False)
    if where is not None:
        heavy.where(exp.Paren(this=where.copy()), copy=False)
    return heavy.group_by(unit.copy(), copy=False).having(
        exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(heavy_threshold(plan))),
        copy=False,
    )


def splits(plan: Plan) -> bool:
    """Whether the bounded scan of ``plan`` takes the heavy units apart where the dialect does
    (:func:`per_unit_scan`): a single-table source, every measure a count or a sum."""
    return (
        plan.unit is not None
        and aggregatable(plan)
        and plan.relation is None
        and not any(m.kind == "count_distinct" for m in plan.measures)
    )


def heavy_set(plan: Plan) -> exp.Select | None:
    """The heavy units of the whole source (no WHERE), where the split plan can read them from
    a relation the backend keeps (:func:`per_unit_scan`'s ``heavy_set``), else None. It is a
    superset of any statement's heavy units (a WHERE only removes rows), and a unit in it with at
    most T rows passing the statement's WHERE is kept whole by the bounds as before (its bounded
    less its exact measures are 0), so the cells are the same; only a backend whose data cannot
    change while it keeps the relation may use it (a unit that became heavy after it was made
    would be left unbounded)."""
    if lookup_splits(plan) and plan.unit_lookup is not None:
        return _heavy_keys(plan, plan.unit_lookup)
    return heavy_units(plan, None) if splits(plan) else None


def heavy_rows(plan: Plan) -> exp.Select | None:
    """The rows of the heavy units of the whole source (:func:`heavy_set`), each with its unit and
    N: ``SELECT base.*, h.unit, h.N FROM base JOIN (heavy set) AS h ON base.unit = h.unit`` (a unit
    looked up: ``ON base.fk = h.key``), where the split plan can read them from a relation the
    backend keeps, else None. A statement then aggregates per (unit, cell) the kept rows passing its
    WHERE instead of reading the table a second time and joining every row to the heavy set: the
    same rows (those of a heavy unit), so the same cells (:func:`per_unit_scan`'s ``heavy_rows``).
    Its size is the heavy units' rows (:func:`rows_premise` bounds it)."""
    kept = heavy_set(plan)
    if kept is None:
        return None
    h = "__dpgate_h"
    lk = plan.unit_lookup if lookup_splits(plan) else None
    if lk is not None:  # the base rows whose key a kept heavy unit holds
        on = exp.EQ(
            this=exp.column(lk.fk, table=REL, quoted=True), expression=exp.column(LK, table=h, quoted=True)
        )
    else:
        on = exp.EQ(
            this=exp.column(_bounds(plan).column, table=REL, quoted=True),
            expression=exp.column(U, table=h, quoted=True),
        )
    return (
        exp.select(
            exp.Column(this=exp.Star(), table=exp.to_identifier(REL, quoted=True)),
            exp.column(U, table=h, quoted=True),
            exp.column(NT, table=h, quoted=True),
        )
        .from_(_base(plan))
        .join(exp.Subquery(this=kept, alias=exp.TableAlias(this=exp.to_identifier(h))), on=on)
    )


def rows_premise(plan: Plan, rows_at_most: int) -> exp.Select:
    """One row, one boolean: the heavy units of the whole source have at most ``rows_at_most``
    rows together, so that the relation of their rows (:func:`heavy_rows`) is no larger."""
    total = exp.select(exp.Sum(this=exp.column(NT, quoted=True))).from_(
        exp.Subquery(
            this=heavy_units(plan, None), alias=exp.TableAlias(this=exp.to_identifier("__dpgate_hh"))
        )
    )
    size = exp.Coalesce(this=exp.Subquery(this=total), expressions=[exp.Literal.number(0)])
    return exp.select(exp.alias_(exp.LTE(this=size, expression=exp.Literal.number(rows_at_most)), "holds"))


def lookup_splits(plan: Plan) -> bool:
    """Whether the split plan reads a unit looked up through one reference (``lineitem`` whose
    customer is ``orders.o_custkey``, :attr:`Plan.unit_lookup`) from kept heavy units
    (:func:`heavy_set`): every measure a count or a sum, and nothing in the statement reads the
    unit itself. The kept relation holds the looked-up table's key of each heavy unit (its
    orders), so a statement joins the base table to it alone and computes the analyst's own
    aggregate from the base table alone: both sound only where every base row finds exactly
    one looked-up row and it has a unit (:func:`lookup_premise`, checked once for frozen data)."""
    if plan.unit is None or plan.unit_lookup is None or plan.per_unit or not aggregatable(plan):
        return False
    if any(m.kind == "count_distinct" for m in plan.measures):
        return False
    name = plan.unit.column
    nodes: list[exp.Expression] = [plan.where] if plan.where is not None else []
    nodes += [g.expr for g in plan.group_by if g.expr is not None]
    nodes += [m.filter for m in plan.measures if m.filter is not None]
    nodes += [e for m in plan.measures if isinstance(e := getattr(m.column, "expr", None), exp.Expression)]
    names = {g.column for g in plan.group_by if g.expr is None} | {m.column for m in plan.measures}
    return name not in names and all(c.name != name for n in nodes for c in n.find_all(exp.Column))


def lookup_premise(plan: Plan, keys_at_most: int) -> exp.Select:
    """One row, one boolean: every row of the base table finds exactly one row of the
    looked-up table and that row has a unit (the key is unique there; no foreign key dangles or
    is NULL; no unit is NULL), and the kept relation (:func:`heavy_set`) would hold at most
    ``keys_at_most`` keys. Then the relation of the one-pass plan (the base table LEFT JOIN
    the lookup) has the base table's rows, each with a unit, and the split plan's reading of
    the base table alone (:func:`lookup_splits`) gives the same cells."""
    lk = plan.unit_lookup
    if lk is None:
        raise ValueError("the premise is of a plan whose unit is looked up")
    key, ref = exp.column(lk.key, quoted=True), source_relation(lk.source)
    one = (
        exp.select(exp.Count(this=exp.Star()))
        .from_(ref.copy())
        .where(exp.Not(this=exp.Is(this=key.copy(), expression=exp.Null())))
    )
    unique = exp.EQ(
        this=exp.Subquery(this=one),
        expression=exp.Subquery(
            this=exp.select(exp.Count(this=exp.Distinct(expressions=[key.copy()]))).from_(ref.copy())
        ),
    )
    found = (
        exp.select(exp.Count(this=exp.Star()))
        .from_(_base(plan))
        .join(
            exp.alias_(ref.copy(), "__dpgate_r", table=True),
            on=exp.EQ(
                this=exp.column(lk.fk, table=REL, quoted=True),
                expression=exp.column(lk.key, table="__dpgate_r", quoted=True),
            ),
            join_type="left",
        )
        .where(exp.Is(this=exp.column(lk.column, table="__dpgate_r", quoted=True), expression=exp.Null()))
    )
    dangling = exp.EQ(this=exp.Subquery(this=found), expression=exp.Literal.number(0))
    kept = exp.select(exp.Count(this=exp.Star())).from_(
        exp.Subquery(this=_heavy_keys(plan, lk), alias=exp.TableAlias(this=exp.to_identifier("__dpgate_kk")))
    )
    small = exp.LTE(this=exp.Subquery(this=kept), expression=exp.Literal.number(keys_at_most))
    return exp.select(exp.alias_(exp.and_(unique, dangling, small), "holds"))


def _base(plan: Plan) -> exp.Expr:
    """The base table of a looked-up unit's relation, under the relation's own alias."""
    return exp.alias_(source_relation(plan.source), REL, table=True)


def _heavy_keys(plan: Plan, lk: UnitLookup) -> exp.Select:
    """The looked-up table's keys of the heavy units of the whole relation (no WHERE), with
    the unit and its rows N: ``SELECT key, unit, N FROM ref JOIN (heavy units) ON ref.unit =
    heavy.unit`` (:func:`heavy_set`)."""
    ref = exp.alias_(source_relation(lk.source), "__dpgate_r", table=True)
    h = "__dpgate_h"
    return (
        exp.select(
            exp.alias_(exp.column(lk.key, table="__dpgate_r", quoted=True), LK, quoted=True),
            exp.column(U, table=h, quoted=True),
            exp.column(NT, table=h, quoted=True),
        )
        .from_(ref)
        .join(
            exp.Subquery(this=heavy_units(plan, None), alias=exp.TableAlias(this=exp.to_identifier(h))),
            on=exp.EQ(
                this=exp.column(lk.column, table="__dpgate_r", quoted=True),
                expression=exp.column(U, table=h, quoted=True),
            ),
        )
    )


def total_window(
    plan: Plan,
    bases: dict[int | str, Any],
    knames: list[str],
    source: str,
    known_heavy: bool = False,
    offset: bool = True,
) -> list[tuple[str, exp.Expression]]:
    """Total mode with GROUP BY: the (unit, cell) rows with the unit's total N and the
    running sums of every count a share is taken of, in the order of the cell keys (a
    deterministic order is all systematic sampling needs: the keyed offset picks which
    cells round up; no hash in the sort), and the unit's keyed offset where N > R::

        tot  AS (SELECT u, SUM(nc) AS nt FROM source GROUP BY u),
        whole AS (SELECT source.*, tot.nt FROM source JOIN tot ON source.u = tot.u),
        cum  AS (SELECT *, NULL AS c_x.., NULL AS h FROM whole WHERE nt <= R
                 UNION ALL
                 SELECT *, SUM(x) OVER (PARTITION BY u ORDER BY k.. ROWS UNBOUNDED PRECEDING) AS c_x..,
                        h(salt, u) AS h
                 FROM whole WHERE nt > R)

    The running sums and the offset are read only where N > R (:func:`_total_values`), so the
    window sorts, and the keyed hash runs on, only the heavy units' rows; N comes from a GROUP
    BY and a join rather than a window over every row, which a backend computes with a hash
    aggregate instead of a sort. ``known_heavy``: ``source`` holds heavy units only and carries
    N already (the heavy units apart without the L0 ranking, :func:`per_unit_scan`): ``cum`` is
    its second branch over ``source``; ``offset`` False: without the offset (the running sums
    alone, which read no salt: a relation the backend keeps, :func:`per_unit_scan`'s ``heavy_cells``)."""
    names = [
        NC,
        *[f"a{j + 1}" for j, m in enumerate(plan.measures) if j not in bases and m.kind != "count_distinct"],
        *[v[0] for j, v in bases.items() if j != "canon"],
    ]
    names = list(dict.fromkeys(bases["canon"].get(n, n) for n in names))
    u = exp.column(U, quoted=True)
    kcols = [exp.column(n) for n in knames]
    order = exp.Order(expressions=[exp.Ordered(this=c) for c in kcols])
    frame = exp.WindowSpec(kind="ROWS", start="UNBOUNDED", start_side="PRECEDING", end="CURRENT ROW")
    R = exp.Literal.number(_bounds(plan).max_rows)
    nt = exp.column(NT, quoted=True)
    heavy = exp.select(
        exp.Star(),
        *[
            exp.alias_(
                exp.Cast(  # a running sum of counts: a bigint (not a 128-bit or numeric sum)
                    this=exp.Window(
                        this=exp.Sum(this=exp.column(n, quoted=True)),
                        partition_by=[u.copy()],
                        order=order.copy(),
                        spec=frame.copy(),
                    ),
                    to=exp.DataType.build("bigint"),
                ),
                CUM + n,
                quoted=True,
            )
            for n in names
        ],
        *([exp.alias_(_offset(u.copy()), HO, quoted=True)] if offset else []),
    )
    if known_heavy:
        return [("cum", heavy.from_(source))]
    tot = (
        exp.select(
            u.copy(),
            exp.alias_(
                exp.Cast(this=exp.Sum(this=exp.column(NC, quoted=True)), to=exp.DataType.build("bigint")),
                NT,
                quoted=True,
            ),
        )
        .from_(source)
        .group_by(u.copy())
    )
    whole = (
        exp.select(
            exp.Column(this=exp.Star(), table=exp.to_identifier(source)),
            exp.column(NT, table="tot", quoted=True),
        )
        .from_(source)
        .join(
            "tot",
            on=exp.EQ(
                this=exp.column(U, table=source, quoted=True),
                expression=exp.column(U, table="tot", quoted=True),
            ),
        )
    )
    bigint = exp.DataType.build("bigint")
    light = (
        exp.select(
            exp.Star(),
            *[exp.alias_(exp.Cast(this=exp.Null(), to=bigint.copy()), CUM + n, quoted=True) for n in names],
            exp.alias_(exp.Cast(this=exp.Null(), to=bigint.copy()), HO, quoted=True),
        )
        .from_("whole")
        .where(exp.LTE(this=nt.copy(), expression=R.copy()))
    )
    heavy = heavy.from_("whole").where(exp.GT(this=nt.copy(), expression=R.copy()))
    return [("tot", tot), ("whole", whole), ("cum", exp.union(light, heavy, distinct=False))]


def _idiv(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="DPGATE_IDIV", expressions=[a, b])


def _scaled(
    a: exp.Expression, n: exp.Expression, rows: int | exp.Expression, integral: bool
) -> exp.Expression:
    """a·R/n (R, ``rows``, an int or an integer expression ≤ n): for an integer sum q·R + (r·R) / n
    with q, r = a div n, a mod n (no overflow; truncated toward zero, so within
    [R·lower, R·upper]); else in double precision."""
    R = exp.Literal.number(rows) if isinstance(rows, int) else exp.Paren(this=rows)
    if not integral:
        return exp.Div(
            this=exp.Mul(this=exp.Cast(this=a.copy(), to=exp.DataType.build("double")), expression=R.copy()),
            expression=n.copy(),
        )
    q = _idiv(a.copy(), n.copy())
    r = exp.Mod(this=a.copy(), expression=n.copy())
    return exp.Add(
        this=exp.Mul(this=q, expression=R.copy()),
        expression=_idiv(exp.Mul(this=exp.Paren(this=r), expression=R.copy()), n.copy()),
    )


def kept_rows(plan: Plan, reads: list[exp.Expression], key_sql: KeySql) -> tuple[exp.Select, exp.Expression]:
    """The ``kept`` relation (the source's rows with their rank within their unit's cell —
    in total mode within the unit —, and their cell's rank among the unit's cells) and the
    predicate that keeps the bounded rows. ``reads``: the scan's per-row expressions (their columns order a unit's rows);
    ``key_sql(g)`` a group key's scan expression (:mod:`.emit`)."""
    b = _bounds(plan)
    unit = exp.column(b.column, quoted=True)
    keys = [key_sql(g) for g in plan.group_by]
    values = _columns(reads, exclude=b.column)
    order = [_hash([_salt(), unit.copy(), *[v.copy() for v in values]]), *[v.copy() for v in values]]
    within = [] if b.total else [k.copy() for k in keys]  # total mode: R rows over all its cells
    rn = exp.Window(
        this=exp.RowNumber(),
        partition_by=[unit.copy(), *within],
        order=exp.Order(expressions=[exp.Ordered(this=o) for o in order]),
    )
    cols: list[exp.Expr] = [exp.Star(), exp.alias_(rn, RN, quoted=True)]
    keep: exp.Expression = exp.LTE(
        this=exp.column(RN, quoted=True), expression=exp.Literal.number(b.max_rows)
    )
    if keys and b.max_groups < plan.n_cells:
        gorder = [_hash([_salt(), unit.copy(), *[k.copy() for k in keys]]), *[k.copy() for k in keys]]
        gn = exp.Window(
            this=exp.Anonymous(this="DENSE_RANK"),
            partition_by=[unit.copy()],
            order=exp.Order(expressions=[exp.Ordered(this=o) for o in gorder]),
        )
        cols.append(exp.alias_(gn, GN, quoted=True))
        keep = exp.And(
            this=keep,
            expression=exp.LTE(this=exp.column(GN, quoted=True), expression=exp.Literal.number(b.max_groups)),
        )
    kept = exp.select(*cols).from_(plan.from_())
    kept = kept.where(exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null())), copy=False)
    if plan.where is not None:
        kept = kept.where(exp.Paren(this=plan.where.copy()), copy=False)
    return kept, keep


def _columns(nodes: Iterable[exp.Expression], exclude: str) -> list[exp.Column]:
    """The distinct source columns the measures read (their values order the rows)."""
    seen: set[str] = set()
    out: list[exp.Column] = []
    for n in nodes:
        for c in n.find_all(exp.Column):
            if c.name not in seen and c.name != exclude:
                seen.add(c.name)
                out.append(exp.column(c.name, quoted=True))
    return sorted(out, key=lambda c: c.name)


def spell_hashes(
    tree: exp.Expr,
    spell: Callable[[list[exp.Expr]], exp.Expr],
    idiv: Callable[[exp.Expr, exp.Expr], exp.Expr] | None = None,
    hash_mod: Callable[[exp.Expr, list[exp.Expr]], exp.Expr] | None = None,
) -> exp.Expr:
    """``tree`` with each ``DPGATE_HASH(…)`` replaced by ``spell(args)`` (the backend's hash),
    each ``DPGATE_IDIV(a, b)`` by ``idiv(a, b)`` (integer division toward zero) and each
    ``DPGATE_HASHMOD(n, …)`` by ``hash_mod(n, args)`` (the keyed hash as an integer in [0, n))."""

    def swap(node: exp.Anonymous) -> exp.Expr:
        if isinstance(node, exp.Anonymous) and node.name.upper() == "DPGATE_HASH":
            return spell(node.expressions)
        if hash_mod is not None and isinstance(node, exp.Anonymous) and node.name.upper() == "DPGATE_HASHMOD":
            return hash_mod(node.expressions[0], node.expressions[1:])
        if idiv is not None and isinstance(node, exp.Anonymous) and node.name.upper() == "DPGATE_IDIV":
            return idiv(*node.expressions)
        return node

    for node in reversed(list(tree.find_all(exp.Anonymous, bfs=False))):  # innermost first (they nest)
        new = swap(node)
        if new is not node:
            if node is tree:
                return new
            node.replace(new)
    return tree


def _salt() -> exp.Expression:
    """The salt: a named parameter, bound by the backend (:func:`salted`)."""
    return exp.Placeholder(this=SALT_PARAM)


def _hash(args: list[exp.Expression]) -> exp.Expression:
    """A keyed row hash; :func:`rewriter.emit.for_dialect` spells it per backend."""
    return exp.Anonymous(this="DPGATE_HASH", expressions=args)
