"""Public tables, a release kind that releases nothing private: the
statement is rebuilt from its parse by :func:`rewriter.public.plan_public` (declared
columns only) and its rows are returned exactly, with no noise and no charge."""

from __future__ import annotations

from rewriter.public import plan_public

from ..wire.api import Column, Description, Result
from .common import TYPE_OIDS, pretty
from .kind import Prepared, ReleaseKind, Statement, fetch

__all__ = ["PUBLIC", "Public"]

_TEXT = 25


def _columns(q) -> list[Column]:
    return [Column(n, TYPE_OIDS.get(t) or _TEXT) for n, t in q.columns]


class Public(ReleaseKind):
    name = "public"

    async def plan(self, conn, stmt: Statement, params: list) -> Prepared:
        q = plan_public(stmt.tree(), conn.gw.config, list(params) if params else None)
        return Prepared(self, q, _columns(q))

    async def answer_free(self, conn, p: Prepared):
        gw = conn.gw
        rows = await fetch(conn, p.plan.sql(gw.backend.dialect))  # a backend error is its SQLSTATE
        note = f"dpgate: {p.plan.table} is a public table: exact rows, no noise, nothing charged"
        return (
            Result(f"SELECT {len(rows)}", p.columns, [tuple(r) for r in rows], notices=[note]),
            "public",
            0.0,
        )

    async def describe(self, conn, stmt: Statement, oids: list[int]) -> Description:
        q = plan_public(stmt.tree(), conn.gw.config, ["0"] * stmt.sql.count("$") or None)
        return Description(list(oids), _columns(q))

    async def explain(self, conn, stmt: Statement, params: list, plan=None) -> Result:
        gw = conn.gw
        q = plan_public(stmt.tree(), gw.config, list(params) if params else None)
        lines = [
            f"dpgate: {q.table} is a public table (no privacy unit, no noise, nothing charged)",
            "backend SQL:",
        ] + ["  " + line for line in pretty(q.sql(gw.backend.dialect), gw.backend.dialect).splitlines()]
        return Result("EXPLAIN", [Column("QUERY PLAN", _TEXT)], [(line,) for line in lines])


PUBLIC = Public()
