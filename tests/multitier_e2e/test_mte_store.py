"""proxy.stores.ladder_store: durable (WAL, synchronous=FULL), one ladder per key under
races, one value per inserted level under races."""

from __future__ import annotations

import sqlite3
import threading
import uuid

import pytest

from proxy.stores.ladder_store import LadderStore
from proxy.stores.ledger import Ledger


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(request, tmp_path):
    """Opens a ladder store (another connection, as another process would) on one
    store: a SQLite file, or a fresh schema of a real Postgres (proxies that scale out)."""
    if request.param == "sqlite":
        return lambda: LadderStore(tmp_path / "l.sqlite3")
    dsn, schema = request.getfixturevalue("postgres").dsn, "t_" + uuid.uuid4().hex[:12]
    return lambda: LadderStore(None, dsn=dsn, schema=schema)


def test_pragmas_and_same_file_as_the_ledger(tmp_path):
    led = Ledger(tmp_path / "ledger.sqlite3")
    st = LadderStore(led.path)
    assert st._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert st._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    names = {
        r[0] for r in sqlite3.connect(led.path).execute("SELECT name FROM sqlite_master WHERE type='table'")
    }
    assert {"mt_ladders", "releases", "spend"} <= names
    assert st.ladder_summaries() == []
    st.close()
    led.close()


def test_racing_creates_keep_one_ladder(new_store):
    st = new_store()
    n = 8
    barrier = threading.Barrier(n)
    got = [None] * n

    def one(i):
        other = new_store()  # separate connections, as separate processes would
        barrier.wait()
        got[i] = other.create(
            ladder="market",
            qkey="q",
            data_version=1,
            canonical="c",
            statement="s",
            version=[2.0, 0.1],
            levels=[2.0, 0.1],
            body={"draw": i},
        )
        other.close()

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert sum(created for _, created in got) == 1
    assert len({row.body["draw"] for row, _ in got}) == 1
    assert st.count("q") == 1
    st.close()


def test_racing_level_insertions_keep_one_value(new_store):
    st = new_store()
    row, _ = st.create(
        ladder="market",
        qkey="q",
        data_version=1,
        canonical="c",
        statement="s",
        version=[2.0, 0.1],
        levels=[2.0, 0.1],
        body={"v": {}},
    )
    n = 8
    barrier = threading.Barrier(n)
    got = [None] * n

    def one(i):
        barrier.wait()

        def change(r):
            if 1.0 in r.levels:
                return None
            return sorted(r.levels + [1.0], reverse=True), {"v": {"1.0": i}}

        got[i] = st.update(row.id, change)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert len({r.body["v"]["1.0"] for r in got}) == 1
    assert st.by_id(row.id).levels == [2.0, 1.0, 0.1]
    st.close()
