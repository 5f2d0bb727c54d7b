"""δ is a quantity of its own in the ledger: a spend row, reservation, release and charge
without an answer each carry their ε and their δ; ``dpgate budget``, ``dpgate.budget``
(tests/e2e/test_e2e_partitions.py) and the owner page show δ spent and left; a ledger
written by schema 1 (δ booked as the ε of a pseudo-role ``<role>#delta``) is migrated
when opened."""

from __future__ import annotations

import sqlite3
import uuid

import psycopg
import pytest

from config import parse_config
from proxy.admin.page import render_page
from proxy.admin.server import collect
from proxy.cli import main
from proxy.stores.ledger import BudgetExceeded, Ledger, period_key
from support.service import make_config

# the ledger as schema 1 wrote it (SQLite; the Postgres one differs only in types)
SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE spend (
    role TEXT NOT NULL, period TEXT NOT NULL, spent_nano INTEGER NOT NULL,
    PRIMARY KEY (role, period));
CREATE TABLE releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, key TEXT NOT NULL, data_version INTEGER NOT NULL,
    canonical TEXT NOT NULL, statement TEXT NOT NULL,
    epsilon_nano INTEGER NOT NULL, mechanism TEXT NOT NULL,
    answer TEXT NOT NULL, period TEXT NOT NULL, created REAL NOT NULL,
    UNIQUE (role, key, data_version));
CREATE TABLE reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, period TEXT NOT NULL, epsilon_nano INTEGER NOT NULL, created REAL NOT NULL);
CREATE TABLE unreleased (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, period TEXT NOT NULL, epsilon_nano INTEGER NOT NULL, created REAL NOT NULL,
    reason TEXT NOT NULL);
"""
SCHEMA_1_PG = (
    SCHEMA_1.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
    .replace("INTEGER", "BIGINT")
    .replace("REAL", "DOUBLE PRECISION")
)


def _schema_1_rows(execute, day: str) -> None:
    """What schema 1 wrote for: three partition-selection releases (ε 1, δ 1e-6 each: the δ
    booked as 1 "ε" of analyst#delta, then settled as "δ of a release"), one COUNT, one scan
    that timed out (ε 1, no answer), one δ reservation left open by a crash (δ 1e-6)."""
    t = 1_000.0
    for i in range(3):
        execute(
            "INSERT INTO releases (role, key, data_version, canonical, statement, epsilon_nano, mechanism, "
            "answer, period, created) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                "analyst",
                f"sel{i}:eps=1.0:delta=1e-06",
                1,
                f"c{i}",
                f"SELECT city{i}",
                10**9,
                "partition_selection",
                '{"values": [[1]]}',
                day,
                t + 10 * i,
            ),
        )
        execute(
            "INSERT INTO unreleased (role, period, epsilon_nano, created, reason) VALUES (?,?,?,?,?)",
            ("analyst#delta", day, 10**9, t + 10 * i + 1, "δ of a release"),
        )
    execute(
        "INSERT INTO releases (role, key, data_version, canonical, statement, epsilon_nano, mechanism, "
        "answer, period, created) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (
            "analyst",
            "count",
            1,
            "c",
            "SELECT COUNT(*)",
            10**9,
            "geometric_count",
            '{"values": [[7]]}',
            day,
            t + 50,
        ),
    )
    execute(
        "INSERT INTO unreleased (role, period, epsilon_nano, created, reason) VALUES (?,?,?,?,?)",
        ("analyst", day, 10**9, t + 60, "timeout"),
    )
    execute(
        "INSERT INTO reservations (role, period, epsilon_nano, created) VALUES (?,?,?,?)",
        ("analyst#delta", day, 10**9, t + 70),
    )
    execute("INSERT INTO spend VALUES (?,?,?)", ("analyst", day, 5 * 10**9))
    execute("INSERT INTO spend VALUES (?,?,?)", ("analyst#delta", day, 4 * 10**9))
    execute("INSERT INTO meta VALUES ('charged_nano', ?)", (str(9 * 10**9),))


@pytest.fixture(params=["sqlite", "postgres"])
def old_ledger(request, tmp_path):
    """A ledger written with schema 1; yields a function opening it with today's code."""
    day = period_key("day")
    if request.param == "sqlite":
        path = tmp_path / "ledger.sqlite3"
        db = sqlite3.connect(path)
        db.executescript(SCHEMA_1)
        _schema_1_rows(db.execute, day)
        db.commit()
        db.close()
        yield lambda: Ledger(path)
    else:
        dsn, schema = request.getfixturevalue("postgres").dsn, "old_" + uuid.uuid4().hex[:8]
        with psycopg.connect(dsn, autocommit=True) as con:
            con.execute(f"CREATE SCHEMA {schema}")
            con.execute(f"SET search_path TO {schema}")
            con.execute(SCHEMA_1_PG)
            _schema_1_rows(lambda sql, args: con.execute(sql.replace("?", "%s"), args), day)
        yield lambda: Ledger(None, dsn=dsn, schema=schema, key_file=tmp_path / "ledger.key")


def test_a_schema_1_ledger_is_migrated_delta_into_its_own_column(old_ledger):
    led = old_ledger()
    try:
        assert led.spent_both("analyst", "day") == (5.0, pytest.approx(4e-6))  # 3 released + 1 reserved
        assert led.spent_both("analyst#delta", "day") == (0.0, 0.0)  # no pseudo-role left
        assert [u["reason"] for u in led.unreleased()] == ["timeout"]  # selections were answered
        assert led.unreleased()[0]["delta"] == 0.0
        assert [r["delta"] for r in led.open_reservations()] == [pytest.approx(1e-6)]
        assert sorted(r["delta"] for r in led.releases()) == [0.0] + [pytest.approx(1e-6)] * 3
        assert led.integrity_problems() == []
        assert any("δ of 1 spend row(s)" in m for m in led.migrated)
        assert any("signed at first open" in m for m in led.migrated)
        with pytest.raises(BudgetExceeded) as e:  # δ budget 5e-6: 4e-6 spent
            led.reserve(role="analyst", epsilon=1.0, budget=50.0, period="day", delta=2e-6, delta_budget=5e-6)
        assert e.value.what == "δ" and e.value.remaining == pytest.approx(1e-6)
        res = led.reserve(
            role="analyst", epsilon=1.0, budget=50.0, period="day", delta=1e-6, delta_budget=5e-6
        )
        assert res.delta_spent_femto == 5 * 10**9
    finally:
        led.close()
    again = old_ledger()  # opening again changes nothing
    try:
        assert again.migrated == [] and again.spent_both("analyst", "day") == (6.0, pytest.approx(5e-6))
    finally:
        again.close()


def test_dpgate_budget_and_the_owner_page_show_delta_and_count_only_unanswered(tmp_path, capsys):
    state = tmp_path / "state"
    state.mkdir()
    db = sqlite3.connect(state / "ledger.sqlite3")
    db.executescript(SCHEMA_1)
    _schema_1_rows(db.execute, period_key("day"))
    db.commit()
    db.close()
    assert main(["budget", "--state-dir", str(state)]) == 0
    out = capsys.readouterr().out
    assert "δ spent" in out and "#delta" not in out
    row = next(x for x in out.splitlines() if x.startswith("analyst "))
    assert row.split()[3] == "5" and float(row.split()[6]) == pytest.approx(4e-6)
    assert "1 statement(s), ε 1 in all, were charged with no answer" in out  # the timeout only
    cfg = parse_config(make_config())
    led = Ledger(state / "ledger.sqlite3")
    try:
        page = render_page(collect(cfg, led, "admin"))
    finally:
        led.close()
    assert "δ spent" in page and "#delta" not in page and "analyst ε 1</p>" in page.replace("\n", "")
