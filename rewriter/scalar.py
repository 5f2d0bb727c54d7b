"""Scalar subqueries: a statement of several releases.

``SELECT region, COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people) FROM people GROUP BY region``,
``… WHERE c_acctbal > (SELECT AVG(c_acctbal) FROM customer WHERE …)``: each scalar subquery
(an aggregate without GROUP BY, so exactly one row) is a statement of its own. It is
released first; its released value is then bound as a constant into the statement
around it, which is planned and released as any other statement. Binding a released
value is post-processing of the first release, and releasing the second statement
after it is sequential composition (Dwork & Roth 2014, Thm. 3.14 and Prop. 2.1): the
statement's ε is the sum of its releases' ε, which the proxy splits
(:mod:`proxy.pipeline.scalar`).

This module is SQL only: it finds the scalar subqueries of a parse (:func:`find`), writes
each as a statement of its own (:func:`statement`: with the WITH queries it names), and
binds released values in their place (:func:`bind`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

from sqlglot import exp

from . import postprocess
from .errors import FEATURE_NOT_SUPPORTED, Refusal
from .scope import Ctx

HINT = (
    "A scalar subquery is answered as a release of its own when it is an aggregate without "
    "GROUP BY over a declared table and names nothing of the statement around it, e.g. "
    "COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people); for anything else run it as a statement "
    "of its own and write its value into the statement."
)

_NOT_SCALAR = (exp.From, exp.Join, exp.Exists, exp.Any, exp.All, exp.CTE, exp.Lateral, exp.SetOperation)


@dataclass(frozen=True)
class Scalar:
    """One scalar subquery: its node in the statement's parse and its text as a statement
    of its own (the WITH queries it reads attached)."""

    node: exp.Subquery
    sql: str


def _is_scalar(node: exp.Subquery) -> bool:
    """Whether ``node`` is a subquery in an expression (not a derived table, not the query of
    IN / EXISTS / ANY / ALL, not an operand of UNION)."""
    parent = node.parent
    if parent is None or isinstance(parent, _NOT_SCALAR):
        return False
    if isinstance(parent, exp.In) and parent.args.get("query") is node:
        return False
    return isinstance(node.this, exp.Select) and not node.alias


def _over_own_rows(tree: exp.Expression, node: exp.Subquery) -> bool:
    """Whether the scalar subquery ``node`` reads only a WITH query (or a derived table — a
    temporary view, inlined) that the SELECT around it reads too (``… FROM revenue0 WHERE
    total = (SELECT MAX(total) FROM revenue0)``): an aggregate of the rows that SELECT reads,
    which its planner answers from the same release (:func:`rewriter.inline.apply_outer`),
    not a release of its own."""
    q = node.this
    f = q.args.get("from_") if isinstance(q, exp.Select) else None
    if f is None or q.args.get("joins"):
        return False
    around = node.parent.find_ancestor(exp.Select) if node.parent is not None else None
    if around is None:
        return False
    g = around.args.get("from_")
    reads = [g.this] if g is not None else []
    reads += [j.this for j in around.args.get("joins") or []]
    if isinstance(f.this, exp.Subquery):  # the same derived table (structurally)
        return any(isinstance(r, exp.Subquery) and r.this == f.this.this for r in reads)
    if not isinstance(f.this, exp.Table) or f.this.text("db") or f.this.name not in _ctes(tree):
        return False
    name = f.this.name
    return any(isinstance(t, exp.Table) and t.name == name and not t.text("db") for t in reads)


def find(tree: exp.Expression) -> list[exp.Subquery]:
    """The outermost scalar subqueries of ``tree`` (a scalar inside one of them belongs to
    that statement), in the order they are written; a subquery over the rows the SELECT
    around it reads is left to that SELECT's planner (:func:`_over_own_rows`)."""
    out: list[exp.Subquery] = []
    for node in tree.find_all(exp.Subquery):
        if not _is_scalar(node) or _over_own_rows(tree, node):
            continue
        up = node.parent
        while up is not None and not (isinstance(up, exp.Subquery) and _is_scalar(up)):
            up = up.parent
        if up is None:
            out.append(node)
    out.sort(key=lambda n: _position(tree, n))
    return out


def _position(tree: exp.Expression, node: exp.Expression) -> int:
    for i, n in enumerate(tree.walk(bfs=False)):  # in the order they are written
        if n is node:
            return i
    return 0


def has_scalars(tree: exp.Expression) -> bool:
    """Whether ``tree`` holds a scalar subquery released on its own (:func:`find`)."""
    return bool(find(tree))


def _names(select: exp.Expression) -> set[str]:
    """The relation names and aliases a query defines for its own columns."""
    out: set[str] = set()
    for t in select.find_all(exp.Table):
        out.add(t.name)
        if t.alias:
            out.add(t.alias)
    for s in select.find_all(exp.Subquery):
        if s.alias:
            out.add(s.alias)
    for c in select.find_all(exp.CTE):
        out.add(c.alias_or_name)
    return out


def _ctes(tree: exp.Expression) -> dict[str, exp.CTE]:
    w = tree.args.get("with_") or tree.args.get("with")
    return {c.alias_or_name: c for c in (w.expressions if isinstance(w, exp.With) else [])}


def _reads(node: exp.Expression, ctes: dict[str, exp.CTE]) -> list[str]:
    """The WITH queries ``node`` reads, directly or through each other, in definition order."""
    want: set[str] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        for t in n.find_all(exp.Table):
            if not t.text("db") and t.name in ctes and t.name not in want:
                want.add(t.name)
                todo.append(ctes[t.name].this)
    return [name for name in ctes if name in want]


def statement(tree: exp.Expression, node: exp.Subquery, tables: Mapping[str, Any] | None = None) -> str:
    """The scalar subquery ``node`` of ``tree`` as a statement of its own (Postgres SQL), or a
    refusal: it must be one aggregate without GROUP BY (exactly one row), and name no
    relation or column of the statement around it (a correlated subquery is a query per
    outer row). ``tables`` (the declared tables, by name: each with ``columns``) tells an
    unqualified outer column (TPC-H Q17's ``l_partkey = p_partkey``) from the subquery's own."""
    select = node.this
    if not isinstance(select, exp.Select):
        raise Refusal(FEATURE_NOT_SUPPORTED, "a scalar subquery must be a SELECT.", hint=HINT)
    if len(select.expressions) != 1:
        raise Refusal(
            FEATURE_NOT_SUPPORTED,
            f"a scalar subquery returns one column; this one selects {len(select.expressions)}.",
            hint=HINT,
        )
    if select.args.get("group") is not None or select.args.get("having") is not None:
        raise Refusal(
            FEATURE_NOT_SUPPORTED,
            "a scalar subquery with GROUP BY or HAVING may return other than one row; "
            "dpgate answers an aggregate without GROUP BY as a scalar subquery.",
            hint=HINT,
        )
    if select.find(exp.AggFunc) is None:
        raise Refusal(
            FEATURE_NOT_SUPPORTED,
            "a scalar subquery over a private table is answered when it is an aggregate "
            "(COUNT, SUM, AVG, MAX, MIN, a percentile).",
            hint=HINT,
        )
    own = _names(select)
    ctes = _ctes(tree)
    for col in select.find_all(exp.Column):
        q = col.table
        if q and q not in own:
            raise Refusal(
                FEATURE_NOT_SUPPORTED,
                f"the scalar subquery names {q}.{col.name} of the statement around it "
                "(a correlated subquery: one query per outer row) and is not answered.",
                hint=HINT,
            )
    if tables is not None:
        _no_outer_columns(tree, node, select, tables, ctes)
    inner = select.copy()
    used = _reads(inner, ctes)
    if used:
        own_with = inner.args.get("with_") or inner.args.get("with")
        mine = list(own_with.expressions) if isinstance(own_with, exp.With) else []
        key = "with_" if "with_" in exp.Select.arg_types else "with"
        inner.set(key, exp.With(expressions=[ctes[n].copy() for n in used] + mine))
    return inner.sql("postgres")


def _no_outer_columns(
    tree: exp.Expression,
    node: exp.Subquery,
    select: exp.Select,
    tables: Mapping[str, Any],
    ctes: Mapping[str, exp.CTE],
) -> None:
    """Refuse an unqualified column that no table of the subquery declares and a declared
    table of the statement around it does: it names the outer row. Decided only when the
    subquery reads declared tables alone (a CTE's or a derived table's columns are not
    known here: the planner refuses what it cannot resolve)."""
    inner = [t for t in select.find_all(exp.Table)]
    if not inner or any(t.name in ctes or t.name not in tables for t in inner) or select.find(exp.Subquery):
        return
    own = {c for t in inner for c in tables[t.name].columns}
    mine = {id(t) for t in node.find_all(exp.Table)}
    outer = [t.name for t in tree.find_all(exp.Table) if id(t) not in mine and t.name in tables]
    for col in select.find_all(exp.Column):
        if col.table or col.name in own:
            continue
        holders = sorted({o for o in outer if col.name in tables[o].columns})
        if holders:
            raise Refusal(
                FEATURE_NOT_SUPPORTED,
                f"the scalar subquery names {col.name}, a column of {', '.join(holders)} in the "
                "statement around it (a correlated subquery: one query per outer row) and is not "
                "answered.",
                hint=HINT,
            )


def scalars(tree: exp.Expression) -> list[Scalar]:
    """Each outermost scalar subquery of ``tree`` and its statement (:func:`statement`)."""
    return [Scalar(n, statement(tree, n)) for n in find(tree)]


def _unit(tables: Mapping[str, Any], name: str) -> str | None:
    """The privacy unit a table's rows belong to (the entity, as the config resolves it:
    :attr:`config.models.Table.unit`), or None: each row is its own unit."""
    return getattr(tables.get(name), "unit", None)


def check_unit(tables: Mapping[str, Any], outer: str | None, inner: str | None) -> None:
    """A scalar subquery reads the statement's own table or a table of the same privacy unit
    (the releases of one statement protect one kind of entity); else a refusal."""
    if outer is None or inner is None or outer == inner:
        return
    a, b = _unit(tables, outer), _unit(tables, inner)
    if a is not None and a == b:
        return
    if getattr(tables.get(inner), "public", False) or getattr(tables.get(outer), "public", False):
        return
    raise Refusal(
        FEATURE_NOT_SUPPORTED,
        f"the scalar subquery reads {inner} and the statement reads {outer}: their rows protect "
        "different privacy units, and one statement's releases protect one unit.",
        hint="run the subquery as a statement of its own and write its value into the statement.",
    )


class _NoRows:
    """The context of a SELECT without FROM: it reads no column, aggregate or parameter."""

    def __getattr__(self, name: str) -> Any:
        raise Refusal(
            FEATURE_NOT_SUPPORTED,
            "a SELECT without FROM computes over constants and scalar subqueries only.",
            hint=HINT,
        )


def constant_outputs(tree: exp.Expression) -> list[tuple[str, Any, str | None]] | None:
    """For a SELECT without FROM whose scalar subqueries are bound (``SELECT 19987 * 1.0 /
    200000``): each select item's name, post-processing tree and type
    (:mod:`rewriter.postprocess`, evaluated by the proxy with Postgres's rules); None for a
    statement that reads a table. Clauses other than the select list are refused."""
    if not isinstance(tree, exp.Select) or tree.args.get("from_") is not None:
        return None
    extra = [k for k, v in tree.args.items() if v not in (None, [], False) and k != "expressions"]
    if extra or tree.find(exp.Column, exp.AggFunc, exp.Parameter, exp.Star) is not None:
        raise Refusal(
            FEATURE_NOT_SUPPORTED,
            "a SELECT without FROM computes over constants and scalar subqueries only (no WHERE, "
            "GROUP BY, ORDER BY or columns).",
            hint=HINT,
        )

    def no_agg(func: str, col: Any) -> tuple[int, str | None]:
        raise Refusal(FEATURE_NOT_SUPPORTED, "an aggregate needs FROM.", hint=HINT)

    def no_key(name: str) -> tuple[int | str, str | None]:
        raise Refusal(FEATURE_NOT_SUPPORTED, f"column {name} needs FROM.", hint=HINT)

    out = []
    for e in tree.expressions:
        node = e.unalias()
        raw = postprocess.tree(node, cast(Ctx, _NoRows()))
        t, typ = postprocess.resolve(raw, no_agg, no_key)
        out.append((e.alias or postprocess.name(node), t, typ))
    return out


def literal(value: object, type_name: str | None = None) -> exp.Expression:
    """A released value as a constant of its type (``type_name``: a Postgres type name such as
    ``double precision``, ``numeric``, ``bigint``; None: the value's own)."""
    if value is None:
        out: exp.Expression = exp.Null()
    elif isinstance(value, bool):
        out = exp.Boolean(this=value)
    elif isinstance(value, int):
        out = exp.Literal.number(value) if value >= 0 else exp.Neg(this=exp.Literal.number(-value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            return exp.cast(
                exp.Literal.string(repr(value).replace("inf", "Infinity").replace("nan", "NaN")), "DOUBLE"
            )
        text = repr(abs(value))
        num = exp.Literal.number(text)
        out = exp.Neg(this=num) if value < 0 or math.copysign(1.0, value) < 0 else num
        type_name = type_name or "double precision"
    elif isinstance(value, Decimal):
        num = exp.Literal.number(str(abs(value)))
        out = exp.Neg(this=num) if value < 0 else num
    else:
        out = exp.Literal.string(str(value))
    if type_name is not None and not isinstance(out, exp.Null):
        out = exp.Cast(this=exp.Paren(this=out), to=exp.DataType.build(type_name, dialect="postgres"))
    elif type_name is not None:
        out = exp.Cast(this=out, to=exp.DataType.build(type_name, dialect="postgres"))
    return out


def parameters(tree: exp.Expression) -> set[int]:
    """The numbers n of the ``$n`` that ``tree`` reads."""
    return {
        int(p.this.this)
        for p in tree.find_all(exp.Parameter)
        if isinstance(p.this, exp.Literal) and p.this.is_int
    }


def bind_params(tree: exp.Expression, params: Sequence[object]) -> exp.Expression:
    """``tree`` (in place) with each ``$n`` replaced by the value the client bound to it, as a
    constant of that value's type, so each part of a statement of several releases is a
    statement of its own; ``$n`` beyond the values, or values left unused, are refused as the
    planner refuses them."""
    used: set[int] = set()
    for node in list(tree.find_all(exp.Parameter)):
        n = node.this
        if not (isinstance(n, exp.Literal) and n.is_int):
            raise Refusal(FEATURE_NOT_SUPPORTED, f"parameter {node.sql('postgres')} is not a $n.", hint=HINT)
        i = int(n.this)
        if not 1 <= i <= len(params):
            raise Refusal(
                "08P01", f"the statement has parameter ${i} but {len(params)} were supplied.", hint=None
            )
        used.add(i)
        node.replace(_param_literal(params[i - 1]))
    if used != set(range(1, len(params) + 1)):
        raise Refusal(
            "08P01",
            f"the statement has {max(used, default=0)} parameter(s) but {len(params)} were supplied.",
            hint=None,
        )
    return tree


def _param_literal(value: object) -> exp.Expression:
    """A bound parameter's value as a constant: numbers and booleans as such, a date or time
    as a typed string, text (a value the client left untyped, too) as a string constant, which
    the planner reads by its context as Postgres reads an unknown-typed literal."""
    if value is None or isinstance(value, (bool, int, float, Decimal)):
        return literal(value)
    iso = getattr(value, "isoformat", None)
    if iso is not None:
        kind = type(value).__name__
        typ = {"date": "date", "datetime": "timestamp", "time": "time", "timedelta": "interval"}.get(kind)
        if typ is not None and kind != "timedelta":
            return exp.Cast(
                this=exp.Literal.string(iso(sep=" ") if kind == "datetime" else iso()),
                to=exp.DataType.build(typ),
            )
    return exp.Literal.string(str(value))


def bind(tree: exp.Expression, found: Sequence[exp.Subquery], values: Sequence[exp.Expression]) -> str:
    """``tree`` with each scalar subquery of ``found`` replaced by its value (Postgres SQL);
    WITH queries no longer read are dropped."""
    for node, value in zip(found, values):
        node.replace(value)
    w = tree.args.get("with_") or tree.args.get("with")
    if isinstance(w, exp.With):
        body = tree.copy()
        body.set("with_" if "with_" in type(tree).arg_types else "with", None)
        ctes = _ctes(tree)
        keep = set(_reads(body, ctes))
        kept = [c for c in w.expressions if c.alias_or_name in keep]
        if kept:
            w.set("expressions", kept)
        else:
            tree.set("with_" if "with_" in type(tree).arg_types else "with", None)
    return tree.sql("postgres")
