"""A ledger edited outside dpgate is caught: each spend row and each stored release carries
an HMAC-SHA256 keyed by ``ledger.key`` (0600, apart from the rows). A lowered spend refuses
the start (one line) and is never charged from; a stored answer with one digit changed is
never returned; ``dpgate ledger check`` prints one line per problem and never a traceback;
a ledger made before MACs is signed at its first open."""

from __future__ import annotations

import sqlite3
import stat
import subprocess
import sys

import psycopg
import pytest

from config import parse_config
from proxy.cli import main
from proxy.stores.errors import LedgerDamaged
from proxy.stores.ledger import Ledger, open_ledger, period_key
from proxy.stores.ledger_guard import LedgerLost
from support.service import Service, make_config

SQL = "SELECT COUNT(*) FROM people WHERE age > 30"


def _ask(svc, sql=SQL):
    notes = []
    with psycopg.connect(svc.dsn(), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        rows = c.execute(sql).fetchall()
    return rows, notes[-1]


def _gateway(state):
    from proxy.gateway import Gateway

    return Gateway(parse_config(make_config()), state)


def _edit(state, sql, *args):
    db = sqlite3.connect(state / "ledger.sqlite3")
    n = db.execute(sql, args).rowcount
    db.commit()
    db.close()
    assert n == 1


def _check(state, capsys):
    code = main(["ledger", "check", "--state-dir", str(state)])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_the_key_is_a_file_of_its_own_0600_created_with_the_ledger(tmp_path):
    svc = Service(make_config(), tmp_path / "state").start()
    svc.close()
    key = tmp_path / "state" / "ledger.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(bytes.fromhex(key.read_text().strip())) == 32
    db = sqlite3.connect(tmp_path / "state" / "ledger.sqlite3")
    assert key.read_text().strip() not in str(
        db.execute("SELECT * FROM meta").fetchall()
    )  # only a check value
    db.close()


def test_a_lowered_spend_refuses_the_start_and_is_never_charged_from(tmp_path, capsys):
    state = tmp_path / "state"
    svc = Service(make_config(), state).start()
    try:
        _ask(svc)
        spent = svc.gw.ledger.spent("analyst", "day")
        _edit(state, "UPDATE spend SET spent_nano = spent_nano - 1000000000 WHERE role = 'analyst'")
        with pytest.raises(psycopg.Error) as e:  # while serving: that role's charge is refused
            _ask(svc, "SELECT COUNT(*) FROM people WHERE age > 40")
        assert e.value.sqlstate == "XX001" and "fails its MAC" in str(e.value)
    finally:
        svc.close()
    code, out, err = _check(state, capsys)
    lines = err.strip().splitlines()  # one line per problem: the sum, the row
    assert code == 1 and len(lines) == 2 and "ε spent 0 in all" in lines[0]
    assert "spend of role 'analyst'" in lines[1] and "fails its MAC" in lines[1]
    with pytest.raises(LedgerLost, match="spend of role 'analyst'.*fails its MAC"):
        _gateway(state)  # the gateway's start: refused
    led = Ledger(state / "ledger.sqlite3")
    try:
        assert led.spent("analyst", "day") == spent - 1.0  # (the edit is still there, unused)
    finally:
        led.close()


def test_dpgate_serve_refuses_a_lowered_spend_with_one_line(tmp_path):
    state = tmp_path / "state"
    led = Ledger(state / "ledger.sqlite3")
    led.reserve(role="analyst", epsilon=1.0, budget=50.0, period="day")
    led.close()
    _edit(state, "UPDATE spend SET spent_nano = 0 WHERE role = 'analyst'")
    proc = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--state-dir", str(state), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "listening" not in proc.stdout
    errors = [x for x in proc.stderr.splitlines() if " WARNING " not in x]  # (the log's warnings)
    assert len(errors) == 1 and "fails its MAC" in errors[0] and "Traceback" not in proc.stderr, proc.stderr


def test_a_stored_answer_with_one_digit_changed_is_never_returned(tmp_path, capsys):
    state = tmp_path / "state"
    svc = Service(make_config(), state).start()
    try:
        ((n,),) = _ask(svc)[0]
        db = sqlite3.connect(state / "ledger.sqlite3")
        ((rid, text),) = db.execute("SELECT id, answer FROM releases").fetchall()
        db.close()
        digit = str(abs(n))[0]
        forged = text.replace(str(abs(n)), str(abs(n)).replace(digit, "9" if digit != "9" else "1", 1), 1)
        assert forged != text
        _edit(state, "UPDATE releases SET answer = ? WHERE id = ?", forged, rid)
        with pytest.raises(psycopg.Error) as e:  # the repeat: refused, not served
            _ask(svc)
        assert e.value.sqlstate == "XX001" and "stored release" in str(e.value)
        assert svc.gw.ledger.spent("analyst", "day") == 1.0  # and nothing charged for it
    finally:
        svc.close()
    code, out, err = _check(state, capsys)
    assert code == 1 and err.count("\n") == 1 and f"release {rid} of role 'analyst' fails its MAC" in err


def test_header_damage_is_one_line_from_check_and_serve(tmp_path, capsys):
    state = tmp_path / "state"
    svc = Service(make_config(), state).start()
    _ask(svc)
    svc.close()
    path = state / "ledger.sqlite3"
    with open(path, "r+b") as f:
        f.write(b"\xff" * 16)  # SQLite's header string
    for suffix in ("-wal", "-shm"):
        (state / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    code, out, err = _check(state, capsys)
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err and "ledger" in err, err
    proc = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--state-dir", str(state), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [x for x in proc.stderr.splitlines() if " WARNING " not in x]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot be opened as a ledger" in proc.stderr


def test_several_problems_are_one_line_each(tmp_path, capsys):
    state = tmp_path / "state"
    led = Ledger(state / "ledger.sqlite3")
    for role in ("a", "b"):
        led.reserve(role=role, epsilon=1.0, budget=5.0, period="day")
    led.close()
    _edit(state, "UPDATE spend SET spent_nano = 1 WHERE role = 'a'")
    _edit(state, "UPDATE spend SET spent_nano = 2 WHERE role = 'b'")
    code, out, err = _check(state, capsys)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 3 and "ε spent" in lines[0]
    assert "role 'a'" in lines[1] and "role 'b'" in lines[2]


def test_a_ledger_made_before_macs_is_signed_at_first_open_then_protected(tmp_path, caplog):
    state = tmp_path / "state"
    state.mkdir()
    db = sqlite3.connect(state / "ledger.sqlite3")  # as written before MACs: no mac column
    db.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE spend (role TEXT NOT NULL, period TEXT NOT NULL, spent_nano INTEGER NOT NULL,
                            PRIMARY KEY (role, period));""")
    db.execute("INSERT INTO spend VALUES ('analyst', ?, 2000000000)", (period_key("day"),))
    db.commit()
    db.close()
    svc = Service(make_config(), state).start()  # the first open signs it (and says so)
    try:
        assert "had no MAC: signed at first open with the new key" in caplog.text
        assert (state / "ledger.key").exists()
        _, note = _ask(svc)
        assert "budget left 47 of 50" in note  # the old spend counts
    finally:
        svc.close()
    _edit(state, "UPDATE spend SET spent_nano = 0 WHERE role = 'analyst'")
    with pytest.raises(LedgerLost, match="fails its MAC"):
        _gateway(state)


def test_a_missing_or_foreign_key_refuses_the_open(tmp_path):
    state = tmp_path / "state"
    Ledger(state / "ledger.sqlite3").close()
    key = (state / "ledger.key").read_text()
    (state / "ledger.key").unlink()
    with pytest.raises(LedgerDamaged, match="key file .* is missing"):
        Ledger(state / "ledger.sqlite3")
    (state / "ledger.key").write_text(("ab" * 32) + "\n")
    with pytest.raises(LedgerDamaged, match="is not the MAC key"):
        Ledger(state / "ledger.sqlite3")
    (state / "ledger.key").write_text(key)
    Ledger(state / "ledger.sqlite3").close()


def test_a_postgres_ledger_row_edited_is_refused_too(postgres, tmp_path):
    import uuid

    schema, key = "mac_" + uuid.uuid4().hex[:8], tmp_path / "ledger.key"
    led = Ledger(None, dsn=postgres.dsn, schema=schema, key_file=key)
    try:
        res = led.reserve(role="r", epsilon=2.0, budget=3.0, period="day")
        led.record(
            res,
            key="q",
            data_version=1,
            canonical="q",
            statement="s",
            mechanism="m",
            answer={"values": [[1786]]},
        )
        with psycopg.connect(postgres.dsn, autocommit=True) as con:
            con.execute(f"UPDATE {schema}.spend SET spent_nano = 0")
            con.execute(f"UPDATE {schema}.releases SET answer = replace(answer, '1786', '9786')")
        with pytest.raises(LedgerDamaged, match="spend of role 'r'"):  # never charged from
            led.reserve(role="r", epsilon=2.0, budget=3.0, period="day")
        with pytest.raises(LedgerDamaged, match="stored release"):  # never returned
            led.lookup("r", "q", 1).answer
        problems = led.integrity_problems()
        assert len(problems) == 3 and "ε spent 0" in problems[0] and "spend of role 'r'" in problems[1]
        assert "release 1 of role 'r' fails its MAC" in problems[2]
    finally:
        led.close()


def test_a_removed_check_value_is_refused_not_re_signed(tmp_path):
    """Deleting the ledger's MAC check value (to have edited rows signed again) is refused
    once the key is older than a start-up race; a proxy starting beside the one that has
    just made the key signs the ledger with it."""
    import os
    import time

    state = tmp_path / "state"
    led = Ledger(state / "ledger.sqlite3")
    led.reserve(role="r", epsilon=1.0, budget=5.0, period="day")
    led.close()
    _edit(state, "DELETE FROM meta WHERE key = 'mac_check'")
    Ledger(state / "ledger.sqlite3").close()  # the key is seconds old: signed again (start-up race)
    _edit(state, "DELETE FROM meta WHERE key = 'mac_check'")
    old = time.time() - 3600
    os.utime(state / "ledger.key", (old, old))
    with pytest.raises(LedgerDamaged, match="MACs were removed"):
        Ledger(state / "ledger.sqlite3")


@pytest.mark.parametrize("flip", [0x01, 0x80])
def test_flipped_bytes_in_a_stored_answer_are_a_named_refusal(tmp_path, capsys, flip):
    """8 bytes of the ledger file flipped inside a stored answer (still text, or no longer
    UTF-8): the repeat is refused with XX001 and one line, never an internal error."""
    state = tmp_path / "state"
    svc = Service(make_config(), state).start()
    try:
        _ask(svc, "SELECT sex, COUNT(*) FROM people GROUP BY sex")
    finally:
        svc.close()
    db = sqlite3.connect(state / "ledger.sqlite3")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ((text,),) = db.execute("SELECT answer FROM releases").fetchall()
    db.close()
    raw = bytearray((state / "ledger.sqlite3").read_bytes())
    at = raw.index(text.encode()) + len(text) // 2 - 4
    raw[at : at + 8] = bytes(b ^ flip for b in raw[at : at + 8])
    (state / "ledger.sqlite3").write_bytes(bytes(raw))
    svc = Service(make_config(), state).start()
    try:
        with pytest.raises(psycopg.Error) as e:
            _ask(svc, "SELECT sex, COUNT(*) FROM people GROUP BY sex")
        assert e.value.sqlstate == "XX001" and len(str(e.value).strip().splitlines()) == 1
    finally:
        svc.close()
    code, out, err = _check(state, capsys)
    assert code == 1 and "Traceback" not in err and all(x.startswith("dpgate: ") for x in err.splitlines())


def test_the_unit_salt_is_derived_from_the_key_and_never_written_to_the_ledger(tmp_path):
    """The privacy unit's salt comes from the MAC key (never stored in the ledger's rows, so
    never a parameter of any ledger statement): stable across opens with the same key, another
    key gives another salt, and ``meta`` holds no unit secret."""
    cfg = parse_config(make_config())
    state = tmp_path / "state"
    state.mkdir()
    led = open_ledger(cfg, state)
    salt = led.unit_salt(1)
    assert salt != led.unit_salt(2)
    led.close()
    db = sqlite3.connect(state / "ledger.sqlite3")
    assert db.execute("SELECT COUNT(*) FROM meta WHERE key='unit_secret'").fetchone()[0] == 0
    db.close()
    led = open_ledger(cfg, state)
    assert led.unit_salt(1) == salt
    led.close()
    other = tmp_path / "other"
    other.mkdir()
    led = open_ledger(cfg, other)
    assert led.unit_salt(1) != salt
    led.close()
