"""Where the ledger lives, by ``[ledger] kind``: a SQLite file in the state dir, or a
Postgres database shared by several proxies (:mod:`.pgstore` speaks SQLite's dialect to
it). What differs between the two is here; the ledger itself (:mod:`.ledger`) and its
guard (:mod:`.ledger_guard`) ask the store, never the kind's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

__all__ = ["LedgerStore", "PostgresStore", "SQLiteStore", "store_of"]

FILE = "ledger.sqlite3"


class LedgerStore:
    kind: ClassVar[str]

    def file(self, state_dir: str | Path) -> Path | None:
        """The ledger's file in the state dir (None: it lives on a server)."""
        return None

    def server(self, ledger_config: Any) -> dict[str, Any]:
        """How :class:`~.ledger.Ledger` reaches it when it has no file (its ``dsn``, ``schema``)."""
        return {}


class SQLiteStore(LedgerStore):
    kind = "sqlite"

    def file(self, state_dir: str | Path) -> Path:
        return Path(state_dir) / FILE


class PostgresStore(LedgerStore):
    kind = "postgres"

    def server(self, ledger_config: Any) -> dict[str, Any]:
        return {"dsn": ledger_config.dsn, "schema": ledger_config.db_schema}


STORES: dict[str, LedgerStore] = {s.kind: s for s in (SQLiteStore(), PostgresStore())}


def store_of(config: Any) -> LedgerStore:
    """The store ``[ledger] kind`` names."""
    return STORES[config.ledger.kind]
