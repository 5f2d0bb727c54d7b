"""A Postgres ledger server that crashes right after a reply keeps what the client
received: the release is durable on the ledger before the answer is sent, so the
same statement afterwards is a repeat (the same answer, ε 0), never a second draw."""

from __future__ import annotations

import psycopg

from mechanisms import SeededSource


def _run(svc, sql):
    notes = []
    with psycopg.connect(svc.dsn("analyst"), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        rows = c.execute(sql).fetchall()
    return rows, notes[0]


def test_an_answer_sent_survives_an_immediate_stop_of_the_ledger_server(tmp_path_factory):
    from support.pg import TempPostgres
    from support.service import Service, make_config

    # the WAL writer flushes asynchronous commits only every 10 s: a commit the ledger
    # did not wait for is still in the server's memory when it is stopped
    pg = TempPostgres(options="-c wal_writer_delay=10000 -c wal_writer_flush_after=0").start()
    svc = None
    try:
        cfg = make_config({"kind": "duckdb", "path": str(tmp_path_factory.mktemp("c") / "d.duckdb")})
        cfg["ledger"] = {"kind": "postgres", "dsn": pg.dsn}
        svc = Service(cfg, tmp_path_factory.mktemp("state_c"), source=SeededSource(5)).start()
        sql = "SELECT COUNT(*) FROM pums WHERE income > 424242"
        first, note = _run(svc, sql)
        assert "ε charged 1" in note
        pg.kill_and_wait()  # pg_ctl stop -m immediate, right after the reply
        pg.resume()
        again, note = _run(svc, sql)
        assert again == first and "ε charged 0 (repeat" in note
        assert svc.gw.ledger.open_reservations() == [] and svc.gw.ledger.integrity_check()
    finally:
        if svc is not None:
            svc.close()
        pg.stop()
