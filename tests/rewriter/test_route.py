"""Routing from the parse: the table and the path of a statement come
from its parsed FROM items, never from its text — aliases, string literals and
comments that name a declared table do not route to it."""

from __future__ import annotations

import pytest

from rewriter.errors import Refusal
from rewriter.route import route

TABLES = {"pums", "accounts", "trips", "people"}
CATALOG = {"pg_class", "pg_type"}

# (statement, kind, table): spelling tricks against the per-record table ``accounts``
CORPUS = [
    ('SELECT COUNT(*) AS "from pums" FROM accounts WHERE balance >= 421048', "dp", "accounts"),
    ("SELECT COUNT('from pums') FROM accounts", "dp", "accounts"),
    ("SELECT COUNT(*) FROM ONLY accounts", "dp", "accounts"),
    ('SELECT COUNT(*) FROM"accounts"', "dp", "accounts"),
    ("SELECT COUNT(*) FROM accounts -- from pums", "dp", "accounts"),
    ("SELECT COUNT(*) /* from pums */ FROM accounts", "dp", "accounts"),
    ("SELECT COUNT(*) FROM public.accounts AS pums", "dp", "accounts"),
    ('SELECT COUNT(*) FROM "public"."accounts" pums', "dp", "accounts"),
    ("SELECT COUNT(*)\tFROM\naccounts", "dp", "accounts"),
    ("SELECT COUNT(*) FROM (SELECT * FROM accounts) AS pums", "dp", "accounts"),
    ("WITH p AS (SELECT * FROM accounts) SELECT COUNT(*) FROM p", "dp", "accounts"),
    ("SELECT COUNT(*) FROM accounts WHERE 'x' <> 'from pums'", "dp", "accounts"),
    ("SELECT COUNT(*) FROM trips WHERE zone = 'from pums'", "dp", "trips"),
    ("SELECT COUNT(*) AS trips FROM pums", "dp", "pums"),
    ('EXPLAIN SELECT COUNT(*) AS "from pums" FROM accounts', "explain", "accounts"),
    ("explain analyze SELECT COUNT(*) FROM trips", "explain", "trips"),
    ("INSERT INTO trips (zone) VALUES ('from pums')", "insert", "trips"),
    ("SELECT * FROM dpgate.budget WHERE role = 'from pums'", "views", None),
    ("SELECT relname FROM pg_class WHERE relname = 'pums'", "dp", None),  # catalog: no declared table
    ('SELECT COUNT(*) FROM "PUMS"', "dp", None),  # quoted: another name
    ("SELECT COUNT(*) FROM other.pums", "dp", None),  # another schema
]


@pytest.mark.parametrize("sql,kind,table", CORPUS)
def test_route_from_the_parse(sql, kind, table):
    r = route(sql, TABLES, CATALOG)
    assert (r.kind, r.table) == (kind, table)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM accounts, pums",
        "SELECT COUNT(*) FROM accounts JOIN pums ON true",
        "SELECT COUNT(*) FROM pums UNION ALL SELECT COUNT(*) FROM accounts",
        "WITH pums AS (SELECT * FROM accounts) SELECT COUNT(*) FROM pums",
        "SELECT COUNT(*) FROM pums, pg_class",
        "SELECT * FROM dpgate.budget, pums",
        "SELECT COUNT(*) FROM pums WHERE age IN (SELECT oid FROM pg_catalog.pg_type)",
    ],
)
def test_mixed_or_ambiguous_statements_are_refused(sql):
    with pytest.raises(Refusal) as e:
        route(sql, TABLES, CATALOG)
    assert e.value.sqlstate == "42501"


def test_explain_forms():
    assert route("EXPLAIN SELECT COUNT(*) FROM pums", TABLES).body == "SELECT COUNT(*) FROM pums"
    for bad, state in [
        ("EXPLAIN", "42601"),
        ("EXPLAIN (FORMAT JSON) SELECT 1", "0A000"),
        ("EXPLAIN EXPLAIN SELECT COUNT(*) FROM pums", "0A000"),
    ]:
        with pytest.raises(Refusal) as e:
            route(bad, TABLES)
        assert e.value.sqlstate == state


def test_unparsable_statements_carry_the_syntax_error():
    r = route("SELECT COUNT(* FROM pums", TABLES)
    assert r.kind == "unparsed" and r.error.sqlstate == "42601"


def test_oversized_token_streams_are_refused_before_parsing():
    sql = "SELECT COUNT(*) FROM pums WHERE " + " OR ".join(f"age = {i}" for i in range(12000))
    with pytest.raises(Refusal) as e:
        route(sql, TABLES)
    assert e.value.sqlstate == "54000"
