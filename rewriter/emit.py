"""Emit the backend SQL for a plan: one scan, one row per group the data has.

    SELECT keys AS k1, …, measures AS m1, … FROM source WHERE pred GROUP BY keys

Without GROUP BY it is a single aggregate row. SUM inputs are
clamped to the declared bounds inside the scan (NULL stays NULL, NaN/inf clamp). A
derived key (:mod:`rewriter.keys`: CASE labels, bins, date parts) is computed in the
same scan. The proxy maps the groups onto the public cells (:func:`rewriter.cells.complete`:
empty cells get zeros, as does a NULL measure; NULL or out-of-domain keys match no cell, a
NULL bin matches NULL) rather than here by a LEFT JOIN from a VALUES relation of the
domain, which would cost the backend about as much again as the scan on small tables.
Everything is built as a sqlglot AST.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from . import params, stats, unit
from .intervals import Arith
from .plan import GroupKey, Measure, Plan
from .values import clamp_case, to_node

DOUBLE = exp.DataType.build("double")


_WHERE_MARK = "__dpgate_where__"


def to_sql(plan: Plan, dialect: Literal["duckdb", "postgres", "spark"], salt: str = "") -> str:
    """The backend SQL. The statement around the WHERE predicate depends only on the
    plan's shape, so it is generated once per shape and cached; the predicate is
    generated from its own AST each time and put in place of a marker column
    (a plan filled from a template, :mod:`.template`, carries its SQL already).
    ``salt`` keys the privacy unit's bounding hash (:mod:`.unit`; hex, from the ledger)."""
    if plan.unit is not None:
        text, names = _unit_sql(plan, dialect)
        return unit.salted(text, salt, dialect, names)
    preset = plan.memo.sql
    if dialect in preset:
        return preset[dialect]
    if plan.where is None:
        return _skeleton(plan, dialect)
    shape = dataclasses.replace(plan, where=exp.column(_WHERE_MARK))
    skeleton = _skeleton(shape, dialect)
    where = _generator(dialect).generate(for_dialect(plan.where.copy(), dialect), copy=False)
    sql = skeleton.replace(_marker(dialect), f"({where})")
    preset[dialect] = sql  # kept with the plan (plans are cached)
    return sql


@functools.lru_cache(maxsize=256)
def _unit_sql(plan: Plan, dialect: str) -> tuple[str, frozenset[str]]:
    """The bounded scan of a plan with a privacy unit (:mod:`.unit`) and its parameters."""
    if unit.aggregatable(plan):
        tree = unit.per_unit_scan(plan, _measure, _base_count, _integral, group_key_sql)
    else:  # COUNT(DISTINCT col): rank the rows themselves
        kept, keep = unit.kept_rows(plan, [_measure(m) for m in plan.measures], group_key_sql)
        scan = build(dataclasses.replace(plan, source=unit.KEPT, where=keep, unit=None, relation=None))
        tree = scan.with_(unit.KEPT, as_=kept, copy=False)
    tree = unit.spell_hashes(
        tree,
        lambda a: keyed_hash(a, dialect),
        lambda a, b: int_div(a, b, dialect),
        lambda n, a: keyed_int(n, a, dialect),
    )
    tree, names = params.spell(tree, dialect)  # the salt: a parameter the backend binds
    return for_dialect(tree, dialect).sql(dialect=dialect, identify=True), names


def int_div(a: exp.Expression, b: exp.Expression, dialect: str) -> exp.Expression:
    """Integer division truncated toward zero: DuckDB ``//``, Postgres ``DIV`` (its SUM of
    bigints is numeric), Spark ``DIV``."""
    return exp.IntDiv(this=exp.Paren(this=a), expression=exp.Paren(this=b))


def _base_count(m: Measure) -> exp.Expression:
    """The rows a sum measure is over (its column non-NULL): the count its bound scales by."""
    if isinstance(m.column, Arith):
        return exp.Count(this=_only_if(m, m.column.expr.copy()))
    return exp.Count(this=_only_if(m, exp.column(m.column, quoted=True)))


def _integral(m: Measure) -> bool:
    """Is the scan's sum for ``m`` an exact integer (as :func:`_clamped` / the moments make it)?"""
    if isinstance(m.column, Arith):
        return m.column.type == "int"
    if m.kind in ("csum", "csumsq"):
        return stats.moment_type(m) == "int"
    return m.lower is not None and _exact_bounds(m)


def _exact_bounds(m: Measure) -> bool:
    """An int column with integral bounds below 2**62: clamped and summed as exact bigints."""
    lo, hi = m.lower, m.upper
    return (
        m.type == "int"
        and float(lo).is_integer()
        and float(hi).is_integer()
        and max(abs(lo), abs(hi)) < 2**62
    )


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


def keyed_int(n: exp.Expression, args: list, dialect: str) -> exp.Expression:
    """The keyed hash of ``args`` as an integer in [0, n) (n > 0): DuckDB ``hash`` (UBIGINT)
    mod n, Spark ``pmod(xxhash64, n)``, Postgres the first 60 bits of the ``md5`` mod n."""
    if dialect == "duckdb":
        return exp.Mod(this=exp.Anonymous(this="hash", expressions=args), expression=exp.Paren(this=n))
    if dialect == "spark":
        return exp.Anonymous(this="pmod", expressions=[exp.Anonymous(this="xxhash64", expressions=args), n])
    hexed = exp.DPipe(
        this=exp.Literal.string("x"),
        expression=exp.Substring(
            this=keyed_hash(args, dialect), start=exp.Literal.number(1), length=exp.Literal.number(15)
        ),
    )
    bits = exp.Cast(
        this=exp.Cast(this=exp.Paren(this=hexed), to=exp.DataType.build("bit(60)", dialect="postgres")),
        to=exp.DataType.build("bigint"),
    )
    return exp.Mod(this=bits, expression=exp.Paren(this=n))


def for_dialect(tree: exp.Expression, dialect: str) -> exp.Expression:
    """The few rewrites one backend needs to mean what the plan means on the others.

    Spark: ``TRUNC(x)`` (truncation toward zero of a double, Postgres / DuckDB) does not
    exist — it is ``CAST(x AS BIGINT)`` — and ``FLOOR``/``CEIL`` of a double are BIGINTs:
    each is guarded to mean Postgres' on NaN, ±Infinity and huge values
    (:func:`_integral_or_same`). And a table is named
    with an explicit alias (its own name, so qualified columns still resolve): Spark's
    table alias may be a non-reserved keyword with a column list, so it reads
    ``FROM fx WHERE (b)`` as ``fx`` aliased ``WHERE(b)`` (ASSIGNMENT_ARITY_MISMATCH) —
    ``FROM fx AS fx WHERE (b)`` filters on ``b`` as the plan means. A bare ``NULL`` where a
    condition stands (``WHERE NULL``, ``CASE WHEN NULL``, an operand of AND/OR/NOT) is
    ``CAST(NULL AS BOOLEAN)``: Spark types the literal VOID and refuses it as a filter.

    Every backend: ``NOT (x IS NULL)`` is spelled ``x IS NOT NULL`` (:func:`not_null_spelling`)."""
    if dialect == "duckdb":
        tree = double_literals(tree)
    return not_null_spelling(_spark(tree) if dialect == "spark" else tree)


def double_literals(tree: exp.Expression) -> exp.Expression:
    """DuckDB: ``CAST(<number> AS DOUBLE)`` (the clamp's bounds, every float constant) as a
    DOUBLE literal in exponent form with 17 significant digits, in place — the same double
    (Python's ``float`` of the text is correctly rounded, and 17 digits read back to the
    same double), but DuckDB binds and folds a literal faster than a CAST, which it redoes
    at every EXECUTE of a prepared statement (``bench.rewrite``). A negative one is parenthesised; a non-finite one stays a CAST."""

    def swap(node):
        if not isinstance(node, exp.Cast) or not node.to.is_type("double"):
            return node
        x, sign = node.this, 1.0
        if isinstance(x, exp.Neg):
            x, sign = x.this, -1.0
        if not (isinstance(x, exp.Literal) and x.is_number):
            return node
        v = sign * float(x.this)
        if not math.isfinite(v):
            return node
        lit = exp.Literal.number(f"{v:.16e}")
        return exp.Paren(this=lit) if v < 0 else lit

    return tree.transform(swap, copy=False)


def _spark(tree: exp.Expression) -> exp.Expression:
    """:func:`for_dialect`'s Spark rewrites."""

    def swap(node):
        if isinstance(node, exp.Null) and (node.parent is None or _condition(node)):
            return exp.Cast(this=exp.Null(), to=exp.DataType.build("boolean"))
        if isinstance(node, exp.Table) and not node.alias and node.name:
            node.set("alias", exp.TableAlias(this=exp.to_identifier(node.name, quoted=True)))
            return node
        return node

    tree = tree.transform(swap, copy=False)
    # innermost first, so an argument is rewritten before it is copied into the CASE
    for node in reversed(list(tree.find_all(exp.Floor, exp.Ceil, exp.Anonymous, bfs=False))):
        if isinstance(node, exp.Anonymous):
            if node.name.upper() != "TRUNC" or len(node.expressions) != 1:
                continue
            x = node.expressions[0]
            new = _integral_or_same(x, exp.Cast(this=x.copy(), to=exp.DataType.build("bigint")))
        elif node.args.get("decimals"):
            continue
        else:
            new = _integral_or_same(node.this, node.copy())
        if node is tree:
            return new
        node.replace(new)
    return tree


def not_null_spelling(tree: exp.Expression) -> exp.Expression:
    """``NOT (x IS NULL)`` written ``x IS NOT NULL``, in place. sqlglot reads the second as
    the first and writes it back as ``NOT x IS NULL``; the two mean the same everywhere, but
    DuckDB's optimizer does not make the first its NOT NULL filter: on the privacy unit's
    lookup join (``WHERE NOT "__dpgate_unit" IS NULL``) DuckDB builds the join's hash table on
    ``orders`` instead of the filtered lines (TPC-H's filtered Q6 in ``bench.user_level``). The tree made here
    (``Is(x, Not(Null))``) is only ever generated, never planned again."""

    def spell(node):
        if not isinstance(node, exp.Not):
            return node
        test = node.this
        while isinstance(test, exp.Paren):
            test = test.this
        if isinstance(test, exp.Is) and isinstance(test.expression, exp.Null):
            return exp.Is(this=test.this, expression=exp.Not(this=exp.Null()))
        return node

    return tree.transform(spell, copy=False)


#: |x| below this: Spark's FLOOR/CEIL (a BIGINT for a double) is exact; above it every
#: double is integral already (2**62 > 2**53)
_SPARK_INTEGRAL = exp.Literal.number(2**62)


def _integral_or_same(x: exp.Expression, integral: exp.Expression) -> exp.Expression:
    """``CASE WHEN -2**62 < x AND x < 2**62 THEN integral ELSE x END``. Spark's
    ``FLOOR(x)``/``CEIL(x)`` of a double is a BIGINT, and ``CAST(x AS BIGINT)`` truncates
    toward zero (Postgres' / DuckDB's ``TRUNC(x)``); both overflow (an ANSI error) on NaN,
    ±Infinity and |x| ≥ 2**63, where Postgres and DuckDB return ``x`` (and ``x - x % 1``
    made ±Infinity NaN). The CASE means theirs: the same value (BIGINT and DOUBLE meet in
    DOUBLE, exact below 2**53; above it every double is integral already), NaN fails both
    comparisons and is returned as it is; an int or decimal argument keeps an exact type."""
    inside = exp.and_(
        exp.LT(this=exp.Neg(this=_SPARK_INTEGRAL.copy()), expression=x.copy()),
        exp.LT(this=x.copy(), expression=_SPARK_INTEGRAL.copy()),
    )
    return exp.Paren(this=exp.Case(ifs=[exp.If(this=inside, true=integral)], default=x.copy()))


def from_postgres(sql: str, dialect: str) -> str:
    """SQL an emitter built as text in Postgres spelling (per-record levels, Chen et al. 2025)
    for ``dialect``: unchanged but for Spark, where it is parsed and generated again
    (``DOUBLE PRECISION`` is ``DOUBLE``, …) with :func:`for_dialect`'s rewrites. Literals
    keep their text, so the float-exact level bounds ``CAST('…' AS DOUBLE)`` stay exact."""
    if dialect != "spark":
        return sql
    tree = sqlglot.parse_one(sql, read="postgres")
    return for_dialect(tree, dialect).sql(dialect=dialect, identify=True)


def _condition(node: exp.Expression) -> bool:
    """``node`` stands where a boolean is required."""
    parent = node.parent
    if isinstance(parent, (exp.Where, exp.Having, exp.And, exp.Or, exp.Not)):
        return True
    if isinstance(parent, exp.Paren):
        return parent.parent is None or _condition(parent)
    return isinstance(parent, exp.If) and node.arg_key == "this"


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
    col = exp.column(m.column, quoted=True)
    if m.kind == "count":
        return exp.Count(this=_only_if(m, col))
    if m.kind == "count_distinct":
        return exp.Count(this=exp.Distinct(expressions=[col]))
    clamped = _clamped(m, col)
    if m.kind in ("csum", "csumsq"):
        return stats.moment_expr(m.kind, m.type, clamped, m.lower, m.upper)
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
    lo, hi = m.lower, m.upper
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
