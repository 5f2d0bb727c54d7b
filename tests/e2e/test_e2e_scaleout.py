"""Proxies that scale out: two dpgate processes (here two services) share one
Postgres ledger (``[ledger] kind = "postgres"``) — one budget per role across
both, and a release made by one is the other's repeat (same answer, no charge)."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from mechanisms import SeededSource


@pytest.fixture(scope="module")
def two_proxies(postgres, tmp_path_factory):
    from support.service import Service, make_config

    ledger = {
        "kind": "postgres",
        "dsn": postgres.dsn,
        "schema": "scale_" + uuid.uuid4().hex[:8],
        "key_file": str(tmp_path_factory.mktemp("key") / "ledger.key"),
    }  # one MAC key, shared
    svcs = []
    for name, seed in (("a", 1), ("b", 2)):
        cfg = make_config({"kind": "duckdb", "path": str(tmp_path_factory.mktemp(name) / "d.duckdb")})
        cfg["ledger"] = ledger
        svcs.append(Service(cfg, tmp_path_factory.mktemp(f"state_{name}"), source=SeededSource(seed)).start())
    yield svcs
    for s in svcs:
        s.close()


def _run(svc, sql):
    notes = []
    with psycopg.connect(svc.dsn("tiny"), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        rows = c.execute(sql).fetchall()
    return rows, notes[0]


def test_one_budget_and_one_release_store_across_proxies(two_proxies):
    a, b = two_proxies
    q1 = "SELECT sex, COUNT(*) FROM pums GROUP BY sex"
    rows_a, note_a = _run(a, q1)
    rows_b, note_b = _run(b, q1)  # B's own noise source differs: a repeat
    assert rows_b == rows_a and "ε charged 1" in note_a and "ε charged 0" in note_b
    _, note = _run(b, "SELECT COUNT(*) FROM pums WHERE age > 40")
    assert "ε charged 1" in note and "budget left 0.5" in note
    with pytest.raises(psycopg.errors.lookup("53400")):  # tiny's budget of 2.5 is spent on A too
        _run(a, "SELECT COUNT(*) FROM pums WHERE age > 50")
    for svc in (a, b):
        assert svc.gw.ledger.spent("tiny", "day") == 2.0 and svc.gw.ledger.integrity_check()
    assert a.gw.ledger.dsn == b.gw.ledger.dsn and a.gw.ledger.path is None


def test_a_data_version_advanced_on_one_proxy_holds_for_both(two_proxies):
    a, b = two_proxies
    dv = a.gw.ledger.advance_data_version()
    assert b.gw.ledger.data_version() == dv


def test_a_ledger_outage_is_a_clear_error_and_the_proxy_recovers(tmp_path_factory):
    from support.pg import TempPostgres
    from support.service import Service, make_config

    pg = TempPostgres().start()
    svc = None
    try:
        cfg = make_config({"kind": "duckdb", "path": str(tmp_path_factory.mktemp("o") / "d.duckdb")})
        cfg["ledger"] = {"kind": "postgres", "dsn": pg.dsn}
        svc = Service(cfg, tmp_path_factory.mktemp("state_o"), source=SeededSource(3)).start()
        _run(svc, "SELECT COUNT(*) FROM pums WHERE age > 20")
        pg.kill_and_wait()
        with pytest.raises(psycopg.errors.lookup("08006")) as e:
            _run(svc, "SELECT COUNT(*) FROM pums WHERE age > 30")
        assert "privacy ledger is unavailable" in str(e.value)
        pg.resume()
        rows, note = _run(svc, "SELECT COUNT(*) FROM pums WHERE age > 30")
        assert "ε charged 1" in note and len(rows) == 1
    finally:
        if svc is not None:
            svc.close()
        pg.stop()
