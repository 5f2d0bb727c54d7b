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
   refunded instead. On SQLite this commit is written to the WAL before the
   answer is sent but not fsynced (``synchronous=NORMAL``): it survives a crash
   of the proxy; an operating-system crash or power loss may lose it, and then
   the charge stays and the same query later charges again for a fresh answer —
   never an answer without a charge. On Postgres it is a synchronous commit: the
   ledger server is another process, and its crash (``pg_ctl stop -m immediate``)
   must not lose an answer the client already holds.
3. When the backend fails *before* the scan starts (unreachable, cancelled
   while queued), ``cancel`` refunds the reservation (nothing ran). Once the
   scan has started, a failure, timeout or cancel settles it with ``spend``: the
   charge stands with no answer (a row in ``unreleased``), since the time the
   scan took was observable; a repeat of the statement runs, and is charged,
   again (nothing was released to serve it from).

A reservation left by a crash between 1 and 2 stays charged (its answer may
have been sent); ``integrity_check`` counts it: total spend = stored releases +
open reservations + charges spent without an answer, per unit and for δ alike. Amounts are in the
accountant's units (:mod:`mechanisms.accounting`): each row's ``unit`` says which — ``eps`` (ε, a pure
tier's) or ``rho`` (ρ, a zCDP tier's) — and its ``*_nano`` columns hold nano-units of it; δ is in
femto-δ (10⁻¹⁵). Integers, so budgets add up exactly (no floating-point drift at the budget's edge).
A role's spend in one period is in one unit. A ledger written before amounts named their unit
(schema 2) is migrated when opened: its rows are ε (the column's default), their MACs unchanged
(:mod:`proxy.stores.ledger_mac` adds the unit to a row's message only when it is not ε).

δ (partition selection) is a quantity of its own: each spend row, reservation, release and
charge without an answer carries its ε and its δ, and a charge checks both budgets in one
transaction.

Each spend row and each stored release carries a keyed MAC (:mod:`proxy.stores.ledger_mac`):
a row altered outside dpgate is refused where it is read (``LedgerDamaged``, XX001).

Periods come from one clock, the ledger's: the SQLite host's clock (``clock``), or the
Postgres server's ``clock_timestamp()`` read inside each charge's transaction, so proxies
with skewed clocks sharing one ledger charge into the same period; and never a period
before the latest one the ledger has recorded (a clock set back opens no fresh budget).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from .answer import cell_count
from .errors import LedgerDamaged, LedgerFault, LedgerUnavailable, cannot_write, no_write_reason  # noqa: F401  (part of this module's API)
from .ladder_store import ladder_problems
from .ledger_mac import Mac, create_key, read_key
from .ledger_store import store_of
from .write_lock import transaction

if TYPE_CHECKING:
    from .pgstore import PgConnection


def _encode(answer: dict) -> str:
    """A release's stored text (:mod:`.release_codec`, imported on first use: commands that
    read budgets and never a release, ``dpgate budget``, do not load numpy)."""
    from .release_codec import encode_answer  # deferred: numpy

    return encode_answer(answer)


def _decode(body: str | bytes) -> dict:
    from .release_codec import decode_answer  # deferred: numpy

    return decode_answer(body)


log = logging.getLogger("dpgate.ledger")

NANO = 1_000_000_000
FEMTO = 10**15  # δ is kept in femto-δ (integers, 10⁻¹⁵ resolution)
SCHEMA_VERSION = "3"  # 2: δ columns and MACs; 3: amounts name their unit (ε or ρ)
EPS, RHO = "eps", "rho"  # the units of amounts: ε (pure tiers) and ρ (zCDP tiers), as nano-unit integers
KEY_NEW_S = 120  # a MAC key younger than this may still sign an unsigned ledger (proxies starting together)
HEAVY_CELLS = 256  # an answer this large is decoded and turned into rows off the event loop
HEAVY_BYTES = 16_384  # a stored text this long is decoded off the event loop (json.loads holds the GIL)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS spend (
    role TEXT NOT NULL, period TEXT NOT NULL, spent_nano INTEGER NOT NULL,
    delta_femto INTEGER NOT NULL DEFAULT 0, mac TEXT, unit TEXT NOT NULL DEFAULT 'eps',
    PRIMARY KEY (role, period));
CREATE TABLE IF NOT EXISTS releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, key TEXT NOT NULL, data_version INTEGER NOT NULL,
    canonical TEXT NOT NULL, statement TEXT NOT NULL,
    epsilon_nano INTEGER NOT NULL, mechanism TEXT NOT NULL,
    answer TEXT NOT NULL, period TEXT NOT NULL, created REAL NOT NULL,
    delta_femto INTEGER NOT NULL DEFAULT 0, mac TEXT, unit TEXT NOT NULL DEFAULT 'eps',
    UNIQUE (role, key, data_version));
CREATE TABLE IF NOT EXISTS reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, period TEXT NOT NULL, epsilon_nano INTEGER NOT NULL, created REAL NOT NULL,
    delta_femto INTEGER NOT NULL DEFAULT 0, unit TEXT NOT NULL DEFAULT 'eps');
CREATE TABLE IF NOT EXISTS unreleased (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, period TEXT NOT NULL, epsilon_nano INTEGER NOT NULL, created REAL NOT NULL,
    reason TEXT NOT NULL, delta_femto INTEGER NOT NULL DEFAULT 0, unit TEXT NOT NULL DEFAULT 'eps');
CREATE TABLE IF NOT EXISTS auto_bounds (
    data_version INTEGER NOT NULL, tbl TEXT NOT NULL, field TEXT NOT NULL,
    value TEXT NOT NULL, epsilon_nano INTEGER NOT NULL, created REAL NOT NULL, mac TEXT,
    PRIMARY KEY (data_version, tbl, field));
"""
# columns added since schema 1 (a ledger written before them is migrated when opened); a row
# written before amounts named their unit is in ε (schema 3's default)
_ADDED = (
    ("spend", "delta_femto", "INTEGER NOT NULL DEFAULT 0"),
    ("spend", "mac", "TEXT"),
    ("releases", "delta_femto", "INTEGER NOT NULL DEFAULT 0"),
    ("releases", "mac", "TEXT"),
    ("reservations", "delta_femto", "INTEGER NOT NULL DEFAULT 0"),
    ("unreleased", "delta_femto", "INTEGER NOT NULL DEFAULT 0"),
    ("spend", "unit", "TEXT NOT NULL DEFAULT 'eps'"),
    ("releases", "unit", "TEXT NOT NULL DEFAULT 'eps'"),
    ("reservations", "unit", "TEXT NOT NULL DEFAULT 'eps'"),
    ("unreleased", "unit", "TEXT NOT NULL DEFAULT 'eps'"),
)
_UNIT_WORD = {EPS: "ε", RHO: "ρ"}
_OLD_DELTA = "#delta"  # schema 1 booked δ×10⁶ as the nano-ε of a pseudo-role "<role>#delta"
_OLD_DELTA_REASON = "δ of a release"


class BudgetExceeded(Exception):
    """A charge that does not fit: ``what`` is "ε" or "δ", the amounts are of that budget."""

    def __init__(
        self, role: str, epsilon: float, remaining: float, budget: float, period: str, what: str = "ε"
    ):
        super().__init__(f"{what} budget exceeded for role {role}")
        self.role, self.epsilon, self.remaining = role, epsilon, remaining
        self.budget, self.period, self.what = budget, period, what


def _named_faults(fn):
    """A write the file system refuses (disk full, read-only: 53100) or a ledger locked too
    long (55P03) as its SQLSTATE (:func:`.errors.no_write_reason`), and a damaged file as
    :class:`LedgerDamaged` (XX001), one line each."""

    @functools.wraps(fn)
    def wrapper(self, *a, **kw):
        try:
            return fn(self, *a, **kw)
        except (sqlite3.Error, OSError) as e:
            if (reason := no_write_reason(e, self.path)) is not None:
                raise cannot_write(self.path, reason) from None
            if isinstance(e, sqlite3.DatabaseError) and any(
                w in str(e).lower() for w in ("malformed", "not a database", "corrupt", "could not decode")
            ):
                raise LedgerDamaged(
                    f"the privacy ledger {self.path} is damaged ({e}); no answer was released; "
                    "run `dpgate ledger check`"
                ) from None
            msg = str(e).lower()
            if not isinstance(e, sqlite3.OperationalError):
                raise
            if "locked" in msg or "busy" in msg:
                raise LedgerFault(
                    "55P03",
                    f"the privacy ledger is locked by another process ({self.path}); "
                    "no answer was released; try again shortly",
                ) from None
            raise

    return wrapper


@dataclass(frozen=True)
class ChosenBound:
    """A bound dpgate chose for a data version (``"auto"`` in the config): the table, the
    field (``max_rows_per_unit``, ``max_groups_per_unit``, ``columns.<c>.lower`` …), the
    released value as exact decimal text (None: not choosable — too few units for its ε),
    the ε it was charged and when."""

    table: str
    field: str
    value: str | None
    epsilon: float
    created: float = 0.0


@dataclass(frozen=True, eq=False)
class Stored:
    """A release as stored: the released (noisy) answer, never true values. A release
    read back keeps its stored text (``body``, :mod:`proxy.stores.release_codec`) and
    decodes it on first use of :attr:`answer`, so the caller chooses where that work
    runs (``heavy``: off the event loop)."""

    decoded: dict | None
    epsilon: float
    mechanism: str
    created: float
    charged: bool  # True if this call charged it, False for a repeat
    body: str | None = field(default=None, repr=False)
    delta: float = 0.0  # the δ it was charged (partition selection)
    unit: str = EPS  # what ``epsilon`` is: ε, or ρ (a zCDP tier's release)
    verify: Callable[[], None] | None = field(
        default=None, repr=False
    )  # checks the stored text's MAC (raises LedgerDamaged)

    @property
    def answer(self) -> dict:
        decoded = self.decoded
        if decoded is None:  # (two threads may both decode: equal dicts, one kept)
            if self.body is None:
                raise RuntimeError("the answer of this release was forgotten (Stored.forget)")
            if self.verify is not None:
                self.verify()  # a stored text that fails its MAC is never decoded nor sent
            decoded = _decode(self.body)
            object.__setattr__(self, "decoded", decoded)
        return decoded

    def forget(self) -> Stored:
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
    period: str  # the period key the charge went to
    epsilon_nano: int
    spent_nano: int  # the role's spend in that period after this charge
    state: str = field(default="open")  # open -> recorded | refunded | spent
    delta_femto: int = 0
    delta_spent_femto: int = 0  # the role's δ spend in that period after this charge
    unit: str = EPS  # the unit of epsilon_nano and spent_nano: ε, or ρ


def nano(eps: float) -> int:
    return round(eps * NANO)


def femto(delta: float) -> int:
    return round(delta * FEMTO)


def spent_as(amount_nano: int, have: str, want: str) -> float:
    """A spend of ``amount_nano`` nano-``have`` read in ``want``: itself, or unbounded when the
    units differ (a period spent in one unit takes no charge in the other: ``Ledger._same_unit``)."""
    return amount_nano / NANO if have == want else float("inf")


def period_key(period: str, now: float | None = None) -> str:
    t = datetime.fromtimestamp(time.time() if now is None else now, UTC)
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
    (``dsn``: shared by proxies on several hosts, see :mod:`proxy.stores.pgstore`).

    ``key_file``: the MAC key (:mod:`proxy.stores.ledger_mac`); default for SQLite the
    ledger's path with suffix ``.key``. A Postgres ledger opened without one has no MACs
    (tools only; a signed ledger refuses to open without its key). ``sign=False``
    (``dpgate ledger check``): no key is created and nothing is signed."""

    def __init__(
        self,
        path: str | Path | None,
        *,
        dsn: str | None = None,
        schema: str = "dpgate",
        key_file: str | Path | None = None,
        sign: bool = True,
    ):
        self.path = Path(path) if path is not None else None
        self.dsn, self.schema = dsn, schema
        self._lock = threading.Lock()
        self._rlock = threading.Lock()
        # three connections: writes (fsync-ed), reads (in WAL mode they never wait
        # for a writer, so the event loop can call them directly), and ``record``'s
        # writes, used under the same lock as the first so the two never wait on each
        # other: on SQLite with synchronous=NORMAL (written to the WAL, no fsync: a
        # crash of the process keeps it); on Postgres committed synchronously, since a
        # crash of the ledger *server* is that process's crash and must keep it too.
        record_sync = "FULL" if dsn is not None else "NORMAL"
        self._db, self._rdb, self._ndb = (self._connect(sync) for sync in ("FULL", None, record_sync))
        self._db.executescript(_SCHEMA)
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None
        self._salt_secret: str | None = None  # unit_salt's secret, read once
        self.guard = None  # proxy.stores.ledger_guard.Guard, called before charges and look-ups
        self.existed = (
            True  # the SQLite file was there, non-empty, before it was opened (:func:`open_ledger`)
        )
        self.clock = time.time  # this host's clock, injectable (tests: a clock that goes backwards)
        self._skew = 0.0  # Postgres: the ledger server's clock minus ``clock`` (last seen)
        self.migrated: list[str] = []  # what opening this ledger changed (said in the log)
        self._signed: dict[tuple[str, str], tuple] = {}  # (role, period) -> spend row as last written here
        self._migrate()
        if key_file is None and dsn is None:
            key_file = self._file().with_suffix(".key")
        self.key_file = Path(key_file) if key_file is not None else None
        self._mac: Mac | None = self._open_mac(sign)
        self._latest: dict[str, str] = {  # period kind -> latest period key seen (persisted)
            k.split(":", 1)[1]: v
            for k, v in self._db.execute("SELECT key, value FROM meta WHERE key LIKE 'period:%'").fetchall()
        }
        if dsn is not None:
            self._skew = (
                float(self._rdb.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())").fetchone()[0])
                - self.clock()
            )

    def _file(self) -> Path:
        """The SQLite ledger's file (a ledger without a dsn is opened with a path)."""
        if self.path is None:
            raise ValueError("a ledger is opened with a file path or a Postgres dsn")
        return self.path

    def _connect(self, sync: str | None):
        db: PgConnection | sqlite3.Connection
        if self.dsn is not None:
            from .pgstore import PgConnection  # deferred: psycopg, for a ledger on Postgres only

            db = PgConnection(self.dsn, self.schema)
        else:
            path = self._file()
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():  # 0600: its -wal and -shm take the file's mode
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
            db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
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

    # -- schema migration ------------------------------------------------------
    def _migrate(self) -> None:
        """A ledger written by schema 1: its δ columns and MAC columns added, and δ booked
        as the pseudo-role ``<role>#delta`` (δ×10⁶ as nano-ε, i.e. femto-δ) moved into
        the role's own δ columns, in one write transaction (proxies starting together:
        one migrates). A release's δ (schema 1: a charge without an answer, reason
        "δ of a release") goes back to that release (same role, period and δ, the
        latest release before it whose key names a δ)."""
        db = self._db
        row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is not None and row[0] >= SCHEMA_VERSION:
            return
        with self._lock:
            with transaction(db):
                row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if row is not None and row[0] >= SCHEMA_VERSION:
                    db.execute("ROLLBACK")
                    return
                for table, col, decl in _ADDED:
                    if self.dsn is not None:
                        db.execute(
                            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {col} "
                            + decl.replace("INTEGER", "BIGINT")
                        )
                    else:
                        try:
                            db.execute(f"ALTER TABLE {table} ADD COLUMN {col} {decl}")
                        except sqlite3.OperationalError as e:
                            if "duplicate column" not in str(e):
                                raise
                self._fold_old_delta(db)
                db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
                db.execute("COMMIT")

    def _fold_old_delta(self, db) -> None:
        cut = len(_OLD_DELTA)
        like = "%" + _OLD_DELTA
        moved = 0
        for role, period, amount in db.execute(
            "SELECT role, period, spent_nano FROM spend WHERE role LIKE ?", (like,)
        ).fetchall():
            db.execute(
                "INSERT INTO spend (role, period, spent_nano, delta_femto) VALUES (?,?,0,?) "
                "ON CONFLICT (role, period) DO UPDATE SET delta_femto = spend.delta_femto + "
                "excluded.delta_femto",
                (role[:-cut], period, amount),
            )
            moved += 1
        db.execute("DELETE FROM spend WHERE role LIKE ?", (like,))
        db.execute(
            "UPDATE reservations SET role = substr(role, 1, length(role) - ?), delta_femto = epsilon_nano, "
            "epsilon_nano = 0 WHERE role LIKE ?",
            (cut, like),
        )
        back = 0
        for uid, role, period, amount, created in db.execute(
            "SELECT id, role, period, epsilon_nano, created FROM unreleased WHERE role LIKE ? AND reason = ? "
            "ORDER BY id",
            (like, _OLD_DELTA_REASON),
        ).fetchall():
            rel = db.execute(
                "SELECT id FROM releases WHERE role = ? AND period = ? AND delta_femto = 0 AND "
                "created <= ? AND key LIKE ? ORDER BY created DESC, id DESC LIMIT 1",
                (role[:-cut], period, created, "%:delta=%"),
            ).fetchone()
            if rel is not None:
                db.execute("UPDATE releases SET delta_femto = ? WHERE id = ?", (amount, rel[0]))
                db.execute("DELETE FROM unreleased WHERE id = ?", (uid,))
                back += 1
        db.execute(
            "UPDATE unreleased SET role = substr(role, 1, length(role) - ?), delta_femto = epsilon_nano, "
            "epsilon_nano = 0 WHERE role LIKE ?",
            (cut, like),
        )
        if moved or back:
            self.migrated.append(
                f"δ of {moved} spend row(s) moved from the '<role>{_OLD_DELTA}' accounts "
                f"into the roles' δ column, {back} release(s) given back their δ"
            )

    # -- the MAC key -------------------------------------------------------------
    def _open_mac(self, sign: bool) -> Mac | None:
        """The key, checked against the ledger's check value; a ledger not yet signed
        (new, or written before MACs) is signed at first open with a new key."""
        db = self._db
        check = db.execute("SELECT value FROM meta WHERE key='mac_check'").fetchone()
        if self.key_file is None:
            if check is not None:
                raise LedgerDamaged(f"{self._where()} is protected by a keyed MAC: open it with its key file")
            return None
        try:
            key = read_key(self.key_file)
        except (OSError, ValueError) as e:
            raise LedgerDamaged(f"the ledger's MAC key {self.key_file} is unreadable ({e})") from None
        if check is not None:
            if key is None:
                raise LedgerDamaged(
                    f"{self._where()} is protected by a keyed MAC, but its key file "
                    f"{self.key_file} is missing; restore it from the backup of the state dir"
                )
            mac = Mac(key)
            if not Mac.same(check[0], mac.check_value()):
                raise LedgerDamaged(
                    f"{self.key_file} is not the MAC key of {self._where()} "
                    "(another ledger's key, or altered)"
                )
            return mac
        if not sign:
            return None
        # a key made just now (here, or by a proxy starting beside this one) may sign a ledger
        # that holds charges; an older one means the ledger's check value was removed
        if key is None:
            fresh, key = True, create_key(self.key_file)
        else:
            fresh = time.time() - self.key_file.stat().st_mtime < KEY_NEW_S
        mac = Mac(key)
        with self._lock:
            with transaction(db):
                if db.execute("SELECT value FROM meta WHERE key='mac_check'").fetchone() is not None:
                    db.execute("ROLLBACK")  # another proxy signed it meanwhile
                    has_rows = None
                else:
                    has_rows = self._sign_all(db, mac, fresh)
        if has_rows is None:
            return self._open_mac(sign)
        return mac

    def _sign_all(self, db, mac: Mac, fresh: bool) -> bool:
        """In a write transaction: every spend row and release signed, the check value written."""
        spends = db.execute("SELECT role, period, spent_nano, delta_femto, unit FROM spend").fetchall()
        has_rows = spends or db.execute("SELECT 1 FROM releases LIMIT 1").fetchone()
        if has_rows and not fresh:
            db.execute("ROLLBACK")
            raise LedgerDamaged(
                f"{self._where()} holds charges but no MAC check value, while its key "
                f"{self.key_file} exists: the ledger's MACs were removed"
            )
        for r, p, e, d, u in spends:
            db.execute("UPDATE spend SET mac=? WHERE role=? AND period=?", (mac.spend(r, p, e, d, u), r, p))
        n = 0
        for rid, r, k, dv, e, d, m, a, p, u in db.execute(
            "SELECT id, role, key, data_version, epsilon_nano, delta_femto, mechanism, answer, period, unit "
            "FROM releases"
        ).fetchall():
            db.execute("UPDATE releases SET mac=? WHERE id=?", (mac.release(r, k, dv, e, d, m, a, p, u), rid))
            n += 1
        db.execute("INSERT OR REPLACE INTO meta VALUES ('mac_check', ?)", (mac.check_value(),))
        db.execute("COMMIT")
        if has_rows:
            self.migrated.append(
                f"{len(spends)} spend row(s) and {n} release(s) had no MAC: signed at "
                f"first open with the new key {self.key_file}"
            )
        return bool(has_rows)

    @property
    def mac(self) -> Mac | None:
        """The MACs of this ledger's key (None: an unsigned ledger), for the stores beside it."""
        return self._mac

    @property
    def signed(self) -> bool:
        """Whether this ledger's rows are checked against a keyed MAC."""
        return self._mac is not None

    def _where(self) -> str:
        return str(self.path) if self.dsn is None else f"Postgres ledger schema {self.schema!r}"

    def _damaged(self, what: str) -> LedgerDamaged:
        return LedgerDamaged(
            f"{self._where()}: {what} fails its MAC (altered outside dpgate); "
            "it is not used: no answer was released, nothing was charged"
        )

    def _spend_row(self, db, role: str, pk: str, unit: str | None = None) -> tuple[int, int, str]:
        """(amount, δ, unit) spent by ``role`` in ``pk``, its MAC checked (in a write
        transaction); ``unit``: the unit of an empty row."""
        row = db.execute(
            "SELECT spent_nano, delta_femto, mac, unit FROM spend WHERE role=? AND period=?", (role, pk)
        ).fetchone()
        if row is None:
            return 0, 0, unit or EPS
        if (
            self._mac is not None
            and self._signed.get((role, pk)) != tuple(row)
            and not Mac.same(row[2], self._mac.spend(role, pk, row[0], row[1], row[3]))
        ):
            db.execute("ROLLBACK")
            raise self._damaged(f"the spend of role {role!r} in period {pk}")
        return row[0], row[1], row[3]

    def _put_spend(self, db, role: str, pk: str, e: int, d: int, unit: str = EPS) -> None:
        mac = self._mac.spend(role, pk, e, d, unit) if self._mac is not None else None
        if len(self._signed) > 4096:
            self._signed.clear()
        self._signed[(role, pk)] = (e, d, mac, unit)  # a row read back as written here needs no second MAC
        db.execute(
            "INSERT INTO spend (role, period, spent_nano, delta_femto, mac, unit) VALUES (?,?,?,?,?,?) "
            "ON CONFLICT (role, period) DO UPDATE SET spent_nano = excluded.spent_nano, "
            "delta_femto = excluded.delta_femto, mac = excluded.mac, unit = excluded.unit",
            (role, pk, e, d, mac, unit),
        )

    @staticmethod
    def _same_unit(db, role: str, pk: str, have: str, want: str) -> None:
        """A period's spend is in one unit: one charged in ε (a pure tier) takes no ρ charge and
        the other way round (a role whose tier changed its accounting waits for the next period;
        converting would need the ε spent per release, Bun & Steinke 2016 Prop 1.4, and a ρ
        bounds no pure ε). Refused, nothing written."""
        if have != want:
            db.execute("ROLLBACK")
            raise BudgetExceeded(role, 0.0, 0.0, 0.0, pk, what=_UNIT_WORD[want])

    def _charge(
        self,
        db,
        role: str,
        pk: str,
        epsilon: float,
        budget: float,
        period: str,
        delta: float = 0.0,
        delta_budget: float = 0.0,
        unit: str = EPS,
    ) -> tuple[int, int]:
        """In an open write transaction: add ``epsilon`` (an amount in ``unit``: ε, or ρ) and δ to
        the role's spend in period ``pk`` if both stay within their budgets and return the new
        spends (nano-units, femto-δ); else roll back and raise :class:`BudgetExceeded` (nothing
        written)."""
        eps_n, budget_n = nano(epsilon), nano(budget)
        d_f, dbudget_f = femto(delta), femto(delta_budget)
        e, d, have = self._spend_row(db, role, pk, unit)
        self._same_unit(db, role, pk, have, unit)
        if e + eps_n > budget_n:
            db.execute("ROLLBACK")
            raise BudgetExceeded(role, epsilon, (budget_n - e) / NANO, budget, period)
        if d_f and d + d_f > dbudget_f:
            db.execute("ROLLBACK")
            raise BudgetExceeded(role, delta, (dbudget_f - d) / FEMTO, delta_budget, period, what="δ")
        self._put_spend(db, role, pk, e + eps_n, d + d_f, unit)
        return e + eps_n, d + d_f

    def _release_row(
        self,
        db,
        role: str,
        key: str,
        data_version: int,
        canonical: str,
        statement: str,
        eps_n: int,
        d_f: int,
        mechanism: str,
        body: str,
        pk: str,
        now: float,
        unit: str = EPS,
    ) -> bool:
        """Insert a release unless one of the same key exists (False)."""
        mac = (
            self._mac.release(role, key, data_version, eps_n, d_f, mechanism, body, pk, unit)
            if self._mac is not None
            else None
        )
        return (
            db.execute(
                "INSERT INTO releases (role, key, data_version, canonical, statement, epsilon_nano, "
                "mechanism, answer, period, created, delta_femto, mac, unit) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (role, key, data_version) DO NOTHING",
                (
                    role,
                    key,
                    data_version,
                    canonical,
                    statement,
                    eps_n,
                    mechanism,
                    body,
                    pk,
                    now,
                    d_f,
                    mac,
                    unit,
                ),
            ).rowcount
            != 0
        )

    def _stored(self, row, role: str, key: str, data_version: int, *, charged: bool) -> Stored:
        """A release read back: (answer, amount, mechanism, created, δ, period, mac, unit); its MAC
        is checked before its answer is first decoded (:attr:`Stored.answer`)."""
        body, eps_n, mech, created, d_f, pk, mac, unit = row
        verify = None
        if self._mac is not None:
            m = self._mac

            def verify():
                if not Mac.same(mac, m.release(role, key, data_version, eps_n, d_f, mech, body, pk, unit)):
                    raise self._damaged(f"the stored release of role {role!r} for this statement")

        return Stored(
            None, eps_n / NANO, mech, created, charged, body=body, delta=d_f / FEMTO, unit=unit, verify=verify
        )

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

    # -- bounds chosen by dpgate ("auto"), per data version ---------------------------
    def chosen_bounds(self, data_version: int) -> list[ChosenBound]:
        """The bounds chosen for ``data_version`` (:mod:`proxy.pipeline.auto_bounds`), each
        row's MAC checked (an altered row raises LedgerDamaged: never used)."""
        with self._rlock:
            rows = self._rdb.execute(
                "SELECT tbl, field, value, epsilon_nano, created, mac FROM auto_bounds "
                "WHERE data_version=? ORDER BY created, tbl, field",
                (int(data_version),),
            ).fetchall()
        return [self._chosen(data_version, r) for r in rows]

    def _chosen(self, data_version: int, r) -> ChosenBound:
        tbl, fld, value, eps_n, created, mac = r
        if self._mac is not None and not Mac.same(mac, self._mac.bound(data_version, tbl, fld, value, eps_n)):
            raise self._damaged(f"the bound chosen for {tbl}.{fld}")
        return ChosenBound(tbl, fld, value or None, eps_n / NANO, float(created))

    @_named_faults
    def record_bounds(self, data_version: int, chosen: list[ChosenBound], budget: float) -> list[ChosenBound]:
        """Keep ``chosen`` (made outside any transaction) for ``data_version``, each only if
        no bound is kept for its field yet (a proxy starting beside this one may have made
        it: its choice wins, ours is discarded unreleased) and the version's choices stay
        within ``budget`` ε; one transaction (fsync). Returns every bound then kept for the
        version."""
        dv, cap = int(data_version), round(budget * NANO)
        now = self.clock()
        with self._lock:
            with transaction(self._db):
                for c in chosen:
                    eps_n = round(c.epsilon * NANO)
                    value = c.value or ""
                    mac = self._mac.bound(dv, c.table, c.field, value, eps_n) if self._mac else None
                    self._db.execute(
                        "INSERT INTO auto_bounds (data_version, tbl, field, value, epsilon_nano, "
                        "created, mac) SELECT ?, ?, ?, ?, ?, ?, ? WHERE (SELECT COALESCE(SUM("
                        "epsilon_nano), 0) FROM auto_bounds WHERE data_version=?) + ? <= ? "
                        "ON CONFLICT (data_version, tbl, field) DO NOTHING",
                        (dv, c.table, c.field, value, eps_n, now, mac, dv, eps_n, cap),
                    )
                rows = self._db.execute(
                    "SELECT tbl, field, value, epsilon_nano, created, mac FROM auto_bounds "
                    "WHERE data_version=? ORDER BY created, tbl, field",
                    (dv,),
                ).fetchall()
                self._db.execute("COMMIT")
        return [self._chosen(dv, r) for r in rows]

    def unit_salt(self, data_version: int) -> str:
        """The key of the privacy unit's bounding hash (:mod:`rewriter.unit`) for a data
        version: sha256 of the ledger's unit secret and the version, hex. Retries and
        repeats keep the same rows; a new data version re-draws them. The secret is
        derived from the ledger's MAC key (:meth:`Mac.derived`: kept apart from the ledger,
        never sent to a database, so never in a statement log); a ledger that already holds
        one in ``meta`` keeps it (read, not written again); a ledger without a MAC key draws
        one at random and keeps it there."""
        secret = self._salt_secret
        if secret is None:
            with self._rlock:
                row = self._rdb.execute("SELECT value FROM meta WHERE key='unit_secret'").fetchone()
            if row is not None:
                secret = row[0]
            elif self._mac is not None:
                secret = self._mac.derived("privacy unit salt")
            else:
                with self._lock:
                    with transaction(self._db):
                        self._db.execute(
                            "INSERT INTO meta VALUES ('unit_secret', ?) ON CONFLICT (key) DO NOTHING",
                            (secrets.token_hex(16),),
                        )
                        secret = self._db.execute(
                            "SELECT value FROM meta WHERE key='unit_secret'"
                        ).fetchone()[0]
                        self._db.execute("COMMIT")
            self._salt_secret = secret
        return hashlib.sha256(f"{secret}:{int(data_version)}".encode()).hexdigest()[:32]

    # -- integrity and periods ----------------------------------------
    def _check(self) -> None:
        """The ledger guard (proxy.stores.ledger_guard): raises LedgerLost once the
        ledger file or its identity is gone; a no-op when none is installed."""
        if self.guard is not None:
            self.guard()

    def now(self) -> float:
        """The ledger's clock as last seen: this host's (``clock``), plus, for a Postgres
        ledger, the server's offset measured at each charge."""
        return self.clock() + self._skew

    def period_now(self, period: str, floor: str | None = None) -> str:
        """The period a charge would go to now: the ledger clock's, never before the
        latest one recorded (``floor``: as read from the ledger; else as this process saw it)."""
        pk = period_key(period, self.now())
        if pk == "all":
            return pk
        for f in (self._latest.get(period), floor):
            if f is not None and f > pk:
                pk = f
        return pk

    def _period_read(self, period: str) -> str:
        """The current period key, never before the latest one this process saw."""
        return self.period_now(period)

    def _period_write(self, period: str, db) -> str:
        """The period a charge goes to, inside its transaction, from the ledger's clock
        (Postgres: the server's, read here): never before the latest period recorded in
        the ledger (a clock set back must not open a fresh per-day budget); a later one
        is recorded."""
        if period_key(period, 0) == "all":
            return "all"
        name = "period:" + period
        if self.dsn is not None:
            floor, t = db.execute(
                "SELECT (SELECT value FROM meta WHERE key=?), EXTRACT(EPOCH FROM clock_timestamp())", (name,)
            ).fetchone()
            t = float(t)
            self._skew = t - self.clock()
        else:
            row = db.execute("SELECT value FROM meta WHERE key=?", (name,)).fetchone()
            floor, t = (row[0] if row else None), self.clock()
        pk = period_key(period, t)
        if floor is not None and floor > pk:
            pk = floor
        elif floor is None or floor < pk:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, pk))
        self._latest[period] = pk
        return pk

    @staticmethod
    def _count_charge(db, eps_n: int) -> None:
        """The spend high-water mark: nano-ε ever charged (refunds included), in the
        charge's own fsync-ed transaction, so it never goes down on a healthy ledger."""
        db.execute(
            "INSERT INTO meta VALUES ('charged_nano', ?) ON CONFLICT (key) DO UPDATE "
            "SET value = CAST(CAST(meta.value AS BIGINT) + CAST(excluded.value AS BIGINT) AS TEXT)",
            (str(eps_n),),
        )

    # -- budget -------------------------------------------------------------
    # the period a read looks at: the caller's (the ledger clock's), or the ledger's
    # latest recorded one if that is later (as the charge path does)
    _FLOORED = "COALESCE((SELECT CASE WHEN value > ? THEN value ELSE ? END FROM meta WHERE key=?), ?)"

    def _floor_args(self, period: str) -> tuple:
        pk = self._period_read(period)
        return (pk, pk, "period:" + period, pk)

    def spent(self, role: str, period: str, unit: str = EPS) -> float:
        return self.spent_both(role, period, unit)[0]

    @_named_faults
    def spent_both(self, role: str, period: str, unit: str = EPS) -> tuple[float, float]:
        """(amount in ``unit``, δ) spent by ``role`` in the period a charge would go to now
        (:func:`spent_as`: a spend in ε read in ρ is ε²/2; one in ρ read in ε is unbounded)."""
        with self._rlock:
            row = self._rdb.execute(
                f"SELECT spent_nano, delta_femto, unit FROM spend WHERE role=? AND period={self._FLOORED}",
                (role, *self._floor_args(period)),
            ).fetchone()
        return (spent_as(row[0], row[2], unit), row[1] / FEMTO) if row else (0.0, 0.0)

    def spent_delta(self, role: str, period: str) -> float:
        return self.spent_both(role, period)[1]

    @_named_faults
    def snapshot(self, role: str, key: str, period: str, unit: str = EPS) -> tuple[int, float, Stored | None]:
        """(data version, amount in ``unit`` spent by ``role`` this period, its release of ``key``
        at that data version or None) in one read."""
        self._check()
        with self._rlock:
            row = self._rdb.execute(
                "SELECT m.v, s.spent_nano, s.unit, r.answer, r.epsilon_nano, r.mechanism, r.created, "
                "r.delta_femto, r.period, r.mac, r.unit FROM "
                "(SELECT COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key='data_version'), 1) AS v) m "
                f"LEFT JOIN spend s ON s.role=? AND s.period={self._FLOORED} "
                "LEFT JOIN releases r ON r.role=? AND r.key=? AND r.data_version=m.v",
                (role, *self._floor_args(period), role, key),
            ).fetchone()
        dv, spent_n = row[0], row[1] or 0
        return (
            dv,
            spent_as(spent_n, row[2] or unit, unit),
            (self._stored(row[3:], role, key, dv, charged=False) if row[3] is not None else None),
        )

    @_named_faults
    def lookup(self, role: str, key: str, data_version: int) -> Stored | None:
        self._check()
        with self._rlock:
            row = self._rdb.execute(
                "SELECT " + _RELEASE_COLS + " FROM releases WHERE role=? AND key=? AND data_version=?",
                (role, key, data_version),
            ).fetchone()
        return self._stored(row, role, key, data_version, charged=False) if row else None

    @_named_faults
    def releases_like(self, role: str, data_version: int, prefix: str, limit: int) -> list[tuple]:
        """``role``'s releases at ``data_version`` whose canonical text starts with ``prefix``,
        newest first, at most ``limit``: (id, key, canonical, statement) — the candidates an
        answer derived from earlier releases is looked for in (their answers: :meth:`lookup`)."""
        self._check()
        with self._rlock:
            return self._rdb.execute(
                "SELECT id, key, canonical, statement FROM releases "
                "WHERE role=? AND data_version=? AND substr(canonical, 1, length(CAST(? AS TEXT)))=CAST(? AS TEXT) "
                "ORDER BY id DESC LIMIT ?",
                (role, data_version, prefix, prefix, limit),
            ).fetchall()

    @_named_faults
    def charge_and_record(
        self,
        *,
        role: str,
        key: str,
        data_version: int,
        epsilon: float,
        budget: float,
        period: str,
        canonical: str,
        statement: str,
        mechanism: str,
        answer: dict,
    ) -> Stored:
        """Atomically: return the earlier release for this key, or charge ε and store
        ``answer``. Raises :class:`BudgetExceeded` (nothing written) if ε does not fit."""
        self._check()
        eps_n = nano(epsilon)
        body, now = _encode(answer), time.time()
        db = self._db
        with self._lock:
            with transaction(db):
                pk = self._period_write(period, db)
                # the release row first: UNIQUE (role, key, data_version) finds an earlier one
                if not self._release_row(
                    db, role, key, data_version, canonical, statement, eps_n, 0, mechanism, body, pk, now
                ):
                    row = db.execute(
                        "SELECT " + _RELEASE_COLS + " FROM releases "
                        "WHERE role=? AND key=? AND data_version=?",
                        (role, key, data_version),
                    ).fetchone()
                    db.execute("COMMIT")
                    return self._stored(row, role, key, data_version, charged=False)
                self._charge(db, role, pk, epsilon, budget, period)  # then the charge, if it fits
                self._count_charge(db, eps_n)
                db.execute("COMMIT")
        return Stored(answer, epsilon, mechanism, now, charged=True)

    # -- reserve / record (the DP pipeline: fsync overlaps the scan) ----------
    @_named_faults
    def reserve(
        self,
        *,
        role: str,
        epsilon: float,
        budget: float,
        period: str,
        delta: float = 0.0,
        delta_budget: float = 0.0,
        unit: str = EPS,
    ) -> Reservation:
        """Charge ``epsilon`` (an amount in ``unit``: ε, or ρ of a zCDP tier) and δ now, durably
        (fsync), before the answer exists. Raises :class:`BudgetExceeded` (nothing written) if
        either does not fit."""
        self._check()
        eps_n, d_f = nano(epsilon), femto(delta)
        db = self._db
        with self._lock:
            with transaction(db):
                pk = self._period_write(period, db)
                spent_n, dspent = self._charge(
                    db, role, pk, epsilon, budget, period, delta, delta_budget, unit
                )
                rid = db.execute(
                    "INSERT INTO reservations (role, period, epsilon_nano, created, delta_femto, unit) "
                    "VALUES (?,?,?,?,?,?)",
                    (role, pk, eps_n, time.time(), d_f, unit),
                ).lastrowid
                self._count_charge(db, eps_n)
                db.execute("COMMIT")
        return Reservation(
            rid, role, pk, eps_n, spent_n, delta_femto=d_f, delta_spent_femto=dspent, unit=unit
        )

    def reserve_soon(self, **kw) -> concurrent.futures.Future:
        """``reserve(**kw)`` on the ledger's writer thread (so its fsync overlaps
        the caller's backend scan)."""
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._writer = concurrent.futures.ThreadPoolExecutor(
                        1, thread_name_prefix="dpgate-ledger"
                    )
        return self._writer.submit(self.reserve, **kw)

    @_named_faults
    def record(
        self,
        res: Reservation,
        *,
        key: str,
        data_version: int,
        canonical: str,
        statement: str,
        mechanism: str,
        answer: dict,
    ) -> Stored | None:
        """Store ``answer`` as the release the reservation paid for (the charge is already
        durable). An earlier release of the same key wins: it is returned and the
        reservation refunded. ``None`` if the reservation was cancelled meanwhile (the
        answer must not be sent)."""
        self._check()  # never an answer recorded into a lost ledger
        body, now = _encode(answer), time.time()
        db = self._ndb
        with self._lock:
            if res.state != "open":
                return None
            with transaction(db):
                if not self._release_row(
                    db,
                    res.role,
                    key,
                    data_version,
                    canonical,
                    statement,
                    res.epsilon_nano,
                    res.delta_femto,
                    mechanism,
                    body,
                    res.period,
                    now,
                    res.unit,
                ):
                    row = db.execute(
                        "SELECT " + _RELEASE_COLS + " FROM releases "
                        "WHERE role=? AND key=? AND data_version=?",
                        (res.role, key, data_version),
                    ).fetchone()
                    self._refund(res, db)
                    db.execute("COMMIT")
                    res.state = "refunded"
                    return self._stored(row, res.role, key, data_version, charged=False)
                db.execute("DELETE FROM reservations WHERE id=?", (res.id,))
                db.execute("COMMIT")
                res.state = "recorded"
        return Stored(
            answer,
            res.epsilon_nano / NANO,
            mechanism,
            now,
            charged=True,
            delta=res.delta_femto / FEMTO,
            unit=res.unit,
        )

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
                db.execute(
                    "INSERT INTO unreleased (role, period, epsilon_nano, created, reason, delta_femto, unit) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (res.role, res.period, res.epsilon_nano, time.time(), reason, res.delta_femto, res.unit),
                )
                db.execute("COMMIT")
            res.state = "spent"

    def spend_soon(
        self, fut: concurrent.futures.Future, reason: str = "scan failed"
    ) -> concurrent.futures.Future:
        """``spend`` the reservation ``fut`` on the writer thread (as :meth:`cancel_soon`)."""

        def settle():
            if not fut.cancelled() and fut.exception() is None:
                self.spend(fut.result(), reason)

        assert self._writer is not None
        return self._writer.submit(settle)

    @_named_faults
    def charge_unreleased(
        self, *, role: str, epsilon: float, budget: float, period: str, reason: str = "scan failed"
    ) -> bool:
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
        q = (
            "SELECT role, period, epsilon_nano, created, reason, delta_femto, unit FROM unreleased "
            + ("WHERE role=? " if role else "")
            + "ORDER BY id"
        )
        with self._lock:
            rows = self._db.execute(q, (role,) if role else ()).fetchall()
        return [
            dict(role=r, period=p, epsilon=e / NANO, created=c, reason=w, delta=d / FEMTO, unit=u)
            for r, p, e, c, w, d, u in rows
        ]

    def _refund(self, res: Reservation, db=None) -> None:
        db = self._db if db is None else db
        e, d, unit = self._spend_row(db, res.role, res.period, res.unit)
        self._put_spend(db, res.role, res.period, e - res.epsilon_nano, d - res.delta_femto, unit)
        db.execute("DELETE FROM reservations WHERE id=?", (res.id,))

    def open_reservations(self) -> list[dict]:
        """Charges whose answer was never recorded (a crash between reserve and record)."""
        with self._rlock:
            rows = self._rdb.execute(
                "SELECT role, period, epsilon_nano, created, delta_femto, unit FROM reservations ORDER BY id"
            ).fetchall()
        return [
            dict(role=r, period=p, epsilon=e / NANO, created=c, delta=d / FEMTO, unit=u)
            for r, p, e, c, d, u in rows
        ]

    # -- views --------------------------------------------------------------
    def budgets(self) -> list[tuple[str, str, float, str]]:
        """(role, period, amount spent, its unit: ε or ρ) of every spend row."""
        with self._lock:
            rows = self._db.execute(
                "SELECT role, period, spent_nano, unit FROM spend ORDER BY role, period"
            ).fetchall()
        return [(r, p, s / NANO, u) for r, p, s, u in rows]

    def releases(self, role: str | None = None, limit: int = 1000) -> list[dict]:
        q = (
            "SELECT role, created, statement, epsilon_nano, mechanism, data_version, delta_femto, unit "
            "FROM releases " + ("WHERE role=? " if role else "") + "ORDER BY id DESC LIMIT ?"
        )
        args = (role, limit) if role else (limit,)
        with self._lock:
            rows = self._db.execute(q, args).fetchall()
        return [
            dict(
                role=r,
                created=c,
                statement=s,
                epsilon=e / NANO,
                mechanism=m,
                data_version=v,
                delta=d / FEMTO,
                unit=u,
            )
            for r, c, s, e, m, v, d, u in rows
        ]

    def integrity_problems(self, *, full: bool = True) -> list[str]:
        """What is wrong with the ledger, one line each (none: it is whole): SQLite's own
        check (``full``), total spend against stored releases + open reservations +
        charges without an answer (ε and δ: ``full``), each spend row's MAC, and
        (``full``) each stored release's, each multi-tier ladder row's and each chosen bound's MAC. The fast form (``full=False``, at start)
        reads the spend rows only (one per role and period), not the releases."""
        out = []
        with self._lock:
            db = self._db
            if full:
                out += [
                    f"SQLite integrity check: {r[0]}"
                    for r in db.execute("PRAGMA integrity_check").fetchall()
                    if r[0] != "ok"
                ]
            sums = (
                ("spent_nano", NANO, "ε", f"unit = '{EPS}'"),
                ("spent_nano", NANO, "ρ", f"unit = '{RHO}'"),
                ("delta_femto", FEMTO, "δ", "1 = 1"),
            )
            for col, unit, name, which in sums if full else ():
                rcol = "epsilon_nano" if col == "spent_nano" else "delta_femto"
                total = db.execute(f"SELECT COALESCE(SUM({col}),0) FROM spend WHERE {which}").fetchone()[0]
                parts = [
                    db.execute(f"SELECT COALESCE(SUM({rcol}),0) FROM {t} WHERE {which}").fetchone()[0]
                    for t in ("releases", "reservations", "unreleased")
                ]
                if total != sum(parts):
                    out.append(
                        f"{name} spent {total / unit:g} in all, but stored releases, open reservations and "
                        f"charges without an answer add up to {sum(parts) / unit:g}"
                    )
            if self._mac is not None:
                for r, p, e, d, mac, u in db.execute(
                    "SELECT role, period, spent_nano, delta_femto, mac, unit FROM spend ORDER BY role, period"
                ).fetchall():
                    if not Mac.same(mac, self._mac.spend(r, p, e, d, u)):
                        out.append(
                            f"the spend of role {r!r} in period {p} fails its MAC (altered outside dpgate)"
                        )
                if full:
                    for rid, r, k, dv, e, d, m, a, p, mac, u in db.execute(
                        "SELECT id, role, key, data_version, epsilon_nano, delta_femto, mechanism, answer, "
                        "period, mac, unit FROM releases ORDER BY id"
                    ).fetchall():
                        if not Mac.same(mac, self._mac.release(r, k, dv, e, d, m, a, p, u)):
                            out.append(
                                f"release {rid} of role {r!r} fails its MAC (its answer or charge was "
                                "altered outside dpgate; it will not be served)"
                            )
                    out += ladder_problems(db, self._mac)
                    for dv, t, f, v, e, mac in db.execute(
                        "SELECT data_version, tbl, field, value, epsilon_nano, mac FROM auto_bounds "
                        "ORDER BY data_version, tbl, field"
                    ).fetchall():
                        if not Mac.same(mac, self._mac.bound(dv, t, f, v, e)):
                            out.append(
                                f"the bound chosen for {t}.{f} (data version {dv}) fails its MAC "
                                "(altered outside dpgate; it will not be used)"
                            )
        return out

    def integrity_check(self) -> bool:
        return not self.integrity_problems()


_RELEASE_COLS = "answer, epsilon_nano, mechanism, created, delta_femto, period, mac, unit"


KEY_FILE = "ledger.key"


def key_path(config, state_dir: str | Path) -> Path:
    """The ledger's MAC key file: ``[ledger] key_file``, else ``<state dir>/ledger.key``."""
    named = getattr(config.ledger, "key_file", None)
    return Path(named) if named else Path(state_dir) / KEY_FILE


def open_ledger(config, state_dir: str | Path, *, sign: bool = True) -> Ledger:
    """The ledger the config names (:func:`.ledger_store.store_of`: a Postgres database
    shared by proxies that scale out, or the state dir's SQLite file); its MAC key from
    :func:`key_path`. A file that is not a SQLite database (damaged header) raises
    :class:`LedgerDamaged` (one line). ``sign=False``: no key created, nothing signed."""
    store = store_of(config)
    key = key_path(config, state_dir)
    path = store.file(state_dir)
    if path is None:
        led = Ledger(None, **store.server(config.ledger), key_file=key, sign=sign)
        led.existed = True
    else:
        existed = path.exists() and path.stat().st_size > 0  # before opening creates it
        try:
            led = Ledger(path, key_file=key, sign=sign)
        except sqlite3.DatabaseError as e:
            if (reason := no_write_reason(e, path)) is not None:  # the disk's state, not the file's
                raise cannot_write(path, reason) from None
            raise LedgerDamaged(
                f"{path} cannot be opened as a ledger ({e}); restore it from a backup"
            ) from None
        led.existed = existed  # read by proxy.stores.ledger_guard.verify_at_start
    for what in led.migrated:
        log.warning("ledger %s: %s", led._where(), what)
    return led


# -- dpgate's views: indexed reads on a connection of their own ----------------
# (kept apart from the Ledger class: the views never take the ledger's locks nor
# use its connections, so a view read never delays a DP statement's ledger work)
