"""Defence in depth: a write that slipped past the rewriter is refused by the database itself.

The statements here are sent through the backend layer directly (``backend.fetch``, the path
every rewritten scan takes), never through the rewriter, which would refuse them first. Each
test checks the database's state afterwards: the row, the table or the file is not there.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import duckdb
import psycopg
import pytest

from config import parse_config
from proxy.backends import BackendError, PostgresBackend, open_backend
from proxy.backends.duckdb import source_directories
from support.least_privilege import reader_dsn

WRITES_PG = [
    "INSERT INTO lp_t VALUES (9)",
    "UPDATE lp_t SET a = 9",
    "DELETE FROM lp_t",
    "CREATE TABLE lp_new (a int)",
    "SET transaction_read_only = off; INSERT INTO lp_t VALUES (9)",
    "BEGIN READ WRITE; INSERT INTO lp_t VALUES (9); COMMIT",
]


def _duck_cfg(path: Path, **tables) -> object:
    return parse_config(
        {
            "server": {"auth": "trust"},
            "backend": {"kind": "duckdb", "path": str(path)},
            "tiers": {"t": {"epsilon": 1, "budget": 10}},
            "roles": {"r": {"tier": "t"}},
            "tables": tables or {"lp_t": {"columns": {"a": {"type": "int"}}}},
        }
    )


async def _refused(backend, sql: str) -> BackendError:
    with pytest.raises(BackendError) as e:
        await backend.fetch(sql, 5)
    return e.value


# -- Postgres --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pg_table(postgres):
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute(
            "DROP TABLE IF EXISTS lp_t; DROP TABLE IF EXISTS lp_new; CREATE TABLE lp_t (a int); "
            "INSERT INTO lp_t VALUES (1), (2)"
        )
    return postgres


def _pg_rows(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute("SELECT a FROM lp_t ORDER BY a").fetchall()
        new = c.execute("SELECT to_regclass('lp_new')").fetchone()[0]
    return rows, new


def test_postgres_scan_session_refuses_writes(pg_table, caplog):
    """Even as a superuser (the test server's role), every injected write fails in the
    database: the session is read-only and a message holds one statement."""

    async def main():
        b = PostgresBackend(pg_table.dsn, 2)
        await b.connect()
        try:
            assert await b.fetch("SELECT COUNT(*) FROM lp_t", 5) == [(2,)]
            for sql in WRITES_PG:
                await _refused(b, sql)
            # a statement that changes the session's mode, then a write on the same pool:
            # the mode is asserted again before every scan
            for lone in (
                "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
                "SET default_transaction_read_only = off",
                "BEGIN READ WRITE",
            ):
                for _ in range(2):  # both pool connections
                    await _refused(b, lone)
                for _ in range(3):
                    await _refused(b, "INSERT INTO lp_t VALUES (9)")
            assert await b.fetch("SHOW transaction_read_only", 5) == [("on",)]
        finally:
            await b.close()

    with caplog.at_level(logging.WARNING, logger="dpgate.backend"):
        asyncio.run(main())
    said = caplog.text
    assert "cannot execute INSERT in a read-only transaction" in said
    assert "cannot execute CREATE TABLE in a read-only transaction" in said
    assert "cannot insert multiple commands into a prepared statement" in said
    assert _pg_rows(pg_table.dsn) == ([(1,), (2,)], None)


def test_postgres_writer_is_separate(pg_table):
    """dpgate's own writes go through ``writer``, its own pool on ``write_dsn`` (default dsn)."""

    async def main():
        b = PostgresBackend(pg_table.dsn, 2)
        assert b.writer is not b and b.writer.dsn == pg_table.dsn
        await b.connect()
        try:
            await b.writer.execute_script("CREATE TABLE lp_new (a int); DROP TABLE lp_new")
            assert await b.writer.fetch("SHOW transaction_read_only", 5) == [("off",)]
        finally:
            await b.close()
        other = PostgresBackend(pg_table.dsn, 2, write_dsn="postgresql://writer@127.0.0.1:1/x")
        assert other.writer.dsn == "postgresql://writer@127.0.0.1:1/x"

    asyncio.run(main())


def test_postgres_copy_to_file_refused_for_least_privilege_role(pg_table, tmp_path):
    """``COPY … TO 'file'`` writes no table, so a read-only session does not stop it; a role
    that is not a superuser and not in pg_write_server_files is refused by the server."""
    dsn = reader_dsn(pg_table, ["lp_t"])
    target = tmp_path / "out.csv"

    async def main():
        b = PostgresBackend(dsn, 1)
        await b.connect()
        try:
            assert await b.fetch("SELECT COUNT(*) FROM lp_t", 5) == [(2,)]
            await _refused(b, f"COPY (SELECT 1) TO '{target}'")
            await _refused(b, "COPY (SELECT 1) TO PROGRAM 'true'")
            await _refused(b, "INSERT INTO lp_t VALUES (9)")
        finally:
            await b.close()

    asyncio.run(main())
    assert not target.exists()
    assert _pg_rows(pg_table.dsn) == ([(1,), (2,)], None)


# -- DuckDB ----------------------------------------------------------------------------------
def _duck_file(tmp_path) -> Path:
    path = tmp_path / "lp.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE lp_t AS SELECT * FROM range(1, 3) t(a)")
    con.close()
    return path


def _duck_state(path: Path):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return (
            con.execute("SELECT a FROM lp_t ORDER BY a").fetchall(),
            con.execute("SELECT table_name FROM information_schema.tables ORDER BY 1").fetchall(),
        )
    finally:
        con.close()


@pytest.mark.parametrize("reopen", [False, True], ids=["opened-read-only", "reopened-after-start"])
def test_duckdb_read_only_refuses_writes(tmp_path, reopen):
    """A read-only DuckDB (``--workers N``, or one process once the start's writes are done)
    refuses INSERT/CREATE itself, and COPY TO / ATTACH / a file read outside the sources'
    directories are refused by DuckDB's file-access setting, which no statement can undo."""
    path = _duck_file(tmp_path)
    target = tmp_path / "out.csv"

    async def main():
        b = open_backend(_duck_cfg(path), tmp_path, read_only=not reopen)
        if reopen:
            assert not b.read_only
            b.reopen_read_only()
        assert b.read_only and b.allowed == []
        try:
            assert await b.fetch("SELECT COUNT(*) FROM lp_t", 5) == [(2,)]
            for sql in (
                "INSERT INTO lp_t VALUES (9)",
                "UPDATE lp_t SET a = 9",
                "DELETE FROM lp_t",
                "CREATE TABLE lp_new (a int)",
                f"COPY lp_t TO '{target}'",
                f"ATTACH '{tmp_path / 'other.duckdb'}' AS o",
                "SELECT * FROM read_csv('/etc/passwd')",
                "SET enable_external_access = true",
                "RESET allowed_directories",
                "SET allowed_directories = ['/']",
                "INSTALL httpfs",
            ):
                await _refused(b, sql)
        finally:
            await b.close()

    asyncio.run(main())
    assert not target.exists() and not (tmp_path / "other.duckdb").exists()
    assert _duck_state(path) == ([(1,), (2,)], [("lp_t",)])


def test_duckdb_sources_directories_stay_readable(tmp_path):
    """A source read from files (``read_csv``) is read; a file beside it in another directory is not."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.csv").write_text("a\n1\n2\n3\n")
    (tmp_path / "secret.csv").write_text("a\n42\n")
    path = _duck_file(tmp_path)
    cfg = _duck_cfg(
        path, x={"source": f"read_csv('{data}/*.csv', header = true)", "columns": {"a": {"type": "int"}}}
    )

    async def main():
        b = open_backend(cfg, tmp_path, read_only=True)
        try:
            assert b.allowed == [f"{data}/"]
            assert await b.fetch(f"SELECT COUNT(*) FROM {cfg.source_of('x')}", 5) == [(3,)]
            await _refused(b, f"SELECT * FROM read_csv('{tmp_path}/secret.csv')")
            await _refused(b, f"COPY lp_t TO '{tmp_path}/out.csv'")
        finally:
            await b.close()

    asyncio.run(main())


def test_source_directories_from_the_parse():
    assert source_directories(["pums", "sales.orders"]) == []
    assert source_directories(
        [
            "read_parquet(['/a/1.parquet', '/b/c/*.parquet'])",
            "read_csv('/d/x.csv', delim = ';')",
            "'/e/f.parquet'",
        ]
    ) == ["/a/", "/b/c/", "/d/", "/e/"]
    assert source_directories(["read_parquet('s3://bucket/x.parquet')"]) is None


def test_duckdb_attached_data_file_is_read_only(tmp_path):
    """``[backend] attach``: the owner's data file is attached READ_ONLY, so even dpgate's own
    read-write working file (a role may INSERT into a local table) cannot write into it."""
    data = tmp_path / "wh.duckdb"
    con = duckdb.connect(str(data))
    con.execute("CREATE TABLE orders AS SELECT * FROM range(1, 4) t(a)")
    con.close()
    cfg = parse_config(
        {
            "server": {"auth": "trust"},
            "backend": {"kind": "duckdb", "path": str(tmp_path / "work.duckdb"), "attach": {"wh": str(data)}},
            "tiers": {"t": {"epsilon": 1, "budget": 10}},
            "roles": {"r": {"tier": "t"}},
            "tables": {"orders": {"source": "wh.main.orders", "columns": {"a": {"type": "int"}}}},
        }
    )

    async def main():
        b = open_backend(cfg, tmp_path)
        assert not b.read_only and b.allowed == []
        try:
            assert await b.fetch("SELECT COUNT(*) FROM wh.main.orders", 5) == [(3,)]
            for sql in (
                "INSERT INTO wh.main.orders VALUES (9)",
                "CREATE TABLE wh.main.x (a int)",
                f"ATTACH '{data}' AS wh2",
            ):
                await _refused(b, sql)
            b.reopen_read_only()
            assert await b.fetch("SELECT COUNT(*) FROM wh.main.orders", 5) == [(3,)]
        finally:
            await b.close()

    asyncio.run(main())
    con = duckdb.connect(str(data), read_only=True)
    assert con.execute("SELECT COUNT(*) FROM orders").fetchall() == [(3,)]
    assert con.execute("SELECT COUNT(*) FROM information_schema.tables").fetchall() == [(1,)]
    con.close()


def test_postgres_scan_values_are_those_of_text_results(pg_table):
    """The scan is fetched in binary (extended protocol): each type a scan returns gives the
    value a text-format fetch gives."""
    sql = (
        "SELECT 1::int2, 2::int4, 3::int8, 1.5::float8, 'NaN'::float8, '-Infinity'::float8, 12.345::numeric, "
        "'NaN'::numeric, 'é'::text, 'x'::varchar, 'c'::char(2), true, NULL::int8, DATE '2025-03-01', "
        "TIMESTAMP '2025-03-01 12:34:56.789', 99999999999999999999::numeric, -0.0::float8"
    )

    async def main():
        b = PostgresBackend(pg_table.dsn, 1)
        await b.connect()
        try:
            return await b.fetch(sql, 5)
        finally:
            await b.close()

    got = asyncio.run(main())
    with psycopg.connect(pg_table.dsn, autocommit=True) as c:
        want = c.execute(sql).fetchall()
    assert repr(got) == repr(want)


def test_duckdb_a_view_over_files_stays_readable(tmp_path):
    """A source that is a view of the DuckDB file over Parquet/CSV files: the view's files'
    directory is allowed too (read from the view's definition)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.csv").write_text("a\n1\n2\n")
    path = _duck_file(tmp_path)
    con = duckdb.connect(str(path))
    con.execute(f"CREATE VIEW xv AS SELECT * FROM read_csv('{data}/x.csv', header = true)")
    con.close()
    cfg = _duck_cfg(path, xv={"columns": {"a": {"type": "int"}}})

    async def main():
        b = open_backend(cfg, tmp_path, read_only=True)
        try:
            assert b.allowed == [f"{data}/"]
            assert await b.fetch("SELECT COUNT(*) FROM xv", 5) == [(2,)]
            await _refused(b, f"COPY lp_t TO '{tmp_path}/out.csv'")
        finally:
            await b.close()

    asyncio.run(main())
