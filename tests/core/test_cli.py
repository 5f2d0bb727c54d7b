"""The `dpgate` command line, and the README's main command: `dpgate serve` with
no config starts the demo and prints a psql line that works."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from proxy.cli import main
from proxy.wire.auth import parse_verifier


def test_hash_password(capsys):
    assert main(["hash-password", "s3cret"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("SCRAM-SHA-256$4096:") and "s3cret" not in out
    parse_verifier(out)


def test_check_config_reports_field(tmp_path, capsys):
    p = tmp_path / "bad.toml"
    p.write_text('[tiers.d]\nepsilon = 1\nbudget = 10\n[roles.a]\ntier = "nope"\n[tables]\n')
    assert main(["check-config", str(p)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and "roles.a.tier" in err and len(err.strip().splitlines()) == 1


def test_coalition_command_lists_local_subset_columns_per_row(tmp_path, capsys):
    """`dpgate coalition`: query ladders with their total, then the local tables'
    Subset columns (a per-row loss: max level of the ladder vs Σε of its tiers)."""
    import tomllib

    from proxy.demo import demo_config_path

    tiers = tomllib.loads(demo_config_path().read_text())["tiers"]
    eps = sorted(t["epsilon"] for t in tiers.values() if t.get("ladder") == "market")
    assert main(["coalition", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    head, local = out.split("local tables", 1)
    assert "total: coalition loss 0" in head  # no query released yet
    line = next(x for x in local.splitlines() if "trips.zone (per row)" in x)
    loss, indep = (float(v) for v in line.split()[1:3])
    assert loss <= max(eps) and loss > max(eps) / 2 and indep == pytest.approx(sum(eps))


def test_data_version_and_budget(tmp_path, capsys):
    state = str(tmp_path)
    assert main(["data-version", "--state-dir", state]) == 0
    assert "data version 1" in capsys.readouterr().out
    assert main(["data-version", "--advance", "--state-dir", state]) == 0
    assert "advanced to 2" in capsys.readouterr().out
    assert main(["budget", "--state-dir", state]) == 0
    out = capsys.readouterr().out
    assert "analyst" in out and "50" in out and "never recorded" not in out
    from proxy.stores.ledger import Ledger

    led = Ledger(tmp_path / "ledger.sqlite3")
    led.reserve(role="analyst", epsilon=1.0, budget=50.0, period="day")  # a crash before record
    led.close()
    assert main(["budget", "--state-dir", state]) == 0
    out = capsys.readouterr().out
    assert "1 charge(s), ε 1 in all, were made for answers never recorded" in out
    led = Ledger(tmp_path / "ledger.sqlite3")
    led.charge_unreleased(role="analyst", epsilon=1.0, budget=50.0, period="day")  # a timed-out scan
    led.close()
    assert main(["budget", "--state-dir", state]) == 0
    assert "1 statement(s), ε 1 in all, were charged with no answer" in capsys.readouterr().out
    assert next(x for x in out.splitlines() if x.startswith("analyst")).split()[3] == "1"


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql not installed")
def test_dpgate_serve_demo_prints_working_psql_line(tmp_path):
    from support.pg import free_port

    port = free_port()
    env = {**os.environ, "DPGATE_STATE_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        lines, deadline = [], time.time() + 120
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.strip().startswith("producer"):  # the last role of the demo
                break
        text = "".join(lines)
        assert "producer (ε 0.1/query, budget 0.1/day, INSERT into trips):  psql" in text, text
        m = re.search(r'analyst .*psql "(postgresql://[^"]+)"', text)
        assert m, text
        r = subprocess.run(
            ["psql", m.group(1), "-X", "-A", "-t", "-c", "SELECT COUNT(*) FROM people"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PGSSLMODE": "disable"},
        )
        assert r.returncode == 0, r.stderr
        assert abs(int(r.stdout.strip()) - 1_000_000) < 100  # the ≥1M-row demo table
        assert "ε charged 1" in r.stderr
        assert (tmp_path / "demo-passwords.json").stat().st_mode & 0o077 == 0
        # SIGTERM (a service manager's stop): sessions end with 57P01, the process exits 0
        idle = psycopg.connect(m.group(1), sslmode="disable", autocommit=True)
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[0]
        assert proc.returncode == 0, rest
        assert "dpgate: shutting down (1 session(s)" in rest and rest.rstrip().endswith("dpgate: stopped")
        with pytest.raises(psycopg.errors.AdminShutdown):
            idle.execute("SELECT 1")
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def test_budget_and_data_version_on_a_shared_postgres_ledger(tmp_path, capsys, postgres):
    """`dpgate budget` / `data-version` act on the ledger the config names."""
    import uuid

    from proxy.stores.ledger import Ledger

    schema = "cli_" + uuid.uuid4().hex[:8]
    text = (
        '[server]\nauth = "trust"\nstate_dir = "state"\n[tiers.d]\nepsilon = 1\nbudget = 50\nperiod = "day"\n'
        '[roles.analyst]\ntier = "d"\n[tables.t.columns]\nage = { type = "int", lower = 0, upper = 9 }\n'
        f'[ledger]\nkind = "postgres"\ndsn = "{postgres.dsn}"\nschema = "{schema}"\n'
    )
    cfg = tmp_path / "dpgate.toml"
    cfg.write_text(text)
    led = Ledger(None, dsn=postgres.dsn, schema=schema)  # another proxy's charge
    led.charge_and_record(
        role="analyst",
        key="k",
        data_version=1,
        epsilon=1.0,
        budget=50.0,
        period="day",
        canonical="c",
        statement="s",
        mechanism="m",
        answer={},
    )
    assert main(["budget", "--config", str(cfg)]) == 0
    row = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("analyst"))
    assert row.split()[3] == "1"
    assert main(["data-version", "--advance", "--config", str(cfg)]) == 0
    assert led.data_version() == 2
    led.close()
    assert not (tmp_path / "state" / "ledger.sqlite3").exists()  # no local ledger was made


def test_a_duckdb_file_held_by_another_process_is_a_one_line_error(tmp_path, capsys):
    """One process per DuckDB file: a second `dpgate serve` on the same state names the
    holder and what to do, exit 1, no traceback."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
            "print('held', flush=True); sys.stdin.read()",
            str(tmp_path / "demo.duckdb"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["serve", "--state-dir", str(tmp_path), "--port", "0"]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert f"process {holder.pid} " in err and "has it open" in err and "--state-dir" in err
    finally:
        holder.stdin.close()
        holder.wait(10)


def test_every_subcommand_is_listed_with_its_own_help():
    """``dpgate --help`` lists each subcommand from :data:`COMMANDS` without importing its
    module; each line is the one the module registers with its arguments."""
    from proxy.cli.main import COMMANDS, parser

    def helps(p):
        (sub,) = [a for a in p._actions if a.dest == "cmd"]
        return {c.dest: c.help for c in sub._choices_actions}

    listed = helps(parser())
    assert listed == {name: text for name, (_, _, text) in COMMANDS.items()}
    for name in COMMANDS:
        assert helps(parser(name))[name] == listed[name], name


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["hash-password", "x"], ["check-config", "CONFIG"], ["budget", "-c", "CONFIG"]],
)
def test_light_commands_import_no_engine_or_numerics(tmp_path, argv):
    """The help, hash-password, check-config (a config without local or per-record tables)
    and budget import only what they use: no rewriter, SQL parser, engine or numerics.
    (What it saves in time is measured in bench, not here.)"""
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[server]\nauth = "trust"\nstate_dir = "{tmp_path}"\n'
        '[tiers.t]\nepsilon = 1\nbudget = 10\n[roles.a]\ntier = "t"\n'
        '[tables.t.columns.x]\ntype = "int"\nlower = 0\nupper = 9\n'
    )
    args = [str(cfg) if a == "CONFIG" else a for a in argv]
    code = (
        "import sys\n"
        "from proxy.cli.main import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
        "heavy = {'sqlglot', 'numpy', 'scipy', 'duckdb', 'psycopg', 'rewriter', 'mechanisms'}\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = (
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert out == "[]", (argv, out)
