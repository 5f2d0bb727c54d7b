"""The ledger's write transactions: ``BEGIN IMMEDIATE`` with a short wait for another
process's write lock (``serve --workers N`` on one SQLite ledger)."""

from __future__ import annotations

import contextlib
import sqlite3
import time

__all__ = ["begin_immediate", "transaction"]


@contextlib.contextmanager
def transaction(db):
    """``BEGIN IMMEDIATE`` … (the body commits); anything raised inside rolls back what is
    still open (a budget refusal has rolled back already)."""
    begin_immediate(db)
    try:
        yield
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def begin_immediate(db) -> None:
    """``BEGIN IMMEDIATE``: the write lock. On SQLite, when another process holds it, tried again
    after 50 µs, doubling to 1 ms, until the connection's busy timeout has passed (then
    ``database is locked``: 55P03). SQLite's own busy handler sleeps 1, 2, 5, 10 … 100 ms between
    tries, longer than the few tenths of a millisecond another worker holds the lock for a
    release: with ``--workers 2`` on one SQLite ledger, fresh releases queued on those sleeps."""
    if not isinstance(db, sqlite3.Connection):
        db.execute("BEGIN IMMEDIATE")
        return
    timeout_ms = db.execute("PRAGMA busy_timeout").fetchone()[0]
    db.execute("PRAGMA busy_timeout=0")
    try:
        delay, deadline = 50e-6, time.monotonic() + timeout_ms / 1000
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as e:
                if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(2 * delay, 0.001)
    finally:
        db.execute(f"PRAGMA busy_timeout={int(timeout_ms)}")
