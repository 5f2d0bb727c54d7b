"""Shared fixtures: a pums-like config, and the same rows in DuckDB and Postgres."""

from __future__ import annotations

import os

import duckdb
import pytest
from rw_data import CONFIG, ROWS

from config import parse_config

COLUMNS = (
    "age integer, sex integer, educ integer, race integer, income double precision, "
    "married integer, name text, state text, big integer, flag boolean, "
    "hours double precision, score integer"
)


@pytest.fixture(scope="session")
def config():
    return parse_config(CONFIG)


@pytest.fixture(scope="session")
def duck():
    con = duckdb.connect()
    con.execute(f"CREATE TABLE pums ({COLUMNS})")
    con.executemany("INSERT INTO pums VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", ROWS)
    yield con
    con.close()


@pytest.fixture(scope="session")
def pg(request):
    """A Postgres connection with the rows in schema rw_test (DPGATE_TEST_PG_DSN, else the
    shared temp server from tests/conftest.py; skipped when neither is available)."""
    psycopg = pytest.importorskip("psycopg")
    dsn = os.environ.get("DPGATE_TEST_PG_DSN")
    if not dsn:
        try:
            dsn = request.getfixturevalue("postgres").dsn
        except Exception as e:  # no initdb/pg_ctl here
            pytest.skip(f"no Postgres available: {e}")
    con = psycopg.connect(dsn, autocommit=True)
    con.execute("DROP SCHEMA IF EXISTS rw_test CASCADE")
    con.execute("CREATE SCHEMA rw_test")
    con.execute("SET search_path TO rw_test")
    con.execute(f"CREATE TABLE pums ({COLUMNS})")
    with con.cursor() as cur:
        cur.executemany(f"INSERT INTO pums VALUES ({', '.join(['%s'] * 12)})", ROWS)
    yield con
    con.execute("DROP SCHEMA rw_test CASCADE")
    con.close()
