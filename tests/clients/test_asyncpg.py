"""The shared scenario through asyncpg (its own protocol implementation: extended
protocol only, binary formats, Describe before every Bind), on DuckDB and on Postgres,
and over TLS."""

from __future__ import annotations

import asyncio
import io
import ssl

import asyncpg
import pytest

from support.service import ask

from .outcomes import record
from .pending import CATALOG_PARAMS, SESSION_STATEMENTS, expect_fix
from .scenario import (
    COPY_SQL,
    GROUP_SQL,
    MORE_SQL,
    PARAM,
    PARAM_SQL,
    PUMS_COLUMNS,
    REFUSED_SQL,
    SECRET,
    SECRET_SQL,
    check_report,
    declared_tables,
)


async def error(conn, sql) -> tuple[str, str]:
    with pytest.raises(asyncpg.PostgresError) as e:
        await conn.fetch(sql)
    return e.value.sqlstate, e.value.message


async def scenario(conn) -> dict:
    tables = await conn.fetch(
        "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r' "
        "ORDER BY 1"
    )
    columns = await conn.fetch(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = 'pums' ORDER BY ordinal_position"
    )
    rows = await conn.fetch(GROUP_SQL)
    assert list(rows[0].keys()) == ["sex", "count", "sum", "avg"]
    stmt = await conn.prepare(PARAM_SQL["dollar"])
    assert [t.name for t in stmt.get_parameters()] == ["int8"]
    n = await stmt.fetchval(PARAM)
    more = {name: [tuple(r) for r in await conn.fetch(sql)] for name, sql in MORE_SQL.items()}
    return {
        "more": more,
        "tables": [t["relname"] for t in tables],
        "columns": [c["column_name"] for c in columns],
        "rows": [tuple(r) for r in rows],
        "param_count": n,
        "refused": await error(conn, REFUSED_SQL),
        "secret_error": await error(conn, SECRET_SQL),
    }


def test_asyncpg_scenario(svc):
    notices = []

    async def main():
        conn = await asyncpg.connect(svc.url())
        conn.add_log_listener(lambda c, msg: notices.append(msg.message))
        try:
            report = await scenario(conn)
            secret = await conn.fetch(
                f"SELECT attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                f"WHERE c.relname = '{SECRET}'"
            )
            cols = await conn.fetch(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'pums'::regclass "
                "AND attnum > 0 ORDER BY attnum"
            )
            return report, secret, [c[0] for c in cols]
        finally:
            await conn.close()

    report, secret, cols = asyncio.run(main())
    done = check_report(svc, "asyncpg", report)
    assert secret == [] and cols == PUMS_COLUMNS
    assert any("ε charged" in n for n in notices)
    record("asyncpg", svc, *done, "binary protocol")


def test_asyncpg_parameterised_introspection(svc, request):
    expect_fix(request, svc, CATALOG_PARAMS)

    async def main():
        conn = await asyncpg.connect(svc.url())
        try:
            tables = await conn.fetch(
                "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r' "
                "ORDER BY 1",
                "public",
            )
            cols = await conn.fetch(
                "SELECT column_name FROM information_schema.columns WHERE table_name = $1 "
                "ORDER BY ordinal_position",
                "pums",
            )
            secret = await conn.fetch(
                "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "WHERE c.relname = $1 AND a.attnum > $2",
                SECRET,
                0,
            )
            by_oid = await conn.fetch(
                "SELECT attname FROM pg_attribute WHERE attrelid = $1 ORDER BY attnum",
                await conn.fetchval("SELECT 'pums'::regclass::oid"),
            )
            by_name = await conn.fetch(
                "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass "
                "AND attnum > 0 ORDER BY attnum",
                "public.pums",
            )
            assert [c[0] for c in by_name] == [c[0] for c in by_oid]
            with pytest.raises(asyncpg.UndefinedTableError):
                await conn.fetch("SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass", SECRET)
            return [t[0] for t in tables], [c[0] for c in cols], secret, [c[0] for c in by_oid]
        finally:
            await conn.close()

    tables, cols, secret, by_oid = asyncio.run(main())
    assert tables == declared_tables(svc) and cols == by_oid == PUMS_COLUMNS and secret == []
    record("asyncpg", svc, "catalog queries with $n")


def test_asyncpg_copy_from_query(svc):
    async def main():
        conn = await asyncpg.connect(svc.url())
        try:
            out = io.BytesIO()
            status = await conn.copy_from_query(COPY_SQL, output=out, format="csv", header=True)
            return status, out.getvalue().decode()
        finally:
            await conn.close()

    status, text = asyncio.run(main())
    rows, _ = ask(svc, COPY_SQL)
    assert status == f"COPY {len(rows)}"
    assert text.splitlines() == ["sex,n"] + [f"{s},{n}" for s, n in rows]
    record("asyncpg", svc, "COPY")


def test_asyncpg_wrong_password(svc):
    async def main():
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(svc.url().replace("analyst-pw", "nope"))

    asyncio.run(main())


def test_asyncpg_pool(svc, request):
    """A pool resets each connection on release (pg_advisory_unlock_all, CLOSE ALL, UNLISTEN *, RESET ALL)."""
    expect_fix(request, svc, SESSION_STATEMENTS)

    async def main():
        async with asyncpg.create_pool(svc.url(), min_size=2, max_size=2) as pool:
            return await asyncio.gather(*(pool.fetchval(PARAM_SQL["dollar"], PARAM) for _ in range(4)))

    counts = asyncio.run(main())
    assert len(set(counts)) == 1
    record("asyncpg", svc, "connection pools")


def test_asyncpg_tls(tls_svc):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE

    async def main():
        conn = await asyncpg.connect(tls_svc.url().replace("?sslmode=disable", ""), ssl=ctx)
        try:
            assert conn._transport.get_extra_info("sslcontext") is not None
            return await scenario(conn)
        finally:
            await conn.close()

    check_report(tls_svc, "asyncpg tls", asyncio.run(main()))
    record("asyncpg", tls_svc, "TLS")
