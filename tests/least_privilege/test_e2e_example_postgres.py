"""config/examples/postgres.toml as written: its two roles made with the script in its header,
the demo tables created through ``write_dsn`` (dpgate_owner), every scan as dpgate_reader with
``require_least_privilege = true``, an analyst answered over SCRAM (password ``analyst-pw``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg

from bench.workers import start
from support.least_privilege import drop_role
from support.pg import free_port

EXAMPLE = Path(__file__).parents[2] / "config" / "examples" / "postgres.toml"
ROLES = ("dpgate_reader", "dpgate_owner")


def _header_script(text: str) -> str:
    """The SQL lines of the example's header comment (``#   CREATE …;``)."""
    return "\n".join(line[4:] for line in text.splitlines() if line.startswith("#   ")) + "\n"


def _fresh(pg, database: str, script: str) -> None:
    """A new database with the example's roles made afresh by its header script."""
    for role in ROLES:
        drop_role(pg, role)
    with psycopg.connect(pg.dsn, autocommit=True) as c:  # the server's owner
        c.execute(f"DROP DATABASE IF EXISTS {database}")
        c.execute(f"CREATE DATABASE {database}")
    with psycopg.connect(pg.dsn.rsplit("/", 1)[0] + f"/{database}", autocommit=True) as c:
        c.execute(script)


def _served(pg, database: str, text: str) -> str:
    return re.sub(r"127\.0\.0\.1:5432/postgres", f"127.0.0.1:{pg.port}/{database}", text)


def test_example_config_serves_the_demo_as_the_read_only_role(postgres, tmp_path):
    text = EXAMPLE.read_text()
    assert "postgres@" not in text
    script = _header_script(text)
    assert script.startswith("CREATE ROLE dpgate_owner") and "ALTER DEFAULT PRIVILEGES" in script
    _fresh(postgres, "lp_demo", script)
    port = free_port()
    cfg = tmp_path / "postgres.toml"
    cfg.write_text(_served(postgres, "lp_demo", text).replace("port = 6432", f"port = {port}"))
    proc = start(cfg, workers=1)
    try:
        assert not any("warning" in line for line in proc.output), proc.output
        with psycopg.connect(
            host="127.0.0.1",
            port=port,
            dbname="demo",
            user="analyst",
            password="analyst-pw",
            sslmode="disable",
            autocommit=True,
        ) as c:
            rows = c.execute(
                "SELECT sex, COUNT(*), AVG(age) FROM pums WHERE age BETWEEN 30 AND 60 "
                "GROUP BY sex ORDER BY sex"
            ).fetchall()
            assert [r[0] for r in rows] == [0, 1]
            ((n,),) = c.execute("SELECT COUNT(*) FROM people").fetchall()
            assert isinstance(n, int)
        with psycopg.connect(postgres.dsn.rsplit("/", 1)[0] + "/lp_demo", autocommit=True) as c:
            owners = {
                o
                for (o,) in c.execute("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'")
            }
            assert owners == {"dpgate_owner"}
            users = {
                u
                for (u,) in c.execute(
                    "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = 'lp_demo' "
                    "AND pid <> pg_backend_pid()"
                )
            }
            assert "dpgate_reader" in users
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_demo_without_write_dsn_says_what_to_set(postgres, tmp_path):
    """The reader cannot create the demo tables: serve stops with one line naming write_dsn."""
    text = EXAMPLE.read_text()
    _fresh(postgres, "lp_demo2", _header_script(text))
    no_writer = "\n".join(
        x for x in _served(postgres, "lp_demo2", text).splitlines() if not x.startswith("write_dsn")
    )
    cfg = tmp_path / "postgres.toml"
    cfg.write_text(no_writer.replace("port = 6432", f"port = {free_port()}"))
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(cfg), "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "demo = true creates the demo tables through [backend] write_dsn" in done.stderr
    assert "cannot execute CREATE TABLE in a read-only transaction" in done.stderr
    assert "Traceback" not in done.stderr
