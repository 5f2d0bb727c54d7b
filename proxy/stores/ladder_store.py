"""The durable store of multi-tier ladders (multi-tier release, Wang et al. 2026; multi-tier spec §10 "State").

One row per chain: (ladder name, query fingerprint, data version) is UNIQUE.
The row holds every generated level's RAW chain values for every GROUP BY cell
and aggregate — secrets: only the level a tier is entitled to is ever turned
into an answer (by :mod:`proxy.pipeline.multitier`), and that answer is what the ledger
stores and the client sees.

The tables live in the SAME SQLite file as the ledger (its own connection, WAL,
``synchronous=FULL``), so a backup or a crash treats ledger and ladders alike.

Write ordering (what makes "no re-drawn chain" hold):

1. The whole ladder is drawn outside any transaction (one backend scan, the
   root at the ladder's top level, residuals for the others).
2. ``BEGIN IMMEDIATE``; an existing row for the key wins (a racing tier
   committed first: our draw is discarded, it was never released); otherwise
   ``INSERT``; ``COMMIT`` (fsync).
3. Only then is the role's level charged and recorded by the ledger
   (``charge_and_record``) and sent. A crash between 2 and 3 leaves a ladder
   nobody holds: a later request of any tier is served from it (no second draw).

Levels added later (a new tier, spec §9a/b) are written with the same
``BEGIN IMMEDIATE`` → re-read → update → ``COMMIT`` pattern, so two roles
inserting the same level get one value.

Each row carries the ledger's keyed MAC (:mod:`proxy.stores.ledger_mac`, the ledger's key)
over its identity and its stored ε set, levels and chain values: a row altered outside
dpgate is never used — no level is served from it, none is inserted into it
(:class:`proxy.stores.errors.LedgerDamaged`, XX001). A store written before these MACs
(no ``mac_check`` in ``mt_meta``) is signed at its first open under a signed ledger;
after that a row without a MAC fails its check like an altered one.

The ladder *version* (the ε set of the ladder in the config when the chain was
drawn) is stored with the chain, not used as part of its identity: a config
change that adds a tier must be served FROM the existing chain (nearest lower
level, or an exact bridge), otherwise the new chain would be an independent
release and a coalition would learn the sum of the two roots.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import json_pieces
from .errors import LedgerDamaged
from .ledger_mac import Mac

log = logging.getLogger("dpgate.ledger")

NANO = 1_000_000_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS mt_ladders (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ladder TEXT NOT NULL,            -- ladder name ([tiers.*] ladder = ...)
    qkey TEXT NOT NULL,              -- fingerprint of the canonical query
    data_version INTEGER NOT NULL,
    canonical TEXT NOT NULL,
    statement TEXT NOT NULL,         -- the statement that drew the chain
    version TEXT NOT NULL,           -- JSON: the ladder's ε set when it was drawn
    levels TEXT NOT NULL,            -- JSON: generated levels, descending (grows on insertion)
    body TEXT NOT NULL,              -- JSON: raw chain values per cell/aggregate/level (secret)
    created REAL NOT NULL,
    updated REAL NOT NULL,
    UNIQUE (ladder, qkey, data_version));
CREATE TABLE IF NOT EXISTS mt_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True)
class LadderRow:
    id: int
    ladder: str
    qkey: str
    data_version: int
    canonical: str
    statement: str
    version: list
    levels: list
    body: dict
    created: float


_COLS = "id, ladder, qkey, data_version, canonical, statement, version, levels, body, created, mac"


def _signed(mac: Mac, r) -> str:
    """The MAC of a stored row (``_COLS`` order): its identity and stored texts."""
    _i, lad, qk, dv, can, st, ver, lev, body = r[:9]
    return mac.ladder(lad, qk, dv, can, st, ver, lev, body)


def ladder_problems(db, mac: Mac) -> list[str]:
    """Every ladder row of the store on ``db`` (the ledger's connection) that fails its MAC,
    one line each (``dpgate ledger check``); none for a store not opened yet, or not yet
    signed (it is signed at its first open)."""
    try:
        check = db.execute("SELECT value FROM mt_meta WHERE key='mac_check'").fetchone()
    except sqlite3.OperationalError:  # no ladder store in this SQLite file yet
        return []
    if check is None:
        return []
    if not Mac.same(check[0], mac.check_value()):
        return ["the ladder store was signed with another key (altered outside dpgate)"]
    return [
        f"ladder {r[0]} ({r[1]}) fails its MAC (its chain values were altered outside dpgate; it will "
        "not be served)"
        for r in db.execute(f"SELECT {_COLS} FROM mt_ladders ORDER BY id").fetchall()
        if not Mac.same(r[10], _signed(mac, r))
    ]


class LadderStore:
    """Ladders beside the ledger (its SQLite file, or its Postgres schema); safe
    across threads and processes."""

    def __init__(
        self,
        path: str | Path | None,
        *,
        dsn: str | None = None,
        schema: str = "dpgate",
        mac: Mac | None = None,
    ):
        self.path = Path(path) if path is not None else None
        self.dsn, self.schema = dsn, schema
        self._mac = mac
        self.migrated: list[str] = []  # what opening this store changed (said in the log)
        self._lock = threading.Lock()
        self._db: Any  # a sqlite3.Connection, or a PgConnection that answers the same calls
        if dsn is not None:  # beside a Postgres ledger (proxy.stores.pgstore)
            from .pgstore import PgConnection  # deferred: psycopg, for a ledger on Postgres only

            self._db = PgConnection(dsn, schema)
        elif self.path is None:
            raise ValueError("a ladder store needs a path or a Postgres dsn")
        else:
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._add_mac_column()
        if mac is not None:
            self._open_mac(mac)

    def _add_mac_column(self) -> None:
        """A store written before MACs gets its ``mac`` column."""
        if self.dsn is not None:
            if (
                self._db.execute(
                    "SELECT 1 FROM information_schema.columns WHERE table_schema=? AND "
                    "table_name='mt_ladders' AND column_name='mac'",
                    (self.schema,),
                ).fetchone()
                is None
            ):
                self._db.execute("ALTER TABLE mt_ladders ADD COLUMN IF NOT EXISTS mac TEXT")
            return
        try:
            self._db.execute("ALTER TABLE mt_ladders ADD COLUMN mac TEXT")
        except sqlite3.OperationalError as e:
            if "duplicate column" not in str(e):
                raise

    def _open_mac(self, mac: Mac) -> None:
        """Check the store's key (its check value in ``mt_meta``); a store without one
        (new, or written before MACs) has every row signed and the check value written, in
        one write transaction (proxies starting together: one signs)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                check = self._db.execute("SELECT value FROM mt_meta WHERE key='mac_check'").fetchone()
                if check is not None:
                    self._db.execute("COMMIT")
                    if not Mac.same(check[0], mac.check_value()):
                        raise LedgerDamaged(
                            f"the ladder store beside {self._where()} was signed with another "
                            "key (altered outside dpgate); restore the state dir from a backup"
                        )
                    return
                rows = self._db.execute(f"SELECT {_COLS} FROM mt_ladders").fetchall()
                for r in rows:
                    self._db.execute("UPDATE mt_ladders SET mac=? WHERE id=?", (_signed(mac, r), r[0]))
                self._db.execute(
                    "INSERT INTO mt_meta (key, value) VALUES ('mac_check', ?)", (mac.check_value(),)
                )
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        if rows:
            self.migrated.append(f"{len(rows)} ladder row(s) had no MAC: signed at first open")

    def _where(self) -> str:
        return str(self.path) if self.dsn is None else f"Postgres ledger schema {self.schema!r}"

    def _damaged(self, r, more: str = "") -> LedgerDamaged:
        return LedgerDamaged(
            f"{self._where()}: ladder {r[0]} ({r[1]}) fails its MAC (altered outside dpgate); "
            f"it is not used: no answer was released from it{more}"
        )

    def _row(self, r) -> LadderRow:
        """A stored row, its MAC checked: one altered outside dpgate is never used."""
        if self._mac is not None and not Mac.same(r[10], _signed(self._mac, r)):
            raise self._damaged(r)
        i, lad, qk, dv, can, st, ver, lev, body, created = r[:10]
        return LadderRow(
            i, lad, qk, dv, can, st, json.loads(ver), json.loads(lev), json_pieces.loads(body), created
        )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- reads --------------------------------------------------------------
    def get(self, ladder: str, qkey: str, data_version: int) -> LadderRow | None:
        with self._lock:
            r = self._db.execute(
                f"SELECT {_COLS} FROM mt_ladders WHERE ladder=? AND qkey=? AND data_version=?",
                (ladder, qkey, data_version),
            ).fetchone()
        return self._row(r) if r else None

    def check(self, ladder: str, qkey: str, data_version: int) -> None:
        """Raise :class:`LedgerDamaged` if the key's stored ladder fails its MAC (its values
        are not decoded): the pipeline asks before the scan, so a damaged ladder refuses
        the statement before anything is read or charged."""
        if self._mac is None:
            return
        with self._lock:
            r = self._db.execute(
                f"SELECT {_COLS} FROM mt_ladders WHERE ladder=? AND qkey=? AND data_version=?",
                (ladder, qkey, data_version),
            ).fetchone()
        if r is not None and not Mac.same(r[10], _signed(self._mac, r)):
            raise self._damaged(r, "; nothing was charged")

    def by_id(self, ladder_id: int) -> LadderRow | None:
        with self._lock:
            r = self._db.execute(f"SELECT {_COLS} FROM mt_ladders WHERE id=?", (ladder_id,)).fetchone()
        return self._row(r) if r else None

    def count(self, qkey: str | None = None) -> int:
        with self._lock:
            if qkey is None:
                return self._db.execute("SELECT COUNT(*) FROM mt_ladders").fetchone()[0]
            return self._db.execute("SELECT COUNT(*) FROM mt_ladders WHERE qkey=?", (qkey,)).fetchone()[0]

    # -- writes -------------------------------------------------------------
    def create(
        self,
        *,
        ladder: str,
        qkey: str,
        data_version: int,
        canonical: str,
        statement: str,
        version: list,
        levels: list,
        body: dict,
    ) -> tuple[LadderRow, bool]:
        """Persist a freshly drawn ladder, or return the one already there.

        Returns (row, created). ``created`` is False when another request (any
        tier) committed a ladder for the same key first; the caller must then
        use that one and discard its own draw."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                r = self._db.execute(
                    f"SELECT {_COLS} FROM mt_ladders WHERE ladder=? AND qkey=? AND data_version=?",
                    (ladder, qkey, data_version),
                ).fetchone()
                if r:
                    self._db.execute("COMMIT")
                    return self._row(r), False
                now = time.time()
                texts = (
                    ladder,
                    qkey,
                    data_version,
                    canonical,
                    statement,
                    json.dumps(version),
                    json.dumps(levels),
                    json_pieces.dumps(body),
                )
                mac = self._mac.ladder(*texts) if self._mac is not None else None
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO mt_ladders (ladder, qkey, data_version, canonical, statement, version, "
                    "levels, body, created, updated, mac) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (*texts, now, now, mac),
                )
                if cur.rowcount == 0:  # cannot happen under the write lock; be safe anyway
                    r = self._db.execute(
                        f"SELECT {_COLS} FROM mt_ladders WHERE ladder=? AND qkey=? AND data_version=?",
                        (ladder, qkey, data_version),
                    ).fetchone()
                    self._db.execute("COMMIT")
                    return self._row(r), False
                new_id = cur.lastrowid
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        return LadderRow(
            new_id, ladder, qkey, data_version, canonical, statement, list(version), list(levels), body, now
        ), True

    def update(self, ladder_id: int, change: Callable[[LadderRow], tuple[list, dict] | None]) -> LadderRow:
        """Read-modify-write one ladder under the write lock.

        ``change(row)`` returns the new (levels, body), or None if the row
        already has what the caller needs (e.g. a racing request inserted the
        level first). It runs inside the transaction, so it must be quick and
        must not touch the data (it only post-processes stored values)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                r = self._db.execute(f"SELECT {_COLS} FROM mt_ladders WHERE id=?", (ladder_id,)).fetchone()
                if r is None:
                    raise KeyError(f"ladder {ladder_id} does not exist")
                row = self._row(r)
                out = change(row)
                if out is None:
                    self._db.execute("COMMIT")
                    return row
                levels, body = out
                lev_text, body_text = json.dumps(levels), json_pieces.dumps(body)
                mac = (
                    self._mac.ladder(
                        row.ladder,
                        row.qkey,
                        row.data_version,
                        row.canonical,
                        row.statement,
                        r[6],
                        lev_text,
                        body_text,
                    )
                    if self._mac is not None
                    else None
                )
                self._db.execute(
                    "UPDATE mt_ladders SET levels=?, body=?, updated=?, mac=? WHERE id=?",
                    (lev_text, body_text, time.time(), mac, ladder_id),
                )
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        return LadderRow(
            row.id,
            row.ladder,
            row.qkey,
            row.data_version,
            row.canonical,
            row.statement,
            row.version,
            list(levels),
            body,
            row.created,
        )

    # -- the data owner's view ---------------------------------------------
    def ladder_summaries(self) -> list[dict]:
        """Metadata of every ladder (never a value) and, from the ledger's
        ``releases`` table — the record of what was actually sent — every
        release served from it: role, ε charged, level served, tier."""
        with self._lock:
            lads = self._db.execute(
                "SELECT id, ladder, statement, canonical, data_version, version, levels, created "
                "FROM mt_ladders ORDER BY id"
            ).fetchall()
            try:
                rel = self._db.execute(
                    "SELECT json_extract(answer, '$.ladder.id'), role, epsilon_nano, "
                    "json_extract(answer, '$.ladder.level'), json_extract(answer, '$.ladder.tier'), created "
                    "FROM releases WHERE instr(answer, '\"ladder\"') > 0 "
                    "AND json_extract(answer, '$.ladder.id') IS NOT NULL ORDER BY id"
                ).fetchall()
            except sqlite3.OperationalError:  # no ledger tables yet (SQLite only)
                rel = []
        by_id: dict[int, list] = {}
        for lid, role, eps_n, level, tier, created in rel:
            by_id.setdefault(int(lid), []).append(
                dict(role=role, epsilon=eps_n / NANO, level=float(level), tier=tier, created=created)
            )
        return [
            dict(
                id=i,
                ladder=lad,
                statement=st,
                canonical=can,
                data_version=dv,
                version=json.loads(ver),
                levels=json.loads(lev),
                created=created,
                releases=by_id.get(i, []),
            )
            for i, lad, st, can, dv, ver, lev, created in lads
        ]


_STORES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_STORES_LOCK = threading.Lock()


def store_for(ledger) -> LadderStore:
    """The ladder store living next to ``ledger`` (one per ledger object)."""
    with _STORES_LOCK:
        st = _STORES.get(ledger)
        if st is None:
            st = LadderStore(ledger.path, dsn=ledger.dsn, schema=ledger.schema, mac=ledger.mac)
            for line in st.migrated:
                log.warning("%s: %s", st._where(), line)
            _STORES[ledger] = st
        return st
