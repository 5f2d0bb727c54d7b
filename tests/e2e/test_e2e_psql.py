"""The README's psql session, through the real psql binary, on DuckDB and Postgres."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

PSQL = shutil.which("psql")
pytestmark = pytest.mark.skipif(PSQL is None, reason="psql not installed (.ci/run installs it)")


def psql(service, sql: str, role: str = "analyst", *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PGCONNECT_TIMEOUT": "10", "PGSSLMODE": "disable"}
    return subprocess.run(
        [PSQL, service.url(role), "-X", "-v", "ON_ERROR_STOP=1", *extra, "-c", sql],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_readme_query(service):
    r = psql(
        service,
        "SELECT sex, COUNT(*), AVG(age) FROM pums WHERE age BETWEEN 30 AND 60 GROUP BY sex;",
        "analyst",
        "-A",
        "-t",
        "-F",
        "|",
    )
    assert r.returncode == 0, r.stderr
    rows = [line.split("|") for line in r.stdout.strip().splitlines()]
    assert [row[0] for row in rows] == ["0", "1"]
    for _, count, avg in rows:
        assert int(count) > 100  # true counts are in the hundreds; noise scale 1/0.5
        assert 0 <= float(avg) <= 100  # clamped to the declared bounds
    assert "NOTICE:" in r.stderr and "ε charged 1" in r.stderr and "budget left" in r.stderr
    assert "95% half-width" in r.stderr


@pytest.mark.parametrize("sql", ["SELECT * FROM pums", "SELECT age FROM pums WHERE income > 100000"])
def test_raw_rows_refused(service, sql):
    r = psql(service, sql)
    assert r.returncode != 0
    assert "ERROR:" in r.stderr and "Allowed" in r.stderr


def test_refusal_sqlstate_verbose(service):
    r = psql(service, "SELECT * FROM pums", "analyst", "-v", "VERBOSITY=verbose")
    assert "42501" in r.stderr


def test_describe_tables(service):
    r = psql(service, "\\dt")
    assert r.returncode == 0, r.stderr
    assert "pums" in r.stdout and "people" in r.stdout
    r = psql(service, "\\d pums")
    assert r.returncode == 0, r.stderr
    for col in ("age", "sex", "educ", "race", "income", "married"):
        assert col in r.stdout


def test_session_statements_and_version(service):
    r = psql(
        service,
        "SELECT version(); SHOW TimeZone; SET application_name = 'x'; SELECT 1; BEGIN; COMMIT;",
        "analyst",
        "-A",
        "-t",
    )
    assert r.returncode == 0, r.stderr
    assert "dpgate" in r.stdout and "UTC" in r.stdout
