"""The report table of a local (LDP) table, created once per gateway: the layout as
stored (Subset levels of an existing table), shared by the metric-LDP path (:mod:`.local`)
and the Subset path (:mod:`.local_subset`)."""

from __future__ import annotations

import asyncio
import logging
import weakref

from ..backends import DuckDBBackend, PostgresBackend, SparkBackend, for_backend
from ..ingest.ldp_load import IngestError, ensure_duckdb, ensure_postgres
from ..ingest.ldp_spark import ensure_spark
from ..wire.api import SqlError

__all__ = ["ensure_reports", "stored_layout"]

_READY: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def stored_layout(gw, lay):
    """The layout of ``lay``'s report table as stored, once :func:`ensure_reports` has seen
    it on this gateway; ``lay`` itself before that."""
    hit = _READY.get(gw, {}).get(lay.reports) if hasattr(gw, "backend") else None
    return hit[1] if hit is not None and hit[0] is lay else lay


async def ensure_reports(gw, lay):
    """Create the report table if missing (once per gateway); refuse a stale layout. Returns
    the layout as stored (Subset levels of an existing table, :func:`resolve_stored`)."""
    ready = _READY.setdefault(gw, {})
    hit = ready.get(lay.reports)
    if hit is not None and hit[0] is lay:
        return hit[1]
    lock = _LOCKS.setdefault(gw, asyncio.Lock())
    async with lock:
        hit = ready.get(lay.reports)
        if hit is not None and hit[0] is lay:
            return hit[1]
        ensure = for_backend(ENSURE, gw.backend)
        if ensure is None:
            raise SqlError(
                "0A000",
                f"local tables' reports are not stored in a {gw.backend.kind} backend",
                hint="Declare the table central, or use a backend that stores reports.",
            )
        try:
            stored = await ensure(gw.backend, lay)
        except IngestError as e:
            raise SqlError(e.sqlstate, e.message, hint=e.hint) from None
        except SqlError:
            raise
        except Exception as e:  # backend down, pool timeout, …
            logging.getLogger("dpgate.backend").warning("local reports table: %s", e)
            raise SqlError("08006", "the backend is unavailable; nothing was charged") from None
        ready[lay.reports] = (lay, stored)
        return stored


def _ensure_duck(backend, lay):
    cur = backend._cursor()
    try:
        return ensure_duckdb(cur, lay)
    finally:
        cur.close()


async def _ensure_pg(backend, lay):
    async with backend.writer.pool.connection(timeout=10) as conn:
        return await ensure_postgres(conn, lay)


#: how a report table is made ready, per backend class that stores reports:
#: ``(backend, layout) -> awaitable layout as stored`` (blocking clients on a thread)
ENSURE = {
    DuckDBBackend: lambda b, lay: asyncio.to_thread(_ensure_duck, b, lay),
    SparkBackend: lambda b, lay: asyncio.to_thread(ensure_spark, b, lay),
    PostgresBackend: _ensure_pg,
}
