"""Per-unit histograms: questions about each privacy unit's own count.

    SELECT n, COUNT(*) FROM (SELECT customer_id, COUNT(*) AS n FROM purchases
                             GROUP BY customer_id) t GROUP BY n        -- orders per customer
    SELECT COUNT(*) FROM (…) t WHERE n > 10                            -- customers with more than 10

The inner query groups a table with a privacy unit by that unit and selects per-unit
counts (``COUNT(*)``, ``COUNT(col)``, ``COUNT(DISTINCT col)``): its relation has ONE row
per unit, a function of that unit's rows only (lookup joins attach public rows or rows of
the same person, :mod:`.joins`). dpgate's neighbouring notion is add/remove one unit with
all its rows; that adds or removes exactly one row of this relation and changes no other.
So the outer query is planned as an ordinary row-level statement over the per-unit
relation (each of its rows is one unit) and every mechanism runs at the tier's ε with its
row-level sensitivity: a histogram over a public bucket domain changes in one count by 1
(L1 = 1), ``COUNT(*) … WHERE n > 10`` by 1, ``SUM(n)`` by at most the cap.

* **The bucket domain is public**: ``GROUP BY n`` releases buckets 0..cap, cap being the
  ``max_rows_per_unit`` of the table (the largest of the people's tables joined); a count
  above the cap lands in the cap's bucket (it reads "cap or more"). The cap is public
  config, so any cap keeps the guarantee; it sets how many buckets are released. Bins
  over n (``CASE WHEN n >= 5 THEN …``) are answered when each comparison of n with a
  number gives the same result for every count from the cap up; other expressions of n
  in a group key are refused (they would read the capped value).
* **Filters are exact**: an outer ``WHERE`` over the counts is evaluated on each unit's
  own count (uncapped), in the scan: it only decides which units are counted. That is
  the histogram's sum over the buckets the WHERE keeps, released as one count (one noise
  draw rather than one per bucket, and exact for thresholds above the cap).
* ``SELECT unit … GROUP BY unit`` with no count: the outer ``COUNT(*)`` counts units.
* ``SUM``/``AVG`` of a count clamp it to [0, cap], as any declared bound does.
* **Who is in the relation**: the units with at least one row passing the inner WHERE —
  as in SQL, a unit with no row is in no group, so over one table bucket 0 holds only units
  whose counted column is NULL on all their rows. Joining the table of the people on the
  unit (TPC-H Q13: ``customers c LEFT JOIN orders o ON c.customer_id = o.customer_id``,
  ``COUNT(o.order_id)``) puts the people with no order in bucket 0 (:func:`_unit_join`).
  Rows whose unit is NULL belong to no person and are left out (as everywhere in dpgate).

A join in the subquery is read by the lookup rules (:mod:`.joins`); where they find no
order, two tables of the same people joined on the unit of both are read as they are
(:func:`_unit_join`: the GROUP BY makes each person's joined rows that person's one row).

Any other inner GROUP BY on the privacy unit (other aggregates, other keys beside the
unit, HAVING, LIMIT) is refused with 0A000: its rows would single out units, and it never
goes through partition selection. SQL only: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeGuard

from sqlglot import exp

from config import Config
from config.models import Column, Table

from . import predicate, shape
from .args import understood
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import Refusal
from .joins import UNIT_COLUMN, Relation, resolve
from .plan import GroupKey, Plan, conjuncts
from .scope import Ctx
from .unit import caps

__all__ = ["PerUnit", "finish", "inner", "is_unit", "over", "refuse_unit_key"]

RELATION = "__dpgate_units"
HINT = (
    "Ask a per-unit histogram: SELECT n, COUNT(*) FROM (SELECT <unit>, COUNT(*) AS n FROM <table> "
    "GROUP BY <unit>) t GROUP BY n, or filter it: SELECT COUNT(*) FROM (…) t WHERE n > 10."
)
_INNER_OK = {"expressions", "from_", "where", "group", "joins"}
_COMPARE = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ, exp.NEQ)


@dataclass(frozen=True)
class PerUnit:
    """The per-unit relation an outer query reads (module docstring)."""

    rel: Relation  # the virtual table: one int column per per-unit count
    alias: str  # the derived table's alias in the outer query
    unit: str  # the unit as the analyst names it (customer_id, orders.customer_id)
    unit_names: tuple[str, ...]  # the inner select's names for the unit column (refused outside)
    cap: int  # the bucket domain is 0..cap (max_rows_per_unit)
    counts: tuple[str, ...]  # the names of the per-unit counts
    zero: str  # who is in bucket 0, in words
    types: dict[int, str | None] = field(default_factory=dict)  # the inner WHERE's parameter state,
    used: set[int] = field(default_factory=set)  # shared with the outer query's context

    def describe(self) -> str:
        """The guarantee and the bucket domain in words (NOTICE, EXPLAIN)."""
        return (
            f"privacy unit: {self.unit} (a per-unit histogram: each {self.unit} is one row of the per-unit "
            f"subquery, so adding or removing one changes one count by 1 and mechanisms run at ε; "
            f"per-unit counts are bucketed 0..{self.cap}, {self.cap} meaning {self.cap} or more "
            f"(max_rows_per_unit); a WHERE on a count is exact; {self.zero})"
        )


def is_unit(rel: Relation, config: Config, column: str) -> bool:
    """Does the (resolved) column hold the privacy unit of ``rel``'s rows? Its own unit column,
    or the unit column of a table of the same unit looked up in the join (``o_custkey`` of an
    orders joined to lineitem, ``c_custkey`` of a customer joined on it)."""
    t = rel.table
    if t.privacy_unit is None:
        return False
    if column == t.privacy_unit:
        return True
    return any(
        config.tables[n].unit == t.unit and config.tables[n].privacy_unit == column
        for n, _, _, how in rel.joins
        if how in ("inner", "left")
    )


def refuse_unit_key(groups: Sequence[GroupKey], rel: Relation, config: Config) -> None:
    """A GROUP BY on the privacy unit itself releases one row per person: refused (0A000)."""
    for g in groups:
        if g.expr is None and is_unit(rel, config, g.column):
            raise Refusal(
                UNSUPPORTED,
                f"GROUP BY the privacy unit ({_unit_label(rel, config) if g.column == UNIT_COLUMN else g.column}) "
                "would release one row per "
                f"{_unit_label(rel, config)}; dpgate answers questions about per-unit values as "
                "a histogram of them.",
                hint=HINT,
            )


def _unit_label(rel: Relation, config: Config) -> str:
    return config.tables[rel.name].unit_name or rel.table.privacy_unit or "unit"


def _group_column(g: exp.Expr, items: list[exp.Expression], columns: Collection[str]) -> exp.Expr:
    """A GROUP BY item as the expression it names: by position, by a select alias (where no
    column of the table has that name, as Postgres resolves it), or itself."""
    if isinstance(g, exp.Literal) and g.is_int and 1 <= int(g.this) <= len(items):
        g = items[int(g.this) - 1]
    elif isinstance(g, exp.Column) and not g.table and g.name not in columns:
        g = next((e for e in items if isinstance(e, exp.Alias) and e.alias == g.name), g)
    g = g.unalias() if isinstance(g, exp.Alias) else g
    while isinstance(g, exp.Paren):
        g = g.this
    return g


def inner(select: exp.Select, alias: str, config: Config, params: list[Any] | None) -> PerUnit | None:
    """The per-unit relation of an aggregating derived table that groups by the privacy
    unit; None when it does not group by the unit (planned as before); a refusal when it
    groups by the unit but is not a per-unit count."""
    select = select.copy()
    shape.check_statement(select)
    group = select.args.get("group")
    if group is None or not group.expressions:
        return None
    trial = select.copy()
    extra: list[exp.Expression] = []
    try:  # a lookup join, as everywhere (consumes the JOINs)
        rel, select = resolve(trial, config), trial
    except Refusal:  # else two tables of the same people on the unit
        unit_join = _unit_join(select, config)
        if unit_join is None:
            raise
        rel, extra = unit_join
    unit_column = rel.table.privacy_unit
    if unit_column is None:
        return None
    ctx = Ctx(rel.name, rel.table, rel.qualifiers, params, owners=rel.owners)
    rel = _join_condition(rel, extra, ctx)
    keys = [_group_column(g, select.expressions, rel.table.columns) for g in group.expressions]
    on_unit = [
        isinstance(k, exp.Column)
        and not k.is_star
        and k.name in rel.table.columns
        and (not k.table or k.table in rel.qualifiers)
        and is_unit(rel, config, ctx.column(k).node.name)
        for k in keys
    ]  # (a select alias or another name: not the unit; the rules decide)
    if not any(on_unit):
        return None
    label = _unit_label(rel, config)
    if len(keys) != 1:
        raise Refusal(
            UNSUPPORTED,
            f"a subquery grouped by the privacy unit ({label}) and other keys gives a "
            "unit several rows; group by the unit alone.",
            hint=HINT,
        )
    bad = [k for k, v in select.args.items() if v not in (None, [], False) and k not in _INNER_OK]
    if bad:
        raise Refusal(
            UNSUPPORTED,
            f"{bad[0].rstrip('_').upper()} in a subquery grouped by the privacy unit "
            f"({label}) is not supported; filter the per-unit counts in the outer WHERE.",
            hint=HINT,
        )
    shape.check_nesting(select)
    cap = max(
        caps(n, config.tables[n])[1]
        for n in [rel.name, *(j[0] for j in rel.joins)]
        if not config.tables[n].public
    )  # the largest row cap of the people's tables read
    cols: dict[str, Column] = {}
    items: list[exp.Expr] = []
    unit_names: list[str] = []
    for e in select.expressions:
        name = e.alias if isinstance(e, exp.Alias) else None
        node = e.unalias() if isinstance(e, exp.Alias) else e
        if (
            isinstance(node, exp.Column)
            and not node.is_star
            and is_unit(rel, config, ctx.column(node).node.name)
        ):
            unit_names.append(name or node.name)
            continue
        measure = _count(node, ctx)
        if measure is None:
            raise Refusal(
                UNSUPPORTED,
                f"a subquery grouped by the privacy unit ({label}) selects the unit and "
                f"per-unit counts (COUNT(*), COUNT(col), COUNT(DISTINCT col)), not "
                f"{node.sql('postgres')[:60]}: other values would single out units.",
                hint=HINT,
            )
        name = name or "count"
        if name in cols or name in unit_names:
            raise Refusal(
                "42702", f"the subquery has two columns named {name}; give each its own alias.", hint=None
            )
        cols[name] = Column(
            type="int",
            domain_range=(0, cap),
            lower=0,
            upper=cap,
            nullable=False,
            description=f"per-{label} count, bucketed 0..{cap} ({cap} or more)",
        )
        items.append(exp.alias_(measure, name, quoted=True))
    if not items:  # SELECT unit … GROUP BY unit: the outer query counts the units
        cols["__dpgate_one"] = Column(type="int", domain=[1], lower=1, upper=1, nullable=False)
        items.append(exp.alias_(exp.Literal.number(1), "__dpgate_one", quoted=True))
    unit = exp.column(unit_column, quoted=True)  # the join keeps the base table's unit column
    w = select.args.get("where")
    cond: exp.Expr = exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null()))
    if w is not None:
        cond = exp.and_(cond, exp.Paren(this=predicate.where(w.this, ctx)))
    src = rel.relation if rel.relation is not None else exp.to_table(config.source_of(rel.name))
    q = exp.select(*items).from_(src).where(cond).group_by(unit.copy())
    relation = exp.Subquery(this=q, alias=exp.TableAlias(this=exp.to_identifier(RELATION)))
    table = Table(columns=cols, description=f"one row per {label}")
    vrel = Relation(rel.name, table, {alias}, None, relation, rel.joins)
    outer_join = any(j[3] == "unit-left" for j in rel.joins)
    zero = (
        f"a {label} of {rel.name} with no row in {rel.joins[0][0]} is in bucket 0"
        if outer_join
        else f"a {label} with no row in {rel.name} is in no bucket"
    )
    counts = tuple(c for c in cols if c != "__dpgate_one")
    return PerUnit(vrel, alias, label, tuple(unit_names), cap, counts, zero, ctx.types, ctx.used)


def _plain_table(t: object, config: Config) -> TypeGuard[exp.Table]:
    """A declared table named plainly (no schema, no nested joins)."""
    return (
        isinstance(t, exp.Table)
        and isinstance(t.this, exp.Identifier)
        and t.name in config.tables
        and not t.args.get("db")
        and not t.args.get("joins")
    )


def _unit_join(select: exp.Select, config: Config) -> tuple[Relation, list[exp.Expression]] | None:
    """``FROM customers c [LEFT] JOIN orders o ON c.customer_id = o.customer_id`` grouped by
    the unit: two tables of the same people joined on the privacy unit of both. One person's
    rows meet only that person's rows, and the GROUP BY makes them one row of that person,
    so the join may repeat rows (one customer, many orders) — which a lookup join outside a
    per-unit subquery may not. A LEFT JOIN from the table of the people keeps those with no
    row on the right (TPC-H Q13: ``COUNT(o.order_id)`` is 0 for them: bucket 0). Further ON
    conditions on the right side's rows (Q13's ``AND o_comment NOT LIKE …``) are returned to
    be checked as row predicates (:func:`_join_condition`). None if the statement is not such
    a join (the lookup rules decide)."""
    joins = select.args.get("joins") or []
    if len(joins) != 1:
        return None
    j = joins[0]
    side, kind = (j.side or "").upper(), (j.kind or "").upper()
    right = j.this
    from_ = select.args.get("from_")
    left = from_.this if from_ is not None else None
    if (
        side not in ("", "LEFT")
        or kind not in ("", "INNER", "OUTER")
        or j.args.get("using")
        or j.args.get("method")
        or j.args.get("on") is None
    ):
        return None
    if not (_plain_table(left, config) and _plain_table(right, config)):
        return None
    lq, rq = left.alias or left.name, right.alias or right.name
    lt, rt = config.tables[left.name], config.tables[right.name]
    lu, ru = lt.privacy_unit, rt.privacy_unit
    if (
        lq == rq
        or lu is None
        or ru is None
        or any(t.public or t.mode != "central" or t.privacy is not None for t in (lt, rt))
        or lt.unit != rt.unit  # the same people only when both reach the same unit
        or "." in lu
        or "." in ru
    ):
        return None
    key: exp.Expression | None = None
    extra: list[exp.Expression] = []
    for cond in conjuncts(j.args["on"]):
        a, b = (cond.this, cond.expression) if isinstance(cond, exp.EQ) else (None, None)
        a, b = (_qualified(c, lq, lt, rq, rt) for c in (a, b))  # TPC-H: ON c_custkey = o_custkey
        if isinstance(a, exp.Column) and isinstance(b, exp.Column) and a.table == rq and b.table == lq:
            a, b = b, a
        if (
            key is None
            and isinstance(a, exp.Column)
            and isinstance(b, exp.Column)
            and (a.table, a.name, b.table, b.name) == (lq, lu, rq, ru)
        ):
            key = cond
        else:
            extra.append(cond)
    if key is None:
        return None
    cols, owners = dict(lt.columns), {c: {lq} for c in lt.columns}
    taken: list[str] = []
    for c, spec in rt.columns.items():
        if c == ru and c == lu:
            owners[c].add(rq)
            continue
        if c in cols:
            raise Refusal(
                UNSUPPORTED,
                f"column {c} is declared in both {left.name} and {right.name}; dpgate needs "
                "distinct names across joined tables.",
                hint=None,
            )
        cols[c] = spec if side == "" else spec.model_copy(update={"nullable": True})
        owners[c] = {rq}
        taken.append(c)
    b_, j_ = "__dpgate_b", "__dpgate_j"
    q = (
        exp.select(
            exp.Column(this=exp.Star(), table=exp.to_identifier(b_)),
            *[exp.column(c, j_, quoted=True) for c in taken],
        )
        .from_(exp.alias_(exp.to_table(config.source_of(left.name)), b_, table=True))
        .join(
            exp.alias_(exp.to_table(config.source_of(right.name)), j_, table=True),
            on=exp.EQ(
                this=exp.column(lu, b_, quoted=True),
                expression=exp.column(ru, j_, quoted=True),
            ),
            join_type="left" if side else "inner",
        )
    )
    for cond in extra:  # ON … AND <a condition on the right side's rows> (Q13's o_comment NOT LIKE …)
        for col in cond.find_all(exp.Column):
            if (
                col.table not in ("", rq)
                or col.name not in rt.columns
                or (not col.table and col.name in lt.columns)
            ):
                raise Refusal(
                    UNSUPPORTED,
                    f"a further condition in the ON of {left.name} JOIN {right.name} reads "
                    f"only {right.name}'s columns (qualified {rq}.col); filter {left.name}'s rows in WHERE.",
                    hint=HINT,
                )
    select.set("joins", None)
    relation = exp.Subquery(this=q, alias=exp.TableAlias(this=exp.to_identifier("__dpgate_rel")))
    rel = Relation(
        left.name,
        lt.model_copy(update={"columns": cols}),
        {lq, rq},
        owners,
        relation,
        ((right.name, lu, ru, "unit-" + ("left" if side else "inner")),),
    )
    return rel, extra


def _qualified(c: exp.Expression | None, lq: str, lt: Table, rq: str, rt: Table) -> exp.Expression | None:
    """An unqualified column of exactly one of the two joined tables, qualified by it."""
    if not isinstance(c, exp.Column) or c.table or c.is_star:
        return c
    owners = [q for q, t in ((lq, lt), (rq, rt)) if c.name in t.columns]
    return exp.column(c.name, owners[0]) if len(owners) == 1 else c


def _join_condition(rel: Relation, extra: list[exp.Expression], ctx: Ctx) -> Relation:
    """The unit join's relation with its further ON conditions, checked as row predicates
    of the right side (columns qualified with its alias in the scan)."""
    if not extra or rel.relation is None:  # a unit join's relation is its join (``_unit_join``)
        return rel
    both = exp.and_(*[c.copy() for c in extra]) if len(extra) > 1 else extra[0].copy()
    cond = predicate.where(both, ctx)
    for col in cond.find_all(exp.Column):
        col.set("table", exp.to_identifier("__dpgate_j"))
    relation = rel.relation.copy()
    join = relation.this.args["joins"][0]
    join.set("on", exp.and_(join.args["on"], exp.Paren(this=cond)))
    return replace(rel, relation=relation)


def _count(node: exp.Expr, ctx: Ctx) -> exp.Expression | None:
    """The per-unit count's scan expression, or None if ``node`` is not one."""
    if not isinstance(node, exp.Count):
        return None
    understood(node)
    arg = node.this
    if isinstance(arg, exp.Star):
        return exp.Count(this=exp.Star())
    if isinstance(arg, exp.Column):
        return exp.Count(this=ctx.column(arg).node)
    if (
        isinstance(arg, exp.Distinct)
        and len(arg.expressions) == 1
        and isinstance(arg.expressions[0], exp.Column)
        and not arg.args.get("on")
    ):
        return exp.Count(this=exp.Distinct(expressions=[ctx.column(arg.expressions[0]).node]))
    return None


def over(outer: exp.Select, per: PerUnit) -> exp.Select:
    """The outer query reading the per-unit relation as a table (planned by the rules)."""
    outer = outer.copy()
    outer.set(
        "from_",
        exp.From(
            this=exp.Table(
                this=exp.to_identifier(per.rel.name), alias=exp.TableAlias(this=exp.to_identifier(per.alias))
            )
        ),
    )
    for c in outer.find_all(exp.Column):
        if c.name in per.unit_names and (not c.table or c.table == per.alias):
            raise Refusal(
                UNSUPPORTED,
                f"{c.name} is the privacy unit: over a per-unit subquery the outer query "
                f"reads the per-unit counts ({', '.join(per.counts) or 'none selected'}); count units "
                "with COUNT(*).",
                hint=HINT,
            )
    return outer


def finish(plan: Plan, per: PerUnit) -> Plan:
    """The outer plan over the per-unit relation: a plain count key is bucketed at the cap;
    a derived key over the counts must not tell counts from the cap up apart."""
    groups: list[GroupKey] = []
    for g in plan.group_by:
        if g.expr is None and g.column in per.counts:
            col = exp.column(g.column, quoted=True)
            g = GroupKey(
                g.column,
                "int",
                tuple(range(per.cap + 1)),
                exp.Least(this=col, expressions=[exp.Literal.number(per.cap)]),
            )
        elif g.expr is not None:
            _check_bins(g.expr, per)
        groups.append(g)
    return replace(plan, group_by=tuple(groups), per_unit=per.describe())


def _check_bins(key: exp.Expression, per: PerUnit) -> None:
    """Every count in a derived key is compared with a number in a way that is constant
    for all counts from the cap up (``n >= cap``, ``n > c`` with c < cap …)."""
    for c in key.find_all(exp.Column):
        if c.name not in per.counts:
            continue
        parent = c.parent
        while isinstance(parent, exp.Paren):
            parent = parent.parent
        if not _constant_above(parent, c, per.cap):
            raise Refusal(
                UNSUPPORTED,
                f"a group key over the per-unit count {c.name} must not distinguish counts "
                f"of {per.cap} or more (max_rows_per_unit = {per.cap} caps the bucket domain).",
                hint=f"Use bins like CASE WHEN {c.name} >= {per.cap} THEN '{per.cap}+' … END or GROUP BY "
                f"{c.name}; a WHERE on {c.name} is exact (SELECT COUNT(*) … WHERE {c.name} > 50).",
            )


def _number(node: exp.Expr | None) -> float | None:
    while isinstance(node, exp.Paren):
        node = node.this
    neg = False
    if isinstance(node, exp.Neg):
        neg, node = True, node.this
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            v = float(node.this)
        except ValueError:
            return None
        return -v if neg else v
    return None


def _constant_above(cmp: exp.Expr | None, col: exp.Expression, cap: int) -> bool:
    """``cmp`` is a comparison of ``col`` with a number whose truth is the same for every
    integer count ≥ cap."""
    if isinstance(cmp, exp.Between) and cmp.this is col:
        lo, hi = _number(cmp.args.get("low")), _number(cmp.args.get("high"))
        return lo is not None and hi is not None and (hi < cap or lo > hi)
    if isinstance(cmp, exp.In) and cmp.this is col and not cmp.args.get("query"):
        vals = [_number(v) for v in cmp.expressions]
        return all(v is not None and v < cap for v in vals)
    if not isinstance(cmp, _COMPARE):
        return False
    a, b = cmp.this, cmp.expression
    while isinstance(a, exp.Paren):
        a = a.this
    while isinstance(b, exp.Paren):
        b = b.this
    op: type[exp.Expr]
    if a is col:
        op, v = type(cmp), _number(b)
    elif b is col:
        flip: dict[type[exp.Expr], type[exp.Expr]] = {
            exp.GT: exp.LT,
            exp.GTE: exp.LTE,
            exp.LT: exp.GT,
            exp.LTE: exp.GTE,
        }
        op, v = flip.get(type(cmp), type(cmp)), _number(a)
    else:
        return False
    if v is None:
        return False
    # n > v / n <= v: constant on [cap, ∞) iff v < cap; n >= v / n < v iff v <= cap; n = v / n <> v iff v < cap
    return v <= cap if op in (exp.GTE, exp.LT) else v < cap
