"""Emit the backend SQL for a plan: one scan, one row per cell.

    WITH d AS (domain cells: VALUES … CROSS JOIN VALUES …),
         a AS (SELECT keys, measures FROM source WHERE pred GROUP BY keys)
    SELECT d.k1, …, COALESCE(a.m1, 0), … FROM d LEFT JOIN a ON d.k1 = a.k1 AND …
    ORDER BY d.k1, …

Without GROUP BY it is a single aggregate row. SUM inputs are clamped to the
declared bounds inside the scan (NULL stays NULL, NaN/inf clamp); rows with a NULL or
out-of-domain group value match no cell and are dropped by the join. A derived key
(:mod:`rewriter.keys`: CASE labels, bins, date parts) is computed in the same scan; when
its domain has a NULL bin it joins with IS NOT DISTINCT FROM. Everything is built as a
sqlglot AST.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import threading
from typing import Literal

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from . import dates, stats
from .intervals import Arith
from .plan import GroupKey, Measure, Plan
from .values import to_node

DOUBLE = exp.DataType.build("double")
_SQL_TYPES = {"int": "bigint", "float": "double", "text": "text", "bool": "boolean",
              "date": "date", "timestamp": "timestamp"}
_SERIES_MIN = 64   # contiguous integer domains at least this long use generate_series


_WHERE_MARK = "__dpgate_where__"


def to_sql(plan: Plan, dialect: Literal["duckdb", "postgres"]) -> str:
    """The backend SQL. The statement around the WHERE predicate depends only on the
    plan's shape, so it is generated once per shape and cached; the predicate is
    generated from its own AST each time and put in place of a marker column
    (a plan filled from a template, :mod:`.template`, carries its SQL already)."""
    preset = plan.__dict__.get("_sql")
    if preset is not None and dialect in preset:
        return preset[dialect]
    if plan.where is None:
        return _skeleton(plan, dialect)
    shape = dataclasses.replace(plan, where=exp.column(_WHERE_MARK))
    skeleton = _skeleton(shape, dialect)
    where = _generator(dialect).generate(plan.where, copy=True)
    return skeleton.replace(_marker(dialect), f"({where})")


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
    return build(plan).sql(dialect=dialect, identify=True)


def build(plan: Plan) -> exp.Select:
    source = exp.to_table(plan.source)
    scan = exp.select(*[_measure(m).as_(f"m{j + 1}") for j, m in enumerate(plan.measures)])
    scan = scan.from_(source, copy=False)
    if plan.where is not None:
        scan = scan.where(plan.where.copy(), copy=False)
    if not plan.group_by:
        cols = [exp.Coalesce(this=exp.column(f"m{j + 1}"), expressions=[to_node(0)])
                for j in range(len(plan.measures))]
        return exp.select(*[c.as_(f"m{j + 1}") for j, c in enumerate(cols)]).from_(
            scan.subquery("a", copy=False), copy=False)
    keys = [group_key_sql(g) for g in plan.group_by]
    scan = exp.select(*[k.as_(f"k{i + 1}") for i, k in enumerate(keys)],
                      *scan.expressions).from_(source, copy=False)
    if plan.where is not None:
        scan = scan.where(plan.where.copy(), copy=False)
    scan = scan.group_by(*[k.copy() for k in keys], copy=False)
    cells = _domains(plan.group_by)
    k = [f"k{i + 1}" for i in range(len(plan.group_by))]
    on = exp.and_(*[(exp.NullSafeEQ if None in g.domain else exp.EQ)(   # a NULL bin matches NULL
        this=exp.column(x, "d"), expression=exp.column(x, "a")) for x, g in zip(k, plan.group_by)])
    out = exp.select(
        *[exp.column(x, "d").as_(x) for x in k],
        *[exp.Coalesce(this=exp.column(f"m{j + 1}", "a"), expressions=[to_node(0)])
          .as_(f"m{j + 1}") for j in range(len(plan.measures))])
    out = out.from_(exp.to_table("d"), copy=False).join(
        exp.to_table("a"), on=on, join_type="left", copy=False)
    out = out.order_by(*[exp.column(x, "d") for x in k], copy=False)
    return out.with_("d", as_=cells, copy=False).with_("a", as_=scan, copy=False)


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


def _domains(groups: tuple[GroupKey, ...]) -> exp.Select:
    """The cartesian product of the group domains as a (k1, …, kk) relation."""
    parts = [_domain(g, f"d{i}", f"k{i + 1}") for i, g in enumerate(groups)]
    sel = exp.select(exp.Star()).from_(parts[0], copy=False)
    for p in parts[1:]:
        sel = sel.join(p, join_type="cross", copy=False)
    return sel


def _domain(g: GroupKey, alias: str, col: str) -> exp.Expression:
    vals = sorted(g.domain, key=lambda v: (v is None, v))
    ints = g.type == "int" and all(isinstance(v, int) for v in vals)
    if ints and len(vals) >= _SERIES_MIN and vals[-1] - vals[0] == len(vals) - 1:
        series = exp.Anonymous(this="generate_series",
                               expressions=[to_node(vals[0]), to_node(vals[-1])])
        return exp.Table(this=series, alias=exp.TableAlias(
            this=exp.to_identifier(alias), columns=[exp.to_identifier(col)]))
    typ = exp.DataType.build(_SQL_TYPES[g.type])
    rows = [exp.Tuple(expressions=[exp.Cast(this=_value(v, g.type), to=typ.copy())])
            for v in vals]
    return exp.Values(expressions=rows, alias=exp.TableAlias(
        this=exp.to_identifier(alias), columns=[exp.to_identifier(col)]))


def _value(v, type_: str) -> exp.Expression:
    if type_ in ("date", "timestamp") and v is not None:
        return exp.Literal.string(dates.iso(v))
    if type_ == "float" and isinstance(v, (int, float)) and math.isfinite(v):
        return to_node(float(v))
    return to_node(v)
