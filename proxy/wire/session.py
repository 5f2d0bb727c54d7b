"""Per-connection protocol state machine (no sockets).

The server feeds bytes with :meth:`Session.receive_data`, pulls events with
:meth:`Session.next_event`, awaits :meth:`Session.handle` for each, and writes
:meth:`Session.data_to_send`. Only the handler calls are awaited; there is no I/O here.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import messages as m
from . import types as t
from .api import Authenticator, Column, EncodedRows, Handler, HandlerFactory, Result, SqlError
from .auth import AuthFailed, ScramExchange
from .codec import (
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_MAX_STATEMENT_SIZE,
    FrontendParser,
    ProtocolViolation,
    parse_sasl_initial,
)
from .copy import copy_out
from .extended import ExtendedQuery, Portal, Statement
from .rows import data_rows

log = logging.getLogger(__name__)

STARTUP, SASL_INITIAL, SASL_CONTINUE, READY, CLOSED = "startup", "sasl1", "sasl2", "ready", "closed"
_TXN_END = {"ROLLBACK", "COMMIT", "END", "ABORT"}
THREAD_ROWS = 512  # results of this many rows are encoded on a worker thread
_COMMENTS = re.compile(r"^(\s+|--[^\n]*(\n|$)|/\*.*?\*/)*", re.S)
_ROLLBACK_TO = re.compile(r"^rollback(\s+(work|transaction))?\s+to\b", re.I)


def _after_comments(sql: str) -> str:
    """``sql`` from its first token (``_COMMENTS`` matches, possibly empty, at every start)."""
    lead = _COMMENTS.match(sql)
    assert lead is not None
    return sql[lead.end() :]


def first_word(sql: str) -> str:
    rest = _after_comments(sql)
    w = re.match(r"[A-Za-z_]+", rest)
    return w.group(0).upper() if w else ""


@dataclass
class Session(ExtendedQuery):
    authenticator: Authenticator
    handler_factory: HandlerFactory
    backend_key: tuple[int, int] = (0, 0)
    server_params: dict[str, str] = field(default_factory=dict)
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_statement_size: int | None = DEFAULT_MAX_STATEMENT_SIZE

    def __post_init__(self) -> None:
        self.parser = FrontendParser(self.max_message_size, self.max_statement_size)
        self.state = STARTUP
        self.handler: Handler | None = None
        self.user = self.database = ""
        self.startup_params: dict[str, str] = {}
        self.txn = "I"
        self.statements: dict[str, Statement] = {}
        self.portals: dict[str, Portal] = {}
        self._skip_to_sync = False
        self._scram: ScramExchange | None = None
        self._out = bytearray()

    # ------------------------------------------------------------------ I/O surface
    def receive_data(self, data: bytes) -> None:
        self.parser.feed(data)

    def next_event(self) -> m.FrontendMessage | None:
        """Next frontend event or None; raises ProtocolViolation."""
        return self.parser.next_event()

    def data_to_send(self) -> bytes:
        out, self._out = bytes(self._out), bytearray()
        return out

    def send(self, msg: m._Backend) -> None:
        self._out += msg.encode()

    @property
    def closed(self) -> bool:
        return self.state == CLOSED

    def fatal(self, sqlstate: str, message: str) -> None:
        """Send a FATAL error and mark the session closed."""
        self.send(m.ErrorResponse("FATAL", sqlstate, message))
        self.state = CLOSED

    def violation(self, exc: ProtocolViolation) -> None:
        self.fatal(exc.sqlstate, exc.message)

    # ------------------------------------------------------------------ dispatch
    async def handle(self, ev: m.FrontendMessage) -> None:
        if self.state == CLOSED:
            return
        if isinstance(ev, m.Terminate):
            self.state = CLOSED
        elif self.state == STARTUP:
            if not isinstance(ev, m.StartupMessage):
                return self.fatal("08P01", "unexpected message during startup")
            await self._startup(ev)
        elif self.state in (SASL_INITIAL, SASL_CONTINUE):
            await self._sasl(ev)
        elif isinstance(ev, m.Sync):
            self._sync()
        elif self._skip_to_sync:
            return
        elif isinstance(ev, m.StatementTooLong):
            self._too_long(ev)
        elif isinstance(ev, m.Query):
            await self._simple_query(ev.sql)
        elif isinstance(ev, (m.Parse, m.Bind, m.Describe, m.Execute, m.Close, m.Flush)):
            try:
                await getattr(self, "_" + type(ev).__name__.lower())(ev)
            except Exception as exc:  # reported to the client
                self._error(exc)
                self._skip_to_sync = True
        elif isinstance(ev, m.Unsupported):
            if ev.type == b"F":
                self._error(SqlError("0A000", "function call protocol is not supported"))
                self.send(m.ReadyForQuery(self.txn))
        else:
            self.fatal("08P01", f"unexpected message {type(ev).__name__}")

    # ------------------------------------------------------------------ startup/auth
    async def _startup(self, ev: m.StartupMessage) -> None:
        p = ev.params
        self.startup_params = p
        self.user = p["user"]
        self.database = p.get("database") or self.user
        unknown = tuple(k for k in p if k.startswith("_pq_."))
        if ev.protocol & 0xFFFF or unknown:
            self.send(m.NegotiateProtocolVersion(0, unknown))
        try:
            method = self.authenticator.method(self.user)
            verifier = self.authenticator.scram_verifier(self.user) if method != "trust" else None
        except Exception:
            log.exception("authenticator failed")
            return self.fatal("28P01", f'password authentication failed for user "{self.user}"')
        if method == "trust":
            return await self._ready()
        self._scram = ScramExchange(self.user, verifier)
        self.send(m.AuthenticationSASL(("SCRAM-SHA-256",)))
        self.state = SASL_INITIAL

    async def _sasl(self, ev: m.FrontendMessage) -> None:
        if not isinstance(ev, m.PasswordMessage):
            return self.fatal("08P01", f"expected SASL response, got {type(ev).__name__}")
        scram = self._scram
        assert scram is not None  # made when the password method asked for SASL
        try:
            if self.state == SASL_INITIAL:
                init = parse_sasl_initial(ev)
                self.send(m.AuthenticationSASLContinue(scram.first(init.mechanism, init.data)))
                self.state = SASL_CONTINUE
            else:
                final = scram.final(ev.data)
                self.send(m.AuthenticationSASLFinal(final))
                await self._ready()
        except AuthFailed as exc:
            self.auth_failed = True
            self.fatal(exc.sqlstate, exc.message)
        except ProtocolViolation as exc:
            self.violation(exc)

    async def _ready(self) -> None:
        try:
            self.handler = await self.handler_factory(self.user, self.database, dict(self.startup_params))
        except SqlError as exc:
            return self.fatal(exc.sqlstate, exc.message)
        except Exception:
            log.exception("handler factory failed")
            return self.fatal("XX000", "internal error")
        self.send(m.AuthenticationOk())
        params = dict(self.server_params)
        params.update(
            application_name=self.startup_params.get("application_name", ""), session_authorization=self.user
        )
        for k, v in params.items():
            self.send(m.ParameterStatus(k, v))
        self.send(m.BackendKeyData(*self.backend_key))
        self.send(m.ReadyForQuery("I"))
        self.state = READY

    # ------------------------------------------------------------------ helpers
    def _error(self, exc: Exception) -> None:
        if not isinstance(exc, SqlError):
            log.error("internal error in handler", exc_info=exc)
            exc = SqlError("XX000", "internal error")
        self.send(m.ErrorResponse(exc.severity, exc.sqlstate, exc.message, exc.detail, exc.hint))
        if self.txn == "T":
            self.txn = "E"

    def _check_aborted(self, sql: str) -> None:
        if self.txn == "E" and first_word(sql) not in _TXN_END:
            raise SqlError(
                "25P02", "current transaction is aborted, commands ignored until end of transaction block"
            )

    def _track(self, sql: str, tag: str) -> None:
        word = tag.split(" ", 1)[0].upper()
        if word == "BEGIN" or tag.upper() == "START TRANSACTION":
            self.txn = "T"
        elif word == "ROLLBACK" and _ROLLBACK_TO.match(_after_comments(sql)):
            self.txn = "T"
        elif word in ("COMMIT", "ROLLBACK") or tag.upper() == "PREPARE TRANSACTION":
            self.txn = "I"

    def _sync(self) -> None:
        self._skip_to_sync = False
        if self.txn == "I":
            self.portals.clear()
        self.send(m.ReadyForQuery(self.txn))

    def _row_description(self, cols: list[Column], formats: list[int]) -> m.RowDescription:
        return m.RowDescription(
            tuple(
                m.FieldDescription(c.name, c.type_oid, t.type_size(c.type_oid), f)
                for c, f in zip(cols, formats)
            )
        )

    async def _send_rows(self, cols: list[Column], formats: list[int], rows: Sequence[Sequence[Any]]) -> None:
        """DataRow messages for ``rows`` (:func:`.rows.data_rows`); a large result is encoded
        on a worker thread (its CPU time, proportional to its rows, would stall every
        other session)."""
        oids = [c.type_oid for c in cols]
        if len(rows) >= THREAD_ROWS and not (isinstance(rows, EncodedRows) and rows.encoded_for(formats)):
            self._out += await asyncio.to_thread(data_rows, oids, formats, rows)
        else:
            self._out += data_rows(oids, formats, rows)

    async def _send_copy(self, res: Result) -> None:
        """The result as COPY … TO STDOUT (:func:`.copy.copy_out`), then ``COPY n``; a large
        one is encoded on a worker thread."""
        cols, rows, fmt = res.columns or [], res.rows, res.copy
        assert fmt is not None  # sent for results that are a COPY … TO STDOUT
        if len(rows) >= THREAD_ROWS:
            data, n = await asyncio.to_thread(copy_out, cols, fmt, rows)
        else:
            data, n = copy_out(cols, fmt, rows)
        self._out += data
        self._finish_result(f"COPY {n}", res)

    def _start_result(self, sql: str, res: Result) -> None:
        for n in res.notices:
            self.send(m.NoticeResponse(message=n))
        self._track(sql, res.command_tag)

    def _finish_result(self, tag: str, res: Result) -> None:
        self.send(m.CommandComplete(tag))
        for k, v in res.parameter_status.items():
            self.send(m.ParameterStatus(k, v))

    def _too_long(self, ev: m.StatementTooLong) -> None:
        """Refuse a statement the codec dropped unread (54000); the session stays usable:
        a Query ends with ReadyForQuery, a Parse skips to the next Sync like any error."""
        self._error(
            SqlError(
                "54000",
                f"statement too long: {ev.size} bytes, limit {ev.limit}",
                hint="send a shorter statement (the limit is server.limits.max_statement_size)",
            )
        )
        if ev.type == b"Q":
            self.send(m.ReadyForQuery(self.txn))
        else:
            self._skip_to_sync = True

    # ------------------------------------------------------------------ simple query
    async def _simple_query(self, sql: str) -> None:
        try:
            stmts = self._live().split(sql)
            if not stmts:
                self.send(m.EmptyQueryResponse())
            for stmt in stmts:
                self._check_aborted(stmt)
                res = await self._live().execute(stmt, [])
                self._start_result(stmt, res)
                if res.copy is not None:
                    await self._send_copy(res)
                    continue
                if res.columns is not None:
                    fmts = [0] * len(res.columns)
                    mark = len(self._out)
                    self.send(self._row_description(res.columns, fmts))
                    try:
                        await self._send_rows(res.columns, fmts, res.rows)
                    except BaseException:
                        del self._out[mark:]  # no RowDescription without its rows
                        raise
                self._finish_result(res.command_tag, res)
        except Exception as exc:
            self._error(exc)
        self.send(m.ReadyForQuery(self.txn))

    async def close(self) -> None:
        """Release the handler (idempotent)."""
        h, self.handler = self.handler, None
        self.state = CLOSED
        if h is not None:
            try:
                await h.close()
            except Exception:
                log.exception("handler close failed")
