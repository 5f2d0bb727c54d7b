"""Emit the backend SQL for a plan: one scan, one row per group the data has.

    SELECT keys AS k1, …, measures AS m1, … FROM source WHERE pred GROUP BY keys

Without GROUP BY it is a single aggregate row. SUM inputs are
clamped to the declared bounds inside the scan (NULL stays NULL, NaN/inf clamp). A
derived key (:mod:`rewriter.keys`: CASE labels, bins, date parts) is computed in the
same scan. The proxy maps the groups onto the public cells (:func:`rewriter.cells.complete`:
empty cells get zeros, as does a NULL measure; NULL or out-of-domain keys match no cell, a
NULL bin matches NULL): completing the domain in the proxy, not by a LEFT JOIN from a
VALUES relation in the scan, keeps the scan one pass over the table.
Everything is built as a sqlglot AST; what one backend spells otherwise (its hash, its
parameters, its rewrites) is its :class:`~rewriter.dialects.SQLDialect`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import threading

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.generator import Generator

from . import dialects, fixed_point, params, stats, unit
from .dialects import SQLDialect
from .intervals import Arith
from .plan import GroupKey, Measure, Plan
from .values import clamp_case, to_node

DOUBLE = exp.DataType.build("double")


_WHERE_MARK = "__dpgate_where__"


def to_sql(
    plan: Plan,
    dialect: str | SQLDialect,
    salt: str = "",
    frozen: bool = False,
    rows: bool = False,
    cells: bool = False,
) -> str:
    """The backend SQL. The statement around the WHERE predicate depends only on the
    plan's shape, so it is generated once per shape and cached; the predicate is
    generated from its own AST each time and put in place of a marker column
    (a plan filled from a template, :mod:`.template`, carries its SQL already).
    ``salt`` keys the privacy unit's bounding hash (:mod:`.unit`; hex, from the ledger).
    ``dialect``: the backend's :class:`~rewriter.dialects.SQLDialect` or its name.
    ``frozen``: the source cannot change while the backend keeps a relation made from it, so
    the privacy unit's heavy units are read from one it keeps (:func:`rewriter.unit.heavy_set`;
    the text then carries the relation in :attr:`~rewriter.params.ParamSQL.needs`); ``rows``: and
    the heavy units' rows too (:func:`rewriter.unit.heavy_rows`), where the backend may keep them;
    ``cells``: and a total-mode statement's (unit, cell) rows of them with their running sums
    (:func:`rewriter.unit.per_unit_scan`'s ``heavy_cells``)."""
    d = dialects.get(dialect)
    dialect = d.name
    if plan.unit is not None:
        text, names, needs = _unit_sql(
            plan, dialect, d.unit_heavy_apart, frozen, frozen and rows, frozen and rows and cells
        )
        return unit.salted(text, salt, dialect, names, needs)
    preset = plan.memo.sql
    if dialect in preset:
        return preset[dialect]
    if plan.where is None:
        return _skeleton(plan, dialect)
    shape = dataclasses.replace(plan, where=exp.column(_WHERE_MARK))
    skeleton = _skeleton(shape, dialect)
    where = _generator(dialect).generate(dialects.get(dialect).rewrite(plan.where.copy()), copy=False)
    sql = skeleton.replace(_marker(dialect), f"({where})")
    preset[dialect] = sql  # kept with the plan (plans are cached)
    return sql


@functools.lru_cache(maxsize=256)
def _unit_sql(
    plan: Plan,
    dialect: str,
    heavy_apart: bool,
    frozen: bool = False,
    rows: bool = False,
    cells: bool = False,
) -> tuple[str, frozenset[str], tuple[tuple[str, str], ...]]:
    """The bounded scan of a plan with a privacy unit (:mod:`.unit`), its parameters and the
    relations it needs, in the order they are made (one may read another); ``heavy_apart``: the
    dialect's plan (:attr:`SQLDialect.unit_heavy_apart`); ``frozen``: the heavy units from a relation
    the backend keeps, ``rows``: their rows too, ``cells``: their (unit, cell) rows (:func:`to_sql`)."""
    tree: exp.Expr
    d = dialects.get(dialect)
    needs: tuple[tuple[str, str], ...] = ()
    if unit.aggregatable(plan):
        kept = unit.heavy_set(plan) if frozen and heavy_apart else None
        name = rows_name = None
        if kept is not None:
            select = d.sql(kept)
            name = _kept_name(unit.KEPT_HEAVY, dialect, select)
            needs = ((name, select),)
            heavy = unit.heavy_rows(plan) if rows else None
            if heavy is not None:  # the relation of the heavy units' rows is all the scan reads of them
                select = d.sql(heavy)
                rows_name = _kept_name(unit.KEPT_ROWS, dialect, select)
                needs = ((rows_name, select),)

        cells_kept: list[tuple[str, str]] = []  # made after the rows, which its select reads

        def keep_cells(select: exp.Select) -> str:
            if select.find(exp.Placeholder) is not None:  # a kept relation holds no secret
                raise ValueError("a kept relation's select reads a parameter")
            text = d.sql(unit.spell_hashes(select, d.keyed_hash, d.int_div, d.keyed_int))
            cells_kept.append((_kept_name(unit.KEPT_CELLS, dialect, text), text))
            return cells_kept[-1][0]

        tree = unit.per_unit_scan(
            plan,
            _measure,
            _base_count,
            _integral,
            group_key_sql,
            heavy_apart=heavy_apart,
            heavy_set=name,
            heavy_rows=rows_name,
            heavy_cells=keep_cells if rows_name is not None and cells else None,
        )
        needs = (*needs, *cells_kept)
    else:  # COUNT(DISTINCT col): rank the rows themselves
        kept, keep = unit.kept_rows(plan, [_measure(m) for m in plan.measures], group_key_sql)
        scan = build(dataclasses.replace(plan, source=unit.KEPT, where=keep, unit=None, relation=None))
        tree = scan.with_(unit.KEPT, as_=kept, copy=False)
    tree = unit.spell_hashes(tree, d.keyed_hash, d.int_div, d.keyed_int)
    tree, names = params.spell(tree, d)  # the salt: a parameter the backend binds
    return d.sql(tree), names, needs


def _kept_name(what: str, dialect: str, select: str) -> str:
    """A kept relation's name: what it holds (its prefix) and a digest of the text that makes it."""
    return what + hashlib.sha256(f"{dialect}\0{select}".encode()).hexdigest()[:24]


def _base_count(m: Measure) -> exp.Expression:
    """The rows a sum measure is over (its column non-NULL): the count its bound scales by."""
    if isinstance(m.column, Arith):
        return exp.Count(this=_only_if(m, m.column.expr.copy()))
    return exp.Count(this=_only_if(m, _column(m)))


def _column(m: Measure) -> exp.Column:
    """The one declared column a count or sum measure reads."""
    if not isinstance(m.column, str):
        raise ValueError(f"a {m.kind} measure reads one declared column")
    return exp.column(m.column, quoted=True)


def _bounds(m: Measure) -> tuple[float, float]:
    """A sum measure's declared bounds."""
    if m.lower is None or m.upper is None:
        raise ValueError(f"a {m.kind} measure has declared bounds")
    return m.lower, m.upper


def _integral(m: Measure) -> bool:
    """Is the scan's sum for ``m`` an exact integer (as :func:`_clamped` / the moments make it)?"""
    if isinstance(m.column, Arith):
        return m.column.type == "int"
    if m.kind in ("csum", "csumsq"):
        return stats.moment_type(m) == "int"
    return m.lower is not None and _exact_bounds(m)


def _exact_bounds(m: Measure) -> bool:
    """An int column with integral bounds below 2**62: clamped and summed as exact bigints."""
    if m.lower is None or m.upper is None:
        return False
    lo, hi = m.lower, m.upper
    return (
        m.type == "int"
        and float(lo).is_integer()
        and float(hi).is_integer()
        and max(abs(lo), abs(hi)) < 2**62
    )


def keyed_hash(args: list[exp.Expr], dialect: str | SQLDialect) -> exp.Expr:
    """``DPGATE_HASH(salt, …)`` as the backend spells it (:meth:`SQLDialect.keyed_hash`)."""
    return dialects.get(dialect).keyed_hash(args)


def for_dialect(tree: exp.Expr, dialect: str | SQLDialect) -> exp.Expr:
    """The few rewrites one backend needs to mean what the plan means on the others
    (:meth:`SQLDialect.rewrite`: Spark's TRUNC/FLOOR/CEIL and table aliases, DuckDB's
    double literals; every backend: ``x IS NOT NULL``), in place."""
    return dialects.get(dialect).rewrite(tree)


def from_postgres(sql: str, dialect: str | SQLDialect) -> str:
    """SQL an emitter built as text in Postgres spelling (per-record levels, local reports,
    Subset) for the backend: :meth:`SQLDialect.from_text` (unchanged where the backend reads
    that spelling; Spark's is transpiled)."""
    return dialects.get(dialect).from_text(sql)


def text_dialect(dialect: str | SQLDialect) -> str:
    """The dialect a text emitter writes in for the backend (then :func:`from_postgres`)."""
    return dialects.get(dialect).text_dialect


_LOCAL = threading.local()


def _generator(dialect: str) -> Generator:
    """This thread's generator for ``dialect`` with ``identify=True`` (what
    ``Expression.sql(dialect=…, identify=True)`` builds per call)."""
    gens: dict[str, Generator] = _LOCAL.__dict__.setdefault("gens", {})
    gen = gens.get(dialect)
    if gen is None:
        gen = gens[dialect] = Dialect.get_or_raise(dialect).generator(identify=True)
    return gen


@functools.lru_cache(maxsize=8)
def _marker(dialect: str) -> str:
    return exp.column(_WHERE_MARK).sql(dialect=dialect, identify=True)


@functools.lru_cache(maxsize=512)
def _skeleton(plan: Plan, dialect: str) -> str:
    return dialects.get(dialect).sql(build(plan))


def build(plan: Plan) -> exp.Select:
    scan = exp.select(*[_measure(m).as_(f"m{j + 1}") for j, m in enumerate(plan.measures)])
    scan = scan.from_(plan.from_(), copy=False)
    if plan.where is not None:
        scan = scan.where(plan.where.copy(), copy=False)
    if not plan.group_by:
        return scan
    keys = [group_key_sql(g) for g in plan.group_by]
    scan = exp.select(*[k.as_(f"k{i + 1}") for i, k in enumerate(keys)], *scan.expressions).from_(
        plan.from_(), copy=False
    )
    if plan.where is not None:
        scan = scan.where(plan.where.copy(), copy=False)
    return scan.group_by(*[k.copy() for k in keys], copy=False)


def group_key_sql(g: GroupKey) -> exp.Expression:
    """A group key's column in the scan (a float key cast to DOUBLE, as its domain is)."""
    if g.expr is not None:  # a derived key (rewriter.keys), computed in the scan
        return g.expr.copy()
    col = exp.column(g.column, quoted=True)
    return exp.Cast(this=col, to=DOUBLE.copy()) if g.type == "float" else col


def _measure(m: Measure) -> exp.Expression:
    if m.kind == "count_rows":
        return exp.Count(this=exp.Star())
    if m.kind == "count_if":  # COUNT(CASE WHEN pred THEN 1 END): 0 on no rows
        return exp.Count(this=_only_if(m, to_node(1)))
    if isinstance(m.column, Arith):  # SUM/AVG of arithmetic: over clamped columns (rewriter.intervals)
        value = _only_if(m, m.column.expr.copy())
        return exp.Count(this=value) if m.kind == "count" else exp.Sum(this=value)
    col = _column(m)
    if m.kind == "count":
        return exp.Count(this=_only_if(m, col))
    if m.kind == "count_distinct":
        return exp.Count(this=exp.Distinct(expressions=[col]))
    if m.kind == "sum" and m.scale is not None:  # in the column's own fixed-point type (.fixed_point)
        lo, hi = (fixed_point.bound(b, m.scale) for b in _bounds(m))
        return exp.Cast(this=exp.Sum(this=_only_if(m, clamp_case(col, lo, hi))), to=DOUBLE.copy())
    clamped = _clamped(m, col)
    if m.kind in ("csum", "csumsq"):
        return stats.moment_expr(m.kind, m.type or "", clamped, *_bounds(m))
    return exp.Sum(this=_only_if(m, clamped))


def _only_if(m: Measure, value: exp.Expression) -> exp.Expression:
    """``value`` on the rows the measure's FILTER (WHERE …) keeps, NULL elsewhere (which
    COUNT and SUM skip): ``CASE WHEN (cond) THEN value END``, spelled alike on DuckDB,
    Postgres and Spark. A NULL or false condition keeps nothing, as Postgres's FILTER."""
    if m.filter is None:
        return value
    return exp.Case(ifs=[exp.If(this=exp.Paren(this=m.filter.copy()), true=value)])


def _clamped(m: Measure, col: exp.Expression) -> exp.Expression:
    """The column clamped to [m.lower, m.upper] (exact bigint for integral int bounds)."""
    lo, hi = _bounds(m)
    exact = _exact_bounds(m)
    if exact:
        lo, hi = int(lo), int(hi)
    else:
        col = exp.Cast(this=col, to=DOUBLE.copy())
        lo, hi = float(lo), float(hi)
    lo_n, hi_n = to_node(lo), to_node(hi)
    if not exact:  # keep the bounds float8 (a plain 0 would make Postgres pick numeric)
        lo_n, hi_n = (exp.Cast(this=n, to=DOUBLE.copy()) for n in (lo_n, hi_n))
    return clamp_case(col, lo_n, hi_n)
