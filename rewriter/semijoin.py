"""Row predicates that look into another table: ``EXISTS (SELECT … FROM t WHERE t.c = o
AND …)``, ``NOT EXISTS (…)`` and ``o [NOT] IN (SELECT t.c FROM t WHERE …)``.

Such a subquery asks, for each row of the statement's relation, whether some row of
another declared table ``t`` matches it. The answer is a property of the row, and the row
stays one row (a semi-join never repeats it), so the bounding of each person's
contribution after it is unchanged — provided the rows of ``t`` it reads are the same
person's: then adding or removing a person changes the predicate of that person's rows
only. That holds when the correlating equality follows the privacy unit's path, both
columns naming one entity whose rows belong to one person:

* the privacy unit itself (``NOT EXISTS (SELECT * FROM orders WHERE o_custkey =
  c_custkey)``, TPC-H Q22: a customer with no order);
* one row of a private table that has a unit, named by its key or by a reference to it
  (``EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey AND …)``, Q4: an order
  with a late line — the lines of one order are its customer's).

A **public** ``t`` may be correlated on any column: the predicate then depends on the row
and on public data only. The subquery is one declared table, its WHERE the correlating
equality (for EXISTS; IN names the column in its select list) and a row predicate over
``t``'s own declared columns under the rules of every WHERE (:mod:`rewriter.predicate`);
anything else (joins, GROUP BY, aggregates, further references to the outer query such as
Q21's ``l3.l_suppkey <> l1.l_suppkey``) is refused with what to write instead.

It is emitted uncorrelated, the same truth value in SQL's three-valued logic:
``EXISTS (…)`` as ``(o IS NOT NULL AND o IN (SELECT c FROM t WHERE c IS NOT NULL AND p))``
(true, or false — never NULL, as EXISTS), ``o IN (SELECT c FROM t WHERE p)`` as written
(NULL where Postgres's IN is NULL). SQL only: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from .errors import DATATYPE_MISMATCH, Refusal
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .plan import conjuncts, source_relation
from .scope import Check, Ctx, T
from .shape import Declared

Where = Callable[[exp.Expr, Ctx], exp.Expression]

__all__ = ["HINT", "Semijoin", "subquery_of"]

HINT = (
    "Correlate the subquery by one equality on the privacy unit's path: "
    "EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey AND l_commitdate < l_receiptdate), "
    "NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey), "
    "or o_orderkey IN (SELECT l_orderkey FROM lineitem WHERE …)."
)
_PLAIN = {"expressions", "from_", "where"}


def subquery_of(node: exp.Expression) -> exp.Select | None:
    """The SELECT of ``EXISTS (…)`` or ``x [NOT] IN (SELECT …)``; None for other nodes."""
    if isinstance(node, exp.Exists):
        body = node.this
    elif isinstance(node, exp.In) and node.args.get("query") is not None:
        body = node.args["query"]
    else:
        return None
    while isinstance(body, (exp.Subquery, exp.Paren)):
        body = body.this
    return body if isinstance(body, exp.Select) else None


class Semijoin:
    """The rule for EXISTS / IN subqueries in a statement over ``relation`` (the base table
    and the tables looked up into it, by name), given the config and a ``where(pred, ctx)``
    that checks a row predicate (:func:`rewriter.predicate.where`)."""

    def __init__(self, config: Declared, relation: list[str], where: Where) -> None:
        self.config, self.tables, self.relation, self.where = config, config.tables, relation, where

    def check(self, node: exp.Exists | exp.In, ctx: Ctx, check: Check) -> T:
        select = subquery_of(node)
        plain = {"this", "query"} if isinstance(node, exp.In) else {"this"}
        if select is None or any(v not in (None, [], False) for k, v in node.args.items() if k not in plain):
            raise Refusal(DENIED, "a subquery here is a SELECT over one declared table.", hint=HINT)
        name, quals = self._table(select)
        inner = self.tables[name]
        if isinstance(node, exp.In):
            outer = check(node.this, ctx)
            col = self._in_column(select, quals)
            pred = [c for c in conjuncts(select.args["where"].this)] if select.args.get("where") else []
            corr = None
        else:
            outer, col, pred, corr = self._correlation(select, name, quals, ctx)
        if not inner.public and corr is not None:
            self._on_path(corr, name, col, ctx)
        elif not inner.public:  # IN: the outer expression must be a column on the path
            if not isinstance(node.this, exp.Column):
                raise Refusal(DENIED, "x IN (SELECT … FROM a private table) takes a column as x.", hint=HINT)
            self._on_path(node.this, name, col, ctx)
        ictx = Ctx(
            name,
            inner,
            quals,
            ctx.params,
            types=ctx.types,
            used=ctx.used,
            date_part=ctx.date_part,
        )
        inner_col = ictx.column(exp.column(col))
        if {outer.type, inner_col.type} - {None} and outer.type != inner_col.type:
            if not {outer.type, inner_col.type} <= {"int", "float"}:
                raise Refusal(
                    DATATYPE_MISMATCH,
                    f"the subquery compares {outer.type} with {name}.{col} ({inner_col.type}).",
                    hint=None,
                )
        outer = ctx.settle(outer, inner_col.type)
        conds: list[exp.Expression] = []
        if isinstance(node, exp.Exists):
            conds.append(exp.Not(this=exp.Is(this=inner_col.node.copy(), expression=exp.Null())))
        for p in pred:
            self._own(p, name, quals)
            conds.append(exp.Paren(this=self.where(p, ictx)))
        sub = exp.select(inner_col.node.copy()).from_(source_relation(self.config.source_of(name)))
        for c in conds:
            sub = sub.where(c, copy=False)
        member = exp.In(this=outer.node.copy(), query=exp.Subquery(this=sub))
        if isinstance(node, exp.In):
            return T(member, "bool")
        known = exp.Not(this=exp.Is(this=outer.node.copy(), expression=exp.Null()))
        return T(exp.Paren(this=exp.And(this=known, expression=member)), "bool")

    # -- the subquery's parts ---------------------------------------------------------
    def _table(self, select: exp.Select) -> tuple[str, set[str]]:
        extra = sorted(k for k, v in select.args.items() if v not in (None, [], False) and k not in _PLAIN)
        if extra:
            raise Refusal(
                UNSUPPORTED,
                f"a subquery in WHERE is read as a semi-join: one declared table and a WHERE, "
                f"not {', '.join(k.rstrip('_').upper() for k in extra)}.",
                hint=HINT,
            )
        from_ = select.args.get("from_")
        t = from_.this if from_ is not None else None
        if (
            not isinstance(t, exp.Table)
            or not isinstance(t.this, exp.Identifier)
            or t.args.get("catalog")
            or (t.args.get("db") is not None and t.text("db") != "public")
            or t.name not in self.tables
            or (t.args.get("alias") is not None and t.args["alias"].columns)
        ):
            raise Refusal(
                DENIED,
                "a subquery in WHERE reads one declared table (no joins, functions or schemas).",
                hint=HINT,
            )
        for node in select.walk():
            if node is not select and isinstance(node, (exp.Select, exp.Subquery, exp.Exists, exp.AggFunc)):
                raise Refusal(
                    UNSUPPORTED,
                    "a subquery in WHERE is one SELECT with a row predicate: no nested subqueries or aggregates.",
                    hint=HINT,
                )
        return t.name, {t.alias or t.name}

    def _in_column(self, select: exp.Select, quals: set[str]) -> str:
        items = select.expressions
        c = items[0].unalias() if len(items) == 1 else None
        if not isinstance(c, exp.Column) or c.is_star or (c.table and c.table not in quals):
            raise Refusal(UNSUPPORTED, "x IN (SELECT col FROM t …) selects one column of t.", hint=HINT)
        return c.name

    def _correlation(
        self, select: exp.Select, name: str, quals: set[str], ctx: Ctx
    ) -> tuple[T, str, list[exp.Expression], exp.Column]:
        """(the outer side checked, the inner column, the other conjuncts, the outer column)
        of EXISTS's WHERE: exactly one conjunct equates a column of the subquery's table
        with a column of the statement's relation."""
        w = select.args.get("where")
        found: list[tuple[exp.Expression, exp.Column, exp.Column]] = []
        for c in conjuncts(w.this) if w is not None else ():
            if isinstance(c, exp.EQ) and all(isinstance(s, exp.Column) for s in (c.this, c.expression)):
                a, b = c.this, c.expression
                ia, ib = self._is_inner(a, name, quals), self._is_inner(b, name, quals)
                if ia != ib:
                    found.append((c, a if ia else b, b if ia else a))
        if len(found) != 1:
            raise Refusal(
                DENIED,
                "EXISTS (SELECT … FROM t WHERE …) is read as a semi-join: its WHERE equates one column "
                "of t with one column of the outer query"
                + (" (it has none)." if not found else f" (it has {len(found)})."),
                hint=HINT,
            )
        cond, inner, outer = found[0]
        rest = [c for c in conjuncts(w.this) if c is not cond] if w is not None else []
        return ctx.column(outer), inner.name, rest, outer

    def _is_inner(self, c: exp.Column, name: str, quals: set[str]) -> bool:
        """A column of the subquery's table: qualified by it, or unqualified and declared in it
        (SQL resolves a name in the innermost scope first)."""
        if c.table:
            return c.table in quals
        return c.name in self.tables[name].columns

    def _own(self, pred: exp.Expression, name: str, quals: set[str]) -> None:
        for c in pred.find_all(exp.Column):
            if not self._is_inner(c, name, quals):
                raise Refusal(
                    UNSUPPORTED,
                    f"the subquery's condition refers to {c.sql('postgres')} of the outer query; "
                    "beside its one correlating equality, a subquery in WHERE reads its own columns only.",
                    hint=HINT,
                )

    # -- the unit's path --------------------------------------------------------------
    def _on_path(self, outer: exp.Column, name: str, col: str, ctx: Ctx) -> None:
        """Refuse unless ``outer`` (a column of the statement's relation) and ``name.col``
        name one entity of one person (module doc)."""
        owner = next((t for t in self.relation if outer.name in self.tables[t].columns), None)
        mine = self._entities(name, col)
        theirs = self._entities(owner, outer.name) if owner is not None else set()
        if not (mine & theirs):
            raise Refusal(
                DENIED,
                f"{name} is a private table: a subquery reads it only along the privacy unit's "
                f"path, and {name}.{col} = {outer.name} does not name one person's rows "
                f"(the unit, or the key of a private table's row).",
                hint=HINT,
            )

    def _entities(self, table: str, col: str) -> set[tuple[str, str]]:
        """What ``table.col`` identifies that belongs to one person: the unit, and the row
        of a private table with a unit it is the key of or refers to."""
        t = self.tables[table]
        out: set[tuple[str, str]] = set()
        if t.privacy_unit is not None and col == t.privacy_unit:
            out.add(("unit", t.unit or ""))
        rows = [table] if col == t.key else []
        if col in t.references:
            rows.append(t.references[col])
        for r in rows:
            rt = self.tables.get(r)
            if rt is not None and not rt.public and rt.privacy_unit is not None:
                out.add(("row", r))
                if rt.privacy_unit == rt.key:  # customers: their key is the unit
                    out.add(("unit", rt.unit or ""))
        return out
