"""Postgres: the keyed hash is ``md5`` of the row's text; a named parameter is a session
setting (``current_setting('dpgate.name')``) the backend's connections carry in their
startup packet (:mod:`rewriter.params`)."""

from __future__ import annotations

from sqlglot import exp

from .base import SQLDialect

PG_PREFIX = "dpgate."  # parameter ``name`` is the session setting ``dpgate.name``


class PostgresDialect(SQLDialect):
    name = "postgres"
    #: the heavy units apart: one aggregate per unit and a hash join to the heavy units cost less than a hash
    #: aggregate of every row per (unit, cell) (``python -m bench.user_level --backend postgres``)
    unit_heavy_apart = True

    def keyed_hash(self, args: list[exp.Expr]) -> exp.Expr:
        row = exp.Anonymous(this="ROW", expressions=args)
        return exp.Anonymous(this="md5", expressions=[exp.Cast(this=row, to=exp.DataType.build("text"))])

    def keyed_int(self, n: exp.Expr, args: list[exp.Expr]) -> exp.Expr:
        """The first 60 bits of the ``md5``, mod n."""
        hexed = exp.DPipe(
            this=exp.Literal.string("x"),
            expression=exp.Substring(
                this=self.keyed_hash(args), start=exp.Literal.number(1), length=exp.Literal.number(15)
            ),
        )
        bits = exp.Cast(
            this=exp.Cast(this=exp.Paren(this=hexed), to=exp.DataType.build("bit(60)", dialect=self.name)),
            to=exp.DataType.build("bigint"),
        )
        return exp.Mod(this=bits, expression=exp.Paren(this=n))

    def param_key(self, name: str) -> str:
        return PG_PREFIX + name

    def marker(self, name: str) -> exp.Expr:
        return exp.Anonymous(this="current_setting", expressions=[exp.Literal.string(self.param_key(name))])
