"""``CREATE TEMPORARY VIEW v AS <query>`` over the wire: a session-local name for a statement
dpgate answers. Creating it reads and charges nothing; a SELECT over it is the statement
over its definition (one release: the hand-written inlined statement is a free repeat);
the catalog lists it in the creating connection only (pg_class, pg_attribute, information_schema, in
the schema pg_temp_N); DROP VIEW removes it; a definition dpgate does not answer is refused
with the planner's reason and hint; the views end with the connection."""

from __future__ import annotations

import psycopg
import pytest

from rewriter.session_views import MAX_VIEWS
from support.service import ask

from .outcomes import record
from .test_copy import charged
from .test_psql import PSQL, ok, psql

Q = "SELECT sex, COUNT(*) AS n, AVG(income) AS m FROM pums WHERE age > 33 GROUP BY sex"
LISTED = (
    "SELECT n.nspname, c.relname, c.relkind FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = %s"
)
COLUMNS = (
    "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a "
    "JOIN pg_catalog.pg_class c ON c.oid = a.attrelid WHERE c.relname = %s AND a.attnum > 0 ORDER BY a.attnum"
)


def connect(svc, notes=None):
    c = psycopg.connect(svc.dsn(), autocommit=True)
    if notes is not None:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
    return c


def test_a_view_is_its_statement(svc):
    spent = lambda: svc.gw.ledger.spent("analyst", "day")
    notes: list[str] = []
    with connect(svc, notes) as c:
        before = spent()
        c.execute(f"CREATE TEMPORARY VIEW by_sex AS {Q}")
        assert spent() == before  # naming a statement reads and charges nothing
        rows = c.execute("SELECT * FROM by_sex ORDER BY sex").fetchall()
        assert spent() - before == pytest.approx(svc.gw.tier_of("analyst").epsilon)
        again = c.execute("SELECT sex, n, m FROM pg_temp.by_sex v WHERE v.n > -100 ORDER BY v.sex").fetchall()
        assert again == rows and charged(notes[-1:]) == 0  # the same release
        plan = c.execute("EXPLAIN SELECT * FROM by_sex").fetchall()
        assert any("geometric_count" in r[0] for r in plan)
    hand, hand_notes = ask(svc, f"SELECT * FROM ({Q}) AS by_sex ORDER BY sex")
    assert charged(hand_notes) == 0 and [tuple(r) for r in hand] == rows  # the inlined statement: a repeat
    record("psycopg 3", svc, "CREATE TEMPORARY VIEW")


def test_the_catalog_lists_a_view_in_its_session_only(svc):
    with connect(svc) as c, connect(svc) as other:
        assert c.execute("SELECT pg_my_temp_schema()").fetchone() == (0,)
        c.execute(f"CREATE TEMP VIEW listed AS {Q}")
        ((schema, name, kind),) = c.execute(LISTED, ("listed",)).fetchall()
        assert schema.startswith("pg_temp_") and (name, kind) == ("listed", "v")
        assert c.execute(COLUMNS, ("listed",)).fetchall() == [
            ("sex", "bigint"),
            ("n", "bigint"),
            ("m", "double precision"),
        ]
        assert c.execute(
            "SELECT table_schema, table_type FROM information_schema.tables WHERE table_name = 'listed'"
        ).fetchall() == [(schema, "VIEW")]
        assert c.execute("SELECT nspname FROM pg_namespace WHERE oid = pg_my_temp_schema()").fetchall() == [
            (schema,)
        ]
        assert other.execute(LISTED, ("listed",)).fetchall() == []  # another session sees nothing
        with pytest.raises(psycopg.errors.UndefinedTable):
            other.execute("SELECT * FROM listed")
        c.execute("DROP VIEW listed")
        assert c.execute(LISTED, ("listed",)).fetchall() == []
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("SELECT * FROM listed")
        c.execute(f"CREATE TEMP VIEW kept AS {Q}")
    with connect(svc) as c:  # the session ended: its views with it
        assert c.execute(LISTED, ("kept",)).fetchall() == []
        assert svc.gw.catalog.execute(
            "SELECT count(*) FROM pg_class WHERE relname = 'kept'", user="analyst", session=None
        )[1] == [(0,)]


def test_views_replace_drop_and_name_other_views(svc):
    with connect(svc) as c:
        c.execute(f"/* a comment first */ CREATE TEMPORARY VIEW a AS {Q}")
        with pytest.raises(psycopg.errors.DuplicateTable):
            c.execute(f"CREATE TEMPORARY VIEW a AS {Q}")
        c.execute(f"CREATE OR REPLACE TEMPORARY VIEW a AS {Q.replace('33', '34')}")
        c.execute("CREATE TEMPORARY VIEW b AS SELECT sex, n FROM a WHERE n > 0")  # a view over a view
        rows = c.execute("SELECT * FROM b ORDER BY sex").fetchall()
        c.execute("DROP VIEW a")  # b keeps its definition (taken when it was created)
        assert c.execute("SELECT * FROM b ORDER BY sex").fetchall() == rows
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("DROP VIEW a")
        c.execute("DROP VIEW IF EXISTS a, b")
        with pytest.raises(psycopg.errors.WrongObjectType):
            c.execute("DROP VIEW pums")


@pytest.mark.parametrize(
    ("sql", "state", "says"),
    [
        ("CREATE TEMPORARY VIEW raw AS SELECT * FROM pums", "42501", "raw rows"),
        ("CREATE TEMPORARY VIEW s AS SELECT COUNT(*) FROM secret_salaries", "42P01", "secret_salaries"),
        ("CREATE TEMPORARY VIEW pums AS SELECT COUNT(*) FROM pums", "42P07", "already exists"),
        ("CREATE TEMPORARY VIEW pg_class AS SELECT COUNT(*) FROM pums", "42P07", "already exists"),
        ("CREATE TEMPORARY VIEW v (a) AS SELECT COUNT(*) FROM pums", "0A000", "AS n"),
        ("CREATE VIEW v AS SELECT COUNT(*) FROM pums", "42501", "CREATE VIEW"),
    ],
)
def test_a_view_dpgate_cannot_answer_is_refused(svc, sql, state, says):
    before = svc.gw.ledger.spent("analyst", "day")
    with connect(svc) as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute(sql)
        assert c.execute(LISTED, ("raw",)).fetchall() == []
    assert e.value.sqlstate == state and says in str(e.value), str(e.value)
    assert svc.gw.ledger.spent("analyst", "day") == before


@pytest.mark.skipif(PSQL is None, reason="psql not installed (apt-get install postgresql-client)")
def test_psql_lists_and_describes_a_temporary_view(svc):
    r = psql(
        svc,
        "-c",
        f"CREATE TEMP VIEW listed_in_psql AS {Q}",
        "-c",
        "\\dv",
        "-c",
        "\\d listed_in_psql",
        "-c",
        "SELECT sex, n FROM listed_in_psql ORDER BY sex",
    )
    lines = ok(r)
    schema = lines[1][0]
    assert lines[0] == ["CREATE VIEW"] and schema.startswith("pg_temp_")
    assert lines[1][1:3] == ["listed_in_psql", "view"]
    assert [c[:2] for c in lines[2:5]] == [["sex", "bigint"], ["n", "bigint"], ["m", "double precision"]]
    rows, _ = ask(svc, f"SELECT sex, n FROM ({Q}) AS listed_in_psql ORDER BY sex")
    assert [tuple(int(x) for x in r) for r in lines[5:]] == [tuple(r) for r in rows]
    record("psql", svc, "CREATE TEMPORARY VIEW, \\dv, \\d view")


def test_a_connection_holds_a_bounded_number_of_views(svc):
    with connect(svc) as c:
        for i in range(MAX_VIEWS):
            c.execute(f"CREATE TEMP VIEW v{i} AS {Q}")
        with pytest.raises(psycopg.errors.ProgramLimitExceeded):
            c.execute(f"CREATE TEMP VIEW one_more AS {Q}")
        c.execute(f"CREATE OR REPLACE TEMP VIEW v0 AS {Q}")  # replacing is not one more
        c.execute("DROP VIEW v1")
        c.execute(f"CREATE TEMP VIEW one_more AS {Q}")
