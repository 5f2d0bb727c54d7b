"""Charge what ran: a backend statement refused before it read a row (it did not bind: a
declared source the backend does not have; or the backend role lacks a privilege) charges
nothing, the client gets a SQLSTATE of class 42 (42501 naming the table and the GRANT it
needs), and the statement log says the ledger refunded the reservation. The start-up check
(``check-config --backend``) runs each source exactly as the scans read it, with LIMIT 0,
so such a config is caught before it serves."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid

import psycopg
import pytest

from proxy.backends import open_backend
from proxy.cli.schema_check import check_backend_schema
from support.service import Service, make_config


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _logged(svc, role: str, sql: str):
    """Run ``sql`` as ``role``: (the error, the statement's JSON log record)."""
    log = logging.getLogger("dpgate.statements")
    cap, old = _Capture(), log.level
    log.addHandler(cap)
    log.setLevel(logging.INFO)
    try:
        with psycopg.connect(svc.dsn(role), autocommit=True) as c:
            with pytest.raises(psycopg.Error) as e:
                c.execute(sql)
        deadline = time.monotonic() + 10
        while not cap.lines and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        log.removeHandler(cap)
        log.setLevel(old)
    return e.value, json.loads(cap.lines[-1])


def _ghost_config(tmp_path, source: str) -> dict:
    cfg = make_config({"kind": "duckdb", "path": str(tmp_path / "d.duckdb")})
    cfg["server"]["log_format"] = "json"
    cfg["tables"]["ghost"] = {"source": source, "columns": {"age": {"type": "int", "lower": 0, "upper": 100}}}
    return cfg


@pytest.mark.parametrize("source", ["(SELECT age FROM pums WHERE age > 1)", "no_such_relation"])
def test_a_source_the_backend_cannot_bind_charges_nothing(tmp_path, source):
    svc = Service(_ghost_config(tmp_path, source), tmp_path / "state", people_rows=500).start()
    try:
        tier = svc.gw.tier_of("analyst")
        err, rec = _logged(svc, "analyst", "SELECT COUNT(*) FROM ghost WHERE age > 20")
        assert err.sqlstate == "42P01" and "nothing was charged" in str(err), err
        assert "check-config --backend" in err.diag.message_hint
        assert svc.gw.ledger.spent("analyst", tier.period) == 0
        assert svc.gw.ledger.unreleased("analyst") == []
        assert rec["decision"] == "error 42P01" and rec["ledger"] == "refunded" and rec["epsilon"] == 1.0
        # a scan that read rows and then failed is still charged, and the log says so
        with psycopg.connect(svc.dsn("analyst"), autocommit=True) as c:
            assert c.execute("SELECT COUNT(*) FROM pums WHERE age > 20").fetchone()[0] > 0
        assert svc.gw.ledger.spent("analyst", tier.period) == tier.epsilon
    finally:
        svc.close()


def test_the_start_check_runs_each_source_as_the_scans_read_it(tmp_path):
    """A source that DESCRIBEs as written but not as the scan renders it is a start-up error."""
    svc = Service(
        _ghost_config(tmp_path, "(SELECT age FROM pums WHERE age > 1)"), tmp_path / "state", people_rows=500
    ).start()
    cfg = svc.cfg
    svc.close()
    backend = open_backend(cfg, tmp_path / "state")

    async def check():
        await backend.connect()
        try:
            return await check_backend_schema(cfg, backend, "my.toml")
        finally:
            await backend.close()

    problems = asyncio.run(check())
    assert len(problems) == 1 and problems[0].startswith("my.toml: tables.ghost: "), problems


def test_a_missing_grant_on_postgres_is_42501_naming_the_table_and_the_grant(tmp_path, postgres, monkeypatch):
    """The backend role may read no declared table: a DP statement and a public table's read
    are 42501 naming the table and the GRANT the owner runs, nothing charged."""
    from proxy import demo
    from proxy.demo import trips

    table, role = "ops_" + uuid.uuid4().hex[:8], "ro_" + uuid.uuid4().hex[:8]
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} AS SELECT (i % 90)::int AS age FROM generate_series(1, 100) i")
        c.execute(f"CREATE TABLE {table}_pub AS SELECT i AS id FROM generate_series(1, 3) i")
        c.execute(f"CREATE ROLE {role} LOGIN")
        c.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
    dsn = postgres.dsn.replace("postgresql://postgres@", f"postgresql://{role}@")
    cfg = make_config({"kind": "postgres", "dsn": dsn, "pool_size": 2})
    cfg["tables"][table] = {"columns": {"age": {"type": "int", "lower": 0, "upper": 100}}}
    cfg["tables"][table + "_pub"] = {"public": True, "key": "id", "columns": {"id": {"type": "int"}}}

    async def nothing(*a, **k):
        return None

    monkeypatch.setattr(demo, "load_postgres", nothing)  # the role cannot create the demo
    monkeypatch.setattr(trips, "load_postgres", nothing)
    svc = Service(cfg, tmp_path / "state").start()
    try:
        with psycopg.connect(svc.dsn("analyst"), autocommit=True) as c:
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
                c.execute(f"SELECT COUNT(*) FROM {table} WHERE age > 20")
        assert f"may not read table {table}" in str(e.value) and "nothing was charged" in str(e.value)
        assert e.value.diag.message_hint.endswith(f'GRANT SELECT ON TABLE "{table}" TO "{role}";')
        with psycopg.connect(svc.dsn("analyst"), autocommit=True) as c:
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
                c.execute(f"SELECT id FROM {table}_pub")
        assert e.value.diag.message_hint.endswith(f'GRANT SELECT ON TABLE "{table}_pub" TO "{role}";')
        assert svc.gw.ledger.spent("analyst", svc.gw.tier_of("analyst").period) == 0
        assert svc.gw.ledger.unreleased("analyst") == []
    finally:
        svc.close()
