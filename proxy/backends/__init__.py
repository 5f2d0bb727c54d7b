"""Backends run the rewriter's one-scan SQL and return plain rows.

Backends: embedded DuckDB, Postgres (psycopg pool), Spark (Spark Connect). A backend
is any object with ``dialect`` (a sqlglot dialect name),
``async fetch(sql, timeout_s) -> list[tuple]``, ``async load_demo(...)`` and
``async close()``; one whose ``columnar`` is True also takes ``fetch(…, columnar=True)``
and may return :class:`Columns` (numpy columns) instead of rows. Failures raise :class:`BackendError` with a SQLSTATE; the
orchestrator charges nothing for them.
"""

from __future__ import annotations

from pathlib import Path

from .base import BackendError, BackendRefused, BackendTimeout, Columns
from .duckdb import DuckDBBackend, source_directories
from .postgres import PostgresBackend
from .spark import SparkBackend


def open_backend(cfg, state_dir, *, read_only: bool = False):
    """Build the backend the config asks for (not yet connected for Postgres);
    ``read_only``: an embedded DuckDB file opened for reading only. An embedded DuckDB reads
    and writes no file outside the declared sources' directories (``DuckDBBackend.confine``)."""
    if cfg.backend.kind == "spark":
        b = cfg.backend
        return SparkBackend(
            b.remote,
            token=b.token,
            use_ssl=b.use_ssl,
            catalog=b.catalog,
            database=b.database,
            connect_timeout_s=max(b.connect_timeout_s, 10.0),
        )
    if cfg.backend.kind == "postgres":
        return PostgresBackend(
            cfg.backend.dsn,
            pool_size=cfg.backend.pool_size,
            connect_timeout_s=cfg.backend.connect_timeout_s,
            write_dsn=cfg.backend.write_dsn,
        )
    path = Path(cfg.backend.path or "demo.duckdb")
    backend = DuckDBBackend(
        path if path.is_absolute() else Path(state_dir) / path,
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


__all__ = [
    "BackendError",
    "BackendRefused",
    "BackendTimeout",
    "Columns",
    "DuckDBBackend",
    "PostgresBackend",
    "SparkBackend",
    "open_backend",
]
