"""Spark SQL (Spark Connect): the keyed hash is ``xxhash64``; a named parameter is
``:name``, bound by ``spark.sql(text, args=…)``; the text emitters write Postgres spelling,
transpiled (``DOUBLE PRECISION`` is ``DOUBLE``, identifiers backquoted, …); and the few
rewrites below make Spark mean what the plan means on the others."""

from __future__ import annotations

from sqlglot import exp

from .base import SQLDialect

#: |x| below this: Spark's FLOOR/CEIL (a BIGINT for a double) is exact; above it every
#: double is integral already (2**62 > 2**53)
_INTEGRAL = exp.Literal.number(2**62)


class SparkDialect(SQLDialect):
    name = "spark"
    #: the heavy units apart: a join to the few heavy units (broadcast) and one
    #: aggregate per unit cost no more than a shuffle of every row per (unit, cell)
    #: (``python -m bench.scale --quick --spark --per-person``)
    unit_heavy_apart = True
    text_dialect = "postgres"

    def keyed_hash(self, args: list[exp.Expr]) -> exp.Expr:
        return exp.Anonymous(this="xxhash64", expressions=args)

    def keyed_int(self, n: exp.Expr, args: list[exp.Expr]) -> exp.Expr:
        return exp.Anonymous(this="pmod", expressions=[self.keyed_hash(args), n])

    def marker(self, name: str) -> exp.Expr:
        return exp.Placeholder(this=name)

    def rewrite(self, tree: exp.Expr) -> exp.Expr:
        """``TRUNC(x)`` (truncation toward zero of a double, Postgres / DuckDB) does not exist
        — it is ``CAST(x AS BIGINT)`` — and ``FLOOR``/``CEIL`` of a double are BIGINTs: each
        is guarded to mean Postgres' on NaN, ±Infinity and huge values
        (:func:`_integral_or_same`). A table is named with an explicit alias (its own name,
        so qualified columns still resolve): Spark's table alias may be a non-reserved
        keyword with a column list, so it reads ``FROM fx WHERE (b)`` as ``fx`` aliased
        ``WHERE(b)`` — ``FROM fx AS fx WHERE (b)`` filters on ``b`` as the plan means. A
        bare ``NULL`` where a condition stands (``WHERE NULL``, ``CASE WHEN NULL``, an
        operand of AND/OR/NOT) is ``CAST(NULL AS BOOLEAN)``: Spark types the literal VOID
        and refuses it as a filter."""
        return super().rewrite(_spark(tree))


def _spark(tree: exp.Expr) -> exp.Expr:
    def swap(node: exp.Expr) -> exp.Expr:
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


def _integral_or_same(x: exp.Expr, integral: exp.Expr) -> exp.Expr:
    """``CASE WHEN -2**62 < x AND x < 2**62 THEN integral ELSE x END``. Spark's
    ``FLOOR(x)``/``CEIL(x)`` of a double is a BIGINT, and ``CAST(x AS BIGINT)`` truncates
    toward zero (Postgres' / DuckDB's ``TRUNC(x)``); both overflow (an ANSI error) on NaN,
    ±Infinity and |x| ≥ 2**63, where Postgres and DuckDB return ``x`` (and ``x - x % 1``
    made ±Infinity NaN). The CASE means theirs: the same value (BIGINT and DOUBLE meet in
    DOUBLE, exact below 2**53; above it every double is integral already), NaN fails both
    comparisons and is returned as it is; an int or decimal argument keeps an exact type."""
    inside = exp.and_(
        exp.LT(this=exp.Neg(this=_INTEGRAL.copy()), expression=x.copy()),
        exp.LT(this=x.copy(), expression=_INTEGRAL.copy()),
    )
    return exp.Paren(this=exp.Case(ifs=[exp.If(this=inside, true=integral)], default=x.copy()))


def _condition(node: exp.Expr) -> bool:
    """``node`` stands where a boolean is required."""
    parent = node.parent
    if isinstance(parent, (exp.Where, exp.Having, exp.And, exp.Or, exp.Not)):
        return True
    if isinstance(parent, exp.Paren):
        return parent.parent is None or _condition(parent)
    return isinstance(parent, exp.If) and node.arg_key == "this"
