"""Timeouts that stop work, and charge what ran: on DuckDB a statement
that times out after its scan started is charged ε with no answer and its worker
is free within 3 s of a 2 s timeout; catalog queries get the same timeout, run
on a cursor of their own (another role's catalog query does not wait), and the
server stops on the first SIGTERM while one runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import duckdb
import psycopg
import pytest

from proxy.backends import DuckDBBackend
from support.pg import free_port
from support.service import Service, make_config

SLOW_SCAN = "SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3"
SLOW_CATALOG = (
    "SELECT count(*) FROM pg_class, range(200000000) r, range(1000) s WHERE (r.range * s.range) % 7 = 3"
)


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    from mechanisms import SeededSource

    # the catalog's row cap raised so that SLOW_CATALOG (a long cross product) runs into the timeout
    cfg = make_config({"kind": "duckdb"}, limits={"statement_timeout_ms": 2000, "max_catalog_rows": 10**13})
    s = Service(
        cfg, tmp_path_factory.mktemp("state"), people_rows=1000, trips_rows=1000, source=SeededSource(17)
    ).start()
    yield s
    s.close()


def _ask(svc, sql, role="analyst"):
    with psycopg.connect(svc.dsn(role), autocommit=True, connect_timeout=10) as conn:
        return conn.execute(sql).fetchall()


def test_duckdb_timeout_charges_what_ran_and_frees_the_worker(svc):
    gw = svc.gw
    eps = gw.tier_of("other").epsilon
    before = gw.ledger.spent("other", "day")
    gw.backend._run = lambda cur, sql: DuckDBBackend._run(
        gw.backend, cur, SLOW_SCAN
    )  # the scan runs for minutes
    try:
        t0 = time.perf_counter()
        with pytest.raises(psycopg.Error) as e:
            _ask(svc, "SELECT COUNT(*) FROM pums WHERE age > 31", "other")
        elapsed = time.perf_counter() - t0
    finally:
        del gw.backend._run
    assert e.value.sqlstate == "57014" and "statement timeout (2 s)" in str(e.value)
    assert "was charged with no answer" in e.value.diag.message_detail
    assert 1.9 < elapsed < 3.0, elapsed
    assert gw.ledger.spent("other", "day") == before + eps  # the scan started: charged
    assert gw.backend.scans == 0  # its worker returned
    t0 = time.perf_counter()
    assert _ask(svc, "SELECT COUNT(*) FROM pums WHERE age > 31", "other")  # not free: runs, charged
    assert time.perf_counter() - t0 < 1.0
    assert gw.ledger.spent("other", "day") == before + 2 * eps and gw.ledger.integrity_check()


@pytest.mark.parametrize(
    "role, sql",
    [
        ("analyst", "SELECT MAX(age) FROM pums WHERE sex = 1"),  # MAX / MIN path
        ("analyst", "SELECT COUNT(*) FROM accounts WHERE balance > 1000"),  # per-record path
        ("bronze", "SELECT COUNT(*) FROM pums WHERE age > 40"),  # data-market ladder
    ],
)
def test_every_charging_path_charges_a_timed_out_scan(svc, role, sql):
    """The paths that charge after the scan (charge_and_record) charge a scan that
    started and timed out too, once, with no answer."""
    gw = svc.gw
    eps = gw.tier_of(role).epsilon
    before = gw.ledger.spent(role, gw.tier_of(role).period)
    gw.backend._run = lambda cur, q: DuckDBBackend._run(gw.backend, cur, SLOW_SCAN)
    try:
        with pytest.raises(psycopg.Error) as e:
            _ask(svc, sql, role)
    finally:
        del gw.backend._run
    assert e.value.sqlstate == "57014" and "charged" in e.value.diag.message_detail
    assert gw.ledger.spent(role, gw.tier_of(role).period) == pytest.approx(before + eps)
    assert gw.ledger.integrity_check()


def test_backend_failure_before_the_scan_charges_nothing(svc):
    gw = svc.gw
    before = gw.ledger.spent("other", "day")
    real = gw.backend._worker_cursor

    def down():
        raise __import__("proxy.backends", fromlist=["BackendError"]).BackendError("08006", "down")

    gw.backend._worker_cursor = down
    try:
        with pytest.raises(psycopg.Error) as e:
            _ask(svc, "SELECT COUNT(*) FROM pums WHERE age > 32", "other")
    finally:
        gw.backend._worker_cursor = real
    assert e.value.sqlstate == "08006" and gw.ledger.spent("other", "day") == before
    assert e.value.diag.message_detail is None


def test_catalog_query_times_out_and_does_not_block_others(svc):
    out = {}

    def slow():
        t0 = time.perf_counter()
        try:
            _ask(svc, SLOW_CATALOG, "analyst")
        except psycopg.Error as e:
            out["err"] = e
        out["slow"] = time.perf_counter() - t0

    th = threading.Thread(target=slow)
    th.start()
    time.sleep(0.5)
    t0 = time.perf_counter()
    assert _ask(svc, "SELECT current_user", "other") == [("other",)]  # no global lock
    quick = time.perf_counter() - t0
    th.join(10)
    assert quick < 1.0, quick
    assert out["err"].sqlstate == "57014" and "statement timeout (2 s)" in str(out["err"])
    assert 1.9 < out["slow"] < 3.0, out["slow"]
    t0 = time.perf_counter()
    assert _ask(svc, "SELECT current_user", "analyst") == [("analyst",)]
    assert time.perf_counter() - t0 < 1.0


def test_server_stops_on_the_first_sigterm_during_a_long_catalog_query(tmp_path):
    port = free_port()
    cfg = tmp_path / "dpgate.toml"
    cfg.write_text(
        f'[server]\nauth = "trust"\nport = {port}\nstate_dir = "{tmp_path / "state"}"\n'
        "[server.limits]\nstatement_timeout_ms = 600000\nshutdown_grace_s = 1\n"
        '[tiers.d]\nepsilon = 1\nbudget = 50\nperiod = "day"\n[roles.analyst]\ntier = "d"\n'
        '[tables.t.columns]\nage = { type = "int", lower = 0, upper = 9 }\n'
    )
    (tmp_path / "state").mkdir()  # the declared table exists in the backend (checked at start)
    duckdb.connect(str(tmp_path / "state" / "demo.duckdb")).execute("CREATE TABLE t (age INTEGER)").close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        dsn = f"host=127.0.0.1 port={port} dbname=demo user=analyst sslmode=disable"
        deadline = time.time() + 60
        while True:
            try:
                conn = psycopg.connect(dsn, autocommit=True, connect_timeout=2)
                break
            except psycopg.OperationalError:
                if time.time() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        errors = []

        def run():
            try:
                conn.execute(SLOW_CATALOG)
            except psycopg.Error as e:
                errors.append(e)

        th = threading.Thread(target=run)
        th.start()
        time.sleep(1.0)
        t0 = time.time()
        proc.send_signal(signal.SIGTERM)  # once
        rest = proc.communicate(timeout=30)[0]
        took = time.time() - t0
        th.join(10)
        assert proc.returncode == 0, rest
        assert took < 1 + 3, (took, rest)  # grace 1 s, then the query is interrupted
        assert rest.rstrip().endswith("dpgate: stopped") and errors
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_ladder_refusal_comes_before_the_scan(svc):
    """What a ladder tier cannot be served (VAR_POP: no ladder chain) is refused before any
    scan (a refusal after the scan would be a free timing probe)."""
    gw = svc.gw
    calls = []
    real = gw.backend.fetch

    async def counting(sql, *a, **k):
        calls.append(sql)
        return await real(sql, *a, **k)

    gw.backend.fetch = counting
    try:
        with pytest.raises(psycopg.Error) as e:
            _ask(svc, "SELECT sex, VAR_POP(age) FROM pums GROUP BY sex", "bronze")
    finally:
        gw.backend.fetch = real
    assert e.value.sqlstate == "0A000" and calls == []
