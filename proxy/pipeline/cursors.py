"""Named cursors: ``DECLARE c [NO SCROLL] CURSOR [WITH[OUT] HOLD] FOR <query>``,
``FETCH [NEXT | FORWARD [n | ALL] | n | ALL] [FROM | IN] c`` and ``CLOSE c | ALL``,
as psycopg/psycopg2 named cursors and SQLAlchemy ``stream_results`` send them.

DECLARE runs its query once through the ordinary pipeline (a DP statement is
planned, charged and answered as if sent alone: a repeat is free); the released
rows are kept in the session and FETCH pages through them (post-processing: no
scan, no charge). The cursor's header is session plumbing, read like the other
session statements; the query after FOR is parsed and checked as usual.
Cursors live until CLOSE, DISCARD ALL or the end of the connection.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

from rewriter.errors import Refusal

from ..wire.api import Column, Description, Result, SqlError
from .kind import HEAVY_ROWS

MAX_CURSORS = 64
_IDENT = r'(?:[A-Za-z_][\w$]*|"(?:[^"]|"")+")'
_DECLARE = re.compile(
    r"^DECLARE\s+(?P<name>" + _IDENT + r")\s+(?P<opts>(?:(?:BINARY|INSENSITIVE|ASENSITIVE|"
    r"NO\s+SCROLL|SCROLL)\s+)*)CURSOR(?:\s+(?:WITH|WITHOUT)\s+HOLD)?\s+FOR\s+(?P<query>.+)$",
    re.I | re.S,
)
_FETCH = re.compile(
    r"^FETCH\s+(?:(?P<how>NEXT|FORWARD(?:\s+(?:\d+|ALL))?|\d+|ALL)\s+)?(?:(?:FROM|IN)\s+)?"
    r"(?P<name>" + _IDENT + r")$",
    re.I | re.S,
)
_OTHER_FETCH = re.compile(r"^(FETCH|MOVE)\b", re.I)
_CLOSE = re.compile(r"^CLOSE\s+(?P<name>ALL|" + _IDENT + r")$", re.I)
_DISCARD_ALL = re.compile(r"^DISCARD\s+ALL$", re.I)


def _name(ident: str) -> str:
    return ident[1:-1].replace('""', '"') if ident.startswith('"') else ident.lower()


def match(sql: str):
    """("declare", name, query) | ("fetch", name, count or None for ALL) | ("close", name or None)
    | ("discard",) for a cursor statement, else None."""
    s = sql.strip().rstrip(";").strip()
    if m := _DECLARE.match(s):
        if "BINARY" in m.group("opts").upper():
            raise Refusal(
                "0A000", "BINARY cursors are not supported", hint="Declare the cursor without BINARY."
            )
        return "declare", _name(m.group("name")), m.group("query").strip()
    if m := _FETCH.match(s):
        how = (m.group("how") or "NEXT").upper().split()
        n = how[-1]
        return (
            "fetch",
            _name(m.group("name")),
            (1 if n in ("NEXT", "FORWARD") else None if n == "ALL" else int(n)),
        )
    if _OTHER_FETCH.match(s):
        raise Refusal(
            "0A000",
            "only forward FETCH is supported on dpgate cursors",
            hint="Use FETCH FORWARD n FROM cursor (or FETCH ALL).",
        )
    if m := _CLOSE.match(s):
        return "close", None if m.group("name").upper() == "ALL" else _name(m.group("name"))
    if _DISCARD_ALL.match(s):
        return ("discard",)
    return None


@dataclass
class _Cursor:
    columns: list[Column] | None
    rows: list[tuple]
    pos: int = 0


@dataclass
class Cursors:
    """One connection's open cursors."""

    open: dict = field(default_factory=dict)

    def _get(self, name: str) -> _Cursor:
        cur = self.open.get(name)
        if cur is None:
            raise SqlError("34000", f'cursor "{name}" does not exist')
        return cur

    def columns(self, name: str) -> list[Column] | None:
        """The cursor's row shape (Describe Portal of a declared cursor)."""
        return self._get(name).columns

    async def describe(self, conn, stmt, oids: list[int]) -> Description:
        kind = stmt[0]
        if kind == "declare":
            inner = await conn.describe(stmt[2], oids)  # parameters typed by the query
            return Description(inner.param_type_oids, None)
        if kind == "fetch":
            return Description(list(oids), self._get(stmt[1]).columns)
        return Description(list(oids), None)

    async def run(self, conn, stmt, params: list[object]):
        """(Result, decision, ε) of a cursor statement."""
        kind = stmt[0]
        if kind == "declare":
            name, query = stmt[1], stmt[2]
            if name in self.open:
                raise SqlError("42P03", f'cursor "{name}" already exists')
            if len(self.open) >= MAX_CURSORS:
                raise SqlError(
                    "54000",
                    f"at most {MAX_CURSORS} cursors may be open at once",
                    hint="CLOSE the cursors you have read.",
                )
            if match(query) is not None or conn.session.match(query) is not None:
                raise SqlError("42601", "a cursor is declared FOR a SELECT statement")
            res, decision, eps = await conn.answer(query, params)
            if res.columns is None:
                raise SqlError("42601", "a cursor is declared FOR a statement that returns rows")
            rows = res.rows  # a large result's rows are made off the event loop
            self.open[name] = _Cursor(
                res.columns, await asyncio.to_thread(list, rows) if len(rows) >= HEAVY_ROWS else list(rows)
            )
            return Result("DECLARE CURSOR", None, [], notices=list(res.notices)), decision, eps
        if kind == "fetch":
            cur = self._get(stmt[1])
            end = len(cur.rows) if stmt[2] is None else min(len(cur.rows), cur.pos + stmt[2])
            rows, cur.pos = cur.rows[cur.pos : end], end
            return Result(f"FETCH {len(rows)}", cur.columns, rows), "local", 0.0
        if kind == "close":
            if stmt[1] is None:
                self.open.clear()
                return Result("CLOSE CURSOR ALL", None, []), "local", 0.0
            self.open.pop(stmt[1], None)  # as dpgate always answered CLOSE: clients close freely
            return Result("CLOSE CURSOR", None, []), "local", 0.0
        self.open.clear()  # DISCARD ALL: the session answers it too
        return None
