"""The running service's shared state: config, ledger, backend, catalog, the
CSPRNG source, per-role statement slots, and the statement log."""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import ssl
import time
from collections import OrderedDict
from pathlib import Path

from config import Config

from mechanisms import default_source

from .backends import open_backend
from .catalog import Catalog
from rewriter.template import Templates

from .ledger import open_ledger
from .release import NoiseReservoir
from .orchestrator import Connection
from .views import Views
from .wire.api import SqlError

log = logging.getLogger("dpgate")
stmt_log = logging.getLogger("dpgate.statements")


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
    except OSError:                   # not ours (e.g. a shared mount): leave it
        pass


def _duckdb_file(config: Config, state_dir: Path) -> Path | None:
    if config.backend.kind == "postgres":
        return None
    path = Path(config.backend.path or "demo.duckdb")
    return path if path.is_absolute() else state_dir / path


class Gateway:
    """Everything the connections share. ``await start()`` opens the backend."""

    def __init__(self, config: Config, state_dir: Path | None = None, *, backend=None, source=None):
        self.config = config
        self.state_dir = Path(state_dir or config.server.state_dir or default_state_dir())
        secure_state_dir(self.state_dir)
        from .ledger_guard import install, precheck
        precheck(config, self.state_dir)   # a missing ledger the state dir remembers: before creating one
        self.ledger = open_ledger(config, self.state_dir)
        duck = _duckdb_file(config, self.state_dir) if backend is None else None
        fresh = duck is not None and not duck.exists()
        self.backend = backend or open_backend(config, self.state_dir)
        if fresh and duck.exists():
            os.chmod(duck, 0o600)          # the data: owner only
        try:                               # the ledger is never silently new (LedgerLost: one line)
            install(self.ledger, self.state_dir, self.backend)
        except BaseException:
            self.ledger.close()
            if backend is None and self.backend.dialect == "duckdb":   # free the file (close awaits nothing)
                with contextlib.suppress(StopIteration):
                    self.backend.close().send(None)
            raise
        self.catalog = Catalog(config, database=config.server.database)
        self.source = source or default_source()
        self.reservoir = NoiseReservoir(self.source)     # noise drawn ahead, in idle time
        self.views = Views(self)
        self._slots: dict[str, asyncio.Semaphore] = {}
        self.statement_timeout = config.server.limits.statement_timeout_ms / 1000 or None
        self.json_logs = config.server.log_format == "json"
        self._plans: OrderedDict = OrderedDict()
        self._templates = Templates()
        names = "|".join(re.escape(t) for t in sorted(config.tables, key=len, reverse=True))
        self._from_declared = re.compile(rf'\bfrom\s+(?:"?public"?\s*\.\s*)?"?({names})\b')

    def reads_declared_table(self, sql: str) -> bool:
        """A cheap test: the statement reads a declared table and mentions no catalog
        relation, so it is a DP query (the rewriter still validates it fully)."""
        low = sql.lower()
        return "pg_" not in low and "information_schema" not in low and bool(self._from_declared.search(low))

    def table_of(self, sql: str) -> str | None:
        """The declared table a statement reads (cheap textual look-up; the rewriter
        validates the statement fully), or None."""
        m = self._from_declared.search(sql.lower())
        return m.group(1) if m else None

    def plan(self, sql: str, params: list | None):
        """The rewriter's plan for ``sql`` with ``params`` (an LRU cache: Describe
        and Execute of one statement, and repeats, plan once). Refusals are not cached."""
        key = (sql, tuple((type(p).__name__, p) for p in params or ()))
        hit = self._plans.get(key)
        if hit is not None:
            self._plans.move_to_end(key)
            return hit
        if params:
            from rewriter import build_plan, parse
            plan = build_plan(parse(sql), self.config, list(params), copy=False)
        else:                 # statements equal up to their comparison literals share a template
            plan = self._templates.plan(sql, self.config, self.backend.dialect)
        self._plans[key] = plan
        if len(self._plans) > 2048:
            self._plans.popitem(last=False)
        return plan

    async def start(self) -> None:
        await self.backend.connect()

    async def close(self) -> None:
        await self.backend.close()
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
            raise SqlError("3D000", f'database "{database}" does not exist',
                           hint=f'Connect to database "{self.config.server.database}".')
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
        sem = self._slots.setdefault(role, asyncio.Semaphore(self.config.server.limits.max_statements_per_role))
        if sem.locked():
            raise SqlError("53300", f"too many concurrent statements for role {role}",
                           hint="Wait for your other queries to finish.")
        async with sem:
            yield

    def log_statement(self, *, role: str, sql: str, decision: str, epsilon: float, ms: float,
                      backend_ms: float | None = None) -> None:
        """One line per statement: role, fingerprint of the text, decision, ε, time
        in the proxy and in the backend scan — never an answer or a true value."""
        if not stmt_log.isEnabledFor(logging.INFO):
            return
        fp = statement_fingerprint(sql)
        if self.json_logs:
            rec = {"ts": time.time(), "role": role, "fingerprint": fp, "decision": decision,
                   "epsilon": epsilon, "ms": round(ms, 3)}
            if backend_ms is not None:
                rec["backend_ms"] = round(backend_ms, 3)
            stmt_log.info(json.dumps(rec))
        else:
            scan = "" if backend_ms is None else f" backend_ms={backend_ms:.2f}"
            stmt_log.info("role=%s fp=%s decision=%s epsilon=%g ms=%.2f%s", role, fp, decision, epsilon, ms, scan)


def statement_fingerprint(sql: str) -> str:
    """The statement log's fingerprint: sha256 of the whitespace-normalised text (12 hex)."""
    import hashlib
    return hashlib.sha256(" ".join(sql.split()).encode()).hexdigest()[:12]
