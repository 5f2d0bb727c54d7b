"""The shared scenario through pg8000 (pure Python; its own protocol code: native API
with named parameters and the DB-API with %s), on DuckDB and on Postgres, and over TLS."""

from __future__ import annotations

import io
import ssl

import pytest

pytest.importorskip("pg8000", reason="pip install pg8000")
import pg8000.dbapi
import pg8000.native

from support.service import PASSWORDS, ask

from .outcomes import record
from .pending import CATALOG_PARAMS, expect_fix
from .scenario import (
    COPY_SQL,
    GROUP_SQL,
    MORE_SQL,
    PARAM,
    PARAM_SQL,
    REFUSED_SQL,
    SECRET,
    SECRET_SQL,
    check_report,
)


def connect(svc, api=pg8000.native.Connection, **kw):
    return api(
        "analyst",
        host="127.0.0.1",
        port=svc.port,
        database="demo",
        password=PASSWORDS["analyst"],
        timeout=30,
        **kw,
    )


def error(conn, sql) -> tuple[str, str]:
    with pytest.raises(pg8000.native.DatabaseError) as e:
        conn.run(sql)
    fields = e.value.args[0]
    return fields["C"], fields["M"]


def scenario(conn) -> dict:
    tables = conn.run("SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = 'public' ORDER BY 1")
    columns = conn.run(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'pums' "
        "ORDER BY ordinal_position"
    )
    rows = conn.run(GROUP_SQL)
    assert [c["name"] for c in conn.columns] == ["sex", "count", "sum", "avg"]
    n = conn.run(PARAM_SQL["named"], age=PARAM)[0][0]
    more = {name: conn.run(sql) for name, sql in MORE_SQL.items()}
    return {
        "more": more,
        "tables": [t[0] for t in tables],
        "columns": [c[0] for c in columns],
        "rows": rows,
        "param_count": n,
        "refused": error(conn, REFUSED_SQL),
        "secret_error": error(conn, SECRET_SQL),
    }


def test_pg8000_native(svc):
    conn = connect(svc)
    try:
        report = scenario(conn)
        assert conn.run("SELECT current_schema()") == [["public"]]
    finally:
        conn.close()
    record("pg8000", svc, *check_report(svc, "pg8000 native", report), "native API (named parameters)")


def test_pg8000_dbapi(svc):
    conn = connect(svc, pg8000.dbapi.connect)
    try:
        cur = conn.cursor()
        cur.execute(PARAM_SQL["format"], (PARAM,))
        ((n,),) = cur.fetchall()
        cur.execute(GROUP_SQL)
        rows = cur.fetchall()
        conn.rollback()
    finally:
        conn.close()
    assert n == svc.reference.get("scenario", {}).get("param_count", n)
    assert len(rows) == 2
    record("pg8000", svc, "DB-API (%s)")


def test_pg8000_parameterised_catalog_query(svc, request):
    expect_fix(request, svc, CATALOG_PARAMS)

    conn = connect(svc)
    try:
        rows = conn.run(
            "SELECT table_name FROM information_schema.tables WHERE table_name IN (:a, :b)",
            a="pums",
            b=SECRET,
        )
    finally:
        conn.close()
    assert rows == [["pums"]]
    record("pg8000", svc, "catalog queries with parameters")


def test_pg8000_copy_to_a_stream(svc):
    conn = connect(svc)
    try:
        out = io.BytesIO()
        conn.run(f"COPY ({COPY_SQL}) TO STDOUT WITH (FORMAT csv)", stream=out)
    finally:
        conn.close()
    rows, _ = ask(svc, COPY_SQL)
    assert out.getvalue().decode().splitlines() == [f"{s},{n}" for s, n in rows]
    record("pg8000", svc, "COPY")


def test_pg8000_tls(tls_svc):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = connect(tls_svc, ssl_context=ctx)
    try:
        assert isinstance(conn._usock, ssl.SSLSocket)
        report = scenario(conn)
    finally:
        conn.close()
    check_report(tls_svc, "pg8000 tls", report)
    record("pg8000", tls_svc, "TLS")
