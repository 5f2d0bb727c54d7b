"""The oracle's fixture table in DuckDB and in Postgres (the shared temp server of
tests/conftest.py, or DPGATE_TEST_PG_DSN)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fixture import CONFIG, TABLE, UNIT_CONFIG, UNIT_TABLE, create_sql, create_unit_sql, rows, unit_rows

from config import parse_config


@pytest.fixture(scope="session")
def oracle_config():
    return parse_config(CONFIG)


@pytest.fixture(scope="session")
def oracle_unit_config():
    return parse_config(UNIT_CONFIG)


@pytest.fixture(scope="session")
def oracle_duck():
    con = duckdb.connect()
    con.execute(create_sql())
    con.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)", rows())
    con.execute(create_unit_sql())
    con.executemany(f"INSERT INTO {UNIT_TABLE} VALUES (?, ?, ?, ?, ?, ?, ?)", unit_rows())
    yield con
    con.close()


@pytest.fixture(scope="session")
def oracle_pg(request):
    psycopg = pytest.importorskip("psycopg")
    dsn = os.environ.get("DPGATE_TEST_PG_DSN")
    if not dsn:
        try:
            dsn = request.getfixturevalue("postgres").dsn
        except Exception as e:  # no initdb/pg_ctl here
            pytest.skip(f"no Postgres available: {e}")
    con = psycopg.connect(dsn, autocommit=True)
    con.execute("DROP SCHEMA IF EXISTS oracle_fx CASCADE")
    con.execute("CREATE SCHEMA oracle_fx")
    con.execute("SET search_path TO oracle_fx")
    con.execute("SET statement_timeout = '5s'")
    con.execute(create_sql())
    with con.cursor() as cur:
        cur.executemany(f"INSERT INTO {TABLE} VALUES (%s, %s, %s, %s, %s, %s)", rows())
    con.execute(create_unit_sql())
    with con.cursor() as cur:
        cur.executemany(f"INSERT INTO {UNIT_TABLE} VALUES (%s, %s, %s, %s, %s, %s, %s)", unit_rows())
    yield con
    con.execute("DROP SCHEMA oracle_fx CASCADE")
    con.close()
