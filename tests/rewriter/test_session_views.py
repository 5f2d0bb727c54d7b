"""Temporary views read from the parse (rewriter.session_views): which statements create or
drop one, and how a statement that reads one becomes the statement over its definition."""

from __future__ import annotations

import pytest

from rewriter.errors import Refusal
from rewriter.parsing import parse
from rewriter.session_views import inline, view_statement

DEF = "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex"


@pytest.mark.parametrize(
    ("sql", "action", "names", "flags"),
    [
        (f"CREATE TEMPORARY VIEW v AS {DEF}", "create", ("v",), {}),
        (f'CREATE TEMP VIEW "_Ibis_X" AS {DEF}', "create", ("_Ibis_X",), {}),
        (f"create or replace temp view V AS {DEF}", "create", ("v",), {"replace": True}),
        (f"  CREATE TEMPORARY VIEW pg_temp.v AS {DEF}", "create", ("v",), {}),
        ("DROP VIEW v", "drop", ("v",), {}),
        ('DROP VIEW IF EXISTS "_ibis_x", w CASCADE', "drop", ("_ibis_x", "w"), {"if_exists": True}),
    ],
)
def test_view_statements(sql, action, names, flags):
    st = view_statement(sql)
    assert (st.action, st.names) == (action, names)
    assert {k: getattr(st, k) for k in flags} == flags


@pytest.mark.parametrize(
    "sql",
    [
        f"CREATE VIEW v AS {DEF}",  # not temporary: refused where every other statement is
        f"SELECT * FROM ({DEF}) AS create_temp_view",
        "SELECT 'CREATE TEMPORARY VIEW v AS SELECT 1'",
        "DROP TABLE v",
        "DROP VIEW public.v",  # not a temporary view's name
        "DROP VIEW IF EXISTS",  # a syntax error: its own path says so
    ],
)
def test_other_statements_are_not_view_statements(sql):
    assert view_statement(sql) is None


@pytest.mark.parametrize(
    "sql",
    [
        f"CREATE TEMPORARY VIEW v (a, b) AS {DEF}",
        f"CREATE TEMPORARY VIEW public.v AS {DEF}",
        "CREATE TEMPORARY VIEW v AS VALUES (1)",
    ],
)
def test_temporary_views_this_reading_does_not_know_are_refused(sql):
    with pytest.raises(Refusal) as e:
        view_statement(sql)
    assert e.value.sqlstate == "0A000"


def test_inline_replaces_each_reference_under_its_alias():
    views = {"v": parse(DEF)}
    got = inline("SELECT n FROM v WHERE n > 3 ORDER BY n", views)
    assert parse(got) == parse(f'SELECT n FROM ({DEF}) AS "v" WHERE n > 3 ORDER BY n')
    got = inline("SELECT x.n FROM pg_temp.V AS x", views)
    assert parse(got) == parse(f"SELECT x.n FROM ({DEF}) AS x")
    assert inline("EXPLAIN SELECT * FROM v", views).startswith("EXPLAIN SELECT * FROM (SELECT")


def test_inline_leaves_other_names_alone():
    views = {"v": parse(DEF)}
    assert inline("SELECT COUNT(*) FROM pums", views) is None
    assert inline("SELECT 'v' FROM pums", views) is None
    assert inline("SELECT COUNT(*) FROM public.v", views) is None  # another schema's v
    assert inline('SELECT COUNT(*) FROM "V"', views) is None  # quoted: another name
    cte = "WITH v AS (SELECT age FROM pums) SELECT COUNT(*) FROM v"
    assert inline(cte, views) is None  # a WITH query hides the view, as in Postgres
