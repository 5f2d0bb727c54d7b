"""Extended-query protocol: prepared statements, portals, Parse/Bind/Describe/Execute/Close.

Mixed into :class:`proxy.wire.session.Session`, which provides ``handler``, ``send``,
``statements``, ``portals`` and the shared result helpers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import messages as m
from . import types as t
from .api import Column, Description, Handler, Result, SqlError


@dataclass
class Statement:
    sql: str
    param_oids: list[int]
    empty: bool
    description: Description | None = None

    def oids(self, n: int | None = None) -> list[int]:
        """Parse-declared OIDs, completed by describe-inferred ones."""
        inferred = self.description.param_type_oids if self.description else []
        n = max(len(self.param_oids), len(inferred)) if n is None else n
        out = []
        for i in range(n):
            oid = self.param_oids[i] if i < len(self.param_oids) else 0
            out.append(oid or (inferred[i] if i < len(inferred) else 0))
        return out


@dataclass
class Portal:
    stmt: Statement
    params: list[object]
    result_formats: list[int]
    columns: list[Column] | None = None  # as sent in RowDescription (Describe P)
    described: bool = False
    result: Result | None = None
    pos: int = 0


def _formats(codes: list[int], n: int) -> list[int]:
    if len(codes) == 0:
        return [0] * n
    if len(codes) == 1:
        return codes * n
    if len(codes) != n:
        raise SqlError("08P01", f"bind message has {len(codes)} result formats but query has {n} columns")
    return codes


def _shape(cols: list[Column] | None) -> int:
    return -1 if cols is None else len(cols)


class ExtendedQuery:
    """Parse/Bind/Describe/Execute/Close handlers; errors propagate to Session.handle."""

    # Provided by Session (proxy.wire.session): the connection's state and result helpers.
    handler: Handler | None
    statements: dict[str, Statement]
    portals: dict[str, Portal]
    if TYPE_CHECKING:

        def send(self, msg: m._Backend) -> None: ...
        def _check_aborted(self, sql: str) -> None: ...
        def _row_description(self, cols: list[Column], formats: list[int]) -> m.RowDescription: ...
        async def _send_rows(
            self, cols: list[Column], formats: list[int], rows: Sequence[Sequence[Any]]
        ) -> None: ...
        async def _send_copy(self, res: Result) -> None: ...
        def _start_result(self, sql: str, res: Result) -> None: ...
        def _finish_result(self, tag: str, res: Result) -> None: ...

    def _live(self) -> Handler:
        """The statement handler: set when startup completes, before any statement arrives."""
        assert self.handler is not None
        return self.handler

    def _stmt(self, name: str) -> Statement:
        if name not in self.statements:
            raise SqlError(
                "26000",
                f'prepared statement "{name}" does not exist'
                if name
                else "unnamed prepared statement does not exist",
            )
        return self.statements[name]

    def _portal(self, name: str) -> Portal:
        if name not in self.portals:
            raise SqlError("34000", f'portal "{name}" does not exist')
        return self.portals[name]

    async def _parse(self, ev: m.Parse) -> None:
        if ev.name and ev.name in self.statements:
            raise SqlError("42P05", f'prepared statement "{ev.name}" already exists')
        self._check_aborted(ev.sql)
        stmts = self._live().split(ev.sql)
        if len(stmts) > 1:
            raise SqlError("42601", "cannot insert multiple commands into a prepared statement")
        self.statements[ev.name] = Statement(stmts[0] if stmts else "", list(ev.param_type_oids), not stmts)
        self.send(m.ParseComplete())

    async def _describe_stmt(self, st: Statement) -> Description:
        if st.description is None:
            st.description = (
                Description(st.oids(), None) if st.empty else await self._live().describe(st.sql, st.oids())
            )
        return st.description

    async def _bind(self, ev: m.Bind) -> None:
        st = self._stmt(ev.statement)
        if ev.portal and ev.portal in self.portals:
            raise SqlError("42P03", f'portal "{ev.portal}" already exists')
        self._check_aborted(st.sql)
        n = len(ev.params)
        if st.description is not None and len(st.description.param_type_oids) != n:
            raise SqlError(
                "08P01",
                f"bind message supplies {n} parameters, but prepared statement "
                f'"{ev.statement}" requires {len(st.description.param_type_oids)}',
            )
        if len(ev.param_formats) not in (0, 1, n):
            raise SqlError(
                "08P01", f"bind message has {len(ev.param_formats)} parameter formats but {n} parameters"
            )
        fmts = ev.param_formats * n if len(ev.param_formats) == 1 else ev.param_formats or [0] * n
        params = [t.decode(oid, f, v) for oid, f, v in zip(st.oids(n), fmts, ev.params)]
        self.portals[ev.portal] = Portal(st, params, list(ev.result_formats))
        self.send(m.BindComplete())

    async def _describe(self, ev: m.Describe) -> None:
        if ev.kind == "S":
            st = self._stmt(ev.name)
            desc = await self._describe_stmt(st)
            self.send(m.ParameterDescription(tuple(st.oids(len(desc.param_type_oids)))))
            cols = desc.columns
            fmts = [0] * len(cols or [])
        elif ev.name and ev.name not in self.portals and hasattr(handler := self._live(), "cursor_columns"):
            cols = handler.cursor_columns(ev.name)  # a DECLAREd cursor is a portal too
            fmts = [0] * len(cols or [])
        else:
            p = self._portal(ev.name)
            if p.result is not None:
                cols = p.result.columns
            elif p.stmt.empty:
                cols = None
            else:
                cols = (await self._describe_stmt(p.stmt)).columns
            fmts = _formats(p.result_formats, len(cols or []))
            p.columns, p.described = cols, True
        self.send(self._row_description(cols, fmts) if cols is not None else m.NoData())

    async def _execute(self, ev: m.Execute) -> None:
        p = self._portal(ev.portal)
        if p.stmt.empty:
            return self.send(m.EmptyQueryResponse())
        self._check_aborted(p.stmt.sql)
        if p.result is None:
            res = await self._live().execute(p.stmt.sql, p.params)
            if res.copy is not None:  # COPY … TO STDOUT: described as NoData
                self._start_result(p.stmt.sql, res)
                return await self._send_copy(res)
            if p.described and _shape(p.columns) != _shape(res.columns):
                raise SqlError("XX000", "internal error", detail="result does not match its description")
            p.result = res
            self._start_result(p.stmt.sql, res)
            if not p.described:
                p.columns = res.columns
        res = p.result
        if p.columns is None:
            return self._finish_result(res.command_tag, res)
        fmts = _formats(p.result_formats, len(p.columns))
        end = len(res.rows) if not ev.max_rows else min(len(res.rows), p.pos + ev.max_rows)
        await self._send_rows(p.columns, fmts, res.rows[p.pos : end])
        chunked = p.pos > 0 or end < len(res.rows)
        n, p.pos = end - p.pos, end
        if end < len(res.rows):
            return self.send(m.PortalSuspended())
        tag = f"SELECT {n}" if chunked and res.command_tag.startswith("SELECT ") else res.command_tag
        self._finish_result(tag, res)

    async def _close(self, ev: m.Close) -> None:
        if ev.kind == "S":
            st = self.statements.pop(ev.name, None)
            for k in [k for k, p in self.portals.items() if st is not None and p.stmt is st]:
                del self.portals[k]
        else:
            self.portals.pop(ev.name, None)
        self.send(m.CloseComplete())

    async def _flush(self, ev: m.Flush) -> None:
        pass  # the server writes all pending output after every message batch
