"""Analysts discover the DP facts with the tools they have — real psql: `\\d+ table`
and information_schema.columns + col_description carry each column's bounds, domain and
policy as its comment; `\\dv dpgate.*` lists the budget and release views."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

PSQL = shutil.which("psql")
pytestmark = pytest.mark.skipif(PSQL is None, reason="psql not installed (.ci/run installs it)")


def psql(service, sql: str, *extra: str) -> str:
    env = {**os.environ, "PGCONNECT_TIMEOUT": "10", "PGSSLMODE": "disable"}
    r = subprocess.run(
        [PSQL, service.url("analyst"), "-X", "-v", "ON_ERROR_STOP=1", *extra, "-c", sql],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_d_plus_shows_each_columns_dp_facts(duck_service):
    out = psql(duck_service, "\\d+ pums")
    age = next(x for x in out.splitlines() if x.strip().startswith("age "))
    assert "bounds [0, 100]: SUM/AVG/VAR clamp here" in age
    sex = next(x for x in out.splitlines() if x.strip().startswith("sex "))
    assert "groupable: {0, 1}" in sex
    trips = psql(duck_service, "\\d+ trips")
    assert "private (metric LDP, local)" in trips
    tables = psql(duck_service, "\\dt+")
    assert "per-record DP: each row's ε" in next(x for x in tables.splitlines() if " accounts " in x)


def test_information_schema_columns_with_col_description(duck_service):
    out = psql(
        duck_service,
        "SELECT column_name, col_description('pums'::regclass, ordinal_position) "
        "FROM information_schema.columns WHERE table_name = 'pums' ORDER BY ordinal_position",
        "-A",
        "-t",
        "-F",
        "|",
    )
    rows = dict(line.split("|", 1) for line in out.strip().splitlines())
    assert "bounds [0, 100]" in rows["age"] and "groupable: {0, 1}" in rows["sex"]


def test_dv_dpgate_lists_the_views(duck_service):
    out = psql(duck_service, "\\dv dpgate.*", "-A", "-t", "-F", "|")
    assert [tuple(x.split("|")[:3]) for x in out.strip().splitlines()] == [
        ("dpgate", "budget", "view"),
        ("dpgate", "coalition", "view"),
        ("dpgate", "releases", "view"),
    ]
    assert psql(duck_service, "\\dv", "-A", "-t").strip() == ""  # off the search path, as in Postgres
    cols = psql(duck_service, "\\d dpgate.budget")
    assert "remaining" in cols and "double precision" in cols
    assert "analyst" in psql(
        duck_service, "SELECT role, remaining FROM dpgate.budget"
    )  # still answered by the view
