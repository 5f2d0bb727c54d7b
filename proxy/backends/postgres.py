"""Postgres backend via psycopg 3 with an async connection pool.

Each statement runs with ``statement_timeout`` set on the server, and is also
bounded on the client; a cancel or timeout sends a protocol cancel.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time

import psycopg
from psycopg import sql as pgsql
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from .base import BackendError, BackendRefused, BackendTimeout

log = logging.getLogger("dpgate.backend")

# What a Postgres role needs for each kind of object a "permission denied for <kind> <name>"
# names (GRANT's forms: https://www.postgresql.org/docs/current/sql-grant.html).
GRANT_FOR = {"table": "SELECT ON TABLE {}", "view": "SELECT ON TABLE {}", "materialized view": "SELECT ON TABLE {}",
             "schema": "USAGE ON SCHEMA {}", "function": "EXECUTE ON FUNCTION {}", "sequence": "SELECT ON SEQUENCE {}"}
DENIED = "permission denied for "


def quoted(name: str) -> str:
    return pgsql.Identifier(name).as_string(None)


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
            name = what[len(kind) + 1:]
            obj = name if kind == "function" else quoted(name)
            grant = "GRANT " + GRANT_FOR[kind].format(obj) + f" TO {quoted(user)};"
            return BackendRefused("42501", f"the backend role {user} may not read {kind} {name}; nothing was "
                                  "charged", hint=f"The database owner runs: {grant}")
        return BackendRefused("42501", f"the backend role {user} was denied permission for the scan; nothing was "
                              "charged", hint="Grant the backend role SELECT on the declared tables' sources.")
    return BackendRefused(e.sqlstate or "42000", "the backend could not compile the scan before reading any row; "
                          "nothing was charged", hint="A declared table's source or columns do not match the "
                          "backend: dpgate check-config --backend names the problem.")


class PostgresBackend:
    dialect = "postgres"
    scans = 0         # always 0: the proxy's Python work does not slow a remote scan

    QUEUE_WAIT_S = 10.0       # a pool checkout waits this long while the backend answers

    def __init__(self, dsn: str, pool_size: int = 4, connect_timeout_s: float = 2.0):
        self.dsn = dsn
        # fail fast when the backend is down (issue 24): libpq's connect_timeout (whole
        # seconds, at least 2) bounds each attempt, and until a checkout has succeeded since
        # the last connection failure a checkout waits connect_timeout_s, not the queue's 10 s
        self.connect_timeout_s = float(connect_timeout_s)
        self._up = False
        self.pool = AsyncConnectionPool(dsn, min_size=1, max_size=pool_size, open=False,
                                        kwargs={"autocommit": True,
                                                "connect_timeout": max(2, math.ceil(connect_timeout_s))},
                                        reconnect_timeout=5)

    async def connect(self) -> None:
        await self.pool.open(wait=False)

    async def fetch(self, sql: str, timeout_s: float | None = None, cancel: asyncio.Event | None = None,
                    then=None, timing: dict | None = None, during=None):
        """Rows of ``sql``; ``then(rows)``, if given, runs in a worker thread after
        the scan (outside the timeout) and its result is returned. ``timing``
        receives ``backend_ms`` (pool checkout, round trip and scan) and ``started =
        True`` once the connection is ready and the query is sent; ``during()``
        runs on the event loop while the query is in flight."""
        t0 = time.perf_counter()
        if during is not None:
            asyncio.get_running_loop().call_soon(during)
        rows = await self._fetch(sql, timeout_s, cancel, timing)
        if timing is not None:
            timing["backend_ms"] = (time.perf_counter() - t0) * 1000
        return rows if then is None else await asyncio.to_thread(then, rows)

    async def _fetch(self, sql, timeout_s, cancel, timing=None) -> list[tuple]:
        try:
            async with self.pool.connection(timeout=self.QUEUE_WAIT_S if self._up else self.connect_timeout_s) as conn:
                self._up = True
                return await self._run(conn, sql, timeout_s, cancel, timing)
        except BackendError:
            raise
        except psycopg_pool_timeout() as e:
            self._up = False
            log.warning("postgres pool: %s", e)
            raise BackendError("08006", "the backend is unavailable; nothing was charged") from None
        except psycopg.OperationalError as e:
            self._up = False
            log.warning("postgres: %s", e)
            lost = timing is not None and timing.get("started")       # mid-scan: charged
            raise BackendError("08006", "the backend connection was lost during the query" if lost
                               else "the backend is unavailable; nothing was charged") from None

    async def _run(self, conn, sql, timeout_s, cancel, timing=None):
        ms = int((timeout_s or 0) * 1000)
        async with conn.cursor() as cur:
            await cur.execute(f"SET statement_timeout = {ms}")
            if timing is not None:    # from here on the scan's time is observable: it is charged
                timing["started"] = True
            work = asyncio.ensure_future(self._exec(cur, sql, timeout_s))
            waiters = {work}
            cancel_task = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
            if cancel_task is not None:
                waiters.add(cancel_task)
            try:
                done, _ = await asyncio.wait(waiters, timeout=(timeout_s + 1) if timeout_s else None,
                                             return_when=asyncio.FIRST_COMPLETED)
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
            except asyncio.CancelledError:   # the statement's task is gone (client left, shutdown):
                if not work.done():          # stop the server-side query too
                    conn.cancel()
                    await asyncio.wait({work}, timeout=2)
                raise
            finally:
                if cancel_task is not None:
                    cancel_task.cancel()

    async def _exec(self, cur, sql, timeout_s=None):
        try:
            await cur.execute(sql)
            return await cur.fetchall()
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

    async def execute_script(self, sql: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(sql)

    async def close(self) -> None:
        await self.pool.close()


def psycopg_pool_timeout():
    return PoolTimeout
