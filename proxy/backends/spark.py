"""Spark backend over Spark Connect (``pip install 'dpgate[spark]'``): for tables that
outgrow one machine, on the data owner's own cluster (Databricks, EMR, a standalone
Spark) or a local Connect server.

Each statement is ONE Spark SQL query (the rewriter's one scan, in the ``spark``
dialect) run on a worker thread: only the per-cell rows come back, never raw rows, and
they STREAM in: the Connect client's Arrow batches are turned into the cell
tuples one batch at a time (``toLocalIterator``), so a GROUP BY of a million cells never
holds the whole Arrow result, its ``Row`` objects and the tuples at once (the release
itself needs every cell: ``then`` gets the list of tuples). Every query carries a tag; a
CancelRequest or the statement timeout interrupts it on the cluster (``interruptTag``).
Named parameters (``rewriter.params.ParamSQL``: the privacy unit's salt, ``:unit_salt`` in
the text) are bound by ``spark.sql(text, args=…)``: the value travels beside the text.

A lost cluster: the client retries an unreachable server for a few seconds
only (``RETRY_S``, not pyspark's ten minutes), then the statement fails with 08006. If
the session was idle (``IDLE_PROBE_S``) or the last statement lost it, one round trip
checks it before the query is sent, so a cluster that is down — or was restarted, and
no longer knows the session — is 08006 before anything is charged, or a new session
on the restarted server: the proxy reconnects by itself. A connection lost while a
query ran is 08006 and charged (the scan ran: its time was observable, and a query
can bring a cluster down).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from rewriter.dialects.spark import SparkDialect
from rewriter.params import ParamSQL, needs

from .base import Backend, BackendError, BackendRefused, BackendTimeout

log = logging.getLogger("dpgate.backend")

INTERRUPT_GRACE_S = 5.0
RETRY_S = 3.0  # how long an unreachable server is retried (query, probe) before 08006
IDLE_PROBE_S = 1.0  # a session idle this long is checked (one round trip) before a query
#: what the Connect client says when the server, or its session there, is gone
_LOST = (
    "UNAVAILABLE",
    "Connection refused",
    "failed to connect",
    "NO_ACTIVE_SESSION",
    "INVALID_HANDLE",
    "SESSION_CHANGED",
    "SESSION_NOT_FOUND",
    "SESSION_CLOSED",
)
UNAVAILABLE = "the Spark cluster is unavailable; nothing was charged"
INSTALL_HINT = "the Spark backend needs pyspark's Connect client: pip install 'dpgate[spark]'"
#: SQLSTATEs (Spark's own, class 42) of a query Spark refused while parsing or analysing it
REFUSED_WHAT = {
    "42P01": "has no relation named in",
    "42703": "could not resolve a column of",
    "42601": "could not parse",
    "42501": "was denied permission for",
}


def _client_classes():
    try:
        from pyspark.sql.connect.client.retries import DefaultPolicy
        from pyspark.sql.connect.session import SparkSession
    except ImportError as e:  # pyspark absent, or without grpc / pyarrow
        raise BackendError("58000", f"{INSTALL_HINT} ({e.name or e} is missing)") from None
    return SparkSession, DefaultPolicy


def _policy(policy_class, total_s: float):
    """A retry policy giving up after about ``total_s`` (4 retries after 50, 200, 800 ms and
    ``total_s``/2: 2.55 s for 3 s): pyspark's default retries an unreachable server for ten
    minutes, which would hold a statement (and its slot) long after the cluster was lost."""
    backoff_ms = max(50, int(total_s * 1000 / 2))
    return policy_class(
        max_retries=4, initial_backoff=50, backoff_multiplier=4.0, max_backoff=backoff_ms, jitter=0
    )


def _probe(session) -> None:
    """One round trip (the server's version), under the session's capped retries."""
    _ = session.version


def _unreachable(e: BaseException) -> bool:
    """``e`` says the server cannot be reached (after the capped retries)."""
    return type(e).__name__ == "RetriesExceeded" or any(m in str(e) for m in _LOST[:3])


def _lost_error(e: BaseException) -> bool:
    """``e`` says the server, or our session on it, is gone (not a failed query)."""
    text = str(e)
    return type(e).__name__ == "RetriesExceeded" or any(m in text for m in _LOST)


def refused(e: BaseException) -> BackendRefused | None:
    """The refusal of a query Spark rejected while parsing or analysing it (pyspark's
    ``AnalysisException``, ``ParseException`` is one, and their Spark Connect subclasses): an
    unknown table or column, bad syntax, a denied permission. Analysis precedes execution,
    so no row was read and nothing is charged. Its SQLSTATE is Spark's own when that is of
    class 42 (42P01, 42703, 42601, 42501 …), else 42601 for a parse error and 42000; Spark's
    text goes to the server log only (it names the backend's schema). None: not such an error."""
    try:
        from pyspark.errors import AnalysisException, ParseException
    except ImportError:
        return None
    if not isinstance(e, AnalysisException):
        return None
    try:
        state = e.getSqlState() or ""
    except Exception:
        state = ""
    if not (len(state) == 5 and state.startswith("42")):
        state = "42601" if isinstance(e, ParseException) else "42000"
    what = REFUSED_WHAT.get(state, "could not compile")
    return BackendRefused(
        state,
        f"the backend {what} the scan before reading any row; nothing was charged",
        hint="A declared table's source or columns do not match the backend: "
        "dpgate check-config --backend names the problem.",
    )


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


def stream(df) -> list[tuple]:
    """The rows of a Connect DataFrame as tuples, built one Arrow batch at a time (the
    client's ``toLocalIterator``: the same conversion as ``collect()``, per batch), so
    neither the whole Arrow result nor a ``Row`` per cell is held beside the tuples."""
    return [tuple(r) for r in df.toLocalIterator()]


class SparkBackend(Backend):
    """``[backend] kind = "spark"``: Spark Connect at ``remote``. Its ``writer`` (dpgate's own
    writes: local tables' reports) is the same session: Spark Connect has no read-only session;
    what the session may write is the catalog's grants (Unity Catalog, Ranger, the storage's
    permissions): see docs/least-privilege.md."""

    kind = "spark"
    sql = SparkDialect()
    scans = 0  # always 0: the proxy's Python work does not slow a remote scan
    one_writer = True  # appends to one Parquet table share its _temporary directory:
    serial_writes = True  # one proxy, sending them one at a time

    @classmethod
    def from_config(cls, cfg, state_dir, *, read_only: bool = False) -> SparkBackend:
        b = cfg.backend
        return cls(
            b.remote,
            token=b.token,
            use_ssl=b.use_ssl,
            catalog=b.catalog,
            database=b.database,
            connect_timeout_s=max(b.connect_timeout_s, 10.0),
        )

    def __init__(
        self,
        remote: str,
        *,
        token: str | None = None,
        use_ssl: bool = False,
        catalog: str | None = None,
        database: str | None = None,
        connect_timeout_s: float = 10.0,
    ):
        self.url = connect_url(remote, token, use_ssl)
        self.remote = remote
        self.catalog, self.database = catalog, database
        self.connect_timeout_s = connect_timeout_s
        self._session = None
        self._used = 0.0  # monotonic time the session last answered
        self._lock = threading.Lock()

    # -- the session ---------------------------------------------------------------
    def _open(self):
        """The Connect session: created on first use and again after a loss; one that was
        idle is checked first (a restarted server no longer knows it: a new one)."""
        with self._lock:
            s = self._session
            if s is not None and time.monotonic() - self._used > IDLE_PROBE_S:
                try:
                    _probe(s)
                    self._used = time.monotonic()
                except Exception as e:  # gone, or unknown to a restarted server
                    log.warning("spark session lost: %s", str(e).splitlines()[0] if str(e) else e)
                    self._session = None
                    _discard(s)
                    if _unreachable(e):  # a new session would wait as long again
                        raise BackendError("08006", UNAVAILABLE) from None
            if self._session is None:
                cls, policy = _client_classes()
                s = None
                try:
                    s = cls.builder.remote(self.url).create()
                    s.client.set_retry_policies([_policy(policy, min(self.connect_timeout_s, RETRY_S))])
                    _probe(s)
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
                    raise BackendError("08006", UNAVAILABLE) from None
                self._session, self._used = s, time.monotonic()
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
        s = self._open()  # 08006 here: nothing started, nothing charged
        s.addTag(tag)
        try:
            if timing is not None:  # from here on the scan's time is observable
                timing["started"] = True
            if isinstance(sql, ParamSQL) and isinstance(sql.params, dict):  # the unit's salt:
                rows = stream(s.sql(sql.template, args=sql.params))  # bound beside the text, never in it
            else:
                rows = stream(s.sql(str(sql)))
            self._used = time.monotonic()
            return rows
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
        """Rows of ``sql`` (one Spark job's collected result); ``then(rows)`` runs in the
        worker thread after it and its result is returned. ``timing`` gets ``started``
        once the query is submitted and ``backend_ms``; ``during()`` runs on the event
        loop while the query is in flight."""
        if needs(sql):  # it keeps no relations (frozen() is False): such a text is never made for it
            raise BackendRefused("0A000", "this backend keeps no relations for a scan; nothing was run")
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
            done, _ = await asyncio.wait(
                waiters, timeout=timeout_s or None, return_when=asyncio.FIRST_COMPLETED
            )
            if work not in done:  # cancel or timeout: stop it on the cluster
                self._interrupt(tag)
                # the interrupted query ends within a moment; a lost cluster does not hold
                # the statement beyond that (the worker thread finishes on its own)
                await asyncio.wait({work}, timeout=INTERRUPT_GRACE_S)
                if work.done() and not work.cancelled():
                    work.exception()  # retrieved: no "never retrieved" warning
                if cancel_task is not None and cancel_task in done:
                    raise BackendError("57014", "canceling statement due to user request")
                raise BackendTimeout(timeout_s or 0)
            return self._result(work)
        except asyncio.CancelledError:  # the statement's task is gone: stop the job too
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
            no_row = refused(e)
            if no_row is not None:  # parsed/analysed, never executed: refunded
                log.warning(
                    "spark refused the scan before reading a row: %s: %s",
                    name,
                    text.splitlines()[0] if text else "",
                )
                raise no_row from None
            if _lost_error(e):
                self._lost()  # the next statement reconnects
                log.warning("spark: %s: %s", name, text.splitlines()[0] if text else "")
                raise BackendError(
                    "08006", "the Spark cluster connection was lost during the query"
                ) from None
            if "OPERATION_CANCELED" in text or "cancelled" in text.lower():
                raise BackendError("57014", "canceling statement due to user request") from None
            log.warning("spark error: %s: %s", name, text.splitlines()[0] if text else "")
            raise BackendError("58000", "the backend failed to run the query") from None

    async def describe(self, source: str) -> dict[str, str] | None:
        return await asyncio.to_thread(self.describe_now, source)

    async def privilege_problems(self, config) -> list[str]:
        return [
            "the Spark backend has no read-only session and dpgate cannot read the catalog's grants: "
            "give the Connect server's user SELECT only on the declared tables (docs/least-privilege.md)"
        ]

    def describe_now(self, source: str) -> dict[str, str] | None:
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
        return stream(self._open().sql(sql))

    def execute_script(self, sql: str) -> None:
        """Blocking: run one set-up statement."""
        self._open().sql(sql).collect()

    def append(self, table: str, schema: list[tuple[str, str]], batches) -> None:
        """Blocking: append ``batches`` ({column: values}; ``schema``: (column, Spark type))
        to ``table`` as ONE Spark job (``dpgate ldp-load``): each batch is sent as
        an Arrow table and appended to a staging table, then one ``INSERT … SELECT`` moves
        them all (one commit: all rows or none); the staging table is dropped either way."""
        import pyarrow as pa  # pyspark's Connect client brings it

        arrow = {
            "BIGINT": pa.int64(),
            "DOUBLE": pa.float64(),
            "STRING": pa.string(),
            "BOOLEAN": pa.bool_(),
            "SMALLINT": pa.int16(),
        }
        s = self._open()
        q = lambda n: "`" + n.replace("`", "``") + "`"  # noqa: E731
        staging = f"{table}_dpgate_load_{uuid.uuid4().hex[:12]}"
        cols = ", ".join(q(c) for c, _ in schema)
        try:
            s.sql(f"CREATE TABLE {q(staging)} ({', '.join(f'{q(c)} {t}' for c, t in schema)})").collect()
            for b in batches:
                data = pa.table({c: pa.array(b[c], type=arrow[t]) for c, t in schema})
                s.createDataFrame(data).write.insertInto(staging)
            s.sql(f"INSERT INTO {q(table)} ({cols}) SELECT {cols} FROM {q(staging)}").collect()
        finally:
            s.sql(f"DROP TABLE IF EXISTS {q(staging)}").collect()

    async def close(self) -> None:
        await asyncio.to_thread(self._lost)
