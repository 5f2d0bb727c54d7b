"""One connection's temporary views (``CREATE TEMPORARY VIEW v AS <query>``, ``DROP VIEW v``).

A temporary view is a session-local name for a statement dpgate answers: creating one
plans its query (as Describe does: nothing is read or charged) and refuses it, with the
planner's reason, when the query is not answered; the catalog then lists it for this
connection only (``pg_class``, ``pg_attribute``, ``information_schema`` in its schema
``pg_temp_N``, :meth:`proxy.catalog.Catalog.add_session_view`). A statement that reads
the view is the statement over its definition (:func:`rewriter.session_views.inline`):
the same plan and release key as the inlined statement written by hand, so a repeat is
free and nothing is counted twice. The views end with the connection.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from sqlglot import exp

from rewriter.errors import Refusal
from rewriter.parsing import parse
from rewriter.session_views import MAX_VIEWS, ViewStatement, inline, view_statement

from ..catalog import PG_RELATIONS
from ..wire.api import Result, SqlError

_KEYS = itertools.count(1)
INLINE_PARSE = 1024  # longer statements of a session with views are parsed on a worker thread


class SessionViews:
    """The temporary views of one connection, by name (their definitions, inlined)."""

    def __init__(self, gateway: Any) -> None:
        self.gw = gateway
        self.key = next(_KEYS)  # this connection in the catalog's session relations
        self.views: dict[str, exp.Query] = {}

    @staticmethod
    def statement(sql: str) -> ViewStatement | None:
        """``sql`` as a temporary-view statement, or None (read from its parse)."""
        return view_statement(sql)

    def inline(self, sql: str) -> str:
        """``sql`` with this connection's views replaced by their definitions."""
        if not self.views:
            return sql
        return inline(sql, self.views) or sql

    async def inline_async(self, sql: str) -> str:
        """:meth:`inline`, parsing a long statement on a worker thread (not the event loop)."""
        if not self.views or len(sql) <= INLINE_PARSE:
            return self.inline(sql)
        return await asyncio.to_thread(self.inline, sql)

    async def run(self, conn: Any, st: ViewStatement, params: list[object]) -> Result:
        if st.action == "drop":
            return await self._drop(st)
        if params:
            raise Refusal("42P02", "a view's query takes no parameters; write the values in it.", hint=None)
        (name,) = st.names
        if name in self.gw.config.tables or name in PG_RELATIONS or (name in self.views and not st.replace):
            raise Refusal("42P07", f'relation "{name}" already exists', hint="Choose another name.")
        if name not in self.views and len(self.views) >= MAX_VIEWS:
            raise Refusal(
                "54000",
                f"a connection holds at most {MAX_VIEWS} temporary views; DROP VIEW the ones it no longer needs.",
                hint=None,
            )
        assert st.query is not None  # a CREATE has its query
        text = self.inline(st.query.sql("postgres"))  # a view over another view: its definition
        try:
            desc = await conn._describe(text, [])
        except (Refusal, SqlError) as e:
            raise SqlError(
                e.sqlstate,
                f"CREATE TEMPORARY VIEW {name}: its query is not answered: {e.message}",
                hint=e.hint,
            ) from None
        query = parse(text)
        if desc.columns is None or not isinstance(query, exp.Query):
            raise Refusal("0A000", "a view is defined by a SELECT query.", hint=None)
        columns = [(c.name, c.type_oid) for c in desc.columns]
        await asyncio.to_thread(self._replace, name, columns)
        self.views[name] = query
        return Result("CREATE VIEW")

    def _replace(self, name: str, columns: list[tuple[str, int]]) -> None:
        catalog = self.gw.catalog
        catalog.drop_session_view(self.key, name)
        try:
            catalog.add_session_view(self.key, name, columns)
        except Exception as e:  # CatalogError: a column type the catalog cannot list
            raise SqlError(getattr(e, "sqlstate", "0A000"), getattr(e, "message", str(e))) from None

    async def _drop(self, st: ViewStatement) -> Result:
        if tables := [n for n in st.names if n in self.gw.config.tables and n not in self.views]:
            raise Refusal("42809", f'"{tables[0]}" is not a view', hint=None)
        missing = [n for n in st.names if n not in self.views]
        if missing and not st.if_exists:
            raise Refusal("42P01", f'view "{missing[0]}" does not exist', hint=None)
        for n in st.names:
            if self.views.pop(n, None) is not None:
                await asyncio.to_thread(self.gw.catalog.drop_session_view, self.key, n)
        return Result("DROP VIEW", notices=[f'view "{n}" does not exist, skipping' for n in missing])

    def close(self) -> None:
        if self.views:
            self.views.clear()
            self.gw.catalog.drop_session(self.key)
