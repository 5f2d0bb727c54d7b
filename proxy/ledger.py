"""The durable budget ledger and release store (SQLite, WAL).

Write ordering (what makes "no overspend, no re-drawn answer" hold):

1. A release is computed (backend scan + noise) *outside* any transaction.
2. ``BEGIN IMMEDIATE`` takes the database write lock; inside it the release
   row is inserted unless one with the same key (role, canonical query, data
   version) exists. If one exists it is returned and nothing is charged — the
   fresh draw is discarded, so a repeat never gets a second, different answer.
3. Otherwise the spend is raised by ε only if it stays within the budget (one
   conditional upsert; if it does not fit, everything rolls back); ``COMMIT``
   (fsync in WAL mode with ``synchronous=FULL``) makes both durable together.
4. Only then is the answer sent to the client.

A crash before 3 commits loses nothing that was sent; a crash after it keeps
both the charge and the answer. Amounts are integers in nano-ε, so budgets add
up exactly (no floating-point drift at the budget's edge).
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

NANO = 1_000_000_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS spend (
    role TEXT NOT NULL, period TEXT NOT NULL, spent_nano INTEGER NOT NULL,
    PRIMARY KEY (role, period));
CREATE TABLE IF NOT EXISTS releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, key TEXT NOT NULL, data_version INTEGER NOT NULL,
    canonical TEXT NOT NULL, statement TEXT NOT NULL,
    epsilon_nano INTEGER NOT NULL, mechanism TEXT NOT NULL,
    answer TEXT NOT NULL, period TEXT NOT NULL, created REAL NOT NULL,
    UNIQUE (role, key, data_version));
"""


class BudgetExceeded(Exception):
    def __init__(self, role: str, epsilon: float, remaining: float, budget: float, period: str):
        super().__init__(f"budget exceeded for role {role}")
        self.role, self.epsilon, self.remaining = role, epsilon, remaining
        self.budget, self.period = budget, period


@dataclass(frozen=True)
class Stored:
    """A release as stored: the released (noisy) answer, never true values."""

    answer: dict
    epsilon: float
    mechanism: str
    created: float
    charged: bool          # True if this call charged it, False for a repeat


def nano(eps: float) -> int:
    return round(eps * NANO)


def period_key(period: str, now: float | None = None) -> str:
    t = datetime.fromtimestamp(time.time() if now is None else now, timezone.utc)
    if period == "day":
        return t.strftime("%Y-%m-%d")
    if period == "week":
        y, w, _ = t.isocalendar()
        return f"{y}-W{w:02d}"
    if period == "month":
        return t.strftime("%Y-%m")
    return "all"


class Ledger:
    """SQLite-backed ledger; safe across threads and across processes sharing the file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.executescript(_SCHEMA)
        # Reads go through their own connection: in WAL mode they never wait for a
        # writer's fsync, so the event loop can call them directly.
        self._rlock = threading.Lock()
        self._rdb = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                    check_same_thread=False)
        self._rdb.execute("PRAGMA busy_timeout=30000")

    def close(self) -> None:
        with self._lock, self._rlock:
            self._db.close()
            self._rdb.close()

    # -- data version -------------------------------------------------------
    def data_version(self) -> int:
        with self._rlock:
            row = self._rdb.execute("SELECT value FROM meta WHERE key='data_version'").fetchone()
        return int(row[0]) if row else 1

    def advance_data_version(self) -> int:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT value FROM meta WHERE key='data_version'").fetchone()
                new = (int(row[0]) if row else 1) + 1
                self._db.execute("INSERT OR REPLACE INTO meta VALUES ('data_version', ?)", (str(new),))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return new

    # -- budget -------------------------------------------------------------
    def spent(self, role: str, period: str) -> float:
        with self._rlock:
            row = self._rdb.execute("SELECT spent_nano FROM spend WHERE role=? AND period=?",
                                   (role, period_key(period))).fetchone()
        return (row[0] if row else 0) / NANO

    def lookup(self, role: str, key: str, data_version: int) -> Stored | None:
        with self._rlock:
            row = self._rdb.execute(
                "SELECT answer, epsilon_nano, mechanism, created FROM releases "
                "WHERE role=? AND key=? AND data_version=?", (role, key, data_version)).fetchone()
        return _stored(row, charged=False) if row else None

    def charge_and_record(self, *, role: str, key: str, data_version: int, epsilon: float,
                          budget: float, period: str, canonical: str, statement: str,
                          mechanism: str, answer: dict) -> Stored:
        """Atomically: return the earlier release for this key, or charge ε and store
        ``answer``. Raises :class:`BudgetExceeded` (nothing written) if ε does not fit."""
        pk = period_key(period)
        eps_n, budget_n = nano(epsilon), nano(budget)
        body, now = json.dumps(answer), time.time()
        db = self._db
        with self._lock:
            db.execute("BEGIN IMMEDIATE")
            try:
                # the release row first: UNIQUE (role, key, data_version) finds an earlier one
                if db.execute(
                        "INSERT INTO releases (role, key, data_version, canonical, statement, epsilon_nano, "
                        "mechanism, answer, period, created) VALUES (?,?,?,?,?,?,?,?,?,?) "
                        "ON CONFLICT (role, key, data_version) DO NOTHING",
                        (role, key, data_version, canonical, statement, eps_n, mechanism, body, pk,
                         now)).rowcount == 0:
                    row = db.execute(
                        "SELECT answer, epsilon_nano, mechanism, created FROM releases "
                        "WHERE role=? AND key=? AND data_version=?", (role, key, data_version)).fetchone()
                    db.execute("COMMIT")
                    return _stored(row, charged=False)
                # then the charge, only if it fits (a first charge is checked by hand)
                ok = eps_n <= budget_n and db.execute(
                    "INSERT INTO spend VALUES (?,?,?) ON CONFLICT (role, period) DO UPDATE "
                    "SET spent_nano = spent_nano + excluded.spent_nano "
                    "WHERE spent_nano + excluded.spent_nano <= ?", (role, pk, eps_n, budget_n)).rowcount == 1
                if not ok:
                    cur = db.execute("SELECT spent_nano FROM spend WHERE role=? AND period=?",
                                     (role, pk)).fetchone()
                    db.execute("ROLLBACK")
                    spent_n = cur[0] if cur else 0
                    raise BudgetExceeded(role, epsilon, (budget_n - spent_n) / NANO, budget, period)
                db.execute("COMMIT")
            except BudgetExceeded:
                raise
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return Stored(answer, epsilon, mechanism, now, charged=True)

    # -- views --------------------------------------------------------------
    def budgets(self) -> list[tuple[str, str, float]]:
        with self._lock:
            rows = self._db.execute("SELECT role, period, spent_nano FROM spend ORDER BY role, period").fetchall()
        return [(r, p, s / NANO) for r, p, s in rows]

    def releases(self, role: str | None = None, limit: int = 1000) -> list[dict]:
        q = ("SELECT role, created, statement, epsilon_nano, mechanism, data_version FROM releases "
             + ("WHERE role=? " if role else "") + "ORDER BY id DESC LIMIT ?")
        args = (role, limit) if role else (limit,)
        with self._lock:
            rows = self._db.execute(q, args).fetchall()
        return [dict(role=r, created=c, statement=s, epsilon=e / NANO, mechanism=m, data_version=v)
                for r, c, s, e, m, v in rows]

    def integrity_check(self) -> bool:
        with self._lock:
            ok = self._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            total = self._db.execute("SELECT COALESCE(SUM(spent_nano),0) FROM spend").fetchone()[0]
            charged = self._db.execute("SELECT COALESCE(SUM(epsilon_nano),0) FROM releases").fetchone()[0]
        return ok and total == charged


def _stored(row, *, charged: bool) -> Stored:
    answer, eps_n, mech, created = row
    return Stored(json.loads(answer), eps_n / NANO, mech, created, charged)
