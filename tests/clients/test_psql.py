"""The shared scenario through the real psql binary (libpq), including its backslash
commands, on DuckDB and on Postgres, and over TLS."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from support.service import PASSWORDS

from .outcomes import record
from .scenario import (
    GROUP_SQL,
    MORE_SQL,
    PARAM,
    PUMS_TYPES,
    REFUSED_SQL,
    SECRET,
    SECRET_SQL,
    check_report,
    declared_tables,
)

PSQL = shutil.which("psql")
pytestmark = pytest.mark.skipif(PSQL is None, reason="psql not installed (apt-get install postgresql-client)")


def psql(
    svc,
    *args: str,
    sslmode: str = "disable",
    password: str | None = None,
    stdin: str | None = None,
    user: str = "analyst",
) -> subprocess.CompletedProcess:
    """psql -X -A -t with a password in the URL (SCRAM); returns the finished process."""
    pw = PASSWORDS[user] if password is None else password
    url = f"postgresql://{user}:{pw}@127.0.0.1:{svc.port}/demo?sslmode={sslmode}"
    env = {**os.environ, "PGCONNECT_TIMEOUT": "10"}
    for var in ("PGSSLMODE", "PGPASSWORD", "PGSERVICE", "PGOPTIONS"):
        env.pop(var, None)
    return subprocess.run(
        [PSQL, url, "-X", "-A", "-t", "-F", "|", "-v", "VERBOSITY=verbose", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def ok(r: subprocess.CompletedProcess) -> list[list[str]]:
    assert r.returncode == 0, r.stderr
    return [line.split("|") for line in r.stdout.splitlines() if line]


def error(r: subprocess.CompletedProcess) -> tuple[str, str]:
    """(SQLSTATE, message) from psql's verbose error line."""
    m = re.search(r"ERROR:\s+([0-9A-Z]{5}):\s+(.*)", r.stderr)
    assert m, r.stderr
    return m.group(1), m.group(2)


def scenario(svc, sslmode: str = "disable") -> dict:
    info = ok(psql(svc, "-c", "\\conninfo", sslmode=sslmode))
    text = "\n".join("|".join(r) for r in info)
    assert 'database "demo" as user "analyst"' in text
    tables = ok(psql(svc, "-c", "\\dt", sslmode=sslmode))
    assert all(t[0] == "public" and t[2] == "table" for t in tables)
    columns = ok(psql(svc, "-c", "\\d pums", sslmode=sslmode))
    assert {c[0]: c[1] for c in columns} == PUMS_TYPES
    rows = ok(psql(svc, "-c", GROUP_SQL, sslmode=sslmode))
    # psql prints values as text; the column types come from the RowDescription (checked below)
    parsed = [(int(s), int(n), float(t), float(a)) for s, n, t, a in rows]
    refused = error(psql(svc, "-c", REFUSED_SQL, sslmode=sslmode))
    secret = error(psql(svc, "-c", SECRET_SQL, sslmode=sslmode))
    # psql's parameters: a variable interpolated by psql (as a literal) ...
    count = ok(
        psql(
            svc,
            "-v",
            f"age={PARAM}",
            "-f",
            "-",
            sslmode=sslmode,
            stdin="SELECT COUNT(*) FROM pums WHERE age > :age;\n",
        )
    )
    more = {name: ok(psql(svc, "-c", sql, sslmode=sslmode)) for name, sql in MORE_SQL.items()}
    return {
        "more": more,
        "tables": [t[1] for t in tables],
        "columns": [c[0] for c in columns],
        "rows": parsed,
        "refused": refused,
        "secret_error": secret,
        "param_count": int(count[0][0]),
        "conninfo": text,
    }


def test_psql_scenario(svc):
    report = scenario(svc)
    done = check_report(svc, "psql", report)
    assert "SSL connection" not in report["conninfo"]
    record("psql", svc, *done, "variables (-v)")


def test_psql_bind_parameters(svc):
    """psql 16's \\bind sends a real extended-protocol parameter."""
    version = subprocess.run([PSQL, "--version"], capture_output=True, text=True).stdout
    if int(re.search(r"\(PostgreSQL\)\s+(\d+)", version).group(1)) < 16:
        pytest.skip(f"\\bind needs psql 16 or later ({version.strip()})")
    rows = ok(psql(svc, "-f", "-", stdin=f"SELECT COUNT(*) FROM pums WHERE age > $1 \\bind {PARAM} \\g\n"))
    check_report(svc, "psql \\bind", {**scenario(svc), "param_count": int(rows[0][0])})
    record("psql", svc, "\\bind parameters")


def test_psql_backslash_commands(svc):
    dbs = ok(psql(svc, "-c", "\\l"))
    assert [d[0] for d in dbs] == ["demo"]
    assert dbs[0][2] == "UTF8"
    assert ok(psql(svc, "-c", "\\dn")) == [["dpgate", "analyst"], ["public", "analyst"]]  # dpgate.* views
    plus = ok(psql(svc, "-c", "\\d+ pums"))
    assert [c[0] for c in plus] == list(PUMS_TYPES)
    assert any("age in years" in c[-1] for c in plus)  # column descriptions from the config
    assert ok(psql(svc, "-c", "\\dv")) == ok(psql(svc, "-c", "\\di")) == []
    roles = ok(psql(svc, "-c", "\\du"))
    assert [r[0] for r in roles] == ["analyst"] and "Superuser" not in roles[0][1]
    record("psql", svc, "\\l \\dn \\d+ (DP facts as comments) \\dv \\du")


def test_psql_undeclared_table_is_invisible(svc):
    for cmd in (f"\\d {SECRET}", "\\dt secret*", f"\\d+ {SECRET}", "\\dt *.*"):
        r = psql(svc, "-c", cmd)  # psql exits 1 after "Did not find any relation", as with Postgres
        assert SECRET not in r.stdout + r.stderr.replace(f'named "{SECRET}"', ""), (cmd, r.stdout)
    assert 'Did not find any relation named "secret_salaries"' in psql(svc, "-c", f"\\d {SECRET}").stderr
    # the refusal is the same as for a table that exists nowhere
    state, msg = error(psql(svc, "-c", "SELECT COUNT(*) FROM no_such_table"))
    assert (state, msg.replace("no_such_table", SECRET)) == error(psql(svc, "-c", SECRET_SQL))
    rows = ok(
        psql(
            svc,
            "-c",
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_name LIKE '%secret%' OR table_schema = 'public'",
        )
    )
    assert sorted(r[0] for r in rows) == declared_tables(svc)


def test_psql_wrong_password_is_refused(svc):
    r = psql(svc, "-c", "SELECT 1", password="wrong")
    assert r.returncode != 0 and 'password authentication failed for user "analyst"' in r.stderr


def test_psql_tls(tls_svc):
    report = scenario(tls_svc, sslmode="require")
    check_report(tls_svc, "psql", report)
    assert "SSL connection (protocol: TLS" in report["conninfo"]
    record("psql", tls_svc, "TLS")


def test_psql_require_without_tls_fails(svc):
    r = psql(svc, "-c", "SELECT 1", sslmode="require")
    assert r.returncode != 0 and "server does not support SSL" in r.stderr
