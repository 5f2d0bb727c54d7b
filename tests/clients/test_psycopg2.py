"""The shared scenario through psycopg2 (libpq, client-side parameter binding), on
DuckDB and on Postgres, and over TLS."""

from __future__ import annotations

import io

import pytest

pytest.importorskip("psycopg2", reason="pip install psycopg2-binary")
import psycopg2.extras

from support.service import ask

from .outcomes import record
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
    declared_tables,
)


def connect(svc, sslmode="disable"):
    conn = psycopg2.connect(svc.dsn().replace("sslmode=disable", f"sslmode={sslmode}"))
    conn.autocommit = True
    return conn


def error(cur, sql) -> tuple[str, str]:
    with pytest.raises(psycopg2.Error) as e:
        cur.execute(sql)
    return e.value.pgcode, e.value.diag.message_primary


def scenario(conn) -> dict:
    cur = conn.cursor()
    cur.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", ("public",)
    )
    tables = [r[0] for r in cur.fetchall()]
    cur.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'public' AND table_name = %(t)s ORDER BY ordinal_position",
        {"t": "pums"},
    )
    columns = cur.fetchall()
    cur.execute(GROUP_SQL)
    rows = cur.fetchall()
    assert [d.name for d in cur.description] == ["sex", "count", "sum", "avg"]
    cur.execute(PARAM_SQL["format"], (PARAM,))
    n = cur.fetchone()[0]
    more = {}
    for name, sql in MORE_SQL.items():
        cur.execute(sql)
        more[name] = cur.fetchall()
    return {
        "more": more,
        "tables": tables,
        "columns": [c[0] for c in columns],
        "rows": rows,
        "param_count": n,
        "refused": error(cur, REFUSED_SQL),
        "secret_error": error(cur, SECRET_SQL),
    }


def test_psycopg2_scenario(svc):
    conn = connect(svc)
    try:
        report = scenario(conn)
        cur = conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor)
        cur.execute(
            "SELECT relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = 'public' OR relname LIKE %s",
            ("%secret%",),
        )
        listed = sorted(r["relname"] for r in cur.fetchall())
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s", (SECRET,))
        assert cur.fetchall() == []
        assert conn.server_version == 160000
    finally:
        conn.close()
    done = check_report(svc, "psycopg2", report)
    assert listed == declared_tables(svc)
    record("psycopg2", svc, *done, "client-side binding")


def test_psycopg2_transaction_block(svc):
    conn = psycopg2.connect(svc.dsn())  # not autocommit: BEGIN … ROLLBACK
    try:
        cur = conn.cursor()
        cur.execute(PARAM_SQL["format"], (PARAM,))
        assert cur.fetchone()[0] > 0
        assert conn.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_INTRANS
        conn.rollback()
        assert conn.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_IDLE
    finally:
        conn.close()
    record("psycopg2", svc, "transactions")


def test_psycopg2_copy_expert(svc):
    conn = connect(svc)
    try:
        buf = io.StringIO()
        conn.cursor().copy_expert(f"COPY ({COPY_SQL}) TO STDOUT WITH CSV HEADER", buf)
    finally:
        conn.close()
    rows, _ = ask(svc, COPY_SQL)
    assert buf.getvalue().splitlines() == ["sex,n"] + [f"{s},{n}" for s, n in rows]
    record("psycopg2", svc, "COPY")


def test_psycopg2_wrong_password(svc):
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(svc.dsn().replace("analyst-pw", "nope"))


def test_psycopg2_tls(tls_svc):
    conn = connect(tls_svc, "require")
    try:
        assert conn.info.ssl_in_use
        report = scenario(conn)
    finally:
        conn.close()
    check_report(tls_svc, "psycopg2 tls", report)
    record("psycopg2", tls_svc, "TLS")
