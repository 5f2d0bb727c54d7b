"""The TPC-H-on-Postgres walk-through with the documented read-only role.

Two TPC-H tables (SF 0.001, ``tpchgen-cli``) are loaded into Postgres by their owner;
``dpgate init --dsn`` proposes the config and prints the GRANT script; the owner runs the
script; dpgate serves as that role with ``require_least_privilege = true`` (so a write
privilege would stop it) and answers an analyst over SCRAM. The same config with the owner
(a superuser) as ``dsn`` does not start."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import psycopg
import pytest

from bench import tpch
from bench.workers import start
from proxy.cli.main import main
from support.least_privilege import drop_role
from support.pg import free_port

pytestmark = pytest.mark.skipif(
    tpch.tpchgen() is None, reason="tpchgen-cli not installed (pip install '.[test]')"
)

COLUMNS = {
    "customer": "c_custkey, c_nationkey, c_acctbal::DOUBLE AS c_acctbal, c_mktsegment",
    "orders": "o_orderkey, o_custkey, o_orderstatus, o_totalprice::DOUBLE AS o_totalprice, o_orderdate",
}
TYPES = {
    "customer": "c_custkey bigint, c_nationkey int, c_acctbal float8, c_mktsegment text",
    "orders": "o_orderkey bigint, o_custkey bigint, o_orderstatus text, o_totalprice float8, o_orderdate date",
}


def _load(pg, parquet: Path) -> dict[str, int]:
    """customer and orders into schema tpch, as the server's owner; their row counts."""
    con = duckdb.connect()
    counts = {}
    with psycopg.connect(pg.dsn, autocommit=True) as c:
        c.execute("DROP SCHEMA IF EXISTS tpch CASCADE; CREATE SCHEMA tpch")
        for t, cols in COLUMNS.items():
            rows = con.execute(f"SELECT {cols} FROM read_parquet('{parquet / (t + '.parquet')}')").fetchall()
            c.execute(f"CREATE TABLE tpch.{t} ({TYPES[t]})")
            with c.cursor().copy(f"COPY tpch.{t} FROM STDIN") as cp:
                for r in rows:
                    cp.write_row(r)
            counts[t] = len(rows)
    con.close()
    return counts


def _init(pg, out: Path, capsys) -> tuple[str, str, dict[str, str]]:
    """``dpgate init --dsn`` as the owner: (config text, the printed script, role passwords)."""
    # SF 0.001 (150 customers) is too small for init's default DP bounds at ε 0.1: exact ones
    assert main(["init", "--dsn", pg.dsn, "--schema", "tpch", "--exact-bounds", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    first = next(i for i, x in enumerate(lines) if x.startswith("CREATE ROLE"))
    last = next(i for i, x in enumerate(lines) if x.startswith("GRANT SELECT ON"))
    passwords = {x.split()[3].rstrip(":"): x.split()[5] for x in lines if ": password " in x}
    return out.read_text(), "\n".join(lines[first : last + 1]) + "\n", passwords


def _serve_fails(cfg: Path, port: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "proxy.cli",
            "serve",
            "--config",
            str(cfg),
            "--workers",
            "1",
            "--port",
            str(port),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_tpch_walk_through_as_the_read_only_role(postgres, capsys):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        counts = _load(postgres, tpch.generate(0.001, tmp / "parquet"))
        text, script, passwords = _init(postgres, tmp / "owner.toml", capsys)
        assert "GRANT SELECT ON tpch.customer, tpch.orders TO dpgate_reader;" in script
        drop_role(postgres, "dpgate_reader")
        with psycopg.connect(postgres.dsn, autocommit=True) as c:
            c.execute(script)  # as printed (the test server trusts loopback logins)
        reader = postgres.dsn.replace("postgres@", "dpgate_reader@", 1)
        strict = text.replace('kind = "postgres"', 'kind = "postgres"\nrequire_least_privilege = true', 1)
        assert strict != text and f'dsn = "{postgres.dsn}"' in strict

        # the owner (a superuser) as dsn: refused at start, nothing served
        (tmp / "owner.toml").write_text(strict)
        failed = _serve_fails(tmp / "owner.toml", free_port())
        assert failed.returncode == 2, failed.stdout + failed.stderr
        assert "backend.require_least_privilege: the backend role postgres is a superuser" in failed.stderr

        cfg = tmp / "reader.toml"
        cfg.write_text(strict.replace(f'dsn = "{postgres.dsn}"', f'dsn = "{reader}"'))
        assert main(["check-config", "--backend", str(cfg)]) == 0
        assert capsys.readouterr().err == ""
        port = free_port()
        proc = start(cfg, workers=1, extra=["--port", str(port)])
        try:
            assert not any("warning" in line for line in proc.output), proc.output
            with psycopg.connect(
                host="127.0.0.1",
                port=port,
                dbname="dpgate",
                user="analyst",
                password=passwords["analyst"],
                sslmode="disable",
                autocommit=True,
            ) as c:
                ((n,),) = c.execute("SELECT COUNT(*) FROM orders").fetchall()
                assert isinstance(n, int)
                status = c.execute(
                    "SELECT o_orderstatus, COUNT(*) FROM orders GROUP BY o_orderstatus ORDER BY o_orderstatus"
                ).fetchall()
                assert [s for s, _ in status] == ["F", "O", "P"]
                seg = c.execute(
                    "SELECT c_mktsegment, AVG(c_acctbal) FROM customer GROUP BY c_mktsegment"
                ).fetchall()
                assert len(seg) == 5
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    c.execute("INSERT INTO orders (o_orderkey) VALUES (1)")
            with psycopg.connect(postgres.dsn, autocommit=True) as c:
                users = {
                    u
                    for (u,) in c.execute(
                        "SELECT DISTINCT usename FROM pg_stat_activity "
                        "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                    )
                }
                assert "dpgate_reader" in users
                assert [c.execute(f"SELECT COUNT(*) FROM tpch.{t}").fetchone()[0] for t in counts] == list(
                    counts.values()
                )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
