"""Real clients (psql, psycopg 3, asyncpg) against the toy server."""

import asyncio
import datetime as dt
import os
import shutil
import subprocess
import threading
import time
from decimal import Decimal

import asyncpg
import psycopg
import pytest

from .toy import PASSWORD

PSQL = shutil.which("psql")


def run_psql(server, sql, password=PASSWORD, user="alice"):
    env = dict(os.environ, PGPASSWORD=password, PGCONNECT_TIMEOUT="5")
    env.pop("PGSERVICE", None)
    return subprocess.run(
        [PSQL, "-X", "-h", "127.0.0.1", "-p", str(server.port), "-U", user, "-d", "db", "-c", sql],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
    )


@pytest.mark.skipif(PSQL is None, reason="psql not installed")
def test_psql(server):
    r = run_psql(server, "notice")
    assert r.returncode == 0, r.stderr
    assert "NOTICE:  hello from toy" in r.stderr
    assert "(1 row)" in r.stdout
    r = run_psql(server, "rows 3")
    assert "s2" in r.stdout and "(3 rows)" in r.stdout
    r = run_psql(server, "fail")
    assert r.returncode == 1 and 'relation "fail" does not exist' in r.stderr and "toy hint" in r.stderr
    r = run_psql(server, "select 1", password="wrong")
    assert r.returncode == 2 and 'password authentication failed for user "alice"' in r.stderr
    r = run_psql(server, "select 1", user="nobody")
    assert r.returncode == 2 and 'password authentication failed for user "nobody"' in r.stderr


def test_psycopg_simple_and_extended(server):
    with psycopg.connect(server.dsn(application_name="tapp"), autocommit=True) as conn:
        assert conn.info.parameter_status("application_name") == "tapp"
        assert conn.info.server_version >= 160000
        cur = conn.cursor()
        assert cur.execute("select 1").fetchall() == [(1,)]
        assert cur.execute("rows 3", prepare=False).fetchall()[2] == (
            2,
            "s2",
            0.5,
            Decimal("0.25"),
            True,
            2 * 10**12,
        )
        assert cur.execute(
            "select %s::int4, %s, %s::float8, %s::bool", [5, "x", 1.5, True], prepare=True
        ).fetchall() == [(5, "x", 1.5, True)]
        assert cur.execute("select %s::int4", [6], prepare=True).fetchone() == (6,)
        assert cur.execute("select %s::int4", [7], prepare=True).fetchone() == (7,)
        bcur = conn.cursor(binary=True)
        row = bcur.execute("rows 4").fetchall()[3]
        assert row == (3, "s3", 0.75, Decimal("0.375"), False, 3 * 10**12)
        assert bcur.execute(
            "select %s::numeric, %s::int8, %s::text", [Decimal("-12.5"), 2**40, "é"]
        ).fetchone() == (Decimal("-12.5"), 2**40, "é")
        with pytest.raises(psycopg.errors.UndefinedTable) as ei:
            cur.execute("select fail where %s::int4 = 1", [1])
        assert ei.value.diag.message_hint == "toy hint"
        assert cur.execute("select 1").fetchone() == (1,)  # recovered after the extended-mode error
        with pytest.raises(psycopg.errors.InternalError_):
            cur.execute("boom")
        cur.execute("set application_name = 'other'")
        assert conn.info.parameter_status("application_name") == "other"


def test_psycopg_notices_and_transactions(server):
    with psycopg.connect(server.dsn()) as conn:
        notices = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        st = psycopg.pq.TransactionStatus
        conn.autocommit = True
        conn.execute("notice")
        assert notices == ["hello from toy"]
        conn.execute("begin")
        assert conn.info.transaction_status == st.INTRANS
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("fail")
        assert conn.info.transaction_status == st.INERROR
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            conn.execute("select 1")
        conn.execute("rollback")
        assert conn.info.transaction_status == st.IDLE
        conn.autocommit = False  # psycopg issues BEGIN itself
        conn.execute("select 1")
        assert conn.info.transaction_status == st.INTRANS
        conn.commit()
        assert conn.info.transaction_status == st.IDLE


def test_psycopg_pipeline_error_then_sync_recovers(server):
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            with conn.pipeline():
                conn.execute("select %s::int4", [1])
                conn.execute("select fail where %s::int4 = 1", [1])
                conn.execute("select %s::int4", [3])
        assert conn.execute("select %s::int4", [4]).fetchone() == (4,)


def test_psycopg_cancel(server):
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        # cancel_safe, not cancel(): the blocking PQcancel holds the GIL and would
        # deadlock with this in-process server thread.
        timer = threading.Timer(0.3, lambda: conn.cancel_safe(timeout=5))
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("sleep")
        assert time.monotonic() - t0 < 5
        assert conn.execute("select 1").fetchone() == (1,)


def test_ssl(make_server, tmp_path):
    from .certs import server_context

    server = make_server(ssl_context=server_context(tmp_path))
    with psycopg.connect(server.dsn(sslmode="require")) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("select 1").fetchone() == (1,)
    with psycopg.connect(server.dsn(sslmode="disable")) as conn:  # plaintext still allowed
        assert not conn.pgconn.ssl_in_use


def test_ssl_refused_without_context(server):
    with pytest.raises(psycopg.OperationalError, match="does not support SSL"):
        psycopg.connect(server.dsn(sslmode="require"))
    with psycopg.connect(server.dsn(sslmode="prefer")) as conn:
        assert not conn.pgconn.ssl_in_use


def test_max_connections(make_server):
    server = make_server(max_connections=2)
    c1, c2 = psycopg.connect(server.dsn()), psycopg.connect(server.dsn())
    try:
        with pytest.raises(psycopg.OperationalError, match="too many connections"):
            psycopg.connect(server.dsn())
    finally:
        c1.close()
    for _ in range(50):  # the slot frees up once the server notices the close
        try:
            psycopg.connect(server.dsn()).close()
            break
        except psycopg.OperationalError:
            time.sleep(0.05)
    else:
        pytest.fail("slot never freed")
    c2.close()


def test_unknown_database_and_trust(server):
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        psycopg.connect(server.dsn().replace("dbname=db", "dbname=nodb"))
    with psycopg.connect(server.dsn(user="trusty", password=None)) as conn:
        assert conn.execute("select 1").fetchone() == (1,)


def test_asyncpg(server):
    async def main():
        conn = await asyncpg.connect(
            host="127.0.0.1", port=server.port, user="alice", password=PASSWORD, database="db", ssl=False
        )
        try:
            assert await conn.fetchval("select 1") == 1
            row = await conn.fetchrow(
                "select $1::int4, $2::float8, $3::text, $4::bool, $5::int8, $6::numeric",
                7,
                2.5,
                "hé",
                False,
                2**40,
                Decimal("3.14"),
            )
            assert tuple(row) == (7, 2.5, "hé", False, 2**40, Decimal("3.14"))
            assert await conn.fetchval("select $1::date", dt.date(2024, 1, 31)) == dt.date(2024, 1, 31)
            rows = await conn.fetch("rows 3")
            assert [tuple(r) for r in rows][1] == (1, "s1", 0.25, Decimal("0.125"), False, 10**12)
            stmt = await conn.prepare("select $1::int4, $2")
            assert [tuple(await stmt.fetchrow(i, str(i))) for i in range(3)] == [(0, "0"), (1, "1"), (2, "2")]
            assert [a.name for a in stmt.get_attributes()] == ["p1", "p2"]
            async with conn.transaction():
                assert await conn.fetchval("select $1::int4", 1) == 1
            cur_rows = []
            async with conn.transaction():
                async for r in conn.cursor("rows 7", prefetch=3):
                    cur_rows.append(r["i"])
            assert cur_rows == list(range(7))
            with pytest.raises(asyncpg.UndefinedTableError):
                await conn.fetch("select fail")
            with pytest.raises(asyncio.TimeoutError):
                await conn.fetch("sleep", timeout=0.3)  # asyncpg sends a CancelRequest
            assert await conn.fetchval("select $1::int4", 9) == 9
            with pytest.raises(asyncpg.InvalidPasswordError):
                await asyncpg.connect(
                    host="127.0.0.1", port=server.port, user="alice", password="no", database="db", ssl=False
                )
        finally:
            await conn.close()

    asyncio.run(main())
