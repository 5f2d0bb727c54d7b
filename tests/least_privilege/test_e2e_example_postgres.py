"""config/examples/postgres.toml as written: its two roles made with the script in its header,
the demo tables created through ``write_dsn`` (dpgate_owner), every scan as dpgate_reader with
``require_least_privilege = true``, an analyst answered over SCRAM (password ``analyst-pw``)."""
from __future__ import annotations

import re
from pathlib import Path

import psycopg

from bench.workers import start
from support.pg import free_port

EXAMPLE = Path(__file__).parents[2] / "config" / "examples" / "postgres.toml"
ROLES = ("dpgate_reader", "dpgate_owner")


def _header_script(text: str) -> str:
    """The SQL lines of the example's header comment (``#   CREATE …;``)."""
    return "\n".join(line[4:] for line in text.splitlines() if line.startswith("#   ")) + "\n"


def test_example_config_serves_the_demo_as_the_read_only_role(postgres, tmp_path):
    text = EXAMPLE.read_text()
    assert "postgres@" not in text
    script = _header_script(text)
    assert script.startswith("CREATE ROLE dpgate_owner") and "ALTER DEFAULT PRIVILEGES" in script
    with psycopg.connect(postgres.dsn, autocommit=True) as c:        # the server's owner
        for role in ROLES:
            if c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone():
                c.execute(f"DROP OWNED BY {role}; DROP ROLE {role}")
        c.execute("DROP DATABASE IF EXISTS lp_demo")
        c.execute("CREATE DATABASE lp_demo")
    with psycopg.connect(postgres.dsn.rsplit("/", 1)[0] + "/lp_demo", autocommit=True) as c:
        c.execute(script)
    port = free_port()
    cfg = tmp_path / "postgres.toml"
    served = re.sub(r"127\.0\.0\.1:5432/postgres", f"127.0.0.1:{postgres.port}/lp_demo", text)
    cfg.write_text(served.replace("port = 6432", f"port = {port}"))
    proc = start(cfg, workers=1)
    try:
        assert not any("warning" in line for line in proc.output), proc.output
        with psycopg.connect(host="127.0.0.1", port=port, dbname="demo", user="analyst", password="analyst-pw",
                             sslmode="disable", autocommit=True) as c:
            rows = c.execute("SELECT sex, COUNT(*), AVG(age) FROM pums WHERE age BETWEEN 30 AND 60 "
                             "GROUP BY sex ORDER BY sex").fetchall()
            assert [r[0] for r in rows] == [0, 1]
            (n,), = c.execute("SELECT COUNT(*) FROM people").fetchall()
            assert isinstance(n, int)
        with psycopg.connect(postgres.dsn.rsplit("/", 1)[0] + "/lp_demo", autocommit=True) as c:
            owners = {o for (o,) in c.execute("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'")}
            assert owners == {"dpgate_owner"}
            users = {u for (u,) in c.execute("SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = 'lp_demo' "
                                             "AND pid <> pg_backend_pid()")}
            assert "dpgate_reader" in users
    finally:
        proc.terminate()
        proc.wait(timeout=30)
