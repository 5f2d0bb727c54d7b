"""Run a real dpgate (Gateway + wire Server) in a background thread for tests.

Clients (psql, psycopg, asyncpg …) connect to it over loopback exactly as users do.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import tomllib
from pathlib import Path

import psycopg

from config import parse_config
from proxy import demo
from proxy.demo import demo_config_path
from proxy.gateway import Gateway
from proxy.wire.auth import make_verifier
from proxy.wire.server import Server

PASSWORDS = {
    "analyst": "analyst-pw",
    "admin": "admin-pw",
    "tiny": "tiny-pw",
    "other": "other-pw",
    "bronze": "bronze-pw",
    "silver": "silver-pw",
    "gold": "gold-pw",
    "producer": "producer-pw",
    "half": "half-pw",
}


LOOSE_UNIT = {"max_groups_per_unit": 1000, "max_rows_per_unit": 100_000}  # bind nothing in the demo data


def make_config(
    backend: dict | None = None,
    *,
    tiers: dict | None = None,
    limits: dict | None = None,
    extra_roles: bool = True,
    purchases: str = "demo",
) -> dict:
    """The demo config with known passwords, plus a `tiny` role (budget 2.5), `other`, and `half`
    (ε 0.5 per query, no ladder). ``purchases``: "demo" (per customer, the shipped bounds),
    "loose" (per customer, bounds that bind nothing: exact scans equal the raw query) or
    "rows" (no privacy unit: per purchase)."""
    data = tomllib.loads(demo_config_path().read_text())
    data = copy.deepcopy(data)
    t = data["tables"]["purchases"]
    if purchases == "loose":
        t.update(LOOSE_UNIT)
    elif purchases == "rows":
        for k in ("privacy_unit", "max_groups_per_unit", "max_rows_per_unit"):
            t.pop(k, None)
    data["demo"] = True
    data["server"]["port"] = 0
    if limits:
        data["server"]["limits"] = limits
    if backend:
        data["backend"] = backend
    if extra_roles:
        data["tiers"]["tiny"] = {"epsilon": 1.0, "budget": 2.5, "period": "day"}
        data["roles"]["tiny"] = {"tier": "tiny"}
        data["roles"]["other"] = {"tier": "default"}
        data["tiers"]["half"] = {"epsilon": 0.5, "budget": 20.0, "period": "day"}
        data["roles"]["half"] = {"tier": "half"}
    if tiers:
        data["tiers"].update(tiers)
    for role, spec in data["roles"].items():
        spec["scram"] = make_verifier(PASSWORDS[role], iterations=4096)
    return data


def config_toml(cfg: dict) -> str:
    """A config dict (``make_config``) as a TOML file's text, for ``dpgate serve --config``:
    scalars and lists as values, every nested dict as a [section]."""
    lines: list[str] = []

    def emit(prefix: str, d: dict) -> None:
        if prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f"{k} = {_toml(v)}" for k, v in d.items() if not isinstance(v, dict))
        for k, v in d.items():
            if isinstance(v, dict):
                emit(f"{prefix}.{k}" if prefix else k, v)

    emit("", cfg)
    return "\n".join(lines) + "\n"


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(v)


class Service:
    """dpgate in a thread. ``people_rows`` keeps the demo's big table small in tests."""

    def __init__(
        self,
        cfg_dict: dict,
        state_dir: Path,
        *,
        people_rows: int = 20_000,
        source=None,
        trips_rows: int = 20_000,
    ):
        self.cfg = parse_config(cfg_dict, "test-config")
        self.state_dir = Path(state_dir)
        self.people_rows = people_rows
        self.trips_rows = trips_rows
        self.source = source
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.gw: Gateway | None = None
        self.server: Server | None = None

    def _call(self, coro, timeout=120):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self, port: int):
        self.gw = Gateway(self.cfg, self.state_dir, source=self.source)
        await self.gw.start()
        from mechanisms import SeededSource  # its own stream: the service's draws stay as they were
        from proxy.demo import trips as demo_trips

        trips_source = SeededSource(2002) if self.source is not None else None
        if self.gw.backend.dialect == "spark":
            pass  # the caller mirrored the tables (support.spark.mirror_demo)
        elif self.gw.backend.dialect == "duckdb":
            demo.load_duckdb(self.gw.backend, self.people_rows)
            demo_trips.load_duckdb(self.gw.backend, self.cfg, self.trips_rows, trips_source)
        else:
            await demo.load_postgres(self.gw.backend, self.people_rows)
            await demo_trips.load_postgres(self.gw.backend, self.cfg, self.trips_rows, trips_source)
        lim = self.cfg.server.limits
        self.server = Server(
            self.gw.handler_factory,
            authenticator=self.gw,
            host="127.0.0.1",
            port=port,
            ssl_context=self.gw.ssl_context(),
            max_connections=lim.max_connections,
            max_message_size=lim.max_message_size,
        )
        await self.server.start()

    def start(self, port: int = 0) -> Service:
        self._call(self._start(port))
        self.port = self.server.port
        return self

    async def _stop(self):
        await self.server.stop()
        await self.gw.close()

    def stop(self) -> None:
        self._call(self._stop())

    def restart(self) -> None:
        port = self.port
        self.stop()
        self.start(port)

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    def dsn(self, role: str = "analyst", **extra) -> str:
        opts = " ".join(f"{k}={v}" for k, v in extra.items())
        return (
            f"host=127.0.0.1 port={self.port} dbname=demo user={role} "
            f"password={PASSWORDS[role]} sslmode=disable {opts}"
        ).strip()

    def url(self, role: str = "analyst") -> str:
        return f"postgresql://{role}:{PASSWORDS[role]}@127.0.0.1:{self.port}/demo?sslmode=disable"


HELPER = "dpgate-tests"
"""The application_name of the tests' own connections (:func:`ask`): not a client's statements."""


def ask(svc: Service, sql: str, role: str = "analyst", params=None) -> tuple[list, list[str]]:
    """(rows, NOTICE texts) of one statement through the wire (psycopg, autocommit)."""
    notes: list[str] = []
    with psycopg.connect(svc.dsn(role, application_name=HELPER), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        rows = c.execute(sql, params).fetchall()
    return rows, notes


def backend_rows(svc: Service, sql: str) -> list:
    """The backend's own answer to ``sql`` (what the proxy never shows a client)."""
    return svc._call(svc.gw.backend.fetch(sql))
