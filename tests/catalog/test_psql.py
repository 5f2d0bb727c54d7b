"""psql 15's own describe queries (captured with `psql -E` against a real server)."""

from __future__ import annotations

import pytest
from catalog_helpers import psql_queries

PUMS, PEOPLE = 16384, 16385


def run_all(catalog, name, oid=None):
    return [catalog.execute(q, user="alice") for q in psql_queries(name, oid)]


def test_dt_lists_exactly_the_declared_tables(catalog):
    [(cols, rows)] = run_all(catalog, "dt")
    assert [c for c, _ in cols] == ["Schema", "Name", "Type", "Owner"]
    assert rows == [("public", "people", "table", "alice"), ("public", "pums", "table", "alice")]


def test_d_lists_relations(catalog):
    [(cols, rows)] = run_all(catalog, "d")
    assert [r[1] for r in rows] == ["people", "pums"]


def test_dt_plus_shows_descriptions(catalog):
    [(cols, rows)] = run_all(catalog, "dt_plus")
    assert [c for c, _ in cols][-1] == "Description"
    central = "central DP per row: each answer noisy, ε per query from your tier"  # the DP facts
    assert {r[1]: r[-1] for r in rows} == {"people": central, "pums": f"Census microdata — {central}"}


@pytest.mark.parametrize("name", ["d_pums", "d_plus_pums"])
def test_d_pums_all_queries(catalog, name):
    results = run_all(catalog, name, PUMS)
    assert len(results) == 8
    (cols, rows) = results[0]
    assert rows == [(PUMS, "public", "pums")]
    assert cols[0] == ("oid", 26)
    _, rows = results[1]
    assert rows[0][1] == "r" and rows[0][-1] == "heap"
    cols, rows = results[2]
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("age", "bigint", True),
        ("sex", "bigint", False),
        ("income", "double precision", False),
        ("name", "text", False),
        ("married", "boolean", False),
    ]
    if name == "d_plus_pums":
        assert rows[2][-1] == "yearly income — bounds [0, 500000]: SUM/AVG/VAR clamp here"
    for _, rows in results[3:]:
        assert rows == []


def test_d_people(catalog):
    results = run_all(catalog, "d_people", PEOPLE)
    assert results[0][1] == [(PEOPLE, "public", "people")]
    assert [(r[0], r[1]) for r in results[2][1]] == [("id", "bigint"), ("city", "text")]


@pytest.mark.parametrize("name", ["d_nosuch", "d_secret"])
def test_undeclared_names_give_nothing(catalog, name):
    for _cols, rows in run_all(catalog, name, 16394):
        assert rows == []


def test_l_lists_one_database(catalog):
    [(cols, rows)] = run_all(catalog, "l")
    assert cols[0] == ("Name", 25)
    assert len(rows) == 1 and rows[0][:3] == ("demo", "alice", "UTF8")


def test_dn_lists_public(catalog):
    [(cols, rows)] = run_all(catalog, "dn")
    assert [c for c, _ in cols] == ["Name", "Owner"]
    assert rows == [("public", "alice")]


@pytest.mark.parametrize("name", ["dv", "di", "df", "dT"])
def test_other_listings_are_empty(catalog, name):
    for _cols, rows in run_all(catalog, name):
        assert rows == []


def test_du_shows_the_current_user(catalog):
    [(cols, rows)] = run_all(catalog, "du")
    assert [r[0] for r in rows] == ["bob"] or [r[0] for r in rows] == ["alice"]


def test_every_psql_query_is_handled(catalog):
    import pathlib

    for f in (pathlib.Path(__file__).parent / "psql_queries").glob("*.sql"):
        for q in psql_queries(f.stem, PUMS):
            assert catalog.handles(q), q
