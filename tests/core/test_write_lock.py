"""The ledger's write lock across processes (proxy/stores/write_lock.py): a writer waiting for
another connection's ``BEGIN IMMEDIATE`` gets the lock within about a millisecond of its release
(SQLite's own busy handler sleeps 1, 2, 5, 10, 15, 20 … ms: after a 40 ms hold it would try again
only at 53 ms), keeps the connection's busy timeout as its deadline, and leaves it set."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from proxy.stores.write_lock import begin_immediate, transaction


def _connect(path, timeout_ms: int = 30_000):
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA busy_timeout={timeout_ms}")
    return db


def test_the_lock_is_taken_soon_after_its_release(tmp_path):
    path = tmp_path / "l.db"
    holder, waiter = _connect(path), _connect(path)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    released = []

    def release():
        time.sleep(0.040)
        holder.execute("COMMIT")
        released.append(time.perf_counter())

    threading.Thread(target=release).start()
    with transaction(waiter):
        got = time.perf_counter()
        waiter.execute("INSERT INTO t VALUES (1)")
        waiter.execute("COMMIT")
    assert released and got - released[0] < 0.008  # SQLite's handler: ≈13 ms after
    assert waiter.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
    assert holder.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 1


def test_the_busy_timeout_is_the_deadline(tmp_path):
    path = tmp_path / "l.db"
    holder, waiter = _connect(path), _connect(path, timeout_ms=60)
    holder.execute("BEGIN IMMEDIATE")
    t0 = time.perf_counter()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        begin_immediate(waiter)
    assert 0.055 <= time.perf_counter() - t0 < 2.0
    assert waiter.execute("PRAGMA busy_timeout").fetchone()[0] == 60 and not waiter.in_transaction
    holder.execute("ROLLBACK")
