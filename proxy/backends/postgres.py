"""Postgres backend via psycopg 3 with an async connection pool.

Each statement runs with ``statement_timeout`` set on the server, and is also
bounded on the client; a cancel or timeout sends a protocol cancel.

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

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from .base import BackendError, BackendTimeout

log = logging.getLogger("dpgate.backend")


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
        self._kw = {"autocommit": True, "connect_timeout": max(2, math.ceil(connect_timeout_s))}
        self._own_options = conninfo_to_dict(dsn).get("options") or ""   # the DSN's own, kept first
        self._options = self._own_options      # what new connections carry (module doc)
        self.pool = AsyncConnectionPool(dsn, min_size=1, max_size=pool_size, open=False,
                                        kwargs=self._connect_kwargs, reconnect_timeout=5)

    def _connect_kwargs(self) -> dict:
        """A new connection's arguments: with the current session settings (module doc)."""
        return {**self._kw, "options": self._options} if self._options else self._kw

    def _settings(self, sql: str) -> str | None:
        """The startup options a connection must carry to run ``sql`` (None: any will do);
        they become what new connections carry."""
        named = getattr(sql, "params", None)
        if not isinstance(named, dict):
            return None
        opts = " ".join([self._own_options, *(f"-c {_option(k, v)}" for k, v in sorted(named.items()))]).strip()
        self._options = opts
        return opts

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
        need = self._settings(sql)
        try:
            for _ in range(self.pool.max_size + 2):
                async with self.pool.connection(timeout=self.QUEUE_WAIT_S if self._up else self.connect_timeout_s) as conn:
                    self._up = True
                    if need is not None and (conn.pgconn.options or b"").decode() != need:
                        await conn.close()        # made with other settings: the pool replaces it
                        continue
                    return await self._run(conn, sql, timeout_s, cancel, timing)
            raise BackendError("58000", "the backend's session settings kept changing during the statement; "
                               "nothing was charged, run it again")
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
            await cur.execute(str(sql))        # named parameters: the session settings (module doc)
            return await cur.fetchall()
        except psycopg.errors.QueryCanceled:
            raise BackendTimeout(timeout_s or 0) from None
        except psycopg.OperationalError:
            raise
        except psycopg.Error as e:
            log.warning("postgres error: %s", e)
            raise BackendError("58000", "the backend failed to run the query") from None

    async def execute_script(self, sql: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(sql)

    async def close(self) -> None:
        await self.pool.close()


def _option(name: str, value: str) -> str:
    """``name=value`` for libpq's ``options`` (``-c name=value``): a backslash and a space
    are escaped with a backslash; the name is a dotted identifier."""
    if not name or not all(c.isalnum() or c in "._" for c in name):
        raise ValueError(f"not a setting name: {name!r}")
    return f"{name}=" + value.replace("\\", "\\\\").replace(" ", "\\ ")


def psycopg_pool_timeout():
    return PoolTimeout
