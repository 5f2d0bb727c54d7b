"""The durable budget ledger and release store (SQLite, WAL; or Postgres for
proxies that scale out: :mod:`proxy.stores.pgstore` runs this code there).

Write ordering (what makes "no overspend, no re-drawn answer" hold), for
``charge_and_record`` (one transaction after the answer exists):

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
both the charge and the answer.

The DP pipeline splits this in two so the fsync overlaps the backend scan
(``reserve`` / ``record``):

1. ``reserve`` (while the scan runs, on the ledger's writer thread): the spend
   is raised by ε if it fits and a *reservation* row is written, in one
   transaction committed with ``synchronous=FULL`` (fsync) — the charge is
   durable before any answer exists.
2. After the scan, ``record`` stores the release and deletes the reservation in
   one transaction (the charge already stands); if an earlier release of the
   same key exists (a concurrent twin), that one is returned and the reservation
   refunded instead. This commit is written to the WAL before the answer is sent
   but not fsynced (``synchronous=NORMAL``): it survives a crash of the proxy;
   an operating-system crash or power loss may lose it, and then the charge
   stays and the same query later charges again for a fresh answer — never an
   answer without a charge.
3. When the backend fails *before* the scan starts (unreachable, cancelled
   while queued), ``cancel`` refunds the reservation (nothing ran). Once the
   scan has started, a failure, timeout or cancel settles it with ``spend``: the
   charge stands with no answer (a row in ``unreleased``), since the time the
   scan took was observable; a repeat of the statement runs, and is charged,
   again (nothing was released to serve it from).

A reservation left by a crash between 1 and 2 stays charged (its answer may
have been sent); ``integrity_check`` counts it: total spend = stored releases +
open reservations + charges spent without an answer. Amounts are integers in nano-ε, so budgets add up exactly (no
floating-point drift at the budget's edge).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .errors import LedgerFault, LedgerUnavailable  # noqa: F401  (part of this module's API)
from .errors import cannot_write, no_write_reason
from .pgstore import PgConnection
from .answer import cell_count
from .write_lock import transaction
from .release_codec import decode_answer, encode_answer

NANO = 1_000_000_000
HEAVY_CELLS = 256          # an answer this large is decoded and turned into rows off the event loop
HEAVY_BYTES = 16_384       # (about 0.3 ms of rows, or of json.loads for a stored text this long)

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
CREATE TABLE IF NOT EXISTS reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, period TEXT NOT NULL, epsilon_nano INTEGER NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS unreleased (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, period TEXT NOT NULL, epsilon_nano INTEGER NOT NULL, created REAL NOT NULL,
    reason TEXT NOT NULL);
"""


class BudgetExceeded(Exception):
    def __init__(self, role: str, epsilon: float, remaining: float, budget: float, period: str):
        super().__init__(f"budget exceeded for role {role}")
        self.role, self.epsilon, self.remaining = role, epsilon, remaining
        self.budget, self.period = budget, period


def _named_faults(fn):
    """A write the file system refuses (disk full, read-only: 53100) or a ledger locked too
    long (55P03) as its SQLSTATE, one line each (:func:`.errors.no_write_reason`)."""

    @functools.wraps(fn)
    def wrapper(self, *a, **kw):
        try:
            return fn(self, *a, **kw)
        except (sqlite3.Error, OSError) as e:
            if (reason := no_write_reason(e, self.path)) is not None:
                raise cannot_write(self.path, reason) from None
            msg = str(e).lower()
            if not isinstance(e, sqlite3.OperationalError):
                raise
            if "locked" in msg or "busy" in msg:
                raise LedgerFault("55P03", f"the privacy ledger is locked by another process ({self.path}); "
                                           "no answer was released; try again shortly") from None
            raise
    return wrapper


@dataclass(frozen=True, eq=False)
class Stored:
    """A release as stored: the released (noisy) answer, never true values. A release
    read back keeps its stored text (``body``, :mod:`proxy.stores.release_codec`) and
    decodes it on first use of :attr:`answer`, so the caller chooses where that work
    runs (``heavy``: off the event loop, issue 21)."""

    decoded: dict | None
    epsilon: float
    mechanism: str
    created: float
    charged: bool          # True if this call charged it, False for a repeat
    body: str | None = field(default=None, repr=False)

    @property
    def answer(self) -> dict:
        if self.decoded is None:       # (two threads may both decode: the same dict, once kept)
            if self.body is None:
                raise RuntimeError("the answer of this release was forgotten (Stored.forget)")
            object.__setattr__(self, "decoded", decode_answer(self.body))
        return self.decoded

    def forget(self) -> "Stored":
        """This release without its decoded answer (a stored text is decoded again if
        asked): the thread that built the rows keeps this, so a 10,000-cell answer is freed
        there — freeing its tens of thousands of objects on the event loop takes milliseconds."""
        if self.body is not None:
            object.__setattr__(self, "decoded", None)
            return self
        return dataclasses.replace(self, decoded=None, body=None)

    @property
    def heavy(self) -> bool:
        """True when decoding the answer or building its rows is too much work for the
        event loop (a stored text of ``HEAVY_BYTES``, or ``HEAVY_CELLS`` cells)."""
        if self.decoded is not None:
            return cell_count(self.decoded) >= HEAVY_CELLS
        return len(self.body or "") >= HEAVY_BYTES


@dataclass(eq=False)
class Reservation:
    """ε charged before the answer exists (``Ledger.reserve``); ``record`` or
    ``cancel`` settles it exactly once."""

    id: int
    role: str
    period: str            # the period key the charge went to
    epsilon_nano: int
    spent_nano: int        # the role's spend in that period after this charge
    state: str = field(default="open")    # open -> recorded | refunded | spent


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
    """The budget ledger and release store: SQLite by default (one file in the
    state dir; safe across threads and processes sharing it), or Postgres
    (``dsn``: shared by proxies on several hosts, see :mod:`proxy.stores.pgstore`)."""

    def __init__(self, path: str | Path | None, *, dsn: str | None = None, schema: str = "dpgate"):
        self.path = Path(path) if path is not None else None
        self.dsn, self.schema = dsn, schema
        self._lock = threading.Lock()
        self._rlock = threading.Lock()
        # three connections: writes (fsync-ed), reads (in WAL mode they never wait
        # for a writer, so the event loop can call them directly), and ``record``'s
        # writes with synchronous=NORMAL (no fsync), used under the same lock as
        # the first so the two never wait on each other.
        self._db, self._rdb, self._ndb = (self._connect(sync) for sync in ("FULL", None, "NORMAL"))
        self._db.executescript(_SCHEMA)
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None
        self._salt_secret: str | None = None   # unit_salt's secret, read once
        self.guard = None              # proxy.stores.ledger_guard.Guard, called before charges and look-ups
        self.clock = time.time         # injectable (tests: a clock that goes backwards)
        self._latest: dict[str, str] = {     # period kind -> latest period key seen (persisted)
            k.split(":", 1)[1]: v for k, v in self._db.execute(
                "SELECT key, value FROM meta WHERE key LIKE 'period:%'").fetchall()}

    def _connect(self, sync: str | None):
        if self.dsn is not None:
            db = PgConnection(self.dsn, self.schema)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():     # 0600: its -wal and -shm take the file's mode
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA busy_timeout=30000")
            if sync == "FULL":
                db.execute("PRAGMA journal_mode=WAL")
        if sync is not None:
            db.execute(f"PRAGMA synchronous={sync}")
        return db

    def new_connection(self):
        """A connection of its own to this ledger's database (read-mostly users such as
        :class:`proxy.stores.view_reads.ViewReads`)."""
        return self._connect(None)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.shutdown(wait=True)
        with self._lock, self._rlock:
            self._db.close()
            self._ndb.close()
            self._rdb.close()

    # -- data version -------------------------------------------------------
    def data_version(self) -> int:
        with self._rlock:
            row = self._rdb.execute("SELECT value FROM meta WHERE key='data_version'").fetchone()
        return int(row[0]) if row else 1

    @_named_faults
    def advance_data_version(self) -> int:
        with self._lock:
            with transaction(self._db):
                row = self._db.execute("SELECT value FROM meta WHERE key='data_version'").fetchone()
                new = (int(row[0]) if row else 1) + 1
                self._db.execute("INSERT OR REPLACE INTO meta VALUES ('data_version', ?)", (str(new),))
                self._db.execute("COMMIT")
        return new

    def unit_salt(self, data_version: int) -> str:
        """The key of the privacy unit's bounding hash (:mod:`rewriter.unit`) for a data
        version: sha256 of a random secret kept in the ledger (created once) and the
        version, hex. Retries and repeats keep the same rows; a new data version
        re-draws them."""
        secret = self._salt_secret
        if secret is None:
            with self._lock:
                with transaction(self._db):
                    self._db.execute("INSERT INTO meta VALUES ('unit_secret', ?) ON CONFLICT (key) DO NOTHING",
                                     (secrets.token_hex(16),))
                    secret = self._db.execute("SELECT value FROM meta WHERE key='unit_secret'").fetchone()[0]
                    self._db.execute("COMMIT")
            self._salt_secret = secret
        return hashlib.sha256(f"{secret}:{int(data_version)}".encode()).hexdigest()[:32]

    # -- integrity and periods (issue 24) ----------------------------------------
    def _check(self) -> None:
        """The ledger guard (proxy.stores.ledger_guard): raises LedgerLost once the
        ledger file or its identity is gone; a no-op when none is installed."""
        if self.guard is not None:
            self.guard()

    def _period_read(self, period: str) -> str:
        """The current period key, never before the latest one this process saw."""
        pk = period_key(period, self.clock())
        latest = self._latest.get(period)
        return latest if latest is not None and latest > pk else pk

    def _period_write(self, period: str, db) -> str:
        """The period a charge goes to, inside its transaction: never before the
        latest period recorded in the ledger (a clock set back must not open a
        fresh per-day budget); a later one is recorded."""
        pk = self._period_read(period)
        if pk != "all":
            row = db.execute("SELECT value FROM meta WHERE key=?", ("period:" + period,)).fetchone()
            if row is not None and row[0] > pk:
                pk = row[0]
            elif row is None or row[0] < pk:
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", ("period:" + period, pk))
            self._latest[period] = pk
        return pk

    @staticmethod
    def _count_charge(db, eps_n: int) -> None:
        """The spend high-water mark: nano-ε ever charged (refunds included), in the
        charge's own fsync-ed transaction, so it never goes down on a healthy ledger."""
        db.execute("INSERT INTO meta VALUES ('charged_nano', ?) ON CONFLICT (key) DO UPDATE "
                   "SET value = CAST(CAST(meta.value AS BIGINT) + CAST(excluded.value AS BIGINT) AS TEXT)",
                   (str(eps_n),))

    # -- budget -------------------------------------------------------------
    def spent(self, role: str, period: str) -> float:
        with self._rlock:
            row = self._rdb.execute("SELECT spent_nano FROM spend WHERE role=? AND period=?",
                                   (role, self._period_read(period))).fetchone()
        return (row[0] if row else 0) / NANO

    def snapshot(self, role: str, key: str, period: str) -> tuple[int, float, Stored | None]:
        """(data version, ε spent by ``role`` this period, its release of ``key`` at
        that data version or None) in one read."""
        self._check()
        with self._rlock:
            row = self._rdb.execute(
                "SELECT m.v, s.spent_nano, r.answer, r.epsilon_nano, r.mechanism, r.created FROM "
                "(SELECT COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key='data_version'), 1) AS v) m "
                "LEFT JOIN spend s ON s.role=? AND s.period=? "
                "LEFT JOIN releases r ON r.role=? AND r.key=? AND r.data_version=m.v",
                (role, self._period_read(period), role, key)).fetchone()
        dv, spent_n = row[0], row[1] or 0
        return dv, spent_n / NANO, (_stored(row[2:], charged=False) if row[2] is not None else None)

    def lookup(self, role: str, key: str, data_version: int) -> Stored | None:
        self._check()
        with self._rlock:
            row = self._rdb.execute(
                "SELECT answer, epsilon_nano, mechanism, created FROM releases "
                "WHERE role=? AND key=? AND data_version=?", (role, key, data_version)).fetchone()
        return _stored(row, charged=False) if row else None

    @_named_faults
    @_named_faults
    def charge_and_record(self, *, role: str, key: str, data_version: int, epsilon: float,
                          budget: float, period: str, canonical: str, statement: str,
                          mechanism: str, answer: dict) -> Stored:
        """Atomically: return the earlier release for this key, or charge ε and store
        ``answer``. Raises :class:`BudgetExceeded` (nothing written) if ε does not fit."""
        self._check()
        eps_n = nano(epsilon)
        body, now = encode_answer(answer), time.time()
        db = self._db
        with self._lock:
            with transaction(db):
                pk = self._period_write(period, db)
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
                _charge(db, role, pk, epsilon, budget, period)    # then the charge, if it fits
                self._count_charge(db, eps_n)
                db.execute("COMMIT")
        return Stored(answer, epsilon, mechanism, now, charged=True)

    # -- reserve / record (the DP pipeline: fsync overlaps the scan) ----------
    @_named_faults
    def reserve(self, *, role: str, epsilon: float, budget: float, period: str) -> Reservation:
        """Charge ε now, durably (fsync), before the answer exists. Raises
        :class:`BudgetExceeded` (nothing written) if ε does not fit."""
        self._check()
        eps_n = nano(epsilon)
        db = self._db
        with self._lock:
            with transaction(db):
                pk = self._period_write(period, db)
                spent_n = _charge(db, role, pk, epsilon, budget, period)
                rid = db.execute("INSERT INTO reservations (role, period, epsilon_nano, created) "
                                 "VALUES (?,?,?,?)", (role, pk, eps_n, time.time())).lastrowid
                self._count_charge(db, eps_n)
                db.execute("COMMIT")
        return Reservation(rid, role, pk, eps_n, spent_n)

    def reserve_soon(self, **kw) -> concurrent.futures.Future:
        """``reserve(**kw)`` on the ledger's writer thread (so its fsync overlaps
        the caller's backend scan)."""
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dpgate-ledger")
        return self._writer.submit(self.reserve, **kw)

    @_named_faults
    def record(self, res: Reservation, *, key: str, data_version: int, canonical: str,
               statement: str, mechanism: str, answer: dict) -> Stored | None:
        """Store ``answer`` as the release the reservation paid for (WAL write, no
        fsync: the charge is already durable). An earlier release of the same key
        wins: it is returned and the reservation refunded. ``None`` if the
        reservation was cancelled meanwhile (the answer must not be sent)."""
        self._check()                  # never an answer recorded into a lost ledger
        body, now = encode_answer(answer), time.time()
        db = self._ndb
        with self._lock:
            if res.state != "open":
                return None
            with transaction(db):
                if db.execute(
                        "INSERT INTO releases (role, key, data_version, canonical, statement, epsilon_nano, "
                        "mechanism, answer, period, created) VALUES (?,?,?,?,?,?,?,?,?,?) "
                        "ON CONFLICT (role, key, data_version) DO NOTHING",
                        (res.role, key, data_version, canonical, statement, res.epsilon_nano, mechanism,
                         body, res.period, now)).rowcount == 0:
                    row = db.execute(
                        "SELECT answer, epsilon_nano, mechanism, created FROM releases "
                        "WHERE role=? AND key=? AND data_version=?", (res.role, key, data_version)).fetchone()
                    self._refund(res, db)
                    db.execute("COMMIT")
                    res.state = "refunded"
                    return _stored(row, charged=False)
                db.execute("DELETE FROM reservations WHERE id=?", (res.id,))
                db.execute("COMMIT")
                res.state = "recorded"
        return Stored(answer, res.epsilon_nano / NANO, mechanism, now, charged=True)

    @_named_faults
    def cancel(self, res: Reservation) -> None:
        """Refund an open reservation (its scan failed: nothing was sent)."""
        db = self._db
        with self._lock:
            if res.state != "open":
                return
            with transaction(db):
                self._refund(res)
                db.execute("COMMIT")
            res.state = "refunded"

    def cancel_soon(self, fut: concurrent.futures.Future) -> concurrent.futures.Future:
        """Cancel the reservation ``fut`` if it succeeded and is still open, on the
        writer thread (after the reserve itself: one thread, first in first out)."""
        def settle():
            if not fut.cancelled() and fut.exception() is None:
                self.cancel(fut.result())
        assert self._writer is not None
        return self._writer.submit(settle)

    @_named_faults
    def spend(self, res: Reservation, reason: str = "scan failed") -> None:
        """Settle an open reservation as spent with no answer: its scan started and
        then failed, timed out or was cancelled (charge what ran; nothing was sent)."""
        db = self._db
        with self._lock:
            if res.state != "open":
                return
            with transaction(db):
                db.execute("DELETE FROM reservations WHERE id=?", (res.id,))
                db.execute("INSERT INTO unreleased (role, period, epsilon_nano, created, reason) "
                           "VALUES (?,?,?,?,?)", (res.role, res.period, res.epsilon_nano, time.time(), reason))
                db.execute("COMMIT")
            res.state = "spent"

    def spend_soon(self, fut: concurrent.futures.Future, reason: str = "scan failed") -> concurrent.futures.Future:
        """``spend`` the reservation ``fut`` on the writer thread (as :meth:`cancel_soon`)."""
        def settle():
            if not fut.cancelled() and fut.exception() is None:
                self.spend(fut.result(), reason)
        assert self._writer is not None
        return self._writer.submit(settle)

    @_named_faults
    def charge_unreleased(self, *, role: str, epsilon: float, budget: float, period: str,
                          reason: str = "scan failed") -> bool:
        """Charge ε for a scan that started and did not complete, on the paths that
        charge only after the scan (``charge_and_record``). False if ε no longer fits
        (a concurrent statement took the budget: nothing more can be charged)."""
        try:
            res = self.reserve(role=role, epsilon=epsilon, budget=budget, period=period)
        except BudgetExceeded:
            return False
        self.spend(res, reason)
        return True

    def unreleased(self, role: str | None = None) -> list[dict]:
        """Charges spent without an answer (scans that timed out, were cancelled or failed)."""
        q = ("SELECT role, period, epsilon_nano, created, reason FROM unreleased "
             + ("WHERE role=? " if role else "") + "ORDER BY id")
        with self._lock:
            rows = self._db.execute(q, (role,) if role else ()).fetchall()
        return [dict(role=r, period=p, epsilon=e / NANO, created=c, reason=w) for r, p, e, c, w in rows]

    def _refund(self, res: Reservation, db=None) -> None:
        db = self._db if db is None else db
        db.execute("UPDATE spend SET spent_nano = spent_nano - ? WHERE role=? AND period=?",
                   (res.epsilon_nano, res.role, res.period))
        db.execute("DELETE FROM reservations WHERE id=?", (res.id,))

    def open_reservations(self) -> list[dict]:
        """Charges whose answer was never recorded (a crash between reserve and record)."""
        with self._rlock:
            rows = self._rdb.execute("SELECT role, period, epsilon_nano, created FROM reservations "
                                     "ORDER BY id").fetchall()
        return [dict(role=r, period=p, epsilon=e / NANO, created=c) for r, p, e, c in rows]

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
            held = self._db.execute("SELECT COALESCE(SUM(epsilon_nano),0) FROM reservations").fetchone()[0]
            spent = self._db.execute("SELECT COALESCE(SUM(epsilon_nano),0) FROM unreleased").fetchone()[0]
        return ok and total == charged + held + spent


def _charge(db, role: str, pk: str, epsilon: float, budget: float, period: str) -> int:
    """In an open write transaction: add ε to the role's spend in period ``pk`` if it stays
    within ``budget`` and return the new spend (nano-ε); else roll back and raise
    :class:`BudgetExceeded` (nothing written)."""
    eps_n, budget_n = nano(epsilon), nano(budget)
    row = db.execute(
        "INSERT INTO spend VALUES (?,?,?) ON CONFLICT (role, period) DO UPDATE "
        "SET spent_nano = spent_nano + excluded.spent_nano "
        "WHERE spent_nano + excluded.spent_nano <= ? RETURNING spent_nano",
        (role, pk, eps_n, budget_n)).fetchone() if eps_n <= budget_n else None
    if row is None:
        cur = db.execute("SELECT spent_nano FROM spend WHERE role=? AND period=?", (role, pk)).fetchone()
        db.execute("ROLLBACK")
        raise BudgetExceeded(role, epsilon, (budget_n - (cur[0] if cur else 0)) / NANO, budget, period)
    return row[0]


def open_ledger(config, state_dir: str | Path) -> Ledger:
    """The ledger the config names: ``[ledger] kind = "postgres"`` (shared by
    proxies that scale out) or the state dir's SQLite file."""
    lc = config.ledger
    if lc.kind == "postgres":
        led = Ledger(None, dsn=lc.dsn, schema=lc.db_schema)
        led.existed = True
        return led
    path = Path(state_dir) / "ledger.sqlite3"
    existed = path.exists() and path.stat().st_size > 0     # before opening creates it
    led = Ledger(path)
    led.existed = existed         # read by proxy.stores.ledger_guard.verify_at_start
    return led


def _stored(row, *, charged: bool) -> Stored:
    body, eps_n, mech, created = row
    return Stored(None, eps_n / NANO, mech, created, charged, body=body)


# -- dpgate's views: indexed reads on a connection of their own ----------------
# (kept apart from the Ledger class: the views never take the ledger's locks nor
# use its connections, so a view read never delays a DP statement's ledger work)
