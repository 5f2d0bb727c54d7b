"""Backend faults: down, slow (beyond the statement timeout), cancelled — a clear
SQLSTATE, the proxy keeps serving and reconnects. Charge what ran: a backend
unreachable before the scan starts charges nothing; a scan that started and then
timed out or was cancelled is charged ε with no answer (its time was observable),
and running it again is charged again."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import psycopg
import pytest

from support.pg import TempPostgres
from support.service import Service, make_config


@pytest.fixture
def pg_service(tmp_path):
    from mechanisms import SeededSource

    pg = TempPostgres().start()
    cfg = make_config(
        {"kind": "postgres", "dsn": pg.dsn, "pool_size": 2}, limits={"statement_timeout_ms": 1500}
    )
    svc = Service(cfg, tmp_path / "state", people_rows=1000, source=SeededSource(3)).start()
    yield svc, pg
    svc.close()
    pg.stop()


def _ask(svc, sql, role="analyst"):
    with psycopg.connect(svc.dsn(role), autocommit=True, connect_timeout=10) as conn:
        return conn.execute(sql).fetchall()


def test_backend_down_then_back(pg_service):
    svc, pg = pg_service
    assert _ask(svc, "SELECT COUNT(*) FROM pums WHERE age > 20")
    spent = svc.gw.ledger.spent("analyst", "day")
    pg.kill_and_wait()
    with pytest.raises(psycopg.Error) as e:
        _ask(svc, "SELECT COUNT(*) FROM pums WHERE age > 21")
    assert e.value.sqlstate == "08006" and "nothing was charged" in str(e.value)
    assert svc.gw.ledger.spent("analyst", "day") == spent
    # Session statements and catalog queries keep working while the backend is down.
    assert _ask(svc, "SELECT 1") == [(1,)]
    # The repeat of an earlier release is served from the store without the backend.
    assert _ask(svc, "SELECT COUNT(*) FROM pums WHERE age > 20")
    pg.resume()
    deadline = time.time() + 30
    while True:
        try:
            rows = _ask(svc, "SELECT COUNT(*) FROM pums WHERE age > 21")
            break
        except psycopg.Error:
            if time.time() > deadline:
                raise
            time.sleep(0.5)
    assert rows and svc.gw.ledger.spent("analyst", "day") == spent + 1


def _eps(svc, role):
    return svc.gw.tier_of(role).epsilon


def test_statement_timeout_charges_what_ran(pg_service):
    svc, pg = pg_service
    eps = _eps(svc, "analyst")
    locker = psycopg.connect(pg.dsn)  # a real slow query: the table is locked
    locker.execute("LOCK TABLE pums IN ACCESS EXCLUSIVE MODE")
    try:
        t0 = time.time()
        with pytest.raises(psycopg.Error) as e:
            _ask(svc, "SELECT COUNT(*) FROM pums WHERE age > 33")
        assert e.value.sqlstate == "57014" and time.time() - t0 < 10
        assert "statement timeout (1.5 s)" in str(e.value)  # not "(0 s)"
        assert svc.gw.ledger.spent("analyst", "day") == eps  # the scan started: charged
        assert [u["epsilon"] for u in svc.gw.ledger.unreleased("analyst")] == [eps]
        # Other tables keep answering meanwhile.
        assert _ask(svc, "SELECT COUNT(*) FROM people")
    finally:
        locker.rollback()
        locker.close()
    # the repeat is not free: nothing was released to serve it from
    assert _ask(svc, "SELECT COUNT(*) FROM pums WHERE age > 33")
    assert svc.gw.ledger.spent("analyst", "day") == 3 * eps and svc.gw.ledger.integrity_check()


def test_cancel_request_charges_what_ran(pg_service):
    svc, pg = pg_service
    locker = psycopg.connect(pg.dsn)
    locker.execute("LOCK TABLE pums IN ACCESS EXCLUSIVE MODE")

    async def main():
        conn = await asyncpg.connect(svc.url("other"))
        try:
            with pytest.raises(asyncio.TimeoutError):
                await conn.fetch("SELECT COUNT(*) FROM pums WHERE age > 44", timeout=0.5)
            return await conn.fetchval("SELECT 1")  # the connection is still usable
        finally:
            await conn.close()

    try:
        assert asyncio.run(main()) == 1
    finally:
        locker.rollback()
        locker.close()
    deadline = time.time() + 5  # the cancel settles on the ledger's thread
    while svc.gw.ledger.spent("other", "day") == 0 and time.time() < deadline:
        time.sleep(0.05)
    assert svc.gw.ledger.spent("other", "day") == _eps(svc, "other")
    assert svc.gw.ledger.integrity_check()
