"""Routes by shape (rewriter/route.py ``Routes``): a statement that differs from
an earlier one only in its numbers is routed without a parse, and its route is the one
:func:`route` gives from its own parse; refusals, EXPLAIN and routes without a table are
never served by shape."""

from __future__ import annotations

import pytest
from test_route import CATALOG, CORPUS, TABLES  # tests/rewriter is on sys.path (rootdir conftest)

from rewriter import tokenize
from rewriter.errors import Refusal
from rewriter.route import Routes, route, shape_key

SHAPED = [
    "SELECT region, COUNT(*), AVG(income) FROM people WHERE age BETWEEN {a} AND {b} GROUP BY region",
    "SELECT COUNT(*) FROM accounts WHERE balance >= {a} LIMIT {b}",
    "SELECT COUNT(*) FROM (SELECT * FROM accounts WHERE balance > {a}.5) AS pums WHERE {b} < 7",
    "WITH p AS (SELECT * FROM accounts WHERE balance < {a}) SELECT COUNT(*) FROM p LIMIT {b}",
]


@pytest.mark.parametrize("text", SHAPED)
def test_a_statement_differing_in_numbers_routes_as_its_own_parse(text):
    routes = Routes(TABLES, CATALOG)
    first = routes.route(text.format(a=18, b=60))
    for a, b in [(31, 64), (0, 1), (123456789, 2), (5, 99999)]:
        sql = text.format(a=a, b=b)
        assert routes.route(sql) == route(sql, TABLES, CATALOG) == first
    assert routes.hits == 4


@pytest.mark.parametrize("sql,kind,table", CORPUS)
def test_the_corpus_routes_alike_by_shape(sql, kind, table):
    routes = Routes(TABLES, CATALOG)
    for _ in range(2):
        r = routes.route(sql)
        assert (r.kind, r.table) == (kind, table)
    assert routes.hits == (1 if kind in ("dp", "public") and table is not None else 0)


def test_numbers_are_the_only_slots():
    """Names, strings, operators and keywords are part of the key: another of them is
    another shape (parsed afresh)."""
    key = lambda s: shape_key(tokenize(s))
    assert key("SELECT COUNT(*) FROM pums WHERE age > 3") == key("SELECT COUNT(*) FROM pums WHERE age > 70")
    for other in [
        "SELECT COUNT(*) FROM accounts WHERE age > 3",
        "SELECT COUNT(*) FROM pums WHERE age < 3",
        "SELECT COUNT(*) FROM pums WHERE sex > 3",
        "SELECT COUNT(*) FROM pums WHERE age > '3'",
        "EXPLAIN SELECT COUNT(*) FROM pums WHERE age > 3",
    ]:
        assert key(other) != key("SELECT COUNT(*) FROM pums WHERE age > 3")


def test_refusals_and_explain_are_never_kept():
    routes = Routes(TABLES, CATALOG)
    for _ in range(2):
        with pytest.raises(Refusal):
            routes.route("SELECT COUNT(*) FROM accounts, pums WHERE age > 3")
        assert (
            routes.route("EXPLAIN SELECT COUNT(*) FROM pums WHERE age > 3").body
            == "SELECT COUNT(*) FROM pums WHERE age > 3"
        )
    e = routes.route("EXPLAIN SELECT COUNT(*) FROM pums WHERE age > 4")
    assert e.body == "SELECT COUNT(*) FROM pums WHERE age > 4" and routes.hits == 0


def test_tokenize_keeps_the_last_statement_only():
    a, b = "SELECT 1", "SELECT 2"
    ta = tokenize(a)
    assert tokenize(a) is ta and tokenize(b) is not ta and [t.text for t in tokenize(a)] == ["SELECT", "1"]
