"""Embedded DuckDB backend: one database connection, a cursor per statement,
run in a worker thread; a timeout or a client cancel interrupts the cursor."""
from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import duckdb

from .base import BackendError, BackendTimeout

log = logging.getLogger("dpgate.backend")


class DuckDBBackend:
    dialect = "duckdb"

    def __init__(self, path: str | Path | None):
        self.path = str(path) if path is not None else ":memory:"
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._con = duckdb.connect(self.path)
        self._lock = threading.Lock()

    async def connect(self) -> None:
        return None

    def _cursor(self):
        with self._lock:
            return self._con.cursor()

    async def fetch(self, sql: str, timeout_s: float | None = None, cancel: asyncio.Event | None = None) -> list[tuple]:
        cur = self._cursor()
        task = asyncio.ensure_future(asyncio.to_thread(self._run, cur, sql))
        waiters = {task}
        cancel_task = None
        if cancel is not None:
            cancel_task = asyncio.ensure_future(cancel.wait())
            waiters.add(cancel_task)
        try:
            done, _ = await asyncio.wait(waiters, timeout=timeout_s or None,
                                         return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            cur.interrupt()
            try:
                await task
            except BaseException:
                pass
            if cancel_task is not None and cancel_task in done:
                raise BackendError("57014", "canceling statement due to user request")
            raise BackendTimeout(timeout_s or 0)
        finally:
            if cancel_task is not None:
                cancel_task.cancel()
            cur.close()

    @staticmethod
    def _run(cur, sql: str) -> list[tuple]:
        try:
            return cur.execute(sql).fetchall()
        except duckdb.InterruptException:
            raise
        except duckdb.Error as e:
            log.warning("duckdb error: %s", e)
            raise BackendError("58000", "the backend failed to run the query; nothing was charged") from None

    def execute_script(self, sql: str) -> None:
        """Run trusted setup SQL (demo loading) synchronously."""
        cur = self._cursor()
        try:
            cur.execute(sql)
        finally:
            cur.close()

    def query(self, sql: str, params=None) -> list[tuple]:
        cur = self._cursor()
        try:
            return cur.execute(sql, params).fetchall() if params else cur.execute(sql).fetchall()
        finally:
            cur.close()

    async def close(self) -> None:
        with self._lock:
            self._con.close()
