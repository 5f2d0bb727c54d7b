"""DuckDB (embedded): the keyed hash is ``hash`` (UBIGINT); a named parameter is
``CAST($name AS VARCHAR)``, bound by the Python API; a plan template runs prepared; a
float constant is a DOUBLE literal rather than a CAST."""

from __future__ import annotations

import math

from sqlglot import exp

from .base import SQLDialect


class DuckDBDialect(SQLDialect):
    name = "duckdb"
    #: the heavy units apart: a hash aggregate per unit and a join to the heavy units cost less than a
    #: hash aggregate of every row per (unit, cell) (``python -m bench.user_level --backend duckdb``)
    unit_heavy_apart = True
    prepares_templates = True

    def keyed_hash(self, args: list[exp.Expr]) -> exp.Expr:
        return exp.Anonymous(this="hash", expressions=args)

    def keyed_int(self, n: exp.Expr, args: list[exp.Expr]) -> exp.Expr:
        # the hash is a UBIGINT; below n (< 2^31) it is a BIGINT, so the arithmetic on it stays
        # in 64 bits (a UBIGINT beside a BIGINT is widened to a 128-bit HUGEINT, several times slower)
        return exp.Cast(
            this=exp.Mod(this=self.keyed_hash(args), expression=exp.Paren(this=n)),
            to=exp.DataType.build("bigint"),
        )

    def marker(self, name: str) -> exp.Expr:
        return exp.Cast(this=exp.Parameter(this=exp.var(name)), to=exp.DataType.build("varchar"))

    def rewrite(self, tree: exp.Expr) -> exp.Expr:
        return super().rewrite(double_literals(tree))


def double_literals(tree: exp.Expr) -> exp.Expr:
    """``CAST(<number> AS DOUBLE)`` (the clamp's bounds, every float constant) as a DOUBLE
    literal in exponent form with 17 significant digits, in place — the same double
    (Python's ``float`` of the text is correctly rounded, and 17 digits read back to the
    same double), but DuckDB binds and folds a literal at once where it redoes a CAST at
    every EXECUTE of a prepared statement. A negative one is parenthesised; a non-finite
    one stays a CAST."""

    def swap(node: exp.Expr) -> exp.Expr:
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

    out: exp.Expr = tree.transform(swap, copy=False)
    return out
