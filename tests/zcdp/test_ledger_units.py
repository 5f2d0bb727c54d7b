"""The ledger keeps amounts in the accountant's units: each spend row, release, reservation and
charge without an answer names its unit (ε of a pure tier, ρ of a zCDP tier). A ledger written by
schema 2 (nano-ε integers, femto-δ, HMACs; no unit) is migrated when opened — its rows are ε and
their MACs still hold — on SQLite and on Postgres."""

from __future__ import annotations

import sqlite3
import uuid

import psycopg
import pytest

from proxy.stores.ledger import BudgetExceeded, Ledger, LedgerDamaged, period_key
from proxy.stores.ledger_mac import Mac, create_key

# the ledger as schema 2 wrote it (SQLite; the Postgres one differs only in types)
SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE spend (
    role TEXT NOT NULL, period TEXT NOT NULL, spent_nano INTEGER NOT NULL,
    delta_femto INTEGER NOT NULL DEFAULT 0, mac TEXT,
    PRIMARY KEY (role, period));
CREATE TABLE releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, key TEXT NOT NULL, data_version INTEGER NOT NULL,
    canonical TEXT NOT NULL, statement TEXT NOT NULL,
    epsilon_nano INTEGER NOT NULL, mechanism TEXT NOT NULL,
    answer TEXT NOT NULL, period TEXT NOT NULL, created REAL NOT NULL,
    delta_femto INTEGER NOT NULL DEFAULT 0, mac TEXT,
    UNIQUE (role, key, data_version));
CREATE TABLE reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, period TEXT NOT NULL, epsilon_nano INTEGER NOT NULL, created REAL NOT NULL,
    delta_femto INTEGER NOT NULL DEFAULT 0);
CREATE TABLE unreleased (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    role TEXT NOT NULL, period TEXT NOT NULL, epsilon_nano INTEGER NOT NULL, created REAL NOT NULL,
    reason TEXT NOT NULL, delta_femto INTEGER NOT NULL DEFAULT 0);
CREATE TABLE auto_bounds (
    data_version INTEGER NOT NULL, tbl TEXT NOT NULL, field TEXT NOT NULL,
    value TEXT NOT NULL, epsilon_nano INTEGER NOT NULL, created REAL NOT NULL, mac TEXT,
    PRIMARY KEY (data_version, tbl, field));
"""
SCHEMA_2_PG = (
    SCHEMA_2.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
    .replace("INTEGER", "BIGINT")
    .replace("REAL", "DOUBLE PRECISION")
)


def _schema_2_mac(mac: Mac, *fields) -> str:
    """A MAC as schema 2 computed it: the fields, no unit."""
    return mac._mac(*fields)  # the message as it was, independent of today's helpers


def _schema_2_rows(execute, day: str, mac: Mac) -> None:
    """What schema 2 wrote for role analyst: two COUNT releases (ε 1 each) and a scan that timed out
    (ε 0.5, no answer): 2.5 ε spent, each row signed."""
    answer = '{"values": [[7]]}'
    for i in range(2):
        execute(
            "INSERT INTO releases (role, key, data_version, canonical, statement, epsilon_nano, mechanism, "
            "answer, period, created, delta_femto, mac) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                "analyst",
                f"count{i}:eps=1.0",
                1,
                f"c{i}",
                f"SELECT COUNT(*) -- {i}",
                10**9,
                "geometric_count",
                answer,
                day,
                1000.0 + i,
                0,
                _schema_2_mac(
                    mac,
                    "release",
                    "analyst",
                    f"count{i}:eps=1.0",
                    1,
                    10**9,
                    0,
                    "geometric_count",
                    answer,
                    day,
                ),
            ),
        )
    execute(
        "INSERT INTO unreleased (role, period, epsilon_nano, created, reason, delta_femto) VALUES (?,?,?,?,?,?)",
        ("analyst", day, 5 * 10**8, 1010.0, "timeout", 0),
    )
    execute(
        "INSERT INTO spend (role, period, spent_nano, delta_femto, mac) VALUES (?,?,?,?,?)",
        ("analyst", day, 25 * 10**8, 0, _schema_2_mac(mac, "spend", "analyst", day, 25 * 10**8, 0)),
    )
    execute("INSERT INTO meta VALUES (?, ?)", ("schema", "2"))
    execute("INSERT INTO meta VALUES (?, ?)", ("mac_check", mac.check_value()))
    execute("INSERT INTO meta VALUES (?, ?)", ("charged_nano", str(25 * 10**8)))


@pytest.fixture(params=["sqlite", "postgres"])
def old_ledger(request, tmp_path):
    """A signed ledger written with schema 2; yields a function opening it with today's code."""
    day = period_key("day")
    key_file = tmp_path / "ledger.key"
    mac = Mac(create_key(key_file))
    if request.param == "sqlite":
        path = tmp_path / "ledger.sqlite3"
        db = sqlite3.connect(path)
        db.executescript(SCHEMA_2)
        _schema_2_rows(db.execute, day, mac)
        db.commit()
        db.close()
        yield lambda: Ledger(path, key_file=key_file), lambda sql: _sqlite_exec(path, sql)
    else:
        dsn, schema = request.getfixturevalue("postgres").dsn, "old_" + uuid.uuid4().hex[:8]
        with psycopg.connect(dsn, autocommit=True) as con:
            con.execute(f"CREATE SCHEMA {schema}")
            con.execute(f"SET search_path TO {schema}")
            con.execute(SCHEMA_2_PG)
            _schema_2_rows(lambda sql, args: con.execute(sql.replace("?", "%s"), args), day, mac)

        def pg_exec(sql: str) -> None:
            with psycopg.connect(dsn, autocommit=True) as con:
                con.execute(f"SET search_path TO {schema}")
                con.execute(sql)

        yield lambda: Ledger(None, dsn=dsn, schema=schema, key_file=key_file), pg_exec


def _sqlite_exec(path, sql: str) -> None:
    db = sqlite3.connect(path)
    db.execute(sql)
    db.commit()
    db.close()


def test_a_schema_2_ledger_is_migrated_its_rows_in_epsilon_and_their_macs_kept(old_ledger):
    open_it, _ = old_ledger
    led = open_it()
    try:
        assert led.integrity_problems() == []  # every MAC of schema 2 still holds
        assert led.budgets() == [("analyst", period_key("day"), 2.5, "eps")]
        assert [r["unit"] for r in led.releases()] == ["eps", "eps"]
        assert [(u["epsilon"], u["unit"]) for u in led.unreleased()] == [(0.5, "eps")]
        assert led.spent("analyst", "day") == 2.5
        dv, spent, stored = led.snapshot("analyst", "count1:eps=1.0", "day")
        assert (dv, spent) == (1, 2.5) and stored is not None
        assert (stored.answer, stored.epsilon, stored.unit) == ({"values": [[7]]}, 1.0, "eps")  # MAC checked
        # a pure tier goes on charging ε in that period; a ρ charge there is refused (one unit a period)
        res = led.reserve(role="analyst", epsilon=1.0, budget=10.0, period="day")
        assert res.spent_nano == 35 * 10**8 and res.unit == "eps"
        with pytest.raises(BudgetExceeded) as e:
            led.reserve(role="analyst", epsilon=0.01, budget=1.0, period="day", unit="rho")
        assert e.value.what == "ρ"
        # another role on a zCDP tier is charged in ρ, to its budget in ρ
        z = led.reserve(role="zed", epsilon=0.3, budget=0.5, period="day", unit="rho")
        led.record(
            z, key="k", data_version=1, canonical="c", statement="s", mechanism="m", answer={"values": []}
        )
        with pytest.raises(BudgetExceeded) as e:
            led.reserve(role="zed", epsilon=0.3, budget=0.5, period="day", unit="rho")
        assert e.value.what == "ε" and e.value.remaining == pytest.approx(0.2)  # (in the charge's unit)
        assert led.spent("zed", "day", "rho") == pytest.approx(0.3)
        assert led.spent("zed", "day") == float("inf")  # ρ bounds no pure ε
        stored = led.lookup("zed", "k", 1)
        assert stored is not None and (stored.epsilon, stored.unit) == (pytest.approx(0.3), "rho")
        assert stored.answer == {"values": []}
        assert led.integrity_problems() == []
    finally:
        led.close()
    again = open_it()  # opening again changes nothing
    try:
        assert again.migrated == [] and again.spent("analyst", "day") == 3.5
        assert again.spent("zed", "day", "rho") == pytest.approx(0.3)
    finally:
        again.close()


def test_a_rho_row_relabelled_as_epsilon_fails_its_mac(old_ledger):
    open_it, execute = old_ledger
    led = open_it()
    try:
        led.record(
            led.reserve(role="zed", epsilon=0.3, budget=0.5, period="day", unit="rho"),
            key="k",
            data_version=1,
            canonical="c",
            statement="s",
            mechanism="m",
            answer={"values": []},
        )
    finally:
        led.close()
    execute("UPDATE spend SET unit = 'eps' WHERE role = 'zed'")  # 0.3 ρ read as 0.3 ε: refused
    execute("UPDATE releases SET unit = 'eps' WHERE role = 'zed'")
    led = open_it()
    try:
        problems = led.integrity_problems()
        assert any("role 'zed'" in p and "spend" in p for p in problems)
        assert any("fails its MAC" in p and "release" in p for p in problems)
        with pytest.raises(LedgerDamaged):
            led.reserve(role="zed", epsilon=0.1, budget=1.0, period="day")
    finally:
        led.close()
