"""Catalog statements in the forms clients send them: arrays as PostgreSQL array literal
text under ``= ANY`` / ``<> ALL`` (pgcli/pgspecial's ``\\dt``, a bound array parameter),
SQL's niladic ``CURRENT_SCHEMA``, and ADBC's ``pg_type`` read (``typreceive != 0``)."""

from __future__ import annotations

import pytest

from proxy.catalog import CatalogError

TABLES = (
    "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' AND c.relkind {} ORDER BY 1"
)
ADBC_TYPES = (
    "SELECT oid, typname, typreceive, typbasetype, typrelid, typarray FROM pg_catalog.pg_type "
    "WHERE (typreceive != 0 OR typsend != 0) AND typtype != 'r' AND typreceive::TEXT != 'array_recv'"
)


def names(catalog, where: str, params=None) -> list[str]:
    return [r[0] for r in catalog.execute(TABLES.format(where), user="analyst", params=params)[1]]


def test_any_over_an_array_literal_is_the_array(catalog):
    expected = names(catalog, "IN ('r', 'p')")
    assert expected and names(catalog, "= ANY(ARRAY['r', 'p'])") == expected
    assert names(catalog, "= ANY('{r,p}')") == expected
    assert names(catalog, "= ANY('{r,p}'::\"char\"[])") == expected
    assert names(catalog, "= ANY($1)", ["{r,p}"]) == expected  # a parameter sent as text
    assert names(catalog, "= ANY($1)", [["r", "p"]]) == expected  # … or decoded as an array
    assert names(catalog, "= ANY($1::text[])", ["{r,p}"]) == expected
    assert names(catalog, "<> ALL('{v,i,S}')") == expected
    assert names(catalog, "= ANY('{}')") == [] and names(catalog, "<> ALL('{}')") == expected


def test_a_malformed_array_literal_is_refused(catalog):
    with pytest.raises(CatalogError) as e:
        names(catalog, "= ANY('{r,{p}}')")
    assert e.value.sqlstate == "22P02"


def test_niladic_current_schema(catalog):
    assert catalog.handles("SELECT CURRENT_SCHEMA")
    assert catalog.execute("SELECT CURRENT_SCHEMA", user="analyst") == (
        [("current_schema", 25)],
        [("public",)],
    )
    cols, rows = catalog.execute(
        "SELECT CURRENT_SCHEMA, CURRENT_USER, SESSION_USER, CURRENT_CATALOG, CURRENT_ROLE", user="analyst"
    )
    assert rows == [("public", "analyst", "analyst", "demo", "analyst")]


def test_adbc_type_query(catalog):
    cols, rows = catalog.execute(ADBC_TYPES, user="analyst")
    by_name = {r[1]: r for r in rows}
    assert by_name["int8"][:3] == (20, "int8", "int8recv") and by_name["float8"][2] == "float8recv"
    assert all(r[2] != "array_recv" for r in rows)
