"""The running service's shared state: config, ledger, backend, catalog, the
CSPRNG source, per-role statement slots, and the statement log."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import json
import logging
import os
import sqlite3
import ssl
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path

from config import Config
from mechanisms import default_source
from rewriter import build_plan, parse, to_sql
from rewriter.route import Route, Routes
from rewriter.template import Templates

from .backends import kind_of, open_backend
from .catalog import PG_RELATIONS, Catalog
from .pipeline.lane import heavy_plan
from .pipeline.orchestrator import Connection
from .pipeline.release import NoiseReservoir, prepare_mechanisms
from .pipeline.views import Views, catalog_views
from .stores.errors import cannot_write, no_write_reason
from .stores.ledger import open_ledger
from .stores.ledger_guard import install, precheck
from .wire.api import SqlError

log = logging.getLogger("dpgate")
stmt_log = logging.getLogger("dpgate.statements")

INLINE_PARSE = 1024
"""Statements up to this many characters are routed on the event loop (and planned from the
plan templates; a plan not in the cache is made on a worker thread: ``plan_async``)."""

SWITCH_INTERVAL_S = 0.0005
"""The interpreter's GIL switch interval while serving (``sys.setswitchinterval``; Python's
default is 5 ms). A release's mechanism and rows run in a worker thread (nothing
heavy on the event loop), but a CPU-bound thread keeps the GIL until the interval expires,
and the event loop waits for it again after every socket call, so the loop's delay grows
with the interval (``tests/core/test_event_loop_latency.py`` watches a stream of repeats
beside large releases; a shorter interval than this one gains nothing more)."""

GC_NOTE = """A full garbage collection holds the GIL throughout, whichever thread runs it: with the
objects a started service holds (sqlglot, DuckDB, numpy, the config) one stalls the event
loop for as long as it walks them (tests/core/test_event_loop_latency.py sees it as the
repeats' maximum). ``start`` freezes them (``gc.freeze``), so a collection
visits only what was made since."""


PLAN_CACHE = 256
"""Plans kept by statement text (an LRU: Describe then Execute, repeats). Each holds its WHERE as
a sqlglot tree, a score of objects the cyclic collector walks, so a full collection's pause grows with the
cache; a statement of a templated shape is cheap to fill again."""
FULL_GC_OFF = 1 << 30  # a third threshold no count reaches: no automatic full collection
FULL_GC_AFTER = 10  # young collections between two full ones: Python's own third threshold
GC_CHECK_S = 1.0  # how often a running gateway checks whether a full collection is due
_SETTLED: list = []  # thresholds before the first settle_gc, and how many gateways run


def settle_gc() -> None:
    """When a gateway starts: what exists now (config, parsers, mechanism tables) is frozen
    out of the cyclic collector's scans (GC_NOTE; ``close`` unfreezes it), and the collector's
    full collections are no longer started by whichever thread allocates next (most often the
    event loop): the gateway checks every ``GC_CHECK_S`` and runs a due one on a
    worker thread (:func:`collect_if_due`; ``unsettle_gc`` restores Python's thresholds when the
    last gateway closes). A full collection still holds the GIL while it runs. The young
    collections keep Python's thresholds (700, 10): raised, they become rarer but each holds the
    GIL longer than the event loop's step (tests/core/test_event_loop_latency.py), and
    ``bench.cells``' large release is no faster."""
    gc.collect()
    gc.freeze()
    if not _SETTLED:
        _SETTLED.extend([gc.get_threshold(), 0])
    _SETTLED[1] += 1
    t0, t1, _ = _SETTLED[0]
    gc.set_threshold(t0, t1, FULL_GC_OFF)


def full_gc_due() -> bool:
    """``FULL_GC_AFTER`` young collections since the last full one (Python's own count;
    ``settle_gc`` turned its automatic start off)."""
    return gc.get_count()[2] >= FULL_GC_AFTER


def collect_if_due() -> bool:
    """The cyclic collector's full collection, in this thread, when it is due (:func:`full_gc_due`)."""
    if full_gc_due():
        gc.collect()
        return True
    return False


def unsettle_gc() -> None:
    if _SETTLED:
        _SETTLED[1] -= 1
        if _SETTLED[1] <= 0:
            gc.set_threshold(*_SETTLED[0])
            _SETTLED.clear()


def default_state_dir() -> Path:
    if env := os.environ.get("DPGATE_STATE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "dpgate"


def secure_state_dir(path: Path) -> None:
    """The state dir (ledger, data, demo passwords): created 0700, and made 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.chmod(path, 0o700)
    except OSError:  # not ours (e.g. a shared mount): leave it
        pass


class Gateway:
    """Everything the connections share. ``await start()`` opens the backend."""

    def __init__(self, config: Config, state_dir: Path | None = None, *, backend=None, source=None):
        self.config = config
        prepare_mechanisms(config)  # AVG/SUM/COUNT set-up tables, once, before any statement
        self.state_dir = Path(state_dir or config.server.state_dir or default_state_dir())
        try:  # a state dir that cannot be written (full, read-only): one line, 53100
            secure_state_dir(self.state_dir)
            precheck(config, self.state_dir)  # a missing ledger the state dir remembers: before creating one
            self.ledger = open_ledger(config, self.state_dir)
        except (OSError, sqlite3.Error) as e:
            if (reason := no_write_reason(e, self.state_dir / "ledger.sqlite3")) is None:
                raise
            raise cannot_write(self.state_dir, reason) from None
        data = kind_of(config).data_file(config, self.state_dir) if backend is None else None
        fresh = data is not None and not data.exists()
        self.backend = backend or open_backend(config, self.state_dir)
        if fresh and data.exists():
            os.chmod(data, 0o600)  # the data: owner only
        try:  # the ledger is never silently new (LedgerLost: one line)
            install(self.ledger, self.state_dir, self.backend)
        except BaseException:
            self.ledger.close()
            if backend is None:  # free what it holds (an embedded file)
                self.backend.discard()
            raise
        self.catalog = Catalog(config, database=config.server.database, views=catalog_views())
        self.source = source or default_source()
        self.reservoir = NoiseReservoir(self.source)  # noise drawn ahead, in idle time
        self.views = Views(self)
        self.lane = None  # a worker's heavy-statement lane (proxy.pipeline.lane.LaneClient)
        self._slots: dict[str, asyncio.Semaphore] = {}
        self.in_flight: dict[tuple[str, str], asyncio.Future] = {}  # (role, release key) being released
        self.statement_timeout = config.server.limits.statement_timeout_ms / 1000 or None
        self.json_logs = config.server.log_format == "json"
        self._plans: OrderedDict = OrderedDict()
        self._descriptions: OrderedDict = OrderedDict()
        self._templates = Templates()
        self._routes: OrderedDict = OrderedDict()
        self._cache_lock = threading.Lock()  # plans and routes are also made on threads
        self._template_lock = threading.Lock()  # the templates: one planner thread at a time
        self._catalog_names = frozenset(PG_RELATIONS)
        self._shapes = Routes(config.tables, self._catalog_names)

    def route(self, sql: str) -> Route:
        """The statement's path and declared table, decided from its parse
        (:mod:`rewriter.route`); cached by text. A statement that names no declared
        table or view is the catalog's when the catalog takes it."""
        return self.parse_route(sql)[0]

    def parse_route(self, sql: str):
        """:meth:`route`, and the parse it was decided from (None when the route was cached):
        the statement's planner takes it, so a statement is parsed once."""
        with self._cache_lock:
            hit = self._routes.get(sql)
            if hit is not None:
                self._routes.move_to_end(sql)
                return hit, None
        r, tree = self._shapes.parse_route(sql)  # by shape: a statement differing only in numbers, unparsed
        if r.kind in ("dp", "unparsed") and r.table is None and self.catalog.handles(sql):
            r = Route("catalog", catalog=True)
        with self._cache_lock:
            self._routes[sql] = r
            if len(self._routes) > 4096:
                self._routes.popitem(last=False)
        return r, tree

    async def route_async(self, sql: str):
        """:meth:`parse_route` on a worker thread unless cached or short (a short
        statement parses in well under a millisecond: less than the hand-off)."""
        if sql in self._routes or len(sql) <= INLINE_PARSE:
            return self.parse_route(sql)
        return await asyncio.to_thread(self.parse_route, sql)

    def _cached_plan(self, key):
        with self._cache_lock:
            hit = self._plans.get(key)
            if hit is not None:
                self._plans.move_to_end(key)
            return hit

    def plan(self, sql: str, params: list | None, tree=None):
        """The rewriter's plan for ``sql`` with ``params`` (an LRU cache: Describe
        and Execute of one statement, and repeats, plan once). Refusals are not cached.
        ``tree``: the statement's parse, if routing made one (the planner may change it)."""
        key = _plan_key(sql, params)
        hit = self._cached_plan(key)
        if hit is not None:
            return hit
        if len(sql) > INLINE_PARSE:
            plan = build_plan(
                tree if tree is not None else parse(sql), self.config, list(params or ()), copy=False
            )
        else:  # statements equal up to their comparison literals (or integer parameters) share a template
            with self._template_lock:
                plan = self._templates.plan(sql, self.config, self.backend.dialect, params or None, tree)
        if self.lane is None or not heavy_plan(plan):  # else the lane scans it (pipeline.lane)
            _warm_sql(plan, self.backend.dialect)
        return self._keep_plan(key, plan)

    def _keep_plan(self, key, plan):
        if plan.clock:  # now() / current_date: never reused
            return plan
        with self._cache_lock:
            self._plans[key] = plan
            if len(self._plans) > PLAN_CACHE:
                self._plans.popitem(last=False)
        return plan

    def description(self, key, make=None):
        """The parameter types and columns Describe found for ``key`` (a statement and
        the types its client declared), or None; with ``make``, the value to keep for it
        (an LRU like the plans': a driver re-Parses one text with new parameters on every
        execution, and describing it plans it with placeholder values)."""
        with self._cache_lock:
            if make is not None:
                self._descriptions[key] = make
                if len(self._descriptions) > 2048:
                    self._descriptions.popitem(last=False)
                return make
            hit = self._descriptions.get(key)
            if hit is not None:
                self._descriptions.move_to_end(key)
            return hit

    async def plan_async(self, sql: str, params: list | None, tree=None):
        """:meth:`plan`: a cached plan (Describe then Execute, repeats) on the event loop,
        anything else on a worker thread — planning a 10,000-cell GROUP BY (its public
        domain, a template's probes) takes milliseconds of CPU (nothing heavy on
        the event loop; the hand-off is cheap beside it). A statement whose shape has a
        template is filled on the loop (a WHERE copy and its literals; its tokens are still those routing made) unless a planner thread
        holds the templates."""
        key = _plan_key(sql, params)
        hit = self._cached_plan(key)
        if hit is not None:
            return hit
        if len(sql) <= INLINE_PARSE and self._template_lock.acquire(blocking=False):
            try:
                plan = self._templates.fill(sql, params or None)
            finally:
                self._template_lock.release()
            if plan is not None:
                return self._keep_plan(key, plan)
        return await asyncio.to_thread(self.plan, sql, params, tree)

    async def start(self) -> None:
        sys.setswitchinterval(SWITCH_INTERVAL_S)  # the event loop gets the GIL back sooner
        await self.backend.connect()
        settle_gc()  # (GC_NOTE)
        self._gc_check = asyncio.get_running_loop().create_task(self._collect_when_due())

    async def _collect_when_due(self) -> None:
        """Full collections on a worker thread, never as a step of the loop (``settle_gc``)."""
        while True:
            await asyncio.sleep(GC_CHECK_S)
            if full_gc_due():  # (checked here first: no thread hop when not)
                await asyncio.to_thread(collect_if_due)

    async def close(self) -> None:
        task = getattr(self, "_gc_check", None)
        if task is not None:
            task.cancel()
        unsettle_gc()
        gc.unfreeze()  # (a process that starts several services, e.g. the tests, collects them)
        await self.backend.close()
        self.views.close()
        self.ledger.close()

    @property
    def data_version(self) -> int:
        return self.ledger.data_version()

    async def ledger_read(self, fn, *args):
        """A ledger read from the event loop: inline on SQLite (a WAL read never
        waits), on a thread for a Postgres ledger (a network round trip)."""
        if self.ledger.dsn is None:
            return fn(*args)
        return await asyncio.to_thread(fn, *args)

    def tier_of(self, role: str):
        return self.config.tiers[self.config.roles[role].tier]

    # -- wire hooks -----------------------------------------------------------
    async def handler_factory(self, user: str, database: str, params: dict[str, str]):
        if user not in self.config.roles:
            raise SqlError("28000", f'role "{user}" does not exist')
        if database != self.config.server.database:
            raise SqlError(
                "3D000",
                f'database "{database}" does not exist',
                hint=f'Connect to database "{self.config.server.database}".',
            )
        return Connection(self, user, database, params)

    def method(self, user: str) -> str:
        return self.config.server.auth

    def scram_verifier(self, user: str) -> str | None:
        role = self.config.roles.get(user)
        return role.scram if role else None

    def ssl_context(self) -> ssl.SSLContext | None:
        tls = self.config.server.tls
        if tls.cert is None:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(tls.cert, tls.key)
        return ctx

    @contextlib.asynccontextmanager
    async def statement_slot(self, role: str):
        """At most ``limits.max_statements_per_role`` backend scans per role at once."""
        sem = self._slots.setdefault(
            role, asyncio.Semaphore(self.config.server.limits.max_statements_per_role)
        )
        if sem.locked():
            raise SqlError(
                "53300",
                f"too many concurrent statements for role {role}",
                hint="Wait for your other queries to finish.",
            )
        async with sem:
            yield

    def log_statement(
        self,
        *,
        role: str,
        sql: str,
        decision: str,
        epsilon: float,
        ms: float,
        backend_ms: float | None = None,
        ledger: str = "none",
    ) -> None:
        """One line per statement: role, fingerprint of the text, decision, what the ledger
        did (``charged`` ε, ``refunded`` the ε it had reserved, or ``none``), time in the
        proxy and in the backend scan — never an answer or a true value."""
        if not stmt_log.isEnabledFor(logging.INFO):
            return
        fp = statement_fingerprint(sql)
        if self.json_logs:
            rec = {
                "ts": time.time(),
                "role": role,
                "fingerprint": fp,
                "decision": decision,
                "epsilon": epsilon,
                "ledger": ledger,
                "ms": round(ms, 3),
            }
            if backend_ms is not None:
                rec["backend_ms"] = round(backend_ms, 3)
            stmt_log.info(json.dumps(rec))
        else:
            scan = "" if backend_ms is None else f" backend_ms={backend_ms:.2f}"
            stmt_log.info(
                "role=%s fp=%s decision=%s ledger=%s epsilon=%g ms=%.2f%s",
                role,
                fp,
                decision,
                ledger,
                epsilon,
                ms,
                scan,
            )


def _warm_sql(plan, dialect: str) -> None:
    """Emit a central plan's backend SQL here, on the planner thread (it is kept with the
    plan): generating a WHERE takes milliseconds of sqlglot, which the statement would
    otherwise spend on the event loop just before its scan. A plan another kind
    scans its own way, or one with a privacy unit (keyed by the data version's salt), is
    left as it is."""
    if plan.unit is None and not plan.selected:
        try:
            to_sql(plan, dialect)
        except Exception:  # the kind that scans it says what is wrong
            pass


def _plan_key(sql: str, params: list | None) -> tuple:
    return (sql, tuple((type(p).__name__, tuple(p) if isinstance(p, list) else p) for p in params or ()))


def statement_fingerprint(sql: str) -> str:
    """The statement log's fingerprint: sha256 of the whitespace-normalised text (12 hex)."""
    return hashlib.sha256(" ".join(sql.split()).encode()).hexdigest()[:12]
