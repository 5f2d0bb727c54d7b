"""The registry of backend SQL dialects (:class:`.base.SQLDialect`), by backend kind.

The emitter takes a dialect or its name (``to_sql(plan, "duckdb")``); :func:`get` gives the
object. A new backend's dialect is registered by its backend's registry line
(``proxy.backends.register``), or by :func:`register` for SQL-only use."""

from __future__ import annotations

from .base import SQLDialect, not_null_spelling
from .duckdb import DuckDBDialect
from .postgres import PostgresDialect
from .spark import SparkDialect

__all__ = ["SQLDialect", "get", "names", "not_null_spelling", "register"]

_DIALECTS: dict[str, SQLDialect] = {}


def register(dialect: SQLDialect) -> SQLDialect:
    """Make ``dialect`` the one :func:`get` gives for its name."""
    _DIALECTS[dialect.name] = dialect
    return dialect


def get(dialect: str | SQLDialect) -> SQLDialect:
    """The registered dialect named ``dialect`` (a dialect is returned as it is)."""
    if isinstance(dialect, SQLDialect):
        return dialect
    try:
        return _DIALECTS[dialect]
    except KeyError:
        raise ValueError(f"no backend SQL dialect named {dialect!r} (known: {', '.join(names())})") from None


def names() -> list[str]:
    return sorted(_DIALECTS)


for _d in (DuckDBDialect(), PostgresDialect(), SparkDialect()):
    register(_d)
