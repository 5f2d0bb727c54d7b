"""Charge what ran, on Spark: a scan Spark refuses while parsing or analysing it (an unknown
table or column: pyspark's ``AnalysisException``; bad syntax: ``ParseException``) read no
row, so the client gets Spark's SQLSTATE of class 42 and the ledger charges nothing; the
statement log says the reservation was refunded. A scan Spark runs is charged."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import psycopg
import pytest

from proxy.backends import BackendRefused
from proxy.backends.spark import SparkBackend
from support.service import Service, make_config

VIEW = "dpgate_refused_ok"


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def service(spark_connect, tmp_path_factory):
    spark_connect.session().sql(
        f"CREATE OR REPLACE VIEW {VIEW} AS SELECT CAST(id % 90 AS INT) AS age FROM range(200)"
    )
    cfg = make_config(
        {"kind": "spark", "remote": spark_connect.remote}, limits={"statement_timeout_ms": 60000}
    )
    cfg["demo"] = False
    cfg["server"]["log_format"] = "json"
    del cfg["tables"]["trips"]
    for role in cfg["roles"].values():
        role.pop("insert", None)
    age = {"type": "int", "lower": 0, "upper": 100}
    cfg["tables"]["ok"] = {"source": VIEW, "columns": {"age": age}}
    cfg["tables"]["no_table"] = {"source": "dpgate_no_such_relation", "columns": {"age": age}}
    cfg["tables"]["no_column"] = {"source": VIEW, "columns": {"height": age}}
    svc = Service(cfg, tmp_path_factory.mktemp("spark_refused") / "state").start()
    yield svc
    svc.close()


def _run(svc, sql: str):
    """(the error or None, the statement's JSON log record)."""
    log = logging.getLogger("dpgate.statements")
    cap, old = _Capture(), log.level
    log.addHandler(cap)
    log.setLevel(logging.INFO)
    err = None
    try:
        with psycopg.connect(svc.dsn("analyst"), autocommit=True, connect_timeout=10) as c:
            try:
                c.execute(sql).fetchall()
            except psycopg.Error as e:
                err = e
        deadline = time.monotonic() + 10
        while not cap.lines and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        log.removeHandler(cap)
        log.setLevel(old)
    return err, json.loads(cap.lines[-1])


@pytest.mark.parametrize(
    "table, column, state", [("no_table", "age", "42P01"), ("no_column", "height", "42703")]
)
def test_a_scan_spark_refuses_while_analysing_charges_nothing(service, table, column, state):
    tier = service.gw.tier_of("analyst")
    before = service.gw.ledger.spent("analyst", tier.period)
    err, rec = _run(service, f"SELECT COUNT(*) FROM {table} WHERE {column} > 20")
    assert err is not None and err.sqlstate == state, err
    assert "nothing was charged" in str(err) and "check-config --backend" in err.diag.message_hint
    assert service.gw.ledger.spent("analyst", tier.period) == before
    assert service.gw.ledger.unreleased("analyst") == []
    assert (
        rec["decision"] == f"error {state}" and rec["ledger"] == "refunded" and rec["epsilon"] == tier.epsilon
    )


def test_a_scan_spark_runs_is_charged(service):
    tier = service.gw.tier_of("analyst")
    before = service.gw.ledger.spent("analyst", tier.period)
    err, rec = _run(service, "SELECT COUNT(*) FROM ok WHERE age > 21")
    assert err is None and rec["ledger"] == "charged"
    assert service.gw.ledger.spent("analyst", tier.period) == before + tier.epsilon


def test_a_statement_spark_cannot_parse_is_refused_42601(spark_connect):
    """pyspark's Connect ``ParseException``: refused before reading a row, SQLSTATE 42601."""
    backend = SparkBackend(spark_connect.remote)
    timing: dict = {}
    try:
        with pytest.raises(BackendRefused) as e:
            asyncio.run(backend.fetch("SELEC age FROM dpgate_refused_ok", 60, timing=timing))
    finally:
        asyncio.run(backend.close())
    assert e.value.sqlstate == "42601" and "nothing was charged" in e.value.message
