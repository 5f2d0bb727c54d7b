"""The ledger is never silently new. A ledger identity (state dir,
ledger marker, DuckDB row) checked at start and while serving; `dpgate ledger
check` / `dpgate ledger init --i-know`; named ledger faults; periods that never
move backwards; state files 0600 / dir 0700."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import stat
import uuid

import pytest

from config import parse_config
from proxy.cli import main
from proxy.stores.errors import LedgerDamaged
from proxy.stores.ledger import Ledger, LedgerFault, period_key
from proxy.stores.ledger_guard import ID_FILE, LedgerLost, install
from support.service import make_config


def _cfg(tmp_path):
    return parse_config(make_config({"kind": "duckdb", "path": str(tmp_path / "state" / "demo.duckdb")}))


def _gateway(tmp_path):
    from proxy.gateway import Gateway

    return Gateway(_cfg(tmp_path), tmp_path / "state")


def _close(gw):
    import asyncio

    asyncio.run(gw.close())


def _reserve(led, eps=1.0, budget=10.0, role="r"):
    return led.reserve(role=role, epsilon=eps, budget=budget, period="day")


def _charge(led, key, eps=1.0, budget=10.0, role="r"):
    return led.charge_and_record(
        role=role,
        key=key,
        data_version=1,
        epsilon=eps,
        budget=budget,
        period="day",
        canonical=key,
        statement="SELECT …",
        mechanism="m",
        answer={"values": [[key]]},
    )


def test_first_start_creates_identity_and_private_files(tmp_path):
    gw = _gateway(tmp_path)
    state = tmp_path / "state"
    ident = json.loads((state / ID_FILE).read_text())
    assert gw.ledger.guard.ident["id"] == ident["id"]
    assert gw.backend.query("SELECT ledger_id FROM dpgate_ledger_identity") == [(ident["id"],)]
    _charge(gw.ledger, "q1")
    _close(gw)
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    for name in ("ledger.sqlite3", "demo.duckdb", ID_FILE):
        assert stat.S_IMODE(os.stat(state / name).st_mode) == 0o600, name
    gw = _gateway(tmp_path)  # a restart: the same identity, no complaint
    assert gw.ledger.guard.ident["id"] == ident["id"] and gw.ledger.spent("r", "day") == 1.0
    _close(gw)


@pytest.mark.parametrize("how", ["missing", "empty"])
def test_start_refused_with_a_lost_ledger_beside_the_duckdb_file(tmp_path, how, capsys):
    gw = _gateway(tmp_path)
    _charge(gw.ledger, "q1")
    _close(gw)
    state = tmp_path / "state"
    for suffix in ("", "-wal", "-shm"):
        (state / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    if how == "empty":
        (state / "ledger.sqlite3").write_bytes(b"")
    with pytest.raises(LedgerLost) as e:
        _gateway(tmp_path)
    line = str(e.value)
    assert "missing or empty" in line and "dpgate ledger init --i-know" in line and "\n" not in line
    (state / ID_FILE).unlink()  # the DuckDB file alone still remembers
    for suffix in ("", "-wal", "-shm"):
        (state / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    with pytest.raises(LedgerLost):
        _gateway(tmp_path)
    # `dpgate ledger check` says the same in one line, exit 1; init --i-know recovers
    args = ["--state-dir", str(state)]
    assert main(["ledger", "check", *args]) == 1
    assert main(["ledger", "init", *args]) == 2  # not without --i-know
    capsys.readouterr()
    assert main(["ledger", "init", "--i-know", *args]) == 0
    assert "new ledger identity" in capsys.readouterr().out
    gw = _gateway(tmp_path)
    assert gw.ledger.spent("r", "day") == 0.0
    _close(gw)


def test_cli_check_ok_and_serve_refuses_with_one_line(tmp_path, capsys):
    state = tmp_path / "state"
    args = ["--state-dir", str(state)]
    assert main(["ledger", "check", *args]) == 0
    assert "no ledger yet" in capsys.readouterr().out
    assert main(["ledger", "init", "--i-know", *args]) == 0
    assert main(["ledger", "check", *args]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith("dpgate: ") and ": ok, ledger " in out
    (state / "ledger.sqlite3").unlink()
    assert main(["ledger", "check", *args]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing or empty" in err
    assert not (state / "ledger.sqlite3").exists()  # check creates nothing


def test_replaced_ledger_is_refused_at_start(tmp_path):
    gw = _gateway(tmp_path)
    _close(gw)
    state = tmp_path / "state"
    other = tmp_path / "other"
    other.mkdir()
    led = Ledger(other / "ledger.sqlite3")
    install(led, other)  # another ledger, with its own identity
    _charge(led, "q1")
    led.close()
    for suffix in ("-wal", "-shm"):
        (state / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    os.replace(other / "ledger.sqlite3", state / "ledger.sqlite3")
    with pytest.raises(LedgerDamaged, match="is not the MAC key of"):  # its key is another ledger's
        _gateway(tmp_path)
    os.replace(other / "ledger.key", state / "ledger.key")
    with pytest.raises(LedgerLost, match="was replaced"):  # and so is its identity
        _gateway(tmp_path)


def test_older_copy_is_refused_at_start(tmp_path):
    state = tmp_path / "s"
    led = Ledger(state / "ledger.sqlite3")
    install(led, state)
    _charge(led, "q1")
    led.close()
    backup = sqlite3.connect(state / "ledger.sqlite3")
    backup.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    backup.close()
    copy = (state / "ledger.sqlite3").read_bytes()
    led = Ledger(state / "ledger.sqlite3")
    install(led, state)
    _charge(led, "q2")
    led.guard.check_now()  # the high-water mark reaches ledger.id
    led.close()
    for suffix in ("-wal", "-shm"):
        (state / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    (state / "ledger.sqlite3").write_bytes(copy)
    led = Ledger(state / "ledger.sqlite3")
    with pytest.raises(LedgerLost, match="an older copy"):
        install(led, state)
    led.close()


def test_deleted_while_serving_refuses_the_next_charge_and_lookup(tmp_path):
    state = tmp_path / "s"
    led = Ledger(state / "ledger.sqlite3")
    install(led, state)
    _charge(led, "q1")
    for suffix in ("", "-wal", "-shm"):
        (state / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    with pytest.raises(LedgerLost, match="deleted while serving"):
        _reserve(led)
    with pytest.raises(LedgerLost):  # nothing is answered from the unlinked file
        led.snapshot("r", "q1", "day")
    with pytest.raises(LedgerLost):
        _charge(led, "q2")
    led.close()


def test_deleted_while_serving_is_refused_over_the_wire(tmp_path):
    """A real proxy: delete the ledger under it; the next DP statement is refused
    (55000, one line), and a restart refuses to start."""
    import psycopg

    from support.service import Service

    svc = Service(make_config(), tmp_path / "state").start()
    try:
        with psycopg.connect(svc.dsn(), autocommit=True) as c:
            c.execute("SELECT COUNT(*) FROM people").fetchall()
            for suffix in ("", "-wal", "-shm"):
                (tmp_path / "state" / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
            with pytest.raises(psycopg.Error) as e:
                c.execute("SELECT COUNT(*) FROM people WHERE age > 30").fetchall()
            assert e.value.sqlstate == "55000" and "dpgate ledger init --i-know" in str(e.value)
            with pytest.raises(psycopg.Error) as e:  # a repeat is refused too
                c.execute("SELECT COUNT(*) FROM people").fetchall()
            assert e.value.sqlstate == "55000"
        assert not (tmp_path / "state" / "ledger.sqlite3").exists()  # nothing re-created it
    finally:
        svc.close()
    with pytest.raises(LedgerLost):
        Service(make_config(), tmp_path / "state").start()


def test_postgres_ledger_truncated_or_dropped_is_detected(postgres, tmp_path):
    import psycopg

    schema = "g_" + uuid.uuid4().hex[:10]
    led = Ledger(None, dsn=postgres.dsn, schema=schema)
    guard = install(led, tmp_path / "a", interval=0)
    _charge(led, "q1")
    guard.check_now()
    other = Ledger(None, dsn=postgres.dsn, schema=schema)  # a second proxy adopts the identity
    assert install(other, tmp_path / "b").ident["id"] == guard.ident["id"]
    other.close()
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute(f"TRUNCATE {schema}.spend, {schema}.releases")
    with pytest.raises(LedgerLost, match="spend went down"):  # while serving
        _reserve(led)
    led.close()
    for state in ("a", "c"):  # a restart, a new proxy
        fresh = Ledger(None, dsn=postgres.dsn, schema=schema)
        with pytest.raises(LedgerLost, match="truncated"):
            install(fresh, tmp_path / state)
        fresh.close()
    fresh = Ledger(None, dsn=postgres.dsn, schema=schema)  # ledger init --i-know recovers
    from proxy.stores.ledger_guard import init_identity

    init_identity(fresh, tmp_path / "a")
    assert install(fresh, tmp_path / "a").ident["id"] != guard.ident["id"]
    fresh.close()

    schema = "h_" + uuid.uuid4().hex[:10]
    led = Ledger(None, dsn=postgres.dsn, schema=schema)
    install(led, tmp_path / "d", interval=0)
    _charge(led, "q1")
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute(f"DROP SCHEMA {schema} CASCADE")
    with pytest.raises(LedgerLost):
        _reserve(led)
    led.close()
    led = Ledger(None, dsn=postgres.dsn, schema=schema)  # re-created empty: the state dir knows
    with pytest.raises(LedgerLost, match="no identity marker"):
        install(led, tmp_path / "d")
    led.close()


def test_clock_going_back_keeps_the_latest_period(tmp_path):
    """A proxy whose clock is a day behind must not open a second per-day budget."""
    now = [1_800_000_000.0]
    led = Ledger(tmp_path / "l.db")
    led.clock = lambda: now[0]
    for _ in range(2):
        _reserve(led, budget=2.0)
    now[0] -= 86_400  # the clock goes back a day
    from proxy.stores.ledger import BudgetExceeded

    with pytest.raises(BudgetExceeded):
        _reserve(led, budget=2.0)
    assert led.spent("r", "day") == 2.0
    led.close()
    again = Ledger(tmp_path / "l.db")  # persisted: a restarted proxy too
    again.clock = lambda: now[0]
    assert again.spent("r", "day") == 2.0  # reads show the latest period too
    with pytest.raises(BudgetExceeded):
        _reserve(again, budget=2.0)
    now[0] += 2 * 86_400  # a real new day opens a new budget
    _reserve(again, budget=2.0)
    assert again.spent("r", "day") == 1.0 and period_key("day", now[0]) > period_key("day", now[0] - 86_400)
    again.close()


def test_disk_full_and_locked_are_named(tmp_path, monkeypatch):
    led = Ledger(tmp_path / "l.db")

    class Full:
        def __getattr__(self, name):
            return getattr(real, name)

        def execute(self, sql, *a):
            raise sqlite3.OperationalError("database or disk is full")

    real = led._db
    monkeypatch.setattr(led, "_db", Full())
    with pytest.raises(LedgerFault) as e:
        _reserve(led)
    assert e.value.sqlstate == "53100" and "disk full" in e.value.line
    monkeypatch.setattr(led, "_db", real)
    holder = sqlite3.connect(tmp_path / "l.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    led._db.execute("PRAGMA busy_timeout=50")
    with pytest.raises(LedgerFault) as e:
        _reserve(led)
    assert e.value.sqlstate == "55P03" and "locked" in e.value.line
    holder.execute("ROLLBACK")
    holder.close()
    led.close()


SERVE_CONFIG = """
[server]
auth = "trust"
[tiers.d]
epsilon = 1
budget = 10
[roles.a]
tier = "d"
[backend]
kind = "duckdb"
path = "data.duckdb"
[tables.t.columns]
age = {{ type = "{age}", lower = 0, upper = 100 }}
"""


@pytest.mark.parametrize(
    "error, reason",
    [
        (sqlite3.OperationalError("attempt to write a readonly database"), "read-only file system"),
        (OSError(errno.EROFS, "Read-only file system"), "read-only file system"),
        (OSError(errno.ENOSPC, "No space left on device"), "disk full"),
    ],
)
def test_a_write_the_file_system_refuses_is_53100(tmp_path, monkeypatch, error, reason):
    led = Ledger(tmp_path / "l.db")

    class Refusing:
        def __getattr__(self, name):
            return getattr(real, name)

        def execute(self, sql, *a):
            raise error

    real = led._db
    monkeypatch.setattr(led, "_db", Refusing())
    with pytest.raises(LedgerFault) as e:
        _reserve(led)
    assert e.value.sqlstate == "53100" and f"cannot write: {reason}" in e.value.line
    monkeypatch.setattr(led, "_db", real)
    led.close()


def _serve(cfg, state, port):
    import subprocess
    import sys

    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy.cli",
            "serve",
            "--config",
            str(cfg),
            "--state-dir",
            str(state),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_dpgate_serve_refuses_to_start_with_one_line(tmp_path):
    """`dpgate serve`: a lost ledger and a config the backend cannot hold are
    each one line on stderr and exit status 1 / 2, before listening."""
    import signal

    import duckdb

    from support.pg import free_port

    state = tmp_path / "state"
    state.mkdir()
    con = duckdb.connect(str(state / "data.duckdb"))
    con.execute("CREATE TABLE t (age INTEGER)")
    con.close()
    cfg = tmp_path / "c.toml"
    cfg.write_text(SERVE_CONFIG.format(age="int"))
    port = free_port()
    proc = _serve(cfg, state, port)
    try:
        line = proc.stdout.readline()
        while line and "listening" not in line:
            line = proc.stdout.readline()
        assert "listening" in line, proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    for suffix in ("", "-wal", "-shm"):
        (state / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    proc = _serve(cfg, state, port)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "listening" not in out
    assert len(err.strip().splitlines()) == 1 and "missing or empty" in err and "--i-know" in err, err
    assert main(["ledger", "init", "--i-know", "--config", str(cfg), "--state-dir", str(state)]) == 0
    cfg.write_text(
        SERVE_CONFIG.format(age="bool").replace("lower = 0, upper = 100", "domain = [true, false]")
    )
    proc = _serve(cfg, state, port)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "listening" not in out
    assert err.strip().splitlines() == [
        f"dpgate: {cfg}: tables.t.columns.age: declared bool, but t.age is INTEGER in the backend"
    ], err


def test_proxies_starting_together_share_one_identity(tmp_path):
    """Two proxies on one fresh state dir (or one Postgres ledger): the first
    marker wins, neither later thinks the ledger was replaced."""
    a = Ledger(tmp_path / "ledger.sqlite3")
    b = Ledger(tmp_path / "ledger.sqlite3")
    ga = install(a, tmp_path, interval=0)
    gb = install(b, tmp_path, interval=0)
    assert ga.ident == gb.ident
    _charge(a, "q1")
    _reserve(b)
    ga.check_now()
    gb.check_now()
    assert json.loads((tmp_path / ID_FILE).read_text())["charged_nano"] == 2 * 10**9
    a.close()
    b.close()


def test_postgres_lock_timeout_is_named(postgres):
    """A Postgres ledger whose tables are locked past lock_timeout: 55P03, one line."""
    import psycopg

    schema = "k_" + uuid.uuid4().hex[:10]
    led = Ledger(None, dsn=postgres.dsn, schema=schema)
    led._db.execute("SET lock_timeout = '100ms'")
    with psycopg.connect(postgres.dsn) as holder:
        holder.execute(f"LOCK TABLE {schema}.spend IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(LedgerFault) as e:
            _reserve(led)
        assert e.value.sqlstate == "55P03" and "locked" in e.value.line
    led.close()
