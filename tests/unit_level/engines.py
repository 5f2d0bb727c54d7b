"""One database per backend for the privacy-unit tests: an in-memory DuckDB, or a fresh schema
on the shared test Postgres (dropped afterwards)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import duckdb
import pytest


@dataclass
class Engine:
    dialect: str
    run: Callable[[str], list]               # rows of a statement ([] when it returns none)
    insert: Callable[[str, list], None]       # INSERT rows (tuples) into a table
    series: Callable[[int], str]              # the relation of row numbers i = 0 … n-1


@contextmanager
def engine(request, schema: str):
    """``request.param``: "duckdb" or "postgres"."""
    if request.param == "duckdb":
        con = duckdb.connect()

        def insert(table, rows):
            con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        yield Engine("duckdb", lambda q: con.execute(q).fetchall(), insert, lambda n: f"range(0, {n}) AS t(i)")
        con.close()
        return
    psycopg = pytest.importorskip("psycopg")
    con = psycopg.connect(request.getfixturevalue("postgres").dsn, autocommit=True)
    con.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path TO {schema}")

    def run(q):
        cur = con.execute(q)
        return cur.fetchall() if cur.description is not None else []

    def insert(table, rows):
        with con.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(rows[0]))})", rows)
    try:
        yield Engine("postgres", run, insert, lambda n: f"generate_series(0, {n - 1}) AS t(i)")
    finally:
        con.execute(f"DROP SCHEMA {schema} CASCADE")
        con.close()
