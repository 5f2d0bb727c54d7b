"""The ledger and ladder store on Postgres, for proxies that scale out.

Several dpgate processes (on several hosts) share one budget ledger, release
store and multi-tier ladder store when ``[ledger] kind = "postgres"``. The
stores' code is the SQLite code (:mod:`proxy.stores.ledger`, :mod:`proxy.stores.ladder_store`)
run through :class:`PgConnection`, which gives a psycopg connection the part of
the ``sqlite3`` connection interface they use and translates their few SQLite
forms, keeping every guarantee:

* ``BEGIN IMMEDIATE`` (SQLite's one writer at a time) becomes ``BEGIN`` plus a
  transaction-scoped advisory lock shared by every proxy: ledger writes are
  serialised across processes exactly as on one SQLite file, so the
  conditional charge, "an earlier release wins" and the ladder read-modify-write
  keep their meaning.
* ``PRAGMA synchronous=FULL`` is ``synchronous_commit = on``: every ledger
  write — the reservation before the scan's answer exists, and the record of
  the answer before it is sent — is flushed to the server's WAL before the
  commit returns, so a crash of the ledger server loses no charge and no
  answer a client received. (``synchronous=NORMAL`` would be
  ``synchronous_commit = off``; the ledger does not use it on Postgres.)
* ``INSERT OR REPLACE`` / ``INSERT OR IGNORE`` become ``ON CONFLICT`` forms,
  ``lastrowid`` comes from ``RETURNING id``, JSON look-ups use ``jsonb``.

The tables live in their own schema (``[ledger] schema``, default ``dpgate``).
"""

from __future__ import annotations

import re

import psycopg
from psycopg import pq
from psycopg import sql as pgsql

from .errors import LedgerFault, LedgerUnavailable

LOCK_KEY = 0x64706761  # "dpga": the advisory lock every proxy's ledger writes take

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS spend (
    role TEXT NOT NULL, period TEXT NOT NULL, spent_nano BIGINT NOT NULL,
    delta_femto BIGINT NOT NULL DEFAULT 0, mac TEXT, unit TEXT NOT NULL DEFAULT 'eps',
    PRIMARY KEY (role, period));
CREATE TABLE IF NOT EXISTS releases (
    id BIGSERIAL PRIMARY KEY,
    role TEXT NOT NULL, key TEXT NOT NULL, data_version BIGINT NOT NULL,
    canonical TEXT NOT NULL, statement TEXT NOT NULL,
    epsilon_nano BIGINT NOT NULL, mechanism TEXT NOT NULL,
    answer TEXT NOT NULL, period TEXT NOT NULL, created DOUBLE PRECISION NOT NULL,
    delta_femto BIGINT NOT NULL DEFAULT 0, mac TEXT, unit TEXT NOT NULL DEFAULT 'eps',
    UNIQUE (role, key, data_version));
CREATE TABLE IF NOT EXISTS reservations (
    id BIGSERIAL PRIMARY KEY,
    role TEXT NOT NULL, period TEXT NOT NULL, epsilon_nano BIGINT NOT NULL,
    created DOUBLE PRECISION NOT NULL, delta_femto BIGINT NOT NULL DEFAULT 0, unit TEXT NOT NULL DEFAULT 'eps');
CREATE TABLE IF NOT EXISTS unreleased (
    id BIGSERIAL PRIMARY KEY,
    role TEXT NOT NULL, period TEXT NOT NULL, epsilon_nano BIGINT NOT NULL,
    created DOUBLE PRECISION NOT NULL, reason TEXT NOT NULL, delta_femto BIGINT NOT NULL DEFAULT 0,
    unit TEXT NOT NULL DEFAULT 'eps');
CREATE TABLE IF NOT EXISTS mt_ladders (
    id BIGSERIAL PRIMARY KEY,
    ladder TEXT NOT NULL, qkey TEXT NOT NULL, data_version BIGINT NOT NULL,
    canonical TEXT NOT NULL, statement TEXT NOT NULL, version TEXT NOT NULL,
    levels TEXT NOT NULL, body TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL, mac TEXT,
    UNIQUE (ladder, qkey, data_version));
CREATE TABLE IF NOT EXISTS mt_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS auto_bounds (
    data_version BIGINT NOT NULL, tbl TEXT NOT NULL, field TEXT NOT NULL,
    value TEXT NOT NULL, epsilon_nano BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL, mac TEXT,
    PRIMARY KEY (data_version, tbl, field));
"""

_JSON = re.compile(r"json_extract\((\w+), '\$\.(\w+)\.(\w+)'\)")
_RETURNS_ID = re.compile(
    r"^\s*INSERT\s+INTO\s+(releases|reservations|mt_ladders)\b(?!.*\bRETURNING\b)", re.IGNORECASE | re.DOTALL
)


def translate(sql: str) -> str:
    """SQLite SQL of the stores → Postgres SQL (parameters ``?`` → ``%s``)."""
    s = sql.strip()
    if s.startswith("INSERT OR REPLACE INTO meta"):
        s = (
            s.replace("INSERT OR REPLACE INTO meta", "INSERT INTO meta", 1)
            + " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )
    elif s.startswith("INSERT OR IGNORE INTO"):
        s = s.replace("INSERT OR IGNORE INTO", "INSERT INTO", 1) + " ON CONFLICT DO NOTHING"
    if "INTO spend" in s and "DO UPDATE" in s:  # the existing row, named (Postgres: ambiguous)
        s = s.replace("= spent_nano +", "= spend.spent_nano +").replace(
            "WHERE spent_nano +", "WHERE spend.spent_nano +"
        )
    s = _JSON.sub(r"(\1::jsonb #>> '{\2,\3}')", s)
    s = s.replace("instr(", "strpos(")
    if _RETURNS_ID.match(s):
        s += " RETURNING id"
    return s.replace("?", "%s")


class PgCursor:
    """What the stores read from a cursor: rows, ``rowcount``, ``lastrowid``."""

    def __init__(self, cur, returns_id: bool) -> None:
        self._cur, self.rowcount, self.lastrowid = cur, cur.rowcount, None
        self._rows: list[tuple] | None = None
        if returns_id:
            row = cur.fetchone()
            self.lastrowid = row[0] if row else None
            self._rows = []

    def fetchone(self):
        if self._rows is not None:
            return self._rows.pop(0) if self._rows else None
        return self._cur.fetchone() if self._cur.description else None

    def fetchall(self):
        if self._rows is not None:
            out, self._rows = self._rows, []
            return out
        return self._cur.fetchall() if self._cur.description else []


class PgConnection:
    """A psycopg connection (autocommit; transactions begun explicitly, as with
    ``sqlite3`` in ``isolation_level=None`` mode) behind the ``sqlite3`` calls
    the stores make."""

    def __init__(self, dsn: str, schema: str) -> None:
        self._dsn, self._schema = dsn, schema
        self._settings: list[str] = []
        self._con = self._connect()

    def _connect(self):
        try:
            # a ledger server that vanishes (no RST) fails calls within seconds, not never
            con = psycopg.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=5,
                keepalives=1,
                keepalives_idle=5,
                keepalives_interval=2,
                keepalives_count=3,
                tcp_user_timeout=10_000,
            )
            ident = pgsql.Identifier(self._schema)
            with con.transaction():  # proxies starting together: one creates it
                con.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
                con.execute(pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            con.execute(pgsql.SQL("SET search_path TO {}").format(ident))
            for setting in self._settings:
                con.execute(setting)
        except psycopg.OperationalError as e:
            raise LedgerUnavailable(f"ledger database: {e}") from None
        return con

    @property
    def in_transaction(self) -> bool:
        return self._con.info.transaction_status not in (
            pq.TransactionStatus.IDLE,
            pq.TransactionStatus.UNKNOWN,
        )

    def execute(self, sql: str, params=()) -> PgCursor:
        """One statement. A connection found dead outside a transaction (the
        ledger server restarted meanwhile) is replaced and the statement sent
        again; inside a transaction the server has rolled it back (or, for a
        COMMIT, its outcome is unknown: a charge may stand, an answer is never
        sent) and :class:`LedgerUnavailable` is raised."""
        if self._con.broken or self._con.closed:
            self._con = self._connect()
        idle = not self.in_transaction
        try:
            return self._execute(sql, params)
        except psycopg.errors.DiskFull:  # named, one line: not an internal error
            raise LedgerFault(
                "53100",
                "the privacy ledger cannot write: its database server's disk is full; no answer was released",
            ) from None
        except psycopg.errors.LockNotAvailable:
            raise LedgerFault(
                "55P03",
                "the privacy ledger is locked (lock timeout on its database server); "
                "no answer was released; try again shortly",
            ) from None
        except psycopg.OperationalError:
            if idle and self._con.broken:
                self._con = self._connect()
                try:
                    return self._execute(sql, params)
                except psycopg.OperationalError as e2:
                    e = e2
            raise LedgerUnavailable(f"ledger database: {e}") from None

    def _execute(self, sql: str, params) -> PgCursor:
        s = sql.strip()
        if s == "BEGIN IMMEDIATE":
            self._con.execute("BEGIN")
            self._con.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            return PgCursor(self._con.cursor(), False)
        if s.startswith("PRAGMA"):
            return self._pragma(s)
        pg = translate(s)
        cur = self._con.execute(pg, tuple(params) if params else None)
        return PgCursor(cur, pg.endswith(" RETURNING id"))

    def _pragma(self, s: str) -> PgCursor:
        cur = self._con.cursor()
        setting = {
            "PRAGMA synchronous=NORMAL": "SET synchronous_commit = off",
            "PRAGMA synchronous=FULL": "SET synchronous_commit = on",
        }.get(s)
        if setting is not None:
            cur.execute(setting)
            self._settings.append(setting)  # kept across a reconnect
        elif s == "PRAGMA integrity_check":
            cur.execute("SELECT 'ok'")
        return PgCursor(cur, False)

    def executescript(self, script: str) -> None:
        """The stores' schema: the Postgres one (:data:`SCHEMA`), created once
        under the advisory lock (two proxies may start together)."""
        with self._con.transaction():
            self._con.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            self._con.execute(SCHEMA)

    def close(self) -> None:
        self._con.close()


VIEW_INDEXES = """
CREATE INDEX IF NOT EXISTS releases_role_created ON releases (role, created);
CREATE INDEX IF NOT EXISTS releases_created ON releases (created);
"""


def create_view_indexes(db: PgConnection) -> None:
    """The indexes behind dpgate's views (:class:`proxy.stores.view_reads.ViewReads`), created
    once under the ledger's advisory lock (proxies starting together)."""
    try:
        with db._con.transaction():
            db._con.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            db._con.execute(VIEW_INDEXES)
    except psycopg.OperationalError as e:
        raise LedgerUnavailable(f"ledger database: {e}") from None
