"""pgcli as it talks to the server: its backslash commands are pgspecial's functions
(``\\dt``, ``\\dn``, ``\\d NAME``) over a psycopg 3 cursor, its completion reads the
catalog through ``PGExecute`` (tables, columns), and its queries run through
``PGExecute.run`` (a parameter as pgcli gives one: a named query, ``\\ns name … $1`` and
``\\n name 40``, substituted by pgspecial). The catalog queries use ``relkind = ANY(%s)``
with a bound list and ``= ANY('{r,p}')`` array literals; all of them must list exactly the
declared tables."""

from __future__ import annotations

import psycopg
import pytest

from support.service import ask

from .outcomes import record
from .scenario import (
    COPY_SQL,
    GROUP_SQL,
    MORE_SQL,
    PARAM,
    PARAM_SQL,
    PUMS_TYPES,
    SECRET,
    check_answers,
    check_tables,
)
from .test_copy import charged

pytest.importorskip("pgcli", reason="pgcli not installed (pip install -e .[test])")
from pgcli.pgexecute import PGExecute
from pgspecial.main import PGSpecial
from pgspecial.namedqueries import NamedQueries


class _Config(dict):
    """pgcli's config file, in memory: where ``\\ns`` saves named queries."""

    def write(self):
        pass


def special(svc, command: str) -> tuple[list[str], list]:
    with psycopg.connect(svc.dsn(), autocommit=True) as conn:
        ((_title, rows, headers, _status),) = list(PGSpecial().execute(conn.cursor(), command))
        return list(headers), [tuple(r) for r in rows]


def test_pgspecial_lists_the_declared_tables(svc):
    headers, rows = special(svc, "\\dt")
    assert headers == ["Schema", "Name", "Type", "Owner"]
    check_tables(svc, [r[1] for r in rows])
    assert {r[0] for r in rows} == {"public"} and {r[2] for r in rows} == {"table"}
    _, schemas = special(svc, "\\dn")
    assert [s[0] for s in schemas] == ["dpgate", "public"]
    _, columns = special(svc, "\\d pums")
    assert {c[0]: c[1] for c in columns} == PUMS_TYPES
    _, secret = special(svc, f"\\dt {SECRET}")
    assert secret == []
    record("pgcli", svc, "connect", "introspection", "\\dt \\dn \\d NAME")


def test_pgcli_completion_metadata_and_a_query(svc):
    ex = PGExecute(dsn=svc.dsn())
    try:
        tables = list(ex.tables())
        check_tables(svc, [t for _, t in tables])
        columns = [(t, c, ty) for _, t, c, ty, *_ in ex.table_columns() if t == "pums"]
        assert {c: ty for _, c, ty in columns} == PUMS_TYPES
        sql = "SELECT COUNT(*) FROM pums WHERE age > 53 AND sex = 0"
        ((notice, cur, headers, status, *_),) = list(ex.run(sql))
        assert headers == ["count"] and status == "SELECT 1"
        got = cur.fetchall()
        assert charged([notice]) > 0
    finally:
        ex.conn.close()
    rows, notes = ask(svc, sql)
    assert charged(notes) == 0 and [tuple(r) for r in rows] == [tuple(r) for r in got]
    record("pgcli", svc, "completion metadata", "the NOTICE with each answer")


def _run(ex, pgspecial, sql) -> list[tuple]:
    ((_title, cur, _headers, _status, _q, success, _special),) = list(ex.run(sql, pgspecial=pgspecial))
    assert success, sql
    return [tuple(r) for r in cur.fetchall()]


def test_pgcli_five_aggregates(svc):
    ex, pgspecial = PGExecute(dsn=svc.dsn()), PGSpecial()
    NamedQueries.instance = NamedQueries(_Config())
    try:
        rows = _run(ex, pgspecial, GROUP_SQL)
        list(ex.run(f"\\ns count_over {PARAM_SQL['dollar']}", pgspecial=pgspecial))
        ((n,),) = _run(ex, pgspecial, f"\\n count_over {PARAM}")
        more = {name: _run(ex, pgspecial, sql) for name, sql in MORE_SQL.items()}
    finally:
        ex.conn.close()
        NamedQueries.instance = None
    done = check_answers(svc, "pgcli", {"rows": rows, "param_count": n, "more": more})
    record("pgcli", svc, *done, "named queries with $1 arguments")


def test_pgcli_backslash_copy_to_a_file(svc, tmp_path):
    """pgcli's ``\\copy (query) TO 'file'`` (pgspecial sends ``copy (query) TO STDOUT …``)."""
    out = tmp_path / "by_sex.csv"
    ex, pgspecial = PGExecute(dsn=svc.dsn()), PGSpecial()
    try:
        results = list(ex.run(f"\\copy ({COPY_SQL}) TO '{out}' CSV HEADER", pgspecial=pgspecial))
    finally:
        ex.conn.close()
    assert results and results[0][5], results  # success
    rows, _ = ask(svc, COPY_SQL)
    assert out.read_text().splitlines() == ["sex,n"] + [f"{s},{n}" for s, n in rows]
    record("pgcli", svc, "COPY")


def test_pgcli_over_tls(tls_svc):
    ex = PGExecute(dsn=tls_svc.dsn().replace("sslmode=disable", "sslmode=require"))
    try:
        assert ex.conn.pgconn.ssl_in_use
        check_tables(tls_svc, [t for _, t in ex.tables()])
    finally:
        ex.conn.close()
    record("pgcli", tls_svc, "TLS")
