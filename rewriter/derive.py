"""Which earlier central releases a statement follows from by post-processing: the plan side.

A central release is a noisy value per cell of a public key domain, for the rows a relation
(table, lookup joins, privacy unit and its bounds) keeps under a WHERE. Its *signature*
(:func:`signature`) says that from the plan: the *family* (the relation and WHERE as the
canonical text :meth:`rewriter.plan.Plan.canonical` writes them, group keys and aggregates
left out), its keys (canonical text, type, whether the key is a column itself) and its
aggregates (label and bounds, as the canonical text names them). A new statement follows
from a release of its family when

* its group keys are some of the release's keys (a coarser GROUP BY: a cell of the new
  statement is the sum of the release's cells that agree on its keys — exact for counts and
  sums when every row lies in some cell of each key summed over: :func:`total`, or a WHERE
  that names the key's values, :func:`_closed`; the release's cells are its domain's every
  cell, empty ones included);
* its WHERE is the release's plus conjuncts that each read one column and are true or false of
  each whole cell of one of the release's keys — a column key, a derived key the statement
  groups by too, or a ``date_trunc`` key (a range on its column that cuts no bucket). That is
  checked by restricting the key's domain by the conjunct and by its negation
  (:func:`rewriter.keyfilter.restrict` keeps every value a row passing it can have): a value
  kept by neither has no row, by one only has all its rows on that side, by both is split;
* its aggregates are among the release's (COUNT/SUM summed over cells; any aggregate of one
  cell as it is) or an AVG whose SUM and COUNT are (their ratio).

The family is compared as text written by one function from both plans (conjuncts sorted,
literals normalised), never from the statements' text. :func:`where_variants` gives the
families a statement's WHERE may come from (its conjuncts on one column taken out, in every
combination); :func:`cell_map` maps the new statement's cells onto a release's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from .keyfilter import restrict
from .plan import Aggregate, GroupKey, Plan, conjuncts

SIGNATURE_VERSION = 1
MAX_KEY_CONJUNCTS = 4  # conjuncts on one column tried as key filters (2^4 families at most)
_EMPTY_TAIL = ";group=;aggs=;unit="
SUMMABLE = ("count", "sum")  # a cell of a coarser GROUP BY is the sum of these (exact)
_TIME_TYPES = ("date", "timestamp")


def derivable(plan: Plan) -> bool:
    """A central plan whose cells may be derived from, or derive: a public key domain, no
    sparse-vector selection, not over a per-unit relation."""
    return not plan.selected and plan.selection is None and not plan.per_unit and bool(plan.aggregates)


def agg_signature(a: Aggregate) -> str:
    """An aggregate as the canonical text names it: label, bounds, mean mechanism."""
    return f"{a.label}[{a.lower},{a.upper}]" + (f"/{a.mechanism}" if a.mechanism else "")


def family(plan: Plan, where: exp.Expression | None = None, *, own: bool = True) -> str:
    """The relation and WHERE of ``plan`` (``where`` instead of its own, unless ``own``) as
    canonical text: the canonical text of the same plan without keys and aggregates."""
    bare = dataclasses.replace(
        plan,
        where=plan.where if own else where,
        group_by=(),
        measures=(),
        aggregates=(),
        outputs=(),
        order_by=(),
        limit=None,
        offset=0,
        selection=None,
        row_filter=None,
        key_filter=(),
        lookups=(),
        lookups_done=False,
        key_tuples=(),
    )
    return bare.canonical()


def index_prefix(plan: Plan, where: exp.Expression | None) -> str:
    """What the canonical text of every release of ``plan``'s table under ``where``
    starts with (the ledger's index: ``releases.canonical``)."""
    text = dataclasses.replace(
        plan,
        where=where,
        group_by=(),
        measures=(),
        aggregates=(),
        outputs=(),
        unit=None,
        joins=(),
        relation=None,
        per_unit="",
        selection=None,
    ).canonical()
    if not text.endswith(_EMPTY_TAIL):  # canonical()'s form: table=…;where=…;group=;aggs=;unit=
        raise ValueError(f"a canonical text not of the form this index reads: {text!r}")
    return text[: -len(_EMPTY_TAIL)] + ";group="


def table_prefix(plan: Plan) -> str:
    """What the canonical text of every release of ``plan``'s table starts with."""
    return f"table={plan.table};where="


def signature(plan: Plan) -> dict[str, Any]:
    """What a release of ``plan`` stores beside its cells so that later statements can be
    derived from it (JSON)."""
    return {
        "v": SIGNATURE_VERSION,
        "family": family(plan),
        "keys": [[g.column, g.type, g.expr is None, trunc_of(g), total(g)] for g in plan.group_by],
        "aggs": [agg_signature(a) for a in plan.aggregates],
    }


@dataclass
class Variant:
    """A family a statement may be derived from: ``plan``'s WHERE as ``where``, without
    ``removed`` (conjuncts that read one column each); its index prefix ``prefix``, its
    text :meth:`family` (computed when a candidate's prefix matches)."""

    plan: Plan
    where: exp.Expression | None
    prefix: str
    removed: tuple[exp.Expression, ...]
    _family: str | None = None

    def family(self) -> str:
        if self._family is None:
            self._family = family(self.plan, self.where, own=False)
        return self._family


def where_variants(plan: Plan) -> list[Variant]:
    """The families ``plan``'s cells may be derived from: its own, then its WHERE less each
    combination of its conjuncts that read one column (at most :data:`MAX_KEY_CONJUNCTS`)."""
    parts = list(conjuncts(plan.where)) if plan.where is not None else []
    single = [c for c in parts if len({col.name for col in c.find_all(exp.Column)}) == 1][:MAX_KEY_CONJUNCTS]
    out: list[Variant] = []
    for r in range(len(single) + 1):
        for removed in itertools.combinations(single, r):
            rest = [c for c in parts if not any(c is x for x in removed)]
            where: exp.Expression | None = None
            for c in rest:  # the conjuncts left, in their order
                where = c.copy() if where is None else exp.And(this=where, expression=c.copy())
            out.append(Variant(plan, where, index_prefix(plan, where), removed))
    return out


@dataclass(frozen=True)
class CellMap:
    """A statement's cells on a release's: per cell of the statement (in ``plan.cells``
    order), the indices of the release's cells it sums; ``rolled``: the release's keys summed
    over (not keys of the statement); ``filtered``: those restricted by a conjunct."""

    cells: list[list[int]]
    rolled: tuple[str, ...]
    filtered: tuple[str, ...]

    @property
    def most(self) -> int:
        return max((len(c) for c in self.cells), default=0)


def cell_map(
    plan: Plan,
    keys: Sequence[Sequence[Any]],
    stored: Sequence[Sequence[Any]],
    removed: Sequence[exp.Expression],
    encode: Callable[[Any], Any],
) -> CellMap | None:
    """``plan``'s cells as sums of a release's, or None. ``keys``: the release's
    (column text, type, plain) per key; ``stored``: its cells' key values (as stored:
    ``encode`` turns a plan's value into that form); ``removed``: the conjuncts of
    ``plan``'s WHERE the release's family does not have — each must be a filter on one of
    the release's keys that is true or false of a whole cell."""
    where = {}
    for i, g in enumerate(plan.group_by):
        at = [j for j, k in enumerate(keys) if k[0] == g.column and k[1] == g.type]
        if not at or g.domain is None:
            return None
        where[i] = at[0]
    kept: dict[int, set[Any]] = {}  # release key -> the values its conjuncts keep
    closed: dict[int, bool] = {}  # … and whether only rows in those cells pass them
    for conj in removed:
        hit = _filter(plan, keys, stored, conj)
        if hit is None:
            return None
        j, values = hit
        kept[j] = kept[j] & values if j in kept else values
        closed[j] = closed.get(j, False) or _closed(conj, values)
    mine = set(where.values())
    for j, key in enumerate(keys):  # a key summed over must hold every row the WHERE passes
        if j not in mine and not _is_total(key) and not closed.get(j, False):
            return None
    by_key: dict[tuple[Any, ...], list[int]] = {}
    for n, cell in enumerate(stored):
        if all(cell[j] in vals for j, vals in kept.items()):
            by_key.setdefault(tuple(cell[where[i]] for i in range(len(plan.group_by))), []).append(n)
    out = []
    for cell in plan.cells:
        hit_cells = by_key.get(tuple(encode(v) for v in cell))
        if not hit_cells:  # a key value the release has not got (or that its filters rule out)
            return None
        out.append(hit_cells)
    rolled = tuple(keys[j][0] for j in range(len(keys)) if j not in mine)
    return CellMap(out, rolled, tuple(keys[j][0] for j in sorted(kept)))


def _is_total(key: Sequence[Any]) -> bool:
    """Whether every row lies in one of the key's cells (as its release stored it)."""
    return len(key) > 4 and bool(key[4])


def total(g: GroupKey) -> bool:
    """Every value the key's expression can take is in its domain, so every row lies in one
    of its cells and a sum over them is the sum over the rows: a CASE (its labels, and NULL
    without ELSE) or a boolean expression (false, true, and NULL when it can be NULL:
    :mod:`rewriter.keys`); a boolean column only with a NULL bin. A declared
    domain, bins within bounds or a date part may leave rows in no cell (a value outside
    the domain or the bounds: :mod:`rewriter.cells`), so summing over them is not the SQL's
    total."""
    node = g.expr.this if isinstance(g.expr, exp.Cast) else g.expr
    if isinstance(node, exp.Case):
        return True
    if g.type != "bool" or g.domain is None or not {False, True} <= set(g.domain):
        return False
    return None in g.domain or g.expr is not None  # a derived boolean has its NULL bin when it can be NULL


def _closed(conj: exp.Expression, kept: set[Any]) -> bool:
    """Whether only rows whose key is one of ``kept`` pass ``conj``: it is ``k = literal``,
    ``k IN (literals)``, ``k IS NULL``, a boolean ``k`` / ``NOT k``, or an OR of these, and
    each of its values is a kept (domain) value — a row outside the domain passes none."""
    values = _members(conj)
    return values is not None and len(values) == len(kept)


def _members(node: exp.Expression) -> set[str] | None:
    """The values (as SQL text) a conjunct on one column is true of, when it names them."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Or):
        a, b = _members(node.this), _members(node.expression)
        return None if a is None or b is None else a | b
    if isinstance(node, exp.Column):
        return {"TRUE"}
    if isinstance(node, exp.Not) and isinstance(node.this, exp.Column):
        return {"FALSE"}
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null) and not node.args.get("negate"):
        return {"NULL"} if isinstance(node.this, exp.Column) else None
    if isinstance(node, exp.EQ):
        side = node.expression if isinstance(node.this, exp.Column) else node.this
        return {side.sql()} if _constant(side) else None
    if isinstance(node, exp.In) and isinstance(node.this, exp.Column) and not node.args.get("query"):
        items = node.expressions
        return {e.sql() for e in items} if items and all(_constant(e) for e in items) else None
    return None


def _constant(node: exp.Expression) -> bool:
    return not any(isinstance(n, exp.Column) for n in node.walk()) and all(
        isinstance(n, (exp.Literal, exp.Boolean, exp.Cast, exp.DataType, exp.Neg, exp.Paren))
        for n in node.walk()
    )


def _filter(
    plan: Plan, keys: Sequence[Sequence[Any]], stored: Sequence[Sequence[Any]], conj: exp.Expression
) -> tuple[int, set[Any]] | None:
    """(the release key ``conj`` filters, the stored values it keeps) when ``conj`` is true
    or false of each whole cell of that key. The key's domain is restricted by ``conj`` and
    by ``NOT conj`` (:func:`rewriter.keyfilter.restrict`: each keeps every value a row
    passing it can have, never fewer): a value kept by both holds rows on each side — the
    cell is split, and another key is tried; none: None."""
    cols = {c.name for c in conj.find_all(exp.Column)}
    if len(cols) != 1:
        return None
    col = next(iter(cols))
    negated = exp.Not(this=exp.Paren(this=conj.copy()))
    for j, key in enumerate(keys):
        column, typ, plain = key[0], key[1], key[2]
        trunc = key[3] if len(key) > 3 else None
        expr: exp.Expression | None = None
        if plain:
            if column != col:
                continue
        elif trunc is not None:
            if trunc[1] != col:
                continue
            expr = _trunc_expr(trunc[0], col, typ)
        else:
            exprs = [g.expr for g in plan.group_by if g.column == column and g.expr is not None]
            if not exprs or exprs[0] is None:
                continue
            expr = exprs[0]
        back = {_typed(v, typ): v for v in {cell[j] for cell in stored}}
        domain = tuple(sorted(back, key=lambda v: (v is None, v)))
        g = GroupKey(column, typ, domain, expr)
        types = {col: typ} if typ in _TIME_TYPES else {}
        (pos,), kept_by = restrict((g,), conj, types)
        (neg,), split_by = restrict((g,), negated, types)
        if not kept_by or not split_by:  # a conjunct the evaluator does not interpret on this key
            continue
        kept = set(pos.domain or ())
        if kept & set(neg.domain or ()):  # rows of one cell on both sides
            continue
        return j, {back[v] for v in kept}
    return None


def trunc_of(g: GroupKey) -> list[str] | None:
    """[unit, column] of a ``date_trunc(unit, column)`` key (as :mod:`rewriter.keys` builds it,
    possibly cast), else None: a release stores it, so that a range on the column can be
    checked against the key's buckets without the statement grouping by it."""
    node = g.expr.this if isinstance(g.expr, exp.Cast) else g.expr
    if not (
        isinstance(node, exp.Anonymous) and node.name.upper() == "DATE_TRUNC" and len(node.expressions) == 2
    ):
        return None
    unit, col = node.expressions
    if isinstance(col, exp.Cast):
        return None  # (a cast column: not rebuilt here)
    if isinstance(unit, exp.Literal) and unit.is_string and isinstance(col, exp.Column):
        return [unit.this.lower(), col.name]
    return None


def _trunc_expr(unit: str, column: str, typ: str) -> exp.Expression:
    """The scan expression of a ``date_trunc(unit, column)`` key of type ``typ``."""
    call = exp.Anonymous(
        this="DATE_TRUNC", expressions=[exp.Literal.string(unit), exp.column(column, quoted=True)]
    )
    return exp.Cast(this=call, to=exp.DataType.build(typ))


def _typed(v: Any, typ: str) -> Any:
    """A stored key value (a date or timestamp as ISO text) as the plan holds it."""
    if isinstance(v, str) and typ == "timestamp":
        return dt.datetime.fromisoformat(v)
    if isinstance(v, str) and typ == "date":
        return dt.date.fromisoformat(v)
    return v
