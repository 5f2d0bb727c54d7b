"""Backends run the rewriter's one-scan SQL and return plain rows.

A backend implements :class:`~.base.Backend` (fetch with a timeout and a cancel, a writer,
what the start asks of it) and carries its :class:`rewriter.dialects.SQLDialect`; the
registry below maps ``[backend] kind`` to its class. A new backend is its module, its
dialect and one :func:`register` line. Failures raise :class:`BackendError` with a
SQLSTATE; the orchestrator charges nothing for them.
"""

from __future__ import annotations

from typing import TypeVar

from rewriter import dialects

from .base import Backend, BackendError, BackendRefused, BackendTimeout, Columns
from .duckdb import DuckDBBackend, source_directories
from .postgres import PostgresBackend
from .spark import SparkBackend

_KINDS: dict[str, type[Backend]] = {}
T = TypeVar("T")


def register(cls: type[Backend]) -> type[Backend]:
    """Make ``cls`` the backend of ``[backend] kind = cls.kind``, and its SQL dialect the
    one the rewriter emits for that name."""
    if cls.sql.name != cls.kind:
        raise ValueError(f"{cls.__name__}: its dialect is named {cls.sql.name!r}, not {cls.kind!r}")
    _KINDS[cls.kind] = cls
    dialects.register(cls.sql)
    return cls


def backend_class(kind: str) -> type[Backend]:
    """The registered backend of ``[backend] kind``."""
    try:
        return _KINDS[kind]
    except KeyError:
        raise ValueError(f"no backend kind {kind!r} (known: {', '.join(sorted(_KINDS))})") from None


def kind_of(cfg) -> type[Backend]:
    """The backend class the config names."""
    return backend_class(cfg.backend.kind)


def for_backend(table: dict[type, T], backend: Backend) -> T | None:
    """``table``'s entry for the backend's class or the nearest base class that has one: how
    an optional part (demo data, local tables' reports) is done on that backend; None where it
    is not (the caller refuses with 0A000)."""
    return next((table[c] for c in type(backend).__mro__ if c in table), None)


def open_backend(cfg, state_dir, *, read_only: bool = False) -> Backend:
    """Build the backend the config asks for (not yet connected); ``read_only``: an
    embedded file opened for reading only."""
    return kind_of(cfg).from_config(cfg, state_dir, read_only=read_only)


register(DuckDBBackend)
register(PostgresBackend)
register(SparkBackend)

__all__ = [
    "Backend",
    "BackendError",
    "BackendRefused",
    "BackendTimeout",
    "Columns",
    "DuckDBBackend",
    "PostgresBackend",
    "SparkBackend",
    "backend_class",
    "for_backend",
    "kind_of",
    "open_backend",
    "register",
    "source_directories",
]
