"""Spark backend over Spark Connect (``pip install 'dpgate[spark]'``): for tables that
outgrow one machine, on the data owner's own cluster (Databricks, EMR, a standalone
Spark) or a local Connect server.

Each statement is ONE Spark SQL query (the rewriter's one scan, in the ``spark``
dialect) collected on a worker thread: only the per-cell rows come back, never raw
rows. Every query carries a tag; a CancelRequest or the statement timeout interrupts
it on the cluster (``interruptTag``). A cluster that cannot be reached fails the
statement with 08006 before anything is charged; a connection lost mid-query is
charged (its time was observable); the next statement reconnects.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid

from .base import BackendError, BackendTimeout

log = logging.getLogger("dpgate.backend")

INTERRUPT_GRACE_S = 5.0
INSTALL_HINT = "the Spark backend needs pyspark's Connect client: pip install 'dpgate[spark]'"


def _client_classes():
    try:
        from pyspark.sql.connect.client.retries import DefaultPolicy
        from pyspark.sql.connect.session import SparkSession
    except ImportError as e:                     # pyspark absent, or without grpc / pyarrow
        raise BackendError("58000", f"{INSTALL_HINT} ({e.name or e} is missing)") from None
    return SparkSession, DefaultPolicy


def _probe(session, policy_class, timeout_s: float) -> None:
    """One round trip (the server's version) with retries capped near ``timeout_s``;
    the client's own policy (retries for up to ten minutes, right for a running query)
    is restored afterwards. Without this an unreachable cluster would hold the
    statement for ten minutes before it failed."""
    client = session.client
    policies = client.get_retry_policies()
    backoff_ms = max(50, int(timeout_s * 1000 / 4))
    client.set_retry_policies([policy_class(max_retries=4, initial_backoff=50, backoff_multiplier=4.0,
                                            max_backoff=backoff_ms, jitter=0)])
    try:
        session.version
    finally:
        client.set_retry_policies(policies)


def connect_url(remote: str, token: str | None = None, use_ssl: bool = False) -> str:
    """The Spark Connect URL: ``sc://host:port`` plus ``;token=…`` / ``;use_ssl=true``
    parameters as Spark Connect defines them (a token implies TLS)."""
    url = remote if remote.startswith("sc://") else f"sc://{remote}"
    if token:
        url += f";token={token}"
    if use_ssl and not token:
        url += ";use_ssl=true"
    return url


def _discard(session) -> None:
    """Close a Connect session's client: no call to the cluster (``stop()`` would release the
    session first, retrying for minutes when the cluster is gone, under pyspark's global
    session lock); the server expires the session itself. A closed client also leaves
    pyspark's exit hook nothing to do."""
    try:
        session.client.close()
    except Exception:
        pass


class SparkBackend:
    """``[backend] kind = "spark"``: Spark Connect at ``remote``."""

    dialect = "spark"
    scans = 0         # always 0: the proxy's Python work does not slow a remote scan

    def __init__(self, remote: str, *, token: str | None = None, use_ssl: bool = False,
                 catalog: str | None = None, database: str | None = None, connect_timeout_s: float = 10.0):
        self.url = connect_url(remote, token, use_ssl)
        self.remote = remote
        self.catalog, self.database = catalog, database
        self.connect_timeout_s = connect_timeout_s
        self._session = None
        self._lock = threading.Lock()

    # -- the session ---------------------------------------------------------------
    def _open(self):
        """The Connect session (created on first use, again after a loss)."""
        with self._lock:
            if self._session is None:
                cls, policy = _client_classes()
                s = None
                try:
                    s = cls.builder.remote(self.url).create()
                    _probe(s, policy, self.connect_timeout_s)
                    if self.catalog:
                        s.catalog.setCurrentCatalog(self.catalog)
                    if self.database:
                        s.catalog.setCurrentDatabase(self.database)
                except BackendError:
                    raise
                except Exception as e:  # unreachable, refused, bad token: nothing ran
                    if s is not None:
                        _discard(s)
                    log.warning("spark connect %s: %s", self.remote, str(e).splitlines()[0] if str(e) else e)
                    raise BackendError("08006", "the Spark cluster is unavailable; nothing was charged") from None
                self._session = s
            return self._session

    def _lost(self) -> None:
        with self._lock:
            s, self._session = self._session, None
        if s is not None:
            _discard(s)

    async def connect(self) -> None:
        """Open the session now (so a wrong URL fails at start, not at the first query)."""
        await asyncio.to_thread(self._open)

    # -- statements ---------------------------------------------------------------
    def _collect(self, sql: str, tag: str, timing: dict | None) -> list[tuple]:
        s = self._open()                          # 08006 here: nothing started, nothing charged
        s.addTag(tag)
        try:
            if timing is not None:                # from here on the scan's time is observable
                timing["started"] = True
            return [tuple(r) for r in s.sql(sql).collect()]
        finally:
            try:
                s.removeTag(tag)
            except Exception:
                pass

    def _interrupt(self, tag: str) -> None:
        """Ask the cluster to stop the tagged query, from a daemon thread: the event loop
        never waits on a cluster that may be gone (the client would retry for minutes)."""
        s = self._session
        if s is None:
            return

        def stop():
            try:
                s.interruptTag(tag)
            except Exception as e:  # the cluster is gone: the query is gone with it
                log.warning("spark interrupt: %s", str(e).splitlines()[0] if str(e) else e)
        threading.Thread(target=stop, name="dpgate-spark-interrupt", daemon=True).start()

    async def fetch(self, sql: str, timeout_s: float | None = None, cancel: asyncio.Event | None = None,
                    then=None, timing: dict | None = None, during=None):
        """Rows of ``sql`` (one Spark job's collected result); ``then(rows)`` runs in the
        worker thread after it and its result is returned. ``timing`` gets ``started``
        once the query is submitted and ``backend_ms``; ``during()`` runs on the event
        loop while the query is in flight."""
        t0 = time.perf_counter()
        tag = f"dpgate-{uuid.uuid4().hex}"
        loop = asyncio.get_running_loop()
        if during is not None:
            loop.call_soon(during)

        def run():
            rows = self._collect(sql, tag, timing)
            return rows if then is None else then(rows)

        work = asyncio.ensure_future(asyncio.to_thread(run))
        waiters = {work}
        cancel_task = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
        if cancel_task is not None:
            waiters.add(cancel_task)
        try:
            done, _ = await asyncio.wait(waiters, timeout=timeout_s or None, return_when=asyncio.FIRST_COMPLETED)
            if work not in done:                  # cancel or timeout: stop it on the cluster
                self._interrupt(tag)
                # the interrupted query ends within a moment; a lost cluster does not hold
                # the statement beyond that (the worker thread finishes on its own)
                await asyncio.wait({work}, timeout=INTERRUPT_GRACE_S)
                if work.done() and not work.cancelled():
                    work.exception()              # retrieved: no "never retrieved" warning
                if cancel_task is not None and cancel_task in done:
                    raise BackendError("57014", "canceling statement due to user request")
                raise BackendTimeout(timeout_s or 0)
            return self._result(work)
        except asyncio.CancelledError:            # the statement's task is gone: stop the job too
            self._interrupt(tag)
            raise
        finally:
            if cancel_task is not None:
                cancel_task.cancel()
            if timing is not None:
                timing["backend_ms"] = (time.perf_counter() - t0) * 1000

    def _result(self, work):
        try:
            return work.result()
        except BackendError:
            raise
        except Exception as e:
            name = type(e).__name__
            text = str(e)
            if "UNAVAILABLE" in text or "Connection refused" in text or name in ("SparkConnectGrpcException",
                                                                                 "RetriesExceeded"):
                self._lost()                      # the next statement reconnects
                log.warning("spark: %s: %s", name, text.splitlines()[0] if text else "")
                raise BackendError("08006", "the Spark cluster connection was lost during the query") from None
            if "OPERATION_CANCELED" in text or "cancelled" in text.lower():
                raise BackendError("57014", "canceling statement due to user request") from None
            log.warning("spark error: %s: %s", name, text.splitlines()[0] if text else "")
            raise BackendError("58000", "the backend failed to run the query") from None

    def describe(self, source: str) -> dict[str, str] | None:
        """Blocking: column name -> Spark type of ``source`` (None: no such relation)."""
        try:
            schema = self._open().sql(f"SELECT * FROM {source} LIMIT 0").schema
        except BackendError:
            raise
        except Exception as e:
            if "TABLE_OR_VIEW_NOT_FOUND" in str(e) or "PATH_NOT_FOUND" in str(e):
                return None
            raise
        return {f.name.lower(): f.dataType.simpleString().upper() for f in schema.fields}

    def query(self, sql: str) -> list[tuple]:
        """Blocking: rows of ``sql`` (set-up and checks, not statements)."""
        return [tuple(r) for r in self._open().sql(sql).collect()]

    def execute_script(self, sql: str) -> None:
        """Blocking: run one set-up statement."""
        self._open().sql(sql).collect()

    async def close(self) -> None:
        await asyncio.to_thread(self._lost)
