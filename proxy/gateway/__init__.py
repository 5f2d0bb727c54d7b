"""The service's wiring: the state every connection shares — config, ledger, backend, catalog,
the CSPRNG source and noise reservoir, per-role statement slots — and the steps that turn a
statement's text into its route and plan.

Beside it, one job each: ``caches.py`` (routes, plans and descriptions by text), ``runtime.py``
(the interpreter tuned for serving: switch interval, garbage collector), ``tls.py`` (the server's
TLS context), ``statement_log.py`` (one log line per statement)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import ssl
import threading
import time
from pathlib import Path
from typing import Literal

from config import Config
from mechanisms import default_source
from rewriter import build_plan, parse, to_sql
from rewriter.lru import LRU
from rewriter.route import Route, Routes
from rewriter.template import Templates

from ..backends import kind_of, open_backend
from ..catalog import PG_RELATIONS, Catalog
from ..pipeline.auto_bounds import Resolved, needed, resolve
from ..pipeline.lane import LaneClient, heavy_plan
from ..pipeline.lookup_domains import LookupAnswers
from ..pipeline.noise import NoiseReservoir
from ..pipeline.orchestrator import Connection
from ..pipeline.release import prepare_mechanisms
from ..pipeline.repeat_rows import RepeatRows
from ..pipeline.views import Views, catalog_views
from ..stores.errors import cannot_write, no_write_reason
from ..stores.ledger import open_ledger
from ..stores.ledger_guard import install, precheck
from ..stores.state_dir import default_state_dir, secure_state_dir
from ..wire.api import SqlError
from .caches import StatementCaches, plan_key
from .runtime import collect_when_due, set_switch_interval, settle_gc, unsettle_gc
from .statement_log import StatementLog
from .tls import server_context

PLAN_LOOKUPS = 1024
"""Plans whose key domains public lookup tables gave, kept (by text and data version)."""

BOUNDS_CHECK_S = 1.0
"""How often (at most) a statement reads the ledger's data version to see whether bounds
written "auto" must be chosen again (a new data version: ``dpgate data-version --advance``)."""

INLINE_PARSE = 1024
"""Statements up to this many characters are routed on the event loop (and planned from the
plan templates; a plan not in the cache is made on a worker thread: ``plan_async``)."""


class Gateway:
    """Everything the connections share. ``await start()`` opens the backend."""

    def __init__(self, config: Config, state_dir: Path | None = None, *, backend=None, source=None):
        self.config = config  # as served: bounds written "auto" replaced by the chosen ones (start)
        self.declared = config  # as written
        self.bounds: Resolved | None = None  # the chosen bounds (None: the config has no "auto")
        self._bounds_checked = 0.0
        self._bounds_lock: asyncio.Lock | None = None
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
        if fresh and data is not None and data.exists():
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
        self.lane: LaneClient | None = None  # a worker's heavy-statement lane
        self._slots: dict[str, asyncio.Semaphore] = {}
        self.in_flight: dict[tuple[str, str], asyncio.Future] = {}  # (role, release key) being released
        self.repeat_rows = RepeatRows()  # large releases' rows kept encoded for their repeats
        self.statement_timeout = config.server.limits.statement_timeout_ms / 1000 or None
        self.log_statement = StatementLog(as_json=config.server.log_format == "json")
        self._caches = StatementCaches()  # shared with the planner threads
        self._templates = Templates()
        self.lookups = LookupAnswers()  # public lookup tables' answers (key domains)
        self._resolved: LRU = LRU(PLAN_LOOKUPS)  # plans with those domains applied, by text and data version
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
        hit = self._caches.routes.get(sql)
        if hit is not None:
            return hit, None
        r, tree = self._shapes.parse_route(sql)  # by shape: a statement differing only in numbers, unparsed
        if r.kind in ("dp", "unparsed") and r.table is None and self.catalog.handles(sql):
            r = Route("catalog", catalog=True)
        self._caches.routes.put(sql, r)
        return r, tree

    async def route_async(self, sql: str):
        """:meth:`parse_route` on a worker thread unless cached or short (a short
        statement parses in well under a millisecond: less than the hand-off)."""
        if sql in self._caches.routes or len(sql) <= INLINE_PARSE:
            return self.parse_route(sql)
        return await asyncio.to_thread(self.parse_route, sql)

    def plan(self, sql: str, params: list | None, tree=None):
        """The rewriter's plan for ``sql`` with ``params`` (an LRU cache: Describe
        and Execute of one statement, and repeats, plan once). Refusals are not cached.
        ``tree``: the statement's parse, if routing made one (the planner may change it)."""
        key = plan_key(sql, params)
        hit = self._caches.plans.get(key)
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
        return self._caches.keep_plan(key, plan)

    def description(self, key, make=None):
        """The parameter types and columns Describe found for ``key`` (a statement and
        the types its client declared), or None; with ``make``, the value to keep for it
        (an LRU like the plans': a driver re-Parses one text with new parameters on every
        execution, and describing it plans it with placeholder values)."""
        return self._caches.description(key, make)

    async def plan_async(self, sql: str, params: list | None, tree=None):
        """:meth:`plan`: a cached plan (Describe then Execute, repeats) on the event loop,
        anything else on a worker thread — planning a large GROUP BY (its public domain, a
        template's probes) is CPU work, and nothing heavy runs on the event loop. A statement
        whose shape has a template is filled on the loop (a WHERE copy and its literals; its
        tokens are still those routing made) unless a planner thread holds the templates."""
        plan = await self._plan_async(sql, params, tree)
        if not plan.lookups or plan.lookups_done:
            return plan
        version = await self.ledger_read(self.ledger.data_version)
        hit = self._resolved.get((plan_key(sql, params), version))
        if hit is not None:
            return hit
        done = await self.lookups.resolve(self, plan)  # keys read from public tables: their domains
        self._resolved.put((plan_key(sql, params), version), done)
        return done

    async def _plan_async(self, sql: str, params: list | None, tree=None):
        key = plan_key(sql, params)
        hit = self._caches.plans.get(key)
        if hit is not None:
            return hit
        if len(sql) <= INLINE_PARSE and self._template_lock.acquire(blocking=False):
            try:
                plan = self._templates.fill(sql, params or None)
            finally:
                self._template_lock.release()
            if plan is not None:
                return self._caches.keep_plan(key, plan)
        return await asyncio.to_thread(self.plan, sql, params, tree)

    async def start(self) -> None:
        """Opens the backend, with the interpreter tuned for serving (:mod:`.runtime`)."""
        set_switch_interval()
        await self.backend.connect()
        if needed(self.declared):  # bounds written "auto": chosen (or read back) before serving
            self._bounds_lock = asyncio.Lock()
            await self._choose_bounds()
        settle_gc()  # what exists now is frozen; full collections run off the loop
        self._gc_check = asyncio.get_running_loop().create_task(collect_when_due())

    async def current_bounds(self) -> None:
        """Before a statement: when the config writes bounds "auto" and the data version has
        moved on since they were chosen (read at most every ``BOUNDS_CHECK_S``), choose them for
        the new version (:mod:`proxy.pipeline.auto_bounds`) and serve the config resolved with
        them."""
        if self.bounds is None or self._bounds_lock is None:
            return
        now = time.monotonic()
        if now - self._bounds_checked < BOUNDS_CHECK_S:
            return
        self._bounds_checked = now
        dv = await self.ledger_read(self.ledger.data_version)
        if dv == self.bounds.data_version:
            return
        async with self._bounds_lock:
            if self.bounds.data_version != dv:
                await self._choose_bounds()

    async def _choose_bounds(self) -> None:
        r = await resolve(self, self.declared, self.source)
        await asyncio.to_thread(prepare_mechanisms, r.config)
        catalog = await asyncio.to_thread(
            Catalog, r.config, database=r.config.server.database, views=catalog_views()
        )
        self.config, self.catalog, self.bounds = r.config, catalog, r
        self._shapes = Routes(r.config.tables, self._catalog_names)
        self._caches = StatementCaches()  # plans made with the bounds before
        with self._template_lock:
            self._templates = Templates()
        self._bounds_checked = time.monotonic()

    async def close(self) -> None:
        task = getattr(self, "_gc_check", None)
        if task is not None:
            task.cancel()
        unsettle_gc()
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

    def method(self, user: str) -> Literal["scram", "trust"]:
        return self.config.server.auth

    def scram_verifier(self, user: str) -> str | None:
        role = self.config.roles.get(user)
        return role.scram if role else None

    def ssl_context(self) -> ssl.SSLContext | None:
        return server_context(self.config.server.tls)

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


def _warm_sql(plan, dialect: str) -> None:
    """Emit a central plan's backend SQL here, on the planner thread (it is kept with the
    plan): generating a WHERE is sqlglot work the statement would otherwise do on the event
    loop just before its scan. A plan another kind
    scans its own way, or one with a privacy unit (keyed by the data version's salt), is
    left as it is."""
    if plan.unit is None and not plan.selected:
        try:
            to_sql(plan, dialect)
        except Exception:  # the kind that scans it says what is wrong
            pass
