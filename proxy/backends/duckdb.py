"""Embedded DuckDB backend: one database, a small pool of worker threads each
holding its own cursor (a cursor keeps its prepared-plan caches warm across
statements); a timeout or a client cancel interrupts the running cursor.

A scan whose SQL is a ``rewriter.params.ParamSQL`` (a statement filled from a plan
template: the same shape with other integer literals) runs its template prepared, once
per worker cursor (``PREPARE`` / ``EXECUTE``, like psycopg 3's automatic prepared
statements): DuckDB then neither parses nor binds the long rewritten text again (a text
without a template is prepared when it runs a second time). On
small tables that is a large part of the scan. The
parameters are ``CAST($k AS INTEGER)``, the type of the literal each stands for, so the
statement means what its text means; a template DuckDB will not prepare runs as text.
A ``ParamSQL`` with *named* parameters (the privacy unit's salt, ``rewriter.params``) runs
with them bound through the Python API (``execute(text, params)``): DuckDB's ``EXECUTE``
takes its arguments only as text, so such a statement is not kept prepared.

``read_only=True`` (``dpgate serve --workers N``, N > 1: every worker opens the file so)
lets several processes read one file at once; DuckDB allows either one process that
reads and writes or several that only read, so whatever writes (the demo data, the
ledger identity row, local tables' report tables) is done before the workers start
(:mod:`proxy.cli.workers`)."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from rewriter.dialects.duckdb import DuckDBDialect
from rewriter.lru import LRU
from rewriter.params import ParamSQL, needs
from rewriter.plan import source_relation
from rewriter.unit import KEPT_CELLS

from .base import Backend, BackendError, BackendRefused, BackendTimeout, CancelSignal, Columns

log = logging.getLogger("dpgate.backend")

# DuckDB's settings for every connection the backend opens. allocator_background_threads: memory a
# large statement freed is handed back to the system by DuckDB's own threads, not by whichever scan
# allocates next (a scan with hash tables and a window ran 1.4× slower after a large sort otherwise).
ENGINE_CONFIG: dict[str, str | bool | int | float | list[str]] = {"allocator_background_threads": True}
KEPT_CATALOG = "__dpgate_kept"  # the in-memory catalogs of the relations kept for scans: keep_relation
WORKERS = 8  # concurrent scans (DuckDB parallelises each scan over the cores itself)
PREPARED_MAX = 256  # prepared templates kept per worker cursor (least recently used dropped)
SEEN_MAX = 1024  # texts remembered per worker cursor, to prepare one that repeats
COLUMN_TYPES = frozenset({"BIGINT", "INTEGER", "SMALLINT", "TINYINT", "DOUBLE", "VARCHAR"})
# Errors DuckDB raises while it parses and binds a statement, before its scan reads a row.
REFUSED_STATES = (
    (duckdb.PermissionException, "42501", "was denied permission for"),
    (duckdb.CatalogException, "42P01", "has no relation or function named in"),
    (duckdb.BinderException, "42703", "could not bind"),
    (duckdb.ParserException, "42601", "could not parse"),
)
REFUSED = tuple(t for t, _, _ in REFUSED_STATES)


def refused_state(e: Exception) -> tuple[str, str, str]:
    """SQLSTATE, message and hint of a statement DuckDB refused before reading a row (the
    backend's own text goes to the server log only: it names the backend's schema)."""
    state, what = next((s, w) for t, s, w in REFUSED_STATES if isinstance(e, t))
    return (
        state,
        f"the backend {what} the scan before reading any row; nothing was charged",
        "A declared table's source or columns do not match the backend: "
        "dpgate check-config --backend names the problem.",
    )


"""Result types a columnar fetch takes as numpy columns: ``tolist()`` gives their values exactly
as ``fetchall`` does (HUGEINT, DECIMAL and the time types it would not: such a result comes as rows)."""
_OPEN: weakref.WeakSet[DuckDBBackend] = weakref.WeakSet()


@atexit.register
def _close_cursors() -> None:
    """Worker cursors of backends never closed (e.g. a crashed serve) are closed at exit."""
    for b in list(_OPEN):
        b._close_cursors()


class _Scan:
    """One statement in flight: the worker publishes its cursor, the event loop
    may interrupt it (before it starts, or while it runs)."""

    __slots__ = ("cursor", "stopped", "lock", "finished")

    def __init__(self) -> None:
        self.cursor: Any = None  # the worker's cursor while it runs the statement
        self.stopped: str | None = None  # why it was stopped ("timeout", "cancel")
        self.lock = threading.Lock()
        self.finished = False  # the worker returned (set on the loop)

    def stop_until_finished(self, loop, why: str) -> None:
        """:meth:`stop`, again every 0.25 s until the worker returns: DuckDB drops an
        interrupt that lands just before its query starts. (A method, not a closure over the
        statement's future: a function that schedules itself by name is a reference cycle,
        and one holding the future kept the whole result alive until a garbage collection —
        which then freed a 10,000-row result in whichever thread ran it, often the loop.)"""
        self.stop(why)
        if not self.finished or self.cursor is not None:
            loop.call_later(0.25, self.stop_until_finished, loop, why)

    def finish(self, _fut=None) -> None:
        self.finished = True

    def stop(self, why: str) -> None:
        with self.lock:
            if self.stopped is None:
                self.stopped = why
            if self.cursor is not None:
                self.cursor.interrupt()


def _open_error(path: str, e: Exception) -> str:
    msg = str(e)
    held = re.search(r"Conflicting lock is held in (.*?) \(PID (\d+)\)", msg)
    if held:
        return (
            f"cannot open the DuckDB file {path}: process {held.group(2)} ({held.group(1)}) has it open. "
            "One process uses a DuckDB file at a time: stop that process (another dpgate serve, "
            "or dpgate ldp-load), or use another --state-dir / [backend] path"
        )
    return f"cannot open the DuckDB file {path}: {msg.splitlines()[0] if msg else type(e).__name__}"


_REMOTE = ("://",)  # s3://, https://, gs://, hf:// …: not a local directory
_GLOB = "*?[{"


def source_directories(sources, views=()) -> list[str] | None:
    """The local directories the declared ``sources`` and the database's ``views`` (their
    ``CREATE VIEW`` texts: a source may be a view over files) read files from, from each one's
    parse: the positional string arguments of its table functions, a quoted path as a relation;
    as absolute prefixes ending in ``/``. None if one names a remote URL or does not parse (file
    access is then not confined)."""
    found: set[str] = set()
    for text in [*(f"SELECT * FROM {source}" for source in sources), *views]:
        try:
            tree = sqlglot.parse_one(text, read="duckdb")
        except sqlglot.errors.ParseError:
            return None
        paths = [
            lit.this
            for lit in tree.find_all(exp.Literal)
            if lit.is_string and not isinstance(lit.parent, (exp.EQ, exp.PropertyEQ, exp.Kwarg))
        ]
        paths += [
            t.this.this
            for t in tree.find_all(exp.Table)
            if isinstance(t.this, exp.Identifier)
            and t.this.quoted
            and not t.args.get("db")
            and ("/" in t.this.this or "." in t.this.this)
        ]
        for path in paths:
            if any(m in path for m in _REMOTE):
                return None
            head = path
            for ch in _GLOB:
                head = head.split(ch, 1)[0]
            folder = head if not head or head.endswith("/") else os.path.dirname(head)
            found.add(os.path.join(os.path.abspath(folder or "."), ""))
    return sorted(found)


def _result(cur, columnar: bool):
    """The executed statement's result: rows, or :class:`~.base.Columns` when ``columnar``
    and every column's type is in ``COLUMN_TYPES`` and the names are distinct (decided from
    the description, before anything is fetched)."""
    if columnar:
        desc = cur.description or []
        names = [d[0] for d in desc]
        if desc and len(set(names)) == len(names) and all(str(d[1]) in COLUMN_TYPES for d in desc):
            got = cur.fetchnumpy()
            return Columns(names, [got[n] for n in names])
    return cur.fetchall()


#: the ledger's identity, kept in the data file (:meth:`DuckDBBackend.ledger_marker`)
MARKER_TABLE = "dpgate_ledger_identity"


def decimal_columns(query: Callable[[str, list], list], source: str) -> dict[str, tuple[int, int]]:
    """The DECIMAL columns of the data file's base table ``source`` (lower-case name → (w, s)),
    through ``query(sql, params)`` (``duckdb_columns()``)."""
    t = source_relation(source)
    rows = query(
        "SELECT column_name, numeric_precision, numeric_scale FROM duckdb_columns() "
        "WHERE database_name = current_database() AND data_type LIKE 'DECIMAL(%' "
        "AND lower(schema_name) = lower(?) AND lower(table_name) = lower(?)",
        [t.db or "main", t.name],
    )
    return {str(c).lower(): (int(w), int(s)) for c, w, s in rows}


def keep_relation(cur, catalog: str, name: str, select: str) -> str:
    """Make ``select``'s rows a table ``name`` of a new in-memory catalog ``catalog`` on ``cur``'s
    connection, stored compressed, and return its qualified name.

    The catalog is attached with DuckDB's ``COMPRESS`` option and checkpointed once the table is
    made, so its columns are stored as the file's are (dictionary-encoded strings, bit-packed
    integers): a scan groups the kept rows by a string key on the dictionary, as it does the
    table's own rows, about 3× faster than over plain in-memory vectors, and the rows take about a
    fifth of the memory. A checkpoint waits for no reader only of a catalog no other transaction
    has read, hence one catalog a relation, made before any cursor reads it. ``ATTACH ':memory:'``
    is allowed on a read-only file and with external access disabled."""
    cur.execute(f"ATTACH ':memory:' AS {catalog} (COMPRESS, READ_WRITE)")
    try:
        cur.execute(f'CREATE TABLE {catalog}.main."{name}" AS {select}')
        cur.execute(f"CHECKPOINT {catalog}")
    except BaseException:  # not made (an interrupted scan, a failed select): nothing is left attached
        with contextlib.suppress(duckdb.Error):
            cur.execute(f"DETACH DATABASE IF EXISTS {catalog}")
        raise
    return f'{catalog}.main."{name}"'


class DuckDBBackend(Backend):
    """``[backend] kind = "duckdb"``: the embedded engine. Its ``writer`` is itself: DuckDB
    opens a file read-write or read-only per process; a read-only backend refuses the write
    itself."""

    kind = "duckdb"
    sql = DuckDBDialect()
    scans = 0  # statements in flight (event loop): Python work beside a scan slows it
    columnar = True  # fetch(…, columnar=True): numpy columns (base.Columns) where the types allow
    one_writer = True  # one process writes the file
    read_only_after_start = True

    @classmethod
    def from_config(cls, cfg, state_dir, *, read_only: bool = False) -> DuckDBBackend:
        """The file of ``[backend] path`` (relative to the state dir; default: the demo's).
        It reads and writes no file outside the declared sources' directories
        (:meth:`confine`)."""
        backend = cls(
            cls.data_file(cfg, Path(state_dir)),
            read_only=read_only,
            threads=cfg.backend.threads,
            attach=cfg.backend.attach,
        )
        folders = source_directories(
            [cfg.source_of(name) for name, t in cfg.tables.items() if t.mode != "local"], backend.views()
        )
        if folders is not None:  # a remote source (s3://, https://): file access stays open
            backend.confine(folders)
        return backend

    @classmethod
    def data_file(cls, cfg, state_dir: Path) -> Path:
        path = Path(cfg.backend.path or "demo.duckdb")
        return path if path.is_absolute() else Path(state_dir) / path

    @classmethod
    def marker_reader(cls, cfg, state_dir: Path) -> ReadOnlyFile | None:
        """The data file opened read-only, if it exists and no running proxy holds it (that
        proxy's own guard watches the marker)."""
        path = cls.data_file(cfg, state_dir)
        if not path.exists():
            return None
        try:
            return ReadOnlyFile(path)
        except Exception:  # held by the running proxy
            return None

    def __init__(
        self,
        path: str | Path | None,
        *,
        read_only: bool = False,
        threads: int | None = None,
        attach: dict | None = None,
    ):
        self.path = str(path) if path is not None else ":memory:"
        self.read_only = read_only and path is not None
        if path is not None and not self.read_only:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._config = {**ENGINE_CONFIG, **({"threads": int(threads)} if threads else {})}
        self.attach = {name: str(Path(p).resolve()) for name, p in (attach or {}).items()}
        self._con = self._open()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._cursors: list = []
        self._pool = concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="dpgate-duckdb")
        self._names = itertools.count(1)
        self.prepared_runs = 0  # scans run from a prepared template (for tests)
        self.allowed: list[str] | None = None  # file access limited to these directories (confine), or not
        self._frozen_sizes: dict[str, int | None] = {}  # source → rows of a base table (frozen)
        self._premises: dict[str, bool] = {}  # a premise's text → whether it holds (frozen data)
        self._decimals: dict[str, dict[str, tuple[int, int]]] = {}  # source → its DECIMAL columns (frozen)
        self.kept_made = 0  # relations made for scans (needs): for tests
        self._keep_lock = threading.Lock()
        # a kept relation's name → where it is on this connection (keep_relation), and the catalogs' numbers
        self._kept: dict[str, str] = {}
        self._kept_seq = itertools.count(1)
        self._cells_rows = 0  # rows of the kept relations of heavy (unit, cell) rows (keeps_cells)
        _OPEN.add(self)

    def _open(self):
        try:
            con = duckdb.connect(self.path, read_only=self.read_only, config=self._config)
        except duckdb.Error as e:  # most often: another process holds the file
            raise BackendError("58030", _open_error(self.path, e)) from None
        for name, path in self.attach.items():  # the owner's data files: never opened for writing
            try:
                con.execute(f"ATTACH ? AS {name} (READ_ONLY)", [path])
            except duckdb.Error as e:
                con.close()
                raise BackendError("58030", _open_error(path, e)) from None
        return con

    async def connect(self) -> None:
        return None

    def views(self) -> list[str]:
        """The ``CREATE VIEW`` text of every view the database defines (not DuckDB's own)."""
        return [
            r[0] for r in self.query("SELECT sql FROM duckdb_views() WHERE NOT internal AND sql IS NOT NULL")
        ]

    def frozen(self, source: str, rows_at_most: int | None = None) -> bool:
        """A base table of the data file opened read-only (with at most ``rows_at_most`` rows, if
        given). DuckDB holds a lock on the file that no writer gets while this connection is open
        (a read-write open by any process fails), so its tables cannot change until
        :meth:`reopen_read_only` or :meth:`discard` closes it; the relations made for scans live in
        its in-memory catalog (:meth:`_keep`) and go with it. A view may read files that change, a temporary table
        is a session's, an attached file is its owner's: none of those is frozen."""
        if not self.read_only or self.path == ":memory:":
            return False
        if source not in self._frozen_sizes:  # once per source while the file is held: it cannot change
            self._frozen_sizes[source] = self._base_table_rows(source)
        size = self._frozen_sizes[source]
        return size is not None and (rows_at_most is None or size <= rows_at_most)

    def holds(self, sql: str) -> bool:
        """Whether the premise ``sql`` is true of the file held read-only: asked once while it is
        held (it cannot change meanwhile), on a scan thread — it reads whole tables, which would
        hold the event loop — so it does not hold until it has been answered; a premise that
        fails to run does not hold."""
        if not self.read_only or self.path == ":memory:":
            return False
        premises = self._premises
        if sql not in premises:
            premises[sql] = False  # asked: not held until answered
            try:
                self._pool.submit(self._answer_premise, premises, sql)
            except RuntimeError:  # the backend is closing
                pass
        return premises[sql]

    def _answer_premise(self, premises: dict[str, bool], sql: str) -> None:
        try:
            rows = self.query(sql)
        except Exception:  # not answered: the plan that needs no premise
            rows = []
        premises[sql] = len(rows) == 1 and rows[0][0] is True

    def decimals(self, source: str) -> dict[str, tuple[int, int]]:
        """A frozen base table's DECIMAL columns (``duckdb_columns()``), read once while the file
        is held: a column's type cannot change meanwhile."""
        if not self.frozen(source):
            return {}
        if source not in self._decimals:
            self._decimals[source] = decimal_columns(self.query, source)
        return self._decimals[source]

    def _base_table_rows(self, source: str) -> int | None:
        """The rows of ``source`` if it names a base table of the data file, else None."""
        try:
            t = source_relation(source)
        except Exception:  # not a plain relation name: not frozen
            return None
        rows = self.query(
            "SELECT estimated_size FROM duckdb_tables() WHERE database_name = current_database() "
            "AND NOT temporary AND lower(schema_name) = lower(?) AND lower(table_name) = lower(?) "
            "AND (? = '' OR lower(database_name) = lower(?))",
            [t.db or "main", t.name, t.catalog or "", t.catalog or ""],
        )
        return int(rows[0][0]) if len(rows) == 1 else None

    def _keep(self, cur, sql) -> None:
        """Make each relation ``sql`` reads that the backend keeps (:meth:`frozen`;
        ``ParamSQL.needs``) once for the whole connection (:func:`keep_relation`: shared by the
        worker cursors; the heavy units' rows can be tens of MB) and give this worker's cursor a
        temporary view of it under the name the text reads."""
        made = self._local.__dict__.setdefault("kept", set())
        for name, select in needs(sql):
            if name in made:
                continue
            if not (name.startswith("__dpgate_") and name.replace("_", "").isalnum() and name.isascii()):
                raise BackendError("XX000", "internal error: a kept relation's name is not dpgate's own")
            with self._keep_lock:  # one cursor makes it; the others wait for it, then read it
                if name not in self._kept:
                    self._kept[name] = keep_relation(
                        cur, f"{KEPT_CATALOG}_{next(self._kept_seq)}", name, select
                    )
                    self.kept_made += 1
                    if name.startswith(KEPT_CELLS):
                        self._cells_rows += cur.execute(
                            f"SELECT COUNT(*) FROM {self._kept[name]}"
                        ).fetchone()[0]
            cur.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS SELECT * FROM {self._kept[name]}')
            made.add(name)

    def keeps_cells(self, rows_at_most: int) -> bool:
        """While the file is held read-only, until the kept relations of heavy (unit, cell) rows
        hold ``rows_at_most`` rows together. Each is made from the table's kept rows, so it has
        at most as many rows: all of them hold fewer than twice ``rows_at_most``."""
        return self.read_only and self.path != ":memory:" and self._cells_rows < rows_at_most

    def kept_relation(self, name: str) -> str | None:
        """Where the kept relation ``name`` is on this connection (its qualified name), if made."""
        return self._kept.get(name)

    def reopen_read_only(self) -> None:
        """Open the file again, read-only, once the start's writes are done (demo tables, the
        ledger identity, local tables' report tables) and before any client is served: a
        statement that would write is then refused by DuckDB itself. Not for a config in which
        a role may INSERT into a local table (that process writes at run time). No scan may be
        running."""
        if self.read_only or self.path == ":memory:":
            return
        self._close_cursors()
        with self._lock:
            self._con.close()
            # the worker threads' cursors, and the relations kept on them, were the old connection's
            self._local = threading.local()
            self._frozen_sizes = {}
            self._premises = {}
            self._decimals = {}
            self._kept = {}  # the kept catalogs were the old connection's
            self._cells_rows = 0
            self.read_only = True
            self._con = self._open()
        if self.allowed is not None:
            self.confine(self.allowed)

    def confine(self, directories: list[str]) -> None:
        """No statement reads or writes a file outside ``directories`` (the declared sources'
        directories; DuckDB adds its own spill directory) and none installs an extension: DuckDB's
        ``allowed_directories`` with ``enable_external_access = false``, which DuckDB does not let
        a running database turn back on (nor change the directories). ``COPY … TO`` a path
        elsewhere, ``ATTACH`` and ``read_csv('/etc/…')`` are then refused by DuckDB itself."""
        cur = self._cursor()
        try:
            self.allowed = list(directories)
            cur.execute("SET allowed_directories = ?", [self.allowed])
            for stmt in ("SET enable_external_access = false", "SET autoinstall_known_extensions = false"):
                cur.execute(stmt)
        finally:
            cur.close()

    def _cursor(self):
        with self._lock:
            return self._con.cursor()

    def _worker_cursor(self):
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self._local.cursor = self._cursor()
            with self._lock:
                self._cursors.append(cur)
        return cur

    def _scan(self, sql: str, scan: _Scan, then, timing, during, columnar: bool = False):
        cur = self._worker_cursor()
        with scan.lock:
            if scan.stopped is not None:
                raise duckdb.InterruptException("interrupted before start")
            scan.cursor = cur
        if during is not None:  # runs on the loop once this thread is inside DuckDB (no GIL)
            during[0].call_soon_threadsafe(during[1])
        if timing is not None:  # from here on the scan's time is observable: it is charged
            timing["started"] = True
        t0 = time.perf_counter()
        try:
            rows = self._run(cur, sql, True) if columnar else self._run(cur, sql)
        finally:
            with scan.lock:
                scan.cursor = None
        if timing is not None:
            timing["backend_ms"] = (time.perf_counter() - t0) * 1000
        return rows if then is None else then(rows)

    async def fetch(
        self,
        sql: str,
        timeout_s: float | None = None,
        cancel: asyncio.Event | None = None,
        then: Callable[[Any], Any] | None = None,
        timing: dict | None = None,
        during: Callable[[], None] | None = None,
        columnar: bool = False,
    ) -> Any:
        """Rows of ``sql``. ``then(rows)``, if given, runs in the same worker thread
        right after the scan (no second thread hand-off) and its result is returned;
        the timeout and a cancel stop the scan only, never ``then``. ``timing``
        receives ``backend_ms``, the scan alone, and ``started = True`` just before
        the query is submitted (the orchestrator charges a scan that started).
        ``during()``, if given, runs on the event loop as the scan starts (work that
        overlaps the scan). ``columnar``: the result as :class:`~.base.Columns` where its
        column types allow (``COLUMN_TYPES``), else rows as ever."""
        loop = asyncio.get_running_loop()
        scan = _Scan()
        fut = loop.run_in_executor(
            self._pool,
            self._scan,
            sql,
            scan,
            then,
            timing,
            None if during is None else (loop, during),
            columnar,
        )
        fut.add_done_callback(scan.finish)
        stop = functools.partial(scan.stop_until_finished, loop)
        timer = loop.call_later(timeout_s, stop, "timeout") if timeout_s else None
        unsubscribe = watcher = None
        if isinstance(cancel, CancelSignal):
            unsubscribe = cancel.subscribe(lambda: stop("cancel"))
            if cancel.is_set():  # cancelled while it was planned: it does not start
                stop("cancel")
        elif cancel is not None:
            watcher = asyncio.ensure_future(cancel.wait())
            watcher.add_done_callback(lambda _: stop("cancel"))
        self.scans += 1
        try:
            return await fut
        except asyncio.CancelledError:  # the statement's task is gone (client left, shutdown):
            stop("cancel")  # free the worker too
            raise
        except duckdb.InterruptException:
            if scan.stopped == "cancel":
                raise BackendError("57014", "canceling statement due to user request") from None
            raise BackendTimeout(timeout_s or 0) from None
        finally:
            self.scans -= 1
            if timer is not None:
                timer.cancel()
            if unsubscribe is not None:
                unsubscribe()
            if watcher is not None:
                watcher.cancel()

    def _run(self, cur, sql: str, columnar: bool = False):
        try:
            template, params = (sql.template, sql.params) if isinstance(sql, ParamSQL) else (sql, ())
            self._keep(cur, sql)
            if isinstance(params, dict):  # named values (the unit's salt): bound, never in a text
                return _result(cur.execute(template, params) if params else cur.execute(template), columnar)
            name = self._prepared(cur, template) if params or self._seen_again(sql) else None
            if name is not None:
                args = ", ".join(str(int(v)) for v in params)
                if args:
                    args = f"({args})"
                try:
                    return _result(cur.execute(f"EXECUTE {name}{args}"), columnar)
                except duckdb.InterruptException:
                    raise
                except duckdb.Error as e:  # e.g. the catalog changed under it: run the text
                    log.info(
                        "duckdb: prepared %s failed (%s); running the text", name, str(e).splitlines()[0]
                    )
                    self._local.prepared.put(template, "")
                    try:
                        cur.execute(f"DEALLOCATE {name}")
                    except duckdb.Error:
                        pass
            return _result(cur.execute(sql), columnar)
        except duckdb.InterruptException:
            raise
        except REFUSED as e:
            log.warning("duckdb refused the scan before reading a row: %s", e)
            raise BackendRefused(*refused_state(e)) from None
        except duckdb.Error as e:
            log.warning("duckdb error: %s", e)
            raise BackendError("58000", "the backend failed to run the query") from None

    def _seen_again(self, sql: str) -> bool:
        """Whether this worker has run the text ``sql`` before (its last SEEN_MAX texts): a
        text that repeats — the same scan for another tier or data version — is prepared
        from its second run on, like psycopg 3's ``prepare_threshold``."""
        seen = self._local.__dict__.get("seen")
        if seen is None:  # this worker thread's own
            seen = self._local.seen = LRU(SEEN_MAX)
        again = sql in seen
        seen.put(sql, True)
        return again

    def _prepared(self, cur, template: str) -> str | None:
        """The name ``template`` is prepared under on this worker's cursor (prepared on
        first use), or None if DuckDB refuses to prepare it (it then runs as text)."""
        cache = self._local.__dict__.get("prepared")
        if cache is None:  # this worker thread's own
            cache = self._local.prepared = LRU(PREPARED_MAX)
        name = cache.get(template)
        if name is None:
            name = f"dpgate_p{next(self._names)}"
            try:
                cur.execute(f"PREPARE {name} AS {template}")
            except duckdb.InterruptException:
                raise
            except duckdb.Error as e:
                log.info("duckdb: template not prepared (%s); it runs as text", str(e).splitlines()[0])
                name = ""
            for _, old in cache.put(template, name):
                if old:
                    cur.execute(f"DEALLOCATE {old}")
        self.prepared_runs += bool(name)
        return name or None

    def run(self, sql: str, prepare: bool = True) -> list[tuple]:
        """Rows of ``sql`` on this thread's worker cursor, as a scan runs them (prepared
        where ``sql`` carries a template or repeats), with no timeout: for in-process
        benchmarks; ``prepare=False`` runs the text as it is, as a client of DuckDB would."""
        cur = self._worker_cursor()
        if prepare:
            return self._run(cur, sql)
        self._keep(cur, sql)
        if isinstance(sql, ParamSQL) and isinstance(sql.params, dict) and sql.params:
            return cur.execute(sql.template, sql.params).fetchall()
        return cur.execute(str(sql)).fetchall()

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
        self.discard()

    def discard(self) -> None:
        """Close at once (frees the file: nothing here awaits)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._close_cursors()
        with self._lock:
            self._con.close()

    async def describe(self, source: str) -> dict[str, str] | None:
        """The source's columns, after running it with ``LIMIT 0`` as a scan would (not only
        binding it); a file glob whose files differ in schema is an error naming the first two
        (DuckDB reads a glob's schema from its first file and fails at the first that differs,
        mid-scan)."""
        try:
            rows = self.query(f"DESCRIBE SELECT * FROM {source} LIMIT 0")
            self.query(f"SELECT * FROM {source} LIMIT 0")
        except duckdb.CatalogException:
            return None
        self._one_schema_per_glob(source)
        return {r[0].lower(): str(r[1]) for r in rows}

    def _one_schema_per_glob(self, source: str) -> None:
        rel = sqlglot.parse_one(f"SELECT * FROM {source}", read=self.dialect).find(exp.Table)
        fn = rel.this if rel is not None else None
        if not isinstance(fn, (exp.ReadParquet, exp.ReadCSV)):
            return
        arg = fn.this if isinstance(fn, exp.ReadCSV) else (fn.expressions or [None])[0]
        if not (isinstance(arg, exp.Literal) and arg.is_string and re.search(r"[*?\[]", arg.this)):
            return
        reader = "read_parquet" if isinstance(fn, exp.ReadParquet) else "read_csv"
        first: tuple[str, str] | None = None
        for (path,) in self.query("SELECT file FROM glob(?) ORDER BY file", [arg.this]):
            lit = "'" + path.replace("'", "''") + "'"
            cols = self.query(f"DESCRIBE SELECT * FROM {reader}({lit}) LIMIT 0")
            schema = "(" + ", ".join(f"{r[0]} {r[1]}" for r in cols) + ")"
            if first is None:
                first = (path, schema)
            elif schema != first[1]:
                raise BackendError(
                    "42804",
                    f"the files of {arg.this} differ in schema: {first[0]} has {first[1]}, {path} has "
                    f"{schema}; declare one table per schema (dpgate init reads a glob so)",
                )

    async def privilege_problems(self, config) -> list[str]:
        """Whether file access is confined to the sources' directories (:meth:`confine`)."""
        if self.allowed is None:
            return [
                "a declared source reads a remote URL, so DuckDB's file access is not confined to the "
                "sources' directories (docs/least-privilege.md)"
            ]
        return []

    def ledger_marker(self) -> tuple[bool, dict | None]:
        """The data file keeps the ledger's identity (an in-memory database keeps none)."""
        if self.path == ":memory:":
            return False, None
        return True, read_marker(self)

    def write_ledger_marker(self, ident: dict) -> None:
        self.execute_script(
            f"CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (ledger_id VARCHAR, created DOUBLE); "
            f"DELETE FROM {MARKER_TABLE}; "
            f"INSERT INTO {MARKER_TABLE} VALUES ('{ident['id']}', {float(ident['created'])});"
        )

    def _close_cursors(self) -> None:
        with self._lock:
            for cur in self._cursors:
                cur.close()
            self._cursors.clear()


def read_marker(db) -> dict | None:
    """The identity row of a DuckDB file (``db.query``), or None."""
    rows = db.query(f"SELECT table_name FROM information_schema.tables WHERE table_name = '{MARKER_TABLE}'")
    if not rows:
        return None
    row = db.query(f"SELECT ledger_id, created FROM {MARKER_TABLE} LIMIT 1")
    return dict(id=row[0][0], created=row[0][1]) if row else None


class ReadOnlyFile:
    """A DuckDB file's ledger marker, read without taking the file from a running proxy
    (``dpgate ledger check``)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self._con = duckdb.connect(self.path, read_only=True)

    def query(self, sql: str, params=None) -> list[tuple]:
        return self._con.execute(sql).fetchall()

    def ledger_marker(self) -> tuple[bool, dict | None]:
        return True, read_marker(self)

    def close(self) -> None:
        self._con.close()
