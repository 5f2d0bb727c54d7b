"""The ledger reads behind dpgate's views (``dpgate.budget``, ``dpgate.releases``):
indexed queries, O(answer) not O(history), on a connection of their own so a view
read never holds up a DP statement's ledger work (:mod:`proxy.pipeline.views`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from .ledger import FEMTO, NANO, Ledger, nano
from .pgstore import create_view_indexes

_VIEW_INDEXES = """
CREATE INDEX IF NOT EXISTS releases_role_created ON releases (role, created);
CREATE INDEX IF NOT EXISTS releases_created ON releases (created);
"""

# the view columns a release query may filter or sort on → the ledger's column
VIEW_RELEASE_COLUMNS = {
    "role": "role",
    "statement": "statement",
    "mechanism": "mechanism",
    "data_version": "data_version",
    "epsilon": "epsilon_nano",
    "released_at": "created",
}
_VIEW_OPS = ("=", "<", "<=", ">", ">=", "IN")


class ViewReads:
    """The reads behind ``dpgate.budget`` and ``dpgate.releases``, each one indexed
    query whose cost follows the answer, not the history: the spend of given
    (role, period) pairs (primary key), and releases filtered by role (and other
    exact conditions), ordered and limited in the ledger (indexes on
    ``(role, created)`` and ``(created)``). Its own connection (SQLite: a WAL
    reader; Postgres: a second session), opened on first use."""

    def __init__(self, ledger: Ledger):
        self._led = ledger
        self._lock = threading.Lock()
        self._db = None

    def _conn(self):
        if self._db is None:
            db = self._led.new_connection()
            if self._led.dsn is not None:
                create_view_indexes(db)
            else:
                db.executescript(_VIEW_INDEXES)
            self._db = db
        return self._db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def spent_many(
        self, pairs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[float, float, str, str | None]]:
        """(amount spent, δ spent, period key, the amount's unit: ε, ρ, or None with nothing spent)
        of each (role, period kind) pair, in the period a
        charge goes to now: the ledger clock's, or the latest period the ledger has
        recorded if that is later (what the charge path enforces)."""
        with self._lock:
            db = self._conn()
            floors = {
                k.split(":", 1)[1]: v
                for k, v in db.execute("SELECT key, value FROM meta WHERE key LIKE 'period:%'").fetchall()
            }
            current = {p: self._led.period_now(p, floors.get(p)) for p in {p for _, p in pairs}}
            keys = {(r, current[p]): (r, p) for r, p in pairs}
            out: dict[tuple[str, str], tuple[float, float, str, str | None]] = {
                pair: (0.0, 0.0, current[pair[1]], None) for pair in pairs
            }
            items = sorted(keys)
            for i in range(0, len(items), 400):  # SQLite's parameter limit
                chunk = items[i : i + 400]
                rows = db.execute(
                    "SELECT role, period, spent_nano, delta_femto, unit FROM spend WHERE role IN ("
                    + ",".join("?" * len(chunk))
                    + ") AND period IN ("
                    + ",".join("?" * len({p for _, p in chunk}))
                    + ")",
                    [r for r, _ in chunk] + sorted({p for _, p in chunk}),
                ).fetchall()
                for r, p, s, d, u in rows:
                    if (r, p) in keys:
                        out[keys[(r, p)]] = (s / NANO, d / FEMTO, p, u)
        return out

    def release_rows(
        self,
        *,
        roles: list[str] | None,
        where: Sequence[tuple[str, str, Any]] = (),
        order: Sequence[tuple[str, bool]] = (),
        limit: int | None = None,
    ) -> list[tuple]:
        """Releases as (role, created, statement, amount in nano-units, mechanism, data version,
        the amount's unit: ε or ρ), most
        recent first unless ``order`` (view column, descending?) says otherwise.
        ``roles`` None means every role; ``where`` holds exact (view column, op,
        value) conditions, ANDed."""
        conds: list[str] = []
        args: list[Any] = []
        if roles is not None:
            if not roles:
                return []
            conds.append("role IN (" + ",".join("?" * len(roles)) + ")")
            args += list(roles)
        for col, op, value in where:
            if col not in VIEW_RELEASE_COLUMNS or op not in _VIEW_OPS:
                raise ValueError(f"not a view condition: {col} {op}")
            name = VIEW_RELEASE_COLUMNS[col]
            if col == "epsilon":
                value = [nano(v) for v in value] if op == "IN" else nano(value)
            if op == "IN":
                conds.append(f"{name} IN (" + ",".join("?" * len(value)) + ")")
                args += list(value)
            else:
                conds.append(f"{name} {op} ?")
                args.append(value)
        text = ' COLLATE "C"' if self._led.dsn is not None else ""  # Postgres: byte order, as DuckDB
        keys = []
        for col, desc in order:
            name = VIEW_RELEASE_COLUMNS[col]
            coll = text if name in ("role", "statement", "mechanism") else ""
            keys.append(f"{name}{coll} {'DESC' if desc else 'ASC'}")
        keys = keys or ["created DESC", "id DESC"]
        q = (
            "SELECT role, created, statement, epsilon_nano, mechanism, data_version, unit FROM releases"
            + (" WHERE " + " AND ".join(conds) if conds else "")
            + " ORDER BY "
            + ", ".join(keys)
            + (" LIMIT ?" if limit is not None else "")
        )
        if limit is not None:
            args.append(int(limit))
        with self._lock:
            rows = self._conn().execute(q, args).fetchall()
        return rows
