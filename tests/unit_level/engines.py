"""One database per backend for the privacy-unit tests: an in-memory DuckDB, a fresh schema
on the shared test Postgres, or a fresh database on the shared local Spark Connect server
(both dropped afterwards)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb
import pytest
import sqlglot

from support.bound import duck_rows, pg_execute, spark_df


@dataclass
class Engine:
    dialect: str
    run: Callable[[str], list]  # rows of a statement ([] when it returns none)
    insert: Callable[[str, list], None]  # INSERT rows (tuples) into a table
    series: Callable[[int], str]  # the relation of row numbers i = 0 … n-1


@contextmanager
def engine(request, schema: str):
    """``request.param``: "duckdb" or "postgres"."""
    if request.param == "duckdb":
        con = duckdb.connect()

        def insert(table, rows):
            con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)

        yield Engine("duckdb", lambda q: duck_rows(con, q), insert, lambda n: f"range(0, {n}) AS t(i)")
        con.close()
        return
    if request.param == "spark":
        yield from _spark(request, schema)
        return
    psycopg = pytest.importorskip("psycopg")
    con = psycopg.connect(request.getfixturevalue("postgres").dsn, autocommit=True)
    con.execute(
        f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path TO {schema}"
    )

    def run(q):
        cur = pg_execute(con, q)
        return cur.fetchall() if cur.description is not None else []

    def insert(table, rows):
        with con.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(rows[0]))})", rows)

    try:
        yield Engine("postgres", run, insert, lambda n: f"generate_series(0, {n - 1}) AS t(i)")
    finally:
        con.execute(f"DROP SCHEMA {schema} CASCADE")
        con.close()


def _spark(request, schema: str):
    """Tables in their own Spark database; rows go in as one DataFrame per insert."""
    session = request.getfixturevalue("spark_connect").session()
    session.sql(f"DROP DATABASE IF EXISTS {schema} CASCADE")
    session.sql(f"CREATE DATABASE {schema}")
    session.sql(f"USE {schema}")

    def run(q):
        if q.lstrip().upper().startswith("CREATE "):  # the tests' DDL is written for Postgres
            q = sqlglot.transpile(q, read="postgres", write="spark")[0]
        return [tuple(r) for r in spark_df(session, q).collect()]

    def insert(table, rows):
        session.createDataFrame(rows, session.table(table).schema).write.insertInto(table)

    try:
        yield Engine("spark", run, insert, lambda n: f"range(0, {n}) AS t(i)")
    finally:
        session.sql(f"DROP DATABASE {schema} CASCADE")
