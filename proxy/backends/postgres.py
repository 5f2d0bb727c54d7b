"""Postgres backend via psycopg 3 with an async connection pool.

Each statement runs with ``statement_timeout`` set on the server, and is also
bounded on the client; a cancel or timeout sends a protocol cancel.

Every scan session is read-only at the database (defence in depth behind the rewriter,
which emits SELECTs only): a pool connection is set ``SET SESSION CHARACTERISTICS AS
TRANSACTION READ ONLY`` when it is made (and refused unless ``transaction_read_only``
then reads ``on``), the same setting is asserted again in the round trip that sets each
statement's timeout, and the scan is sent over the extended query protocol, where a
message holds ONE statement: a text such as ``SET transaction_read_only = off; INSERT …``
is refused by the server as a whole, and a lone statement that changes the session's
mode is undone before the next scan. A transaction left open is rolled back when the
connection returns to the pool (psycopg_pool). Read-only does not stop a superuser's
``COPY … TO 'file'`` (no table is written): that is the role's privileges, reported at
start by :mod:`proxy.cli.privileges`.

The writes dpgate itself makes in the backend (demo tables, local tables' reports) go
through :attr:`PostgresBackend.writer`, a separate pool on ``[backend] write_dsn``
(default: ``dsn``) whose sessions are left as the role's defaults.

A statement with named parameters (``rewriter.params.ParamSQL``: the privacy unit's salt)
reads each as a session setting, ``current_setting('dpgate.name')``; the pool's
connections carry the settings in their startup packet (libpq ``options``), which no
statement log records and no view shows (a bound parameter is logged with its value
under ``log_statement = 'all'``). New connections carry the settings of the latest such
statement; a statement that checks out a connection carrying other settings (made before
they changed: a new data version) closes it and takes another.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql as pgsql
from psycopg.conninfo import conninfo_to_dict
from psycopg.postgres import types as pg_types
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from rewriter.dialects.postgres import PostgresDialect
from rewriter.params import needs

from .base import Backend, BackendError, BackendRefused, BackendTimeout

log = logging.getLogger("dpgate.backend")

# What a Postgres role needs for each kind of object a "permission denied for <kind> <name>"
# names (GRANT's forms: https://www.postgresql.org/docs/current/sql-grant.html).
GRANT_FOR = {
    "table": "SELECT ON TABLE {}",
    "view": "SELECT ON TABLE {}",
    "materialized view": "SELECT ON TABLE {}",
    "schema": "USAGE ON SCHEMA {}",
    "function": "EXECUTE ON FUNCTION {}",
    "sequence": "SELECT ON SEQUENCE {}",
}
DENIED = "permission denied for "


def quoted(name: str) -> str:
    return pgsql.Identifier(name).as_string(None)


def ident(name: str) -> str:
    """``name`` as a Postgres identifier (quoted when it is not a plain lower-case name)."""
    return quoted(name) if not name.isidentifier() or name != name.lower() else name


# -- what a role could write (Backend.privilege_problems; docs/least-privilege.md) ----------
WRITE_PRIVILEGES = ("INSERT", "UPDATE", "DELETE", "TRUNCATE")
SERVER_ROLES = {
    "pg_write_server_files": "writes files on the database server (COPY … TO 'file')",
    "pg_execute_server_program": "runs programs on the database server (COPY … PROGRAM)",
    "pg_read_server_files": "reads any file on the database server (COPY … FROM 'file')",
}
_ROLE_SQL = (
    "SELECT current_user, rolsuper, "
    + ", ".join(f"pg_has_role(current_user, '{m}', 'USAGE')" for m in SERVER_ROLES)
    + " FROM pg_roles WHERE rolname = current_user"
)
_TABLE_SQL = (
    "SELECT c.oid IS NOT NULL, n.nspname, "
    + ", ".join(f"c.oid IS NOT NULL AND has_table_privilege(c.oid, '{p}')" for p in WRITE_PRIVILEGES)
    + ", n.oid IS NOT NULL AND has_schema_privilege(n.oid, 'CREATE') "
    "FROM (SELECT to_regclass(%s) AS oid) r LEFT JOIN pg_class c ON c.oid = r.oid "
    "LEFT JOIN pg_namespace n ON n.oid = c.relnamespace"
)


def refused(e: psycopg.Error, user: str) -> BackendRefused:
    """A statement Postgres refused before executing it (SQLSTATE class 42: syntax, an
    undefined relation, column or function, a missing privilege). A missing privilege is
    42501 naming the object and the GRANT the backend role needs; other texts stay in the
    server log (they name the backend's schema)."""
    primary = (e.diag.message_primary or "") if e.diag is not None else ""
    if e.sqlstate == "42501":
        what = primary.removeprefix(DENIED) if primary.startswith(DENIED) else ""
        kind = next((k for k in sorted(GRANT_FOR, key=len, reverse=True) if what.startswith(k + " ")), None)
        if kind is not None:
            name = what[len(kind) + 1 :]
            obj = name if kind == "function" else quoted(name)
            grant = "GRANT " + GRANT_FOR[kind].format(obj) + f" TO {quoted(user)};"
            return BackendRefused(
                "42501",
                f"the backend role {user} may not read {kind} {name}; nothing was charged",
                hint=f"The database owner runs: {grant}",
            )
        return BackendRefused(
            "42501",
            f"the backend role {user} was denied permission for the scan; nothing was charged",
            hint="Grant the backend role SELECT on the declared tables' sources.",
        )
    return BackendRefused(
        e.sqlstate or "42000",
        "the backend could not compile the scan before reading any row; nothing was charged",
        hint="A declared table's source or columns do not match the "
        "backend: dpgate check-config --backend names the problem.",
    )


class PostgresBackend(Backend):
    """``[backend] kind = "postgres"``: a psycopg pool of read-only sessions (module doc)."""

    kind = "postgres"
    sql = PostgresDialect()
    scans = 0  # always 0: the proxy's Python work does not slow a remote scan

    QUEUE_WAIT_S = 10.0  # a pool checkout waits this long while the backend answers

    def __init__(
        self,
        dsn: str,
        pool_size: int = 4,
        connect_timeout_s: float = 2.0,
        *,
        write_dsn: str | None = None,
        read_only: bool = True,
        min_size: int = 1,
    ):
        self.dsn = dsn
        self.read_only = read_only
        # fail fast when the backend is down: libpq's connect_timeout (whole
        # seconds, at least 2) bounds each attempt, and until a checkout has succeeded since
        # the last connection failure a checkout waits connect_timeout_s, not the queue's 10 s
        self.connect_timeout_s = float(connect_timeout_s)
        self._up = False
        self._kw = {"autocommit": True, "connect_timeout": max(2, math.ceil(connect_timeout_s))}
        self._own_options = str(conninfo_to_dict(dsn).get("options") or "")  # the DSN's own, kept first
        self._options = self._own_options  # what new connections carry (module doc)
        self.pool = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=pool_size,
            open=False,
            kwargs=self._connect_kwargs,
            configure=_read_only_session if read_only else None,
            reconnect_timeout=5,
        )
        # the writes dpgate makes (demo tables, local tables' reports): their own pool, no connection
        # held until one is needed; a read-write backend is its own writer
        self._writer = (
            self
            if not read_only
            else PostgresBackend(
                write_dsn or dsn,
                pool_size=2,
                connect_timeout_s=connect_timeout_s,
                read_only=False,
                min_size=0,
            )
        )

    @property
    def writer(self) -> PostgresBackend:
        """The pool on ``write_dsn`` (sessions left as the role's defaults), or itself when
        its own sessions are not read-only."""
        return self._writer

    @classmethod
    def from_config(cls, cfg, state_dir, *, read_only: bool = False) -> PostgresBackend:
        """The pool of ``[backend] dsn`` (not yet connected); its writer on ``write_dsn``."""
        b = cfg.backend
        return cls(b.dsn, pool_size=b.pool_size, connect_timeout_s=b.connect_timeout_s, write_dsn=b.write_dsn)

    def _connect_kwargs(self) -> dict:
        """A new connection's arguments: with the current session settings (module doc)."""
        return {**self._kw, "options": self._options} if self._options else self._kw

    def _settings(self, sql: str) -> str | None:
        """The startup options a connection must carry to run ``sql`` (None: any will do);
        they become what new connections carry."""
        named = getattr(sql, "params", None)
        if not isinstance(named, dict):
            return None
        opts = " ".join(
            [self._own_options, *(f"-c {_option(k, v)}" for k, v in sorted(named.items()))]
        ).strip()
        self._options = opts
        return opts

    async def connect(self) -> None:
        await self.pool.open(wait=False)
        if self.writer is not self:
            await self.writer.connect()

    async def fetch(
        self,
        sql: str,
        timeout_s: float | None = None,
        cancel: asyncio.Event | None = None,
        then: Callable[[Any], Any] | None = None,
        timing: dict | None = None,
        during: Callable[[], None] | None = None,
        columnar: bool = False,  # rows only: a remote result is read as rows
    ) -> Any:
        """Rows of ``sql``; ``then(rows)``, if given, runs in a worker thread after
        the scan (outside the timeout) and its result is returned. ``timing``
        receives ``backend_ms`` (pool checkout, round trip and scan) and ``started =
        True`` once the connection is ready and the query is sent; ``during()``
        runs on the event loop while the query is in flight."""
        if needs(sql):  # it keeps no relations (frozen() is False): such a text is never made for it
            raise BackendRefused("0A000", "this backend keeps no relations for a scan; nothing was run")
        t0 = time.perf_counter()
        if during is not None:
            asyncio.get_running_loop().call_soon(during)
        rows = await self._fetch(sql, timeout_s, cancel, timing)
        if timing is not None:
            timing["backend_ms"] = (time.perf_counter() - t0) * 1000
        return rows if then is None else await asyncio.to_thread(then, rows)

    async def _fetch(self, sql, timeout_s, cancel, timing=None) -> list[tuple]:
        need = self._settings(sql)
        try:
            for _ in range(self.pool.max_size + 2):
                async with self.pool.connection(
                    timeout=self.QUEUE_WAIT_S if self._up else self.connect_timeout_s
                ) as conn:
                    self._up = True
                    if need is not None and (conn.pgconn.options or b"").decode() != need:
                        await conn.close()  # made with other settings: the pool replaces it
                        continue
                    return await self._run(conn, sql, timeout_s, cancel, timing)
            raise BackendError(
                "58000",
                "the backend's session settings kept changing during the statement; "
                "nothing was charged, run it again",
            )
        except BackendError:
            raise
        except psycopg_pool_timeout() as e:
            self._up = False
            log.warning("postgres pool: %s", e)
            raise BackendError("08006", "the backend is unavailable; nothing was charged") from None
        except psycopg.OperationalError as e:
            self._up = False
            log.warning("postgres: %s", e)
            lost = timing is not None and timing.get("started")  # mid-scan: charged
            raise BackendError(
                "08006",
                "the backend connection was lost during the query"
                if lost
                else "the backend is unavailable; nothing was charged",
            ) from None

    async def _run(self, conn, sql, timeout_s, cancel, timing=None):
        ms = int((timeout_s or 0) * 1000)
        async with conn.cursor() as cur:
            await cur.execute(
                f"SET statement_timeout = {ms}; {READ_ONLY}"
                if self.read_only
                else f"SET statement_timeout = {ms}"
            )
            if timing is not None:  # from here on the scan's time is observable: it is charged
                timing["started"] = True
            work = asyncio.ensure_future(self._exec(cur, sql, timeout_s))
            waiters = {work}
            cancel_task = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
            if cancel_task is not None:
                waiters.add(cancel_task)
            try:
                done, _ = await asyncio.wait(
                    waiters,
                    timeout=(timeout_s + 1) if timeout_s else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if work in done:
                    return work.result()
                conn.cancel()
                try:
                    await work
                except BaseException:
                    pass
                if cancel_task is not None and cancel_task in done:
                    raise BackendError("57014", "canceling statement due to user request")
                raise BackendTimeout(timeout_s or 0)
            except asyncio.CancelledError:  # the statement's task is gone (client left, shutdown):
                if not work.done():  # stop the server-side query too
                    conn.cancel()
                    await asyncio.wait({work}, timeout=2)
                raise
            finally:
                if cancel_task is not None:
                    cancel_task.cancel()

    async def _exec(self, cur, sql, timeout_s=None):
        try:
            # binary results: psycopg then sends the statement over the extended protocol (one
            # statement per message); for what a scan returns (integers, floats, numeric, text,
            # booleans, dates, timestamps) the binary loaders give the values the text ones do.
            # Named parameters are the session settings (module doc), not bound values.
            await cur.execute(str(sql), binary=True)
            if cur.description is None and not self.read_only:  # the writer's INSERT: no rows
                return []
            return await cur.fetchall()  # a scan session: a statement without rows fails
        except psycopg.errors.QueryCanceled:
            raise BackendTimeout(timeout_s or 0) from None
        except psycopg.OperationalError:
            raise
        except psycopg.Error as e:
            if (e.sqlstate or "").startswith("42"):
                log.warning("postgres refused the scan before reading a row: %s", e)
                raise refused(e, cur.connection.info.user) from None
            log.warning("postgres error: %s", e)
            raise BackendError("58000", "the backend failed to run the query") from None

    async def describe(self, source: str) -> dict[str, str] | None:
        async with self.pool.connection(timeout=10) as conn:
            try:
                cur = await conn.execute(f"SELECT * FROM {source} LIMIT 0")
            except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
                return None
            out = {}
            for d in cur.description or ():
                info = pg_types.get(d.type_code)
                out[d.name.lower()] = info.name if info is not None else f"oid {d.type_code}"
            return out

    async def privilege_problems(self, config) -> list[str]:
        """The role's attributes and memberships, each declared (central or public) table's
        write privileges and its schema's CREATE."""
        out: list[str] = []
        async with self.pool.connection(timeout=10) as conn:
            cur = await conn.execute(_ROLE_SQL)
            user, superuser, *member = await cur.fetchone()
            if superuser:
                out.append(
                    f"the backend role {user} is a superuser: it can write every table and, even in a "
                    "read-only session, files on the server (COPY … TO)"
                )
            for (role, what), yes in zip(SERVER_ROLES.items(), member):
                if yes and not superuser:
                    out.append(f"the backend role {user} is a member of {role}: it {what}")
            schemas: set[str] = set()
            for name, table in config.tables.items():
                if table.mode == "local":  # its reports are written through [backend] write_dsn
                    continue
                source = config.source_of(name)
                cur = await conn.execute(_TABLE_SQL, [source])
                found, schema, *can = await cur.fetchone()
                if not found or superuser:
                    continue  # a missing relation: the schema check's line
                writes = [p for p, yes in zip(WRITE_PRIVILEGES, can) if yes]
                if writes:
                    out.append(
                        f"the backend role {user} has {', '.join(writes)} on {source} (tables.{name}): "
                        f"REVOKE {', '.join(writes)} ON {source} FROM {user}"
                    )
                if can[-1] and schema not in schemas:
                    schemas.add(schema)
                    out.append(
                        f"the backend role {user} has CREATE on schema {schema}: "
                        f"REVOKE CREATE ON SCHEMA {ident(schema)} FROM {user} (and FROM PUBLIC)"
                    )
        return out

    async def execute_script(self, sql: str) -> None:
        """Run trusted setup SQL on the write connection."""
        async with self.writer.pool.connection() as conn:
            await conn.execute(sql)

    async def close(self) -> None:
        await self.pool.close()
        if self.writer is not self:
            await self.writer.close()


READ_ONLY = "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"


async def _read_only_session(conn) -> None:
    """A new scan connection: read-only for the session, or not used at all (a pooler or
    server that ignores the setting fails closed: no scan runs on a writable session)."""
    await conn.execute(READ_ONLY)
    cur = await conn.execute("SHOW transaction_read_only")
    row = await cur.fetchone()
    if row is None or row[0] != "on":
        raise psycopg.OperationalError("the backend session did not become read-only")


def _option(name: str, value: str) -> str:
    """``name=value`` for libpq's ``options`` (``-c name=value``): a backslash and a space
    are escaped with a backslash; the name is a dotted identifier."""
    if not name or not all(c.isalnum() or c in "._" for c in name):
        raise ValueError(f"not a setting name: {name!r}")
    return f"{name}=" + value.replace("\\", "\\\\").replace(" ", "\\ ")


def psycopg_pool_timeout():
    return PoolTimeout
