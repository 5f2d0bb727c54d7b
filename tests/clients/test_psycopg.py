"""The shared scenario through psycopg 3: simple protocol (no parameters, and
client-side binding) and extended protocol (server-side binding, text and binary,
prepared), on DuckDB and on Postgres, and over TLS."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types import TypeInfo

from .outcomes import record
from .pending import SESSION_STATEMENTS, expect_fix
from .scenario import (
    GROUP_SQL,
    MORE_SQL,
    PARAM,
    PARAM_SQL,
    PUMS_COLUMNS,
    REFUSED_SQL,
    SECRET,
    SECRET_SQL,
    check_report,
)

CLIENT = "psycopg 3"

TABLES_SQL = (
    "SELECT table_name FROM information_schema.tables "
    "WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY table_name"
)
COLUMNS_SQL = (
    "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) "
    "FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
    "ORDER BY a.attnum"
)


def error(conn, sql, **kw) -> tuple[str, str]:
    with pytest.raises(psycopg.Error) as e:
        conn.execute(sql, **kw)
    return e.value.sqlstate, e.value.diag.message_primary


def scenario(conn, *, prepare, cursor_factory=None) -> dict:
    cur = conn.cursor() if cursor_factory is None else cursor_factory(conn)
    tables = [r[0] for r in cur.execute(TABLES_SQL, ("public",), prepare=prepare).fetchall()]
    columns = cur.execute(COLUMNS_SQL, ("pums",), prepare=prepare).fetchall()
    rows = cur.execute(GROUP_SQL, prepare=prepare).fetchall()
    assert [d.name for d in cur.description] == ["sex", "count", "sum", "avg"]
    n = cur.execute(PARAM_SQL["format"], (PARAM,), prepare=prepare).fetchone()[0]
    more = {name: cur.execute(sql, prepare=prepare).fetchall() for name, sql in MORE_SQL.items()}
    return {
        "more": more,
        "tables": tables,
        "columns": [c[0] for c in columns],
        "rows": rows,
        "param_count": n,
        "refused": error(conn, REFUSED_SQL),
        "secret_error": error(conn, SECRET_SQL),
        "types": dict(columns),
    }


def test_psycopg_simple_protocol(svc):
    """No parameters and client-side binding: psycopg sends simple Query messages."""
    notices = []
    with psycopg.connect(svc.dsn(), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        report = scenario(conn, prepare=False, cursor_factory=psycopg.ClientCursor)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    record(CLIENT, svc, *check_report(svc, "psycopg simple", report), "client-side binding")
    assert report["types"]["income"] == "double precision" and report["types"]["age"] == "bigint"
    assert any("ε charged" in n for n in notices)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_psycopg_extended_protocol(svc, binary):
    """Server-side binding (Parse/Bind/Execute), then named prepared statements."""
    with psycopg.connect(svc.dsn(), autocommit=True) as conn:
        report = scenario(conn, prepare=False, cursor_factory=lambda c: c.cursor(binary=binary))
        prepared = scenario(conn, prepare=True, cursor_factory=lambda c: c.cursor(binary=binary))
        one = conn.execute(PARAM_SQL["dollar"].replace("$1", "%s"), (PARAM,), binary=binary).fetchone()
    check_report(svc, "psycopg extended", report)
    check_report(svc, "psycopg prepared", prepared)
    assert one[0] == report["param_count"]
    record(CLIENT, svc, "server-side binding", "binary results" if binary else "text results")
    record(CLIENT, svc, "named prepared statements")


def test_psycopg_typeinfo_and_session_queries(svc):
    with psycopg.connect(svc.dsn(), autocommit=True) as conn:
        info = TypeInfo.fetch(conn, "text")
        assert (info.oid, info.array_oid) == (25, 1009)
        assert TypeInfo.fetch(conn, "hstore") is None
        assert conn.execute("SELECT current_schema()").fetchone() == ("public",)
        assert conn.execute("SHOW search_path").fetchone()[0] == '"$user", public'
        assert conn.execute("SELECT current_database(), current_user").fetchone() == ("demo", "analyst")
    record(CLIENT, svc, "TypeInfo.fetch")


def test_psycopg_transaction_block(svc):
    """Not autocommit: psycopg wraps statements in BEGIN … COMMIT."""
    with psycopg.connect(svc.dsn()) as conn:
        n = conn.execute(PARAM_SQL["format"], (PARAM,)).fetchone()[0]
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.commit()
    record(CLIENT, svc, "transactions")
    assert n == svc.reference.get("scenario", {}).get("param_count", n)


def test_psycopg_nested_transaction_savepoint(svc, request):
    expect_fix(request, svc, SESSION_STATEMENTS)

    with psycopg.connect(svc.dsn()) as conn:
        conn.execute("SELECT 1")
        with conn.transaction():
            assert conn.execute(PARAM_SQL["format"], (PARAM,)).fetchone()[0] > 0
        conn.commit()
    record(CLIENT, svc, "savepoints")


def test_psycopg_undeclared_table_is_invisible(svc):
    with psycopg.connect(svc.dsn(), autocommit=True) as conn:
        assert conn.execute(COLUMNS_SQL, (SECRET,)).fetchall() == []
        assert conn.execute("SELECT to_regclass(%s)", (SECRET,)).fetchone() == (None,)
        assert conn.execute(
            "SELECT count(*) FROM pg_catalog.pg_class WHERE relname = %s", (SECRET,)
        ).fetchone() == (0,)
        assert error(conn, "SELECT %s::regclass", params=(SECRET,))[0] == "42P01"
        cols = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'pums' "
            "ORDER BY ordinal_position"
        ).fetchall()
        assert [c[0] for c in cols] == PUMS_COLUMNS


def test_psycopg_tls(tls_svc):
    with psycopg.connect(
        tls_svc.dsn().replace("sslmode=disable", "sslmode=require"), autocommit=True
    ) as conn:
        assert conn.pgconn.ssl_in_use
        report = scenario(conn, prepare=False)
    check_report(tls_svc, "psycopg tls", report)
    record(CLIENT, tls_svc, "TLS")
