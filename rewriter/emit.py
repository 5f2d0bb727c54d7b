"""Emit the backend SQL for a plan: one scan, one row per group the data has.

    SELECT keys AS k1, …, measures AS m1, … FROM source WHERE pred GROUP BY keys

Without GROUP BY it is a single aggregate row. SUM inputs are
clamped to the declared bounds inside the scan (NULL stays NULL, NaN/inf clamp). A
derived key (:mod:`rewriter.keys`: CASE labels, bins, date parts) is computed in the
same scan. The proxy maps the groups onto the public cells (:func:`rewriter.cells.complete`:
empty cells get zeros, as does a NULL measure; NULL or out-of-domain keys match no cell, a
NULL bin matches NULL)
— the empty-cell completion once done here by a LEFT JOIN from a VALUES relation of the
domain, which cost DuckDB about as much again as the scan on small tables (issue 21).
Everything is built as a sqlglot AST.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Literal

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from . import stats, unit
from .intervals import Arith
from .plan import GroupKey, Measure, Plan
from .values import to_node

DOUBLE = exp.DataType.build("double")


_WHERE_MARK = "__dpgate_where__"


def to_sql(plan: Plan, dialect: Literal["duckdb", "postgres", "spark"], salt: str = "") -> str:
    """The backend SQL. The statement around the WHERE predicate depends only on the
    plan's shape, so it is generated once per shape and cached; the predicate is
    generated from its own AST each time and put in place of a marker column
    (a plan filled from a template, :mod:`.template`, carries its SQL already).
    ``salt`` keys the privacy unit's bounding hash (:mod:`.unit`; hex, from the ledger)."""
    if plan.unit is not None:
        return unit.salted(_unit_sql(plan, dialect), salt)
    preset = plan.__dict__.get("_sql")
    if preset is not None and dialect in preset:
        return preset[dialect]
    if plan.where is None:
        return _skeleton(plan, dialect)
    shape = dataclasses.replace(plan, where=exp.column(_WHERE_MARK))
    skeleton = _skeleton(shape, dialect)
    where = _generator(dialect).generate(for_dialect(plan.where.copy(), dialect), copy=False)
    return skeleton.replace(_marker(dialect), f"({where})")


@functools.lru_cache(maxsize=256)
def _unit_sql(plan: Plan, dialect: str) -> str:
    """The bounded scan of a plan with a privacy unit (:mod:`.unit`)."""
    if unit.aggregatable(plan):
        tree = unit.per_unit_scan(plan, _measure, _base_count, _integral, group_key_sql)
    else:                                  # COUNT(DISTINCT col): rank the rows themselves
        kept, keep = unit.kept_rows(plan, [_measure(m) for m in plan.measures], group_key_sql)
        scan = build(dataclasses.replace(plan, source=unit.KEPT, where=keep, unit=None, relation=None))
        tree = scan.with_(unit.KEPT, as_=kept, copy=False)
    tree = unit.spell_hashes(tree, lambda a: keyed_hash(a, dialect), lambda a, b: int_div(a, b, dialect))
    return for_dialect(tree, dialect).sql(dialect=dialect, identify=True)


def int_div(a: exp.Expression, b: exp.Expression, dialect: str) -> exp.Expression:
    """Integer division truncated toward zero: DuckDB ``//``, Postgres ``DIV`` (its SUM of
    bigints is numeric), Spark ``DIV``."""
    return exp.IntDiv(this=exp.Paren(this=a), expression=exp.Paren(this=b))


def _base_count(m: Measure) -> exp.Expression:
    """The rows a sum measure is over (its column non-NULL): the count its bound scales by."""
    if isinstance(m.column, Arith):
        return exp.Count(this=m.column.expr.copy())
    return exp.Count(this=exp.column(m.column, quoted=True))


def _integral(m: Measure) -> bool:
    """Is the scan's sum for ``m`` an exact integer (as :func:`_clamped` / the moments make it)?"""
    if isinstance(m.column, Arith):
        return m.column.type == "int"
    if m.kind in ("csum", "csumsq"):
        return stats.moment_type(m) == "int"
    lo, hi = m.lower, m.upper
    return (m.type == "int" and lo is not None and float(lo).is_integer() and float(hi).is_integer()
            and max(abs(lo), abs(hi)) < 2**62)


def keyed_hash(args: list, dialect: str) -> exp.Expression:
    """``DPGATE_HASH(salt, …)`` per backend: DuckDB ``hash``, Spark ``xxhash64``, Postgres
    ``md5`` of the row's text (each deterministic for equal arguments; ties are broken by
    the values in the ORDER BY after it)."""
    if dialect == "duckdb":
        return exp.Anonymous(this="hash", expressions=args)
    if dialect == "spark":
        return exp.Anonymous(this="xxhash64", expressions=args)
    row = exp.Anonymous(this="ROW", expressions=args)
    return exp.Anonymous(this="md5", expressions=[exp.Cast(this=row, to=exp.DataType.build("text"))])


def for_dialect(tree: exp.Expression, dialect: str) -> exp.Expression:
    """The few rewrites one backend needs to mean what the plan means on the others.

    Spark: ``TRUNC(x)`` (truncation toward zero of a double, Postgres / DuckDB) does not
    exist — it is ``x - x % 1`` (``%`` is C's fmod there: sign of the dividend; exact in
    IEEE arithmetic, NaN and ±Infinity pass through as with TRUNC)."""
    if dialect != "spark":
        return tree

    def swap(node):
        if isinstance(node, exp.Anonymous) and node.name.upper() == "TRUNC" and len(node.expressions) == 1:
            x = node.expressions[0]
            return exp.Paren(this=exp.Sub(this=exp.Paren(this=x.copy()),
                                          expression=exp.Mod(this=exp.Paren(this=x.copy()),
                                                             expression=exp.Literal.number(1))))
        return node
    return tree.transform(swap, copy=False)


_LOCAL = threading.local()


def _generator(dialect: str):
    """This thread's generator for ``dialect`` with ``identify=True`` (what
    ``Expression.sql(dialect=…, identify=True)`` builds per call)."""
    gens = _LOCAL.__dict__.setdefault("gens", {})
    gen = gens.get(dialect)
    if gen is None:
        gen = gens[dialect] = Dialect.get_or_raise(dialect).generator(identify=True)
    return gen


@functools.lru_cache(maxsize=8)
def _marker(dialect: str) -> str:
    return exp.column(_WHERE_MARK).sql(dialect=dialect, identify=True)


@functools.lru_cache(maxsize=512)
def _skeleton(plan: Plan, dialect: str) -> str:
    return for_dialect(build(plan), dialect).sql(dialect=dialect, identify=True)


def build(plan: Plan) -> exp.Select:
    scan = exp.select(*[_measure(m).as_(f"m{j + 1}") for j, m in enumerate(plan.measures)])
    scan = scan.from_(plan.from_(), copy=False)
    if plan.where is not None:
        scan = scan.where(plan.where.copy(), copy=False)
    if not plan.group_by:
        return scan
    keys = [group_key_sql(g) for g in plan.group_by]
    scan = exp.select(*[k.as_(f"k{i + 1}") for i, k in enumerate(keys)],
                      *scan.expressions).from_(plan.from_(), copy=False)
    if plan.where is not None:
        scan = scan.where(plan.where.copy(), copy=False)
    return scan.group_by(*[k.copy() for k in keys], copy=False)


def group_key_sql(g: GroupKey) -> exp.Expression:
    """A group key's column in the scan (a float key cast to DOUBLE, as its domain is)."""
    if g.expr is not None:               # a derived key (rewriter.keys), computed in the scan
        return g.expr.copy()
    col = exp.column(g.column, quoted=True)
    return exp.Cast(this=col, to=DOUBLE.copy()) if g.type == "float" else col


def _measure(m: Measure) -> exp.Expression:
    if m.kind == "count_rows":
        return exp.Count(this=exp.Star())
    if m.kind == "count_if":               # COUNT(CASE WHEN pred THEN 1 END): 0 on no rows
        return exp.Count(this=exp.Case(ifs=[exp.If(this=exp.Paren(this=m.filter.copy()), true=to_node(1))]))
    if isinstance(m.column, Arith):        # SUM/AVG of arithmetic: over clamped columns (rewriter.intervals)
        return exp.Count(this=m.column.expr.copy()) if m.kind == "count" else exp.Sum(this=m.column.expr.copy())
    col = exp.column(m.column, quoted=True)
    if m.kind == "count":
        return exp.Count(this=col)
    if m.kind == "count_distinct":
        return exp.Count(this=exp.Distinct(expressions=[col]))
    clamped = _clamped(m, col)
    if m.kind in ("csum", "csumsq"):
        return stats.moment_expr(m.kind, m.type, clamped, m.lower, m.upper)
    return exp.Sum(this=clamped)


def _clamped(m: Measure, col: exp.Expression) -> exp.Expression:
    """The column clamped to [m.lower, m.upper] (exact bigint for integral int bounds)."""
    lo, hi = m.lower, m.upper
    exact = (m.type == "int" and float(lo).is_integer() and float(hi).is_integer()
             and max(abs(lo), abs(hi)) < 2**62)
    if exact:
        lo, hi = int(lo), int(hi)
    else:
        col = exp.Cast(this=col, to=DOUBLE.copy())
        lo, hi = float(lo), float(hi)
    lo_n, hi_n = to_node(lo), to_node(hi)
    if not exact:   # keep the bounds float8 (a plain 0 would make Postgres pick numeric)
        lo_n, hi_n = (exp.Cast(this=n, to=DOUBLE.copy()) for n in (lo_n, hi_n))
    # CASE rather than LEAST/GREATEST: Postgres' GREATEST(NULL, lo) is lo, not NULL.
    below = exp.If(this=exp.LT(this=col.copy(), expression=lo_n), true=lo_n.copy())
    above = exp.If(this=exp.GT(this=col.copy(), expression=hi_n), true=hi_n.copy())
    return exp.Case(ifs=[below, above], default=col)
