"""Fixtures for the real-client tests: one dpgate per backend (shared by every client in
this directory, so all clients see the same releases), a TLS-enabled dpgate, and an
undeclared ``secret_salaries`` table created directly in each backend."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psycopg
import pytest

from mechanisms import SeededSource
from proxy.pipeline.orchestrator import Connection
from support.service import HELPER, Service, make_config

from . import outcomes
from .scenario import SECRET


def _start(request, tmp_path_factory, kind: str, tls: dict | None = None) -> Service:
    if kind == "postgres":
        backend = {"kind": "postgres", "dsn": request.getfixturevalue("postgres").dsn, "pool_size": 4}
    else:
        backend = {"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "demo.duckdb")}
    data = make_config(backend)
    if tls:
        data["server"]["tls"] = tls
    svc = Service(data, tmp_path_factory.mktemp("state"), source=SeededSource(20261122)).start()
    svc.kind = kind
    svc.tls = bool(tls)
    svc.reference = {}  # the first client's answers; every other client must match them
    _create_secret(request, svc)
    return svc


def _create_secret(request, svc: Service) -> None:
    """A table that exists in the backend but not in dpgate's config."""
    sql = f"CREATE TABLE IF NOT EXISTS {SECRET} (x INT); INSERT INTO {SECRET} VALUES (100000), (250000)"
    if svc.kind == "duckdb":
        svc.gw.backend.execute_script(sql)
    else:
        with psycopg.connect(request.getfixturevalue("postgres").dsn, autocommit=True) as conn:
            conn.execute(sql)


def _close(svc: Service) -> None:
    """Stop the service, after checking that every client disconnected cleanly."""
    deadline = time.monotonic() + 5
    while svc.server.connection_count and time.monotonic() < deadline:
        time.sleep(0.05)
    left = svc.server.connection_count
    svc.close()
    assert left == 0, f"{left} client connection(s) still open at the end of the client tests"


@pytest.fixture(scope="package", params=["duckdb", "postgres"])
def svc(request, tmp_path_factory):
    """dpgate on each backend, shared by all client tests of this package."""
    s = _start(request, tmp_path_factory, request.param)
    yield s
    try:
        _close(s)
    finally:
        if s.kind == "postgres":
            with psycopg.connect(request.getfixturevalue("postgres").dsn, autocommit=True) as conn:
                conn.execute(f"DROP TABLE IF EXISTS {SECRET}")


@pytest.fixture(scope="package")
def tls_svc(request, tmp_path_factory):
    """dpgate with TLS (self-signed certificate) on DuckDB."""
    from wire.certs import make_cert

    cert, key = make_cert(tmp_path_factory.mktemp("tls"))
    s = _start(request, tmp_path_factory, "duckdb", tls={"cert": str(cert), "key": str(key)})
    yield s
    _close(s)


# ---------------------------------------------------------------- the compatibility table's outcomes


def _module(item) -> str:
    return item.nodeid.split("::")[0].rsplit("/", 1)[-1]


@pytest.hookimpl(trylast=True)  # after the fixtures' reordering by parameter
def pytest_collection_modifyitems(items):
    """The table's check against this run's outcomes runs after every client test."""
    last = [i for i in items if _module(i) == "test_compatibility_table.py"]
    items[:] = [i for i in items if i not in last] + last


def pytest_deselected(items):
    for i in items:
        outcomes.DESELECTED[_module(i)].add(i.nodeid)


def pytest_collection_finish(session):
    for i in session.items:
        outcomes.SELECTED[_module(i)].add(i.nodeid)


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcomes.RAN.add(report.nodeid)
        # an expected failure (xfail) keeps what it recorded: the client's own limitation
        outcomes.commit(report.when == "call" and (report.passed or hasattr(report, "wasxfail")))


def pytest_sessionfinish(session):
    path = os.environ.get("DPGATE_CLIENT_OUTCOMES")
    if path:
        Path(path).write_text(json.dumps(outcomes.snapshot(), indent=1, ensure_ascii=False))
    path = os.environ.get("DPGATE_CLIENT_CORPUS")
    if path:
        corpus = {c: outcomes.STATEMENTS[c] for c in outcomes.CLIENTS if outcomes.STATEMENTS.get(c)}
        Path(path).write_text(json.dumps(corpus, indent=1, ensure_ascii=False) + "\n")


@pytest.fixture(scope="package", autouse=True)
def _statements_sent():
    """Note each statement a client sends to the plaintext DuckDB service (not the tests' own
    :func:`support.service.ask`): the per-client corpus ``bench.sql_coverage`` replays."""
    original, describe_ = Connection.execute, Connection.describe

    def mine(conn) -> bool:
        return (
            conn.gw.config.backend.kind == "duckdb"
            and conn.gw.config.server.tls.cert is None
            and conn.session.settings.get("application_name") != HELPER
        )

    async def execute(self, sql, params):
        try:
            result = await original(self, sql, params)
        except Exception as e:
            if mine(self):
                outcomes.sent(sql, params, getattr(e, "sqlstate", "XX000"))
            raise
        if mine(self):
            outcomes.sent(sql, params, "answered")
        return result

    async def describe(self, sql, oids):  # refused at Describe: never executed
        try:
            return await describe_(self, sql, oids)
        except Exception as e:
            if mine(self):
                outcomes.sent(sql, [], getattr(e, "sqlstate", "XX000"))
            raise

    Connection.execute, Connection.describe = execute, describe
    yield
    Connection.execute, Connection.describe = original, describe_
