"""A fourth backend added in a test: an in-memory SQLite database (``sqlite_backend.py``) and
its SQL dialect (``sqlite_dialect.py``), made known by one ``register`` line. Statements go
through the real service (wire, pipeline, rewriter, mechanisms, ledger) from psycopg and are
released as on any backend; the plan's scan in SQLite's dialect returns the cells DuckDB's
returns; a statement the toy dialect cannot spell (a privacy unit's keyed hash) is refused."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from toy_backend.sqlite_backend import SQLiteBackend

from config import parse_config
from mechanisms import SeededSource
from proxy.backends import DuckDBBackend, backend_class, register
from proxy.gateway import Gateway
from proxy.wire.auth import make_verifier
from proxy.wire.server import Server
from rewriter import build_plan, parse, to_sql
from support.service import Service

register(SQLiteBackend)  # the one registry line

REGIONS = ["north", "south", "east", "west"]
REGIONS_SORTED = sorted(REGIONS)
ROWS = [(REGIONS[i % 4] if i % 17 else None, (i * 37) % 120 if i % 11 else None) for i in range(400)]
CREATE = "CREATE TABLE sales (region TEXT, amount INTEGER);"
INSERT = "INSERT INTO sales VALUES (?, ?)"
STATEMENTS = [
    "SELECT region, COUNT(*) AS n FROM sales GROUP BY region ORDER BY region",
    "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region",
    "SELECT COUNT(*) AS n, SUM(amount) AS total FROM sales WHERE region <> 'west'",
]


def _config(kind: str) -> dict:
    return {
        "server": {"host": "127.0.0.1", "port": 0, "database": "toy", "auth": "scram"},
        "backend": {"kind": kind},
        "tiers": {"default": {"epsilon": 1.0, "budget": 50.0, "period": "day"}},
        "roles": {"analyst": {"tier": "default", "scram": make_verifier("pw", iterations=4096)}},
        "tables": {
            "sales": {
                "columns": {
                    "region": {"type": "text", "domain": REGIONS},
                    "amount": {"type": "int", "lower": 0, "upper": 100},
                }
            }
        },
    }


class _Toy(Service):
    """The service on a backend the config schema does not list: the kind is set on the
    parsed config, and the gateway opens it through the registry like any other."""

    def __init__(self, kind: str, state_dir, source):
        super().__init__(_config("duckdb"), state_dir, source=source)
        self.cfg = self.cfg.model_copy(update={"backend": self.cfg.backend.model_copy(update={"kind": kind})})

    async def _start(self, port: int):
        self.gw = Gateway(self.cfg, self.state_dir, source=self.source)
        await self.gw.start()
        self.gw.backend.load(CREATE, ROWS, INSERT)
        self.server = Server(self.gw.handler_factory, authenticator=self.gw, host="127.0.0.1", port=port)
        await self.server.start()


def _dsn(svc: _Toy) -> str:
    return f"host=127.0.0.1 port={svc.port} dbname=toy user=analyst password=pw sslmode=disable"


def _answers(svc: _Toy) -> list[tuple[list, list[str]]]:
    out = []
    with psycopg.connect(_dsn(svc), autocommit=True) as c:
        for sql in STATEMENTS:
            notes: list[str] = []
            c.add_notice_handler(lambda d, notes=notes: notes.append(d.message_primary))
            out.append((c.execute(sql).fetchall(), notes))
    return out


def _run(kind: str, tmp_path) -> tuple[list, _Toy]:
    svc = _Toy(kind, tmp_path / kind, SeededSource(36)).start()
    try:
        return _answers(svc), svc
    finally:
        svc.close()


def _true(region=None, column=None):
    kept = [(k, v) for k, v in ROWS if (k == region if region else k != "west")]
    return len(kept) if column is None else sum(min(max(v, 0), 100) for _, v in kept if v is not None)


def test_a_fourth_backend_answers_through_the_service(tmp_path):
    answers, svc = _run("sqlite", tmp_path)
    (counts, n1), (sums, n2), (whole, n3) = answers
    assert svc.gw.backend.fetches == len(STATEMENTS)  # every scan ran on SQLite
    assert svc.gw.backend.dialect == "sqlite"
    assert [r for r, _ in counts] == REGIONS_SORTED == [r for r, _ in sums]  # the public domain
    assert all(notes and "ε" in notes[0] for notes in (n1, n2, n3))  # charged, as on any backend
    # COUNT: two-sided geometric noise at ε = 1: P(|Z| ≥ 30) = 2e^-30/(1+e^-1) < 1e-12 a cell.
    assert all(abs(n - _true(r)) < 30 for r, n in counts)
    # SUM over [0, 100]: discrete Laplace of scale 100/ε: P(|Z| ≥ 3000) < 2e^-30 a cell.
    assert all(abs(t - _true(r, "amount")) < 3000 for r, t in sums)
    ((n, t),) = whole  # ε split over two measures: scales 2 and 200, same tail
    assert abs(n - _true()) < 60 and abs(t - _true(column="amount")) < 6000


def test_the_fourth_backend_scans_the_cells_duckdb_scans(tmp_path):
    """The seam's contract: the plan's scan in the toy dialect, run by the toy backend's fetch,
    returns the cells the DuckDB backend returns for its own SQL."""
    cfg = parse_config(_config("duckdb"), "toy")
    toy, duck = SQLiteBackend(), DuckDBBackend(None)
    toy.load(CREATE, ROWS, INSERT)
    duck.execute_script(CREATE)
    cur = duck._cursor()
    cur.executemany(INSERT, ROWS)
    cur.close()

    async def both(sql):
        plan = build_plan(parse(sql), cfg, [])
        return (
            await toy.fetch(to_sql(plan, toy.dialect), 10),
            await duck.fetch(to_sql(plan, duck.dialect), 10),
        )

    try:
        for sql in STATEMENTS:
            mine, theirs = asyncio.run(both(sql))
            assert sorted(mine, key=repr) == sorted(theirs, key=repr), sql
        assert toy.fetches == len(STATEMENTS)
    finally:
        asyncio.run(toy.close())
        asyncio.run(duck.close())


def test_a_privacy_unit_is_refused_on_a_backend_without_a_keyed_hash(tmp_path):
    """The toy dialect has no keyed hash: bounding a unit's contribution is refused (0A000,
    saying why) before any scan, and nothing is charged."""
    cfg = _config("duckdb")
    cfg["tables"]["sales"]["columns"]["customer"] = {"type": "int"}
    cfg["tables"]["sales"].update(privacy_unit="customer", max_groups_per_unit=1, max_rows_per_unit=2)
    svc = _Toy("sqlite", tmp_path, SeededSource(36))
    svc.cfg = svc.cfg.model_copy(update={"tables": parse_config(cfg, "toy").tables})
    svc.start()
    try:
        with psycopg.connect(_dsn(svc), autocommit=True) as c:
            with pytest.raises(psycopg.errors.FeatureNotSupported, match="sqlite backend has no keyed hash"):
                c.execute("SELECT region, COUNT(*) FROM sales GROUP BY region")
        assert svc.gw.backend.fetches == 0
        assert svc.gw.ledger.spent("analyst", svc.gw.ledger.period_now("day")) == 0
    finally:
        svc.close()


def test_what_the_toy_backend_does_not_say_is_refused_not_assumed(tmp_path):
    """The defaults a backend inherits fail closed: its role's privileges cannot be read (a
    line, so ``require_least_privilege`` refuses to start), it keeps no ledger marker and no
    data file; and a backend whose dialect bears another name is not registered."""
    cfg = parse_config(_config("duckdb"), "toy")
    b = SQLiteBackend()
    try:
        assert asyncio.run(b.privilege_problems(cfg)) == [
            "dpgate cannot read what the sqlite backend's role may write (docs/least-privilege.md)"
        ]
        assert b.ledger_marker() == (False, None)
        assert SQLiteBackend.data_file(cfg, tmp_path) is None
        assert backend_class("sqlite") is SQLiteBackend and b.writer is b
    finally:
        asyncio.run(b.close())

    class Misnamed(SQLiteBackend):
        kind = "sqlite2"

    with pytest.raises(ValueError, match="its dialect is named 'sqlite', not 'sqlite2'"):
        register(Misnamed)
    with pytest.raises(ValueError, match="no backend kind 'sqlite2'"):
        backend_class("sqlite2")
