"""The privacy unit's salt never reaches the database as SQL text (rewriter/params.py,
proxy/backends/postgres.py): a real Postgres logs every statement (``log_statement =
'all'``, with bound parameters' values, and every connection), dpgate answers per-person
questions of every kind that bounds a unit by the keyed hash — central, MAX/MIN,
COUNT(DISTINCT …), partition selection — before and after a new data version (a new
salt), and the log holds the rewritten scans but neither salt."""

from __future__ import annotations

import time

import psycopg
import pytest

import rewriter
from mechanisms import SeededSource
from support.pg import TempPostgres
from support.service import Service, ask, make_config

QUESTIONS = [
    "SELECT item, COUNT(*), AVG(amount) FROM purchases WHERE item <= 30 GROUP BY item",  # G < cells: cells by hash
    "SELECT COUNT(DISTINCT item) FROM purchases",  # rows by hash
    "SELECT store, MAX(amount) FROM purchases GROUP BY store",  # histogram scan
    "SELECT city, COUNT(*) FROM purchases GROUP BY city",  # partition selection
]


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    pg = TempPostgres().start()
    try:
        with psycopg.connect(pg.dsn, autocommit=True) as c:
            for setting in (
                "log_statement = 'all'",
                "log_connections = on",
                "log_min_error_statement = error",
            ):
                c.execute(f"ALTER SYSTEM SET {setting}")
            c.execute("SELECT pg_reload_conf()")
        svc = Service(
            make_config({"kind": "postgres", "dsn": pg.dsn, "pool_size": 2}),
            tmp_path_factory.mktemp("state"),
            source=SeededSource(43),
        ).start()
        try:
            yield pg, svc
        finally:
            svc.close()
    finally:
        pg.stop()


def _log(pg: TempPostgres) -> str:
    time.sleep(0.5)  # the logging collector writes asynchronously
    return (pg.dir / "log").read_text(errors="replace")


def test_the_postgres_statement_log_never_holds_the_salt(logged):
    pg, svc = logged
    ledger = svc.gw.ledger
    salts = []
    for _ in range(2):  # a new data version: a new salt, new connections
        salts.append(ledger.unit_salt(ledger.data_version()))
        for sql in QUESTIONS:
            rows, notes = ask(svc, sql, "other")
            assert rows and "privacy unit: customer_id" in notes[-1], sql
        ledger.advance_data_version()
    assert salts[0] != salts[1]
    log = _log(pg)
    for salt in salts:
        assert salt not in log
    assert log.lower().count("current_setting('dpgate.unit_salt')") >= 2 * len(
        QUESTIONS
    )  # the scans were logged


def test_each_scan_runs_with_its_own_salt_whatever_the_pool_carries(logged):
    """Scans keyed by two salts, alternately, on the pool's connections: each connection
    that carries the other salt is replaced, so every scan keeps its own salt's rows."""
    pg, svc = logged
    plan = rewriter.build_plan(
        rewriter.parse("SELECT item, COUNT(*) FROM purchases WHERE item <= 30 GROUP BY item"), svc.gw.config
    )
    a, b = (rewriter.to_sql(plan, "postgres", salt) for salt in ("0a1b", "2c3d"))
    fetch = lambda sql: sorted(svc._call(svc.gw.backend.fetch(sql)))
    first_a, first_b = fetch(a), fetch(b)
    assert first_a != first_b  # the salt chooses the cells a customer keeps
    for _ in range(3):
        assert fetch(a) == first_a and fetch(b) == first_b
