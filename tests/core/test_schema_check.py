"""Config meets the backend at start. Every declared table and column
is checked against the backend's schema (DuckDB and Postgres): one line per
problem naming the file, the field and what the backend has."""

from __future__ import annotations

import asyncio

import duckdb
import psycopg
import pytest

from config import parse_config
from proxy.backends import DuckDBBackend, PostgresBackend
from proxy.cli import main
from proxy.cli.schema_check import check_backend_schema, fits

CONFIG = """
[server]
auth = "trust"
[tiers.d]
epsilon = 1
budget = 10
[roles.a]
tier = "d"
[backend]
kind = "duckdb"
path = "{path}"
[tables.t.columns]
age    = {{ type = "int", lower = 0, upper = 100 }}
region = {{ type = "text", domain = ["n", "s"] }}
[tables.f]
source = "{source}"
[tables.f.columns]
x = {{ type = "float", lower = 0, upper = 1 }}
"""


def _duck(tmp_path, ddl: str, source: str = "t"):
    db = tmp_path / "d.duckdb"
    con = duckdb.connect(str(db))
    con.execute(ddl)
    con.close()
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.format(path=db, source=source))
    return cfg


def test_types_fit():
    assert fits("int", "BIGINT") and fits("int", "DECIMAL(18,0)") and fits("float", "INTEGER")
    assert fits("text", "VARCHAR") and fits("bool", "BOOLEAN") and fits("float", "numeric")
    assert not fits("int", "DOUBLE") and not fits("int", "VARCHAR") and not fits("text", "INTEGER")
    assert not fits("int", "DECIMAL(10,2)") and not fits("bool", "INTEGER")


def test_duckdb_matches_and_check_config_passes(tmp_path, capsys):
    parquet = tmp_path / "f.parquet"
    duckdb.sql(f"COPY (SELECT 0.5::DOUBLE AS x) TO '{parquet}' (FORMAT parquet)")
    cfg = _duck(
        tmp_path,
        "CREATE TABLE t (age INTEGER, region VARCHAR, extra INT)",
        source=f"read_parquet(''{parquet}'')".replace("''", "'"),
    )
    assert main(["check-config", "--backend", str(cfg)]) == 0
    assert "matches the backend" in capsys.readouterr().out


@pytest.mark.parametrize(
    "ddl, expect",
    [
        (
            "CREATE TABLE t (age DOUBLE, region VARCHAR); CREATE TABLE f (x DOUBLE)",
            "tables.t.columns.age: declared int, but t.age is DOUBLE",
        ),
        (
            "CREATE TABLE t (age INTEGER, region INTEGER); CREATE TABLE f (x DOUBLE)",
            "tables.t.columns.region: declared text, but t.region is INTEGER",
        ),
        (
            "CREATE TABLE t (age INTEGER); CREATE TABLE f (x DOUBLE)",
            "tables.t.columns.region: t has no column region",
        ),
        ("CREATE TABLE f (x DOUBLE)", "tables.t: the backend has no relation t"),
    ],
)
def test_duckdb_problems_are_one_line_each(tmp_path, capsys, ddl, expect):
    cfg = _duck(tmp_path, ddl, source="f")
    assert main(["check-config", "--backend", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(cfg) in err[0] and expect in err[0], err


def test_unreadable_table_function_is_named(tmp_path, capsys):
    cfg = _duck(
        tmp_path,
        "CREATE TABLE t (age INTEGER, region VARCHAR)",
        source=f"read_parquet('{tmp_path}/nope.parquet')",
    )
    assert main(["check-config", "--backend", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "tables.f: the backend cannot read read_parquet" in err


def test_demo_config_matches_its_data(tmp_path):
    """The demo's tables (as proxy.demo creates them), and its local table's reports."""
    from support.service import Service, make_config

    svc = Service(make_config(), tmp_path / "state", people_rows=2000, trips_rows=500).start()
    try:
        problems = asyncio.run_coroutine_threadsafe(
            check_backend_schema(svc.cfg, svc.gw.backend, "demo.toml"), svc.loop
        ).result(60)
        assert problems == []
    finally:
        svc.close()


def test_postgres_problems(postgres):
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS sc_t, sc_f")
        c.execute("CREATE TABLE sc_t (age double precision, region text)")
        c.execute("CREATE TABLE sc_f (x integer)")
    data = {
        "tiers": {"d": {"epsilon": 1, "budget": 10}},
        "roles": {"a": {"tier": "d"}},
        "server": {"auth": "trust"},
        "backend": {"kind": "postgres", "dsn": postgres.dsn},
        "tables": {
            "t": {
                "source": "sc_t",
                "columns": {
                    "age": {"type": "int", "lower": 0, "upper": 9},
                    "region": {"type": "text", "domain": ["n"]},
                    "gone": {"type": "int", "lower": 0, "upper": 9},
                },
            },
            "f": {"source": "sc_f", "columns": {"x": {"type": "float", "lower": 0, "upper": 1}}},
            "m": {"source": "sc_missing", "columns": {"x": {"type": "int", "lower": 0, "upper": 1}}},
        },
    }
    cfg = parse_config(data, "pg.toml")

    async def run():
        b = PostgresBackend(postgres.dsn, pool_size=1)
        await b.connect()
        try:
            return await check_backend_schema(cfg, b, "pg.toml")
        finally:
            await b.close()

    problems = asyncio.run(run())
    assert problems == [
        "pg.toml: tables.t.columns.age: declared int, but sc_t.age is float8 in the backend",
        "pg.toml: tables.t.columns.gone: sc_t has no column gone (it has: age, region)",
        "pg.toml: tables.m: the backend has no relation sc_missing (a source names a relation or table "
        "function; a query goes into a view)",
    ]


def test_duckdb_backend_object(tmp_path):
    con = DuckDBBackend(tmp_path / "x.duckdb")
    con.execute_script("CREATE TABLE t (age INTEGER, region VARCHAR); CREATE TABLE f (x FLOAT)")
    cfg = parse_config(
        {
            "tiers": {"d": {"epsilon": 1, "budget": 10}},
            "roles": {"a": {"tier": "d"}},
            "server": {"auth": "trust"},
            "tables": {
                "t": {"columns": {"age": {"type": "int", "lower": 0, "upper": 9}}},
                "f": {"columns": {"x": {"type": "float", "lower": 0, "upper": 1}}},
            },
        },
        "x",
    )
    assert asyncio.run(check_backend_schema(cfg, con, "x")) == []
    asyncio.run(con.close())


def test_date_and_timestamp_columns_fit():
    from proxy.cli.schema_check import fits

    assert fits("date", "DATE") and fits("timestamp", "TIMESTAMP")
    assert fits("timestamp", "timestamp without time zone")
    assert not fits("timestamp", "TIMESTAMP WITH TIME ZONE") and not fits("date", "TIMESTAMP")
