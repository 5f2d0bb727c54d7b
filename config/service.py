"""The service's settings: listening and limits (``[server]``, ``[server.limits]``,
``[server.tls]``), where the data is (``[backend]``) and where the ledger lives
(``[ledger]``). The data's own declarations (tables, tiers, roles) are in :mod:`config.models`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from .base import StrictModel

__all__ = ["Backend", "LedgerStore", "Limits", "Server", "TLS"]


class Limits(StrictModel):
    max_connections: int = Field(default=100, ge=1)
    """logged-in sessions; one more gets FATAL 53300."""
    max_message_size: int = Field(default=1 << 20, ge=1024)
    """bytes of any frontend message; a longer one closes the connection (FATAL 54000)."""
    statement_timeout_ms: int = Field(default=30_000, ge=0)
    """the backend scan is cancelled after this (57014, nothing charged); 0 = never."""
    idle_timeout_s: float = Field(
        default=3600,
        ge=0,
        description=(
            "a logged-in session that sends nothing for this long is closed (FATAL 57P05); 0 = never"
        ),
    )
    # Connections before login and statement size (proxy/wire).
    login_timeout_s: float = Field(
        default=10, gt=0, description=("a connection that has not logged in after this long is closed")
    )
    max_pending_connections: int = Field(
        default=128,
        ge=1,
        description=(
            "connections not yet logged in, in all; over it the oldest one silent for 2 s is closed to "
            "make room, else the new one is refused (FATAL 53300)"
        ),
    )
    max_pending_per_address: int = Field(
        default=64,
        ge=1,
        description=("connections not yet logged in from one client address (as max_pending_connections)"),
    )
    max_statement_size: int = Field(
        default=256 << 10,
        ge=1024,
        description=(
            "bytes of one Query/Parse message; a longer statement is refused (54000) before anything "
            "parses it and the session stays usable; at most max_message_size"
        ),
    )
    max_statements_per_role: int = Field(default=16, ge=1)
    """concurrent statements of one role; one more gets 53300."""
    shutdown_grace_s: float = Field(default=10, ge=0)
    """on SIGTERM / Ctrl-C: how long a running statement may finish."""
    # per-row cost caps (rewriter/cost.py; README "What a statement costs")
    max_literal_chars: int = Field(default=256, ge=16)
    """per-row cost cap: characters of one literal."""
    max_total_literal_chars: int = Field(default=2048, ge=16)
    """per-row cost cap: characters of all literals of a statement."""
    max_pattern_chars: int = Field(default=128, ge=1)
    """per-row cost cap: characters of one LIKE pattern."""
    max_pattern_wildcards: int = Field(default=16, ge=1)  # all patterns of a statement together
    """per-row cost cap: wildcards of all patterns of a statement together."""
    max_text_ops: int = Field(default=16, ge=1)
    """per-row cost cap: text operations in a statement."""
    max_nodes: int = Field(default=2000, ge=50)
    """per-row cost cap: syntax tree nodes of a statement."""
    max_depth: int = Field(default=64, ge=8)
    """per-row cost cap: syntax tree depth."""
    max_in_list: int = Field(default=1000, ge=1)
    """per-row cost cap: values of one IN list."""
    max_catalog_rows: int = Field(default=1_000_000, ge=1000)
    """catalog statements: at most this many rows produced, by the bound of proxy/catalog/cost.py
    (cross products and series count in full)."""

    @model_validator(mode="after")
    def _statement_within_message(self) -> Limits:
        if self.max_statement_size > self.max_message_size:
            raise ValueError("max_statement_size must not exceed max_message_size")
        return self


class TLS(StrictModel):
    cert: Path | None = None
    """server certificate (PEM); TLS is offered when cert and key are set."""
    key: Path | None = None
    """server private key (PEM)."""
    require: bool = False
    """refuse clients that do not use TLS."""

    @model_validator(mode="after")
    def _pair(self) -> TLS:
        if (self.cert is None) != (self.key is None):
            raise ValueError("give both cert and key, or neither")
        if self.require and self.cert is None:
            raise ValueError("require = true needs cert and key")
        return self


class Server(StrictModel):
    host: str = "127.0.0.1"
    """address to listen on."""
    port: int = Field(default=6432, ge=0, le=65535)
    """port to listen on."""
    database: str = "demo"
    """the database name clients connect to."""
    auth: Literal["scram", "trust"] = "scram"
    """scram (passwords, SCRAM-SHA-256) or trust (loopback hosts only)."""
    state_dir: Path | None = None
    """ledger (and DuckDB file) directory; relative to the config file (default $DPGATE_STATE_DIR or
    ~/.local/state/dpgate)."""
    limits: Limits = Limits()
    """connection, statement and per-row cost limits."""
    tls: TLS = TLS()
    """TLS certificate and policy."""
    log_format: Literal["text", "json"] = "text"
    """text, or json: one line per statement (role, fingerprint, decision, ε, ms)."""
    workers: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description=(
            "processes serving the port (dpgate serve --workers overrides it); default: the number of "
            "cores, or 1 for an embedded DuckDB file that a role may INSERT into (one writer per file)"
        ),
    )
    heavy_lane: Literal["idle", "low", "off"] = "idle"
    """with more than one worker: heavy statements (10,000-cell GROUP BYs, ladders, per-record,
    MAX/MIN) run in one more process at the lowest CPU priority, idle (SCHED_IDLE: only when no
    worker is ready to run) or low (nice 19), so the workers' other sessions never wait for
    them; off: each worker runs its own."""
    cpu_affinity: Literal["auto", "off"] = "auto"
    """with more than one worker: auto holds each worker's serving threads (its event loop and the
    threads it starts: scans, ledger writes, planning) to its own share of the cores the service
    was started on, so a statement's hand-offs between them stay on one core; DuckDB's own threads
    and the heavy-statement lane stay free to use every core. off: the kernel places every thread."""

    @model_validator(mode="after")
    def _trust_loopback(self) -> Server:
        if self.auth == "trust" and self.host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("auth = 'trust' is only allowed on a loopback host")
        return self


class Backend(StrictModel):
    kind: Literal["duckdb", "postgres", "spark"] = "duckdb"
    """duckdb (embedded), postgres, or spark (Spark Connect; pip install 'dpgate[spark]')."""
    path: Path | None = None  # duckdb file (relative to the state dir); None → demo file
    """DuckDB file, relative to the state dir (default: the demo's file)."""
    dsn: str | None = None  # postgres connection string
    """Postgres connection string (kind = 'postgres'): a read-only role (docs/least-privilege.md);
    every scan session is also read-only at the database."""
    write_dsn: str | None = None
    """Postgres connection string for the writes dpgate makes in the backend (demo tables, local
    tables' reports; kind = 'postgres'); default: dsn. Scans never use it."""
    require_least_privilege: bool = False
    """refuse to start when the backend role could write: a superuser, a write privilege on a
    declared table, CREATE on its schema, pg_write_server_files / pg_execute_server_program
    (default: a warning at start; docs/least-privilege.md)."""
    pool_size: int = Field(default=4, ge=1, le=256)
    """Postgres connections in the pool."""
    connect_timeout_s: float = Field(default=2.0, gt=0, le=60)  # a down backend fails within this
    """a down backend fails statements (08006) within this."""
    remote: str | None = None
    """Spark Connect server, e.g. 'sc://host:15002' (kind = 'spark')."""
    token: str | None = None
    """Spark Connect bearer token (kind = 'spark'; implies TLS, as Spark Connect defines it)."""
    use_ssl: bool = False
    """Spark Connect over TLS without a token (kind = 'spark')."""
    catalog: str | None = None
    """Spark catalog the declared sources resolve in (kind = 'spark'; default: the session's)."""
    database: str | None = None
    """Spark database (schema) the declared sources resolve in (kind = 'spark')."""
    attach: dict[str, Path] = Field(default_factory=dict)
    """DuckDB files attached read-only, by name (kind = 'duckdb'): `attach = { wh = "/data/wh.duckdb" }`,
    then `source = "wh.main.orders"`; the data stays in a file dpgate never opens for writing
    (docs/least-privilege.md)."""
    threads: int | None = Field(default=None, ge=1, le=1024)
    """the embedded DuckDB's threads in each process (kind = 'duckdb'; default: one per core).
    With --workers N on large tables, cores / N lets N concurrent scans share the cores
    instead of oversubscribing them (more concurrent scans per second on large tables), at
    the cost of a lone scan using fewer cores."""
    kept_rows: int = Field(default=2_000_000, ge=0, le=1_000_000_000)
    """rows of a table's heavy privacy units (those above its contribution bound) that a DuckDB file
    served read-only copies into memory, once per process, so that per-person scans read them instead
    of the table a second time (kind = 'duckdb'; 0: keep the units alone). At the 95th-percentile
    bound they are about a tenth of a table's rows. Stored compressed: TPC-H's lineitem takes ≈ 35
    bytes a row held, ≈ 180 bytes a row while the copy is made. Total-mode statements without a WHERE
    also keep their heavy units' (unit, cell) rows with running sums, made from those rows, up to as
    many rows together."""

    @model_validator(mode="after")
    def _dsn(self) -> Backend:
        if self.threads is not None and self.kind != "duckdb":
            raise ValueError("threads applies to kind = 'duckdb' (the embedded engine) only")
        if "kept_rows" in self.model_fields_set and self.kind != "duckdb":
            raise ValueError("kept_rows applies to kind = 'duckdb' (the embedded engine) only")
        if self.kind == "postgres" and not self.dsn:
            raise ValueError("kind = 'postgres' needs dsn")
        if self.attach and self.kind != "duckdb":
            raise ValueError("attach applies to kind = 'duckdb' only")
        for name in self.attach:
            if (
                not name.isidentifier()
                or name != name.lower()
                or name in ("main", "memory", "system", "temp")
                or name.startswith("__dpgate")
            ):
                raise ValueError(
                    f"attach.{name}: give a lower-case identifier, not a DuckDB catalog name "
                    "(nor one starting with __dpgate, dpgate's own)"
                )
        if self.write_dsn is not None and self.kind != "postgres":
            raise ValueError("write_dsn applies to kind = 'postgres' only")
        if self.kind == "spark" and not self.remote:
            raise ValueError("kind = 'spark' needs remote (e.g. remote = \"sc://localhost:15002\")")
        return self


class LedgerStore(StrictModel):
    """Where the budget ledger, release store and ladder store live: a SQLite file
    in the state dir (default), or a Postgres database shared by several proxies."""

    kind: Literal["sqlite", "postgres"] = "sqlite"
    """sqlite (<state_dir>/ledger.sqlite3) or postgres (shared by several proxies)."""
    dsn: str | None = None  # postgres connection string
    """Postgres connection string (kind = 'postgres')."""
    db_schema: str = Field(default="dpgate", alias="schema", pattern=r"^[a-z_][a-z0-9_]*$")
    """Postgres schema of the ledger tables (key: schema)."""
    key_file: str | None = None
    """The ledger's MAC key file (HMAC-SHA256 over spend rows and stored answers; 0600,
    created with the ledger). Default: <state_dir>/ledger.key. Proxies sharing a Postgres
    ledger need the same key."""

    @model_validator(mode="after")
    def _dsn(self) -> LedgerStore:
        if self.kind == "postgres" and not self.dsn:
            raise ValueError("kind = 'postgres' needs dsn")
        return self
