"""A toy fourth backend: an in-memory SQLite database, enough of :class:`Backend` for the
pipeline to scan it (fetch with a timeout and a cancel, describe, close). It exists to show
that a backend is its module, its dialect and one ``register`` line."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time

from proxy.backends.base import Backend, BackendError, BackendRefused, BackendTimeout

from .sqlite_dialect import SQLiteDialect


class SQLiteBackend(Backend):
    kind = "sqlite"
    sql = SQLiteDialect()

    def __init__(self) -> None:
        self._con = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        self.fetches = 0

    @classmethod
    def from_config(cls, cfg, state_dir, *, read_only: bool = False) -> SQLiteBackend:
        return cls()

    def load(self, script: str, rows: list[tuple] = (), insert: str | None = None) -> None:
        """Set-up for the test: ``script``, then ``insert`` once per row."""
        with self._lock:
            self._con.executescript(script)
            if insert is not None:
                self._con.executemany(insert, rows)
            self._con.commit()

    def _run(self, sql: str, timing: dict | None, then):
        with self._lock:
            if timing is not None:
                timing["started"] = True
            t0 = time.perf_counter()
            try:
                rows = self._con.execute(str(sql)).fetchall()
            except sqlite3.OperationalError as e:
                if "interrupted" in str(e):
                    raise
                raise BackendRefused(
                    "42601", "the backend could not compile the scan; nothing was charged"
                ) from None
            if timing is not None:
                timing["backend_ms"] = (time.perf_counter() - t0) * 1000
        return rows if then is None else then(rows)

    async def fetch(
        self, sql, timeout_s=None, cancel=None, then=None, timing=None, during=None, columnar=False
    ):
        self.fetches += 1
        if during is not None:
            asyncio.get_running_loop().call_soon(during)
        work = asyncio.ensure_future(asyncio.to_thread(self._run, sql, timing, then))
        waiters = {work} | ({asyncio.ensure_future(cancel.wait())} if cancel is not None else set())
        try:
            done, _ = await asyncio.wait(
                waiters, timeout=timeout_s or None, return_when=asyncio.FIRST_COMPLETED
            )
            if work in done:
                return work.result()
            self._con.interrupt()
            await asyncio.wait({work})
            if cancel is not None and cancel.is_set():
                raise BackendError("57014", "canceling statement due to user request")
            raise BackendTimeout(timeout_s or 0)
        finally:
            for w in waiters - {work}:
                w.cancel()

    async def describe(self, source: str) -> dict[str, str] | None:
        with self._lock:
            rows = self._con.execute(f"PRAGMA table_info({self.sql.quote(source)})").fetchall()
        return {r[1].lower(): r[2] for r in rows} or None

    async def close(self) -> None:
        self._con.close()
