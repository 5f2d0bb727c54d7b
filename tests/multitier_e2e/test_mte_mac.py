"""The ladder store's rows carry the ledger's keyed MAC: a row whose stored chain values were
edited in SQLite outside dpgate is never used — the next ladder statement on it is a one-line
XX001 before its scan (nothing charged) and no level is served from it (nor inserted into it); a store written before these
MACs is signed at its first open (and the log says so), after which an edit is caught too."""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import uuid

import psycopg
import pytest
from mte_helpers import ask, ladder_row

from proxy.stores.errors import LedgerDamaged
from proxy.stores.ladder_store import LadderStore
from proxy.stores.ledger import Ledger
from proxy.stores.ledger_mac import Mac
from support.service import Service, make_config

Q = "SELECT sex, COUNT(*), SUM(hours) FROM people WHERE age > 30 GROUP BY sex"


def _edit_body(path, ladder_id: int) -> None:
    """One digit of one stored chain value changed, as an editor of the SQLite file would."""
    db = sqlite3.connect(path)
    body = db.execute("SELECT body FROM mt_ladders WHERE id=?", (ladder_id,)).fetchone()[0]
    m = re.search(r"\d", body)
    edited = body[: m.start()] + str((int(m.group()) + 1) % 10) + body[m.end() :]
    db.execute("UPDATE mt_ladders SET body=? WHERE id=?", (edited, ladder_id))
    db.commit()
    db.close()


@pytest.fixture
def svc(tmp_path):
    from mechanisms import SeededSource

    s = Service(
        make_config({"kind": "duckdb", "path": str(tmp_path / "d.duckdb")}),
        tmp_path / "state",
        people_rows=1000,
        source=SeededSource(7),
    ).start()
    yield s
    s.close()


def test_an_edited_ladder_row_is_never_served(svc):
    ask(svc, "gold", Q)  # draws and stores the ladder
    _plan, row = ladder_row(svc, Q)
    led = svc.gw.ledger
    _edit_body(led.path, row.id)
    for role in ("bronze", "silver"):  # their levels come from this row
        with pytest.raises(psycopg.Error) as e:
            ask(svc, role, Q)
        assert e.value.sqlstate == "XX001", (role, e.value)
        assert "fails its MAC" in str(e.value) and "\n" not in e.value.diag.message_primary
        assert led.releases(role) == []  # nothing released from it
        assert led.spent(role, "day") == 0 and led.unreleased(role) == []  # refused before the scan: free
    with pytest.raises(LedgerDamaged):
        ladder_row(svc, Q)
    assert led.integrity_problems() == [
        f"ladder {row.id} (market) fails its MAC (its chain values were altered "
        "outside dpgate; it will not be served)"
    ]  # dpgate ledger check


def test_a_pre_mac_ladder_store_is_signed_at_first_open(tmp_path, caplog):
    led = Ledger(tmp_path / "ledger.sqlite3")  # a signed ledger
    old = LadderStore(led.path)  # a ladder store written without MACs
    row, _ = old.create(
        ladder="market",
        qkey="q",
        data_version=1,
        canonical="c",
        statement="s",
        version=[2.0, 0.1],
        levels=[2.0, 0.1],
        body={"cells": [[1.5, 2.5]]},
    )
    old.close()
    with caplog.at_level(logging.WARNING, logger="dpgate.ledger"):
        st = LadderStore(led.path, mac=led.mac)
    assert st.migrated == ["1 ladder row(s) had no MAC: signed at first open"]
    assert st.get("market", "q", 1).body == {"cells": [[1.5, 2.5]]}
    st.close()
    _edit_body(led.path, row.id)
    st = LadderStore(led.path, mac=led.mac)  # signed once: an edit is not re-signed
    assert st.migrated == []
    with pytest.raises(LedgerDamaged):
        st.get("market", "q", 1)
    db = sqlite3.connect(led.path)  # a row whose MAC was removed
    db.execute("UPDATE mt_ladders SET mac=NULL, body=? WHERE id=?", ('{"cells": [[1.5, 2.5]]}', row.id))
    db.commit()
    db.close()
    with pytest.raises(LedgerDamaged):
        st.get("market", "q", 1)
    st.close()
    led.close()


def test_ladder_rows_are_signed_beside_a_postgres_ledger(postgres):
    """The same on a Postgres ledger's schema (proxies that scale out share one key)."""
    dsn, schema = postgres.dsn, "t_" + uuid.uuid4().hex[:12]
    mac = Mac(os.urandom(32))
    st = LadderStore(None, dsn=dsn, schema=schema, mac=mac)
    row, _ = st.create(
        ladder="market",
        qkey="q",
        data_version=1,
        canonical="c",
        statement="s",
        version=[2.0, 0.1],
        levels=[2.0, 0.1],
        body={"cells": [[1.5, 2.5]]},
    )
    st.update(row.id, lambda r: (sorted(r.levels + [0.5], reverse=True), {"cells": [[1.5, 2.5, 3.5]]}))
    st.close()
    st = LadderStore(None, dsn=dsn, schema=schema, mac=mac)
    assert st.get("market", "q", 1).levels == [2.0, 0.5, 0.1]
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"UPDATE {schema}.mt_ladders SET body = replace(body, '3.5', '4.5')")
    with pytest.raises(LedgerDamaged):
        st.check("market", "q", 1)
    with pytest.raises(LedgerDamaged):
        LadderStore(None, dsn=dsn, schema=schema, mac=Mac(os.urandom(32)))  # another key
    st.close()
