"""Driver / ORM introspection queries (captured from a real server with log_statement=all)."""

from __future__ import annotations

import threading

import pytest
from catalog_helpers import client_queries, make_config

from proxy.catalog import Catalog, CatalogError

QUERIES = client_queries()


def run(catalog, name, user="alice"):
    q = QUERIES[name]
    params = [p.replace("{oid}", "16384") if isinstance(p, str) else p for p in q["params"]]
    return catalog.execute(q["sql"], user=user, params=params)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_captured_query_runs_and_is_handled(catalog, name):
    assert catalog.handles(QUERIES[name]["sql"])
    cols, rows = run(catalog, name)
    assert cols


def test_psycopg_typeinfo(catalog):
    cols, rows = run(catalog, "psycopg_typeinfo")
    assert [c for c, _ in cols] == ["name", "oid", "array_oid", "regtype", "delimiter"]
    assert rows == [("text", 25, 1009, "text", ",")]
    assert run(catalog, "sqlalchemy_hstore_typeinfo")[1] == []


def test_asyncpg_typeinfo_tree(catalog):
    cols, rows = run(catalog, "asyncpg_typeinfo_tree")
    by_oid = {r[0]: dict(zip([c for c, _ in cols], r)) for r in rows}
    assert by_oid[3904]["name"] == "int4range" and by_oid[3904]["range_subtype"] == 23
    assert by_oid[23]["name"] == "int4"


def test_asyncpg_connect_queries(catalog):
    assert run(catalog, "asyncpg_jit")[1] == [("off", "off")]


def test_sqlalchemy_has_table_and_columns(catalog):
    assert run(catalog, "sqlalchemy_has_table")[1] == [("pums",)]
    assert sorted(run(catalog, "sqlalchemy_get_table_names")[1]) == [("people",), ("pums",)]
    cols, rows = run(catalog, "sqlalchemy_get_columns")
    names = [c for c, _ in cols]
    got = [dict(zip(names, r)) for r in rows]
    assert [(g["name"], g["format_type"], g["not_null"]) for g in got] == [
        ("age", "bigint", True),
        ("sex", "bigint", False),
        ("income", "double precision", False),
        ("name", "text", False),
        ("married", "boolean", False),
    ]
    assert run(catalog, "sqlalchemy_pk_constraint")[1] == []
    assert run(catalog, "sqlalchemy_indexes")[1] == []


def test_sqlalchemy_has_table_for_undeclared(catalog):
    q = QUERIES["sqlalchemy_has_table"]
    params = ["secret"] + q["params"][1:]
    assert catalog.execute(q["sql"], user="alice", params=params)[1] == []


def test_information_schema(catalog):
    cols, rows = catalog.execute(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_name = 'pums' ORDER BY ordinal_position",
        user="alice",
    )
    assert rows == [
        ("age", "bigint", "NO"),
        ("sex", "bigint", "YES"),
        ("income", "double precision", "YES"),
        ("name", "text", "YES"),
        ("married", "boolean", "YES"),
    ]
    _, rows = catalog.execute(
        "SELECT table_schema, table_name, table_type FROM information_schema.tables ORDER BY table_name",
        user="alice",
    )
    assert rows == [("public", "people", "BASE TABLE"), ("public", "pums", "BASE TABLE")]
    _, rows = catalog.execute("select schema_name from information_schema.schemata order by 1", user="alice")
    assert ("public",) in rows


def test_session_functions(catalog):
    cols, rows = catalog.execute(
        "SELECT version(), current_schema(), current_database(), current_user, session_user, "
        "current_setting('server_version'), pg_catalog.current_schemas(false)",
        user="bob",
    )
    assert [c for c, _ in cols] == [
        "version",
        "current_schema",
        "current_database",
        "current_user",
        "current_user",
        "current_setting",
        "current_schemas",
    ]
    assert rows[0][0].startswith("PostgreSQL 16.0")
    assert rows[0][1:6] == ("public", "demo", "bob", "bob", "16.0")
    assert catalog.handles("select version()")
    assert catalog.handles("SELECT current_database()")
    assert catalog.execute("SHOW transaction isolation level", user="bob") == (
        [("transaction_isolation", 25)],
        [("read committed",)],
    )


def test_pg_type_lookups(catalog):
    _, rows = catalog.execute(
        "SELECT oid, typname, typlen, typtype, typcategory FROM pg_catalog.pg_type "
        "WHERE typname IN ('bool','int8','float8','text','varchar','_int4') ORDER BY oid",
        user="alice",
    )
    assert rows == [
        (16, "bool", 1, "b", "B"),
        (20, "int8", 8, "b", "N"),
        (25, "text", -1, "b", "S"),
        (701, "float8", 8, "b", "N"),
        (1007, "_int4", -1, "b", "A"),
        (1043, "varchar", -1, "b", "S"),
    ]
    _, rows = catalog.execute(
        "select 'pums'::regclass::oid, 'int8'::regtype::oid, 16384::regclass::text, format_type(701, NULL)",
        user="alice",
    )
    assert rows == [(16384, 20, "pums", "double precision")]


def test_handles_classification(catalog):
    assert catalog.handles("select * from pg_class")
    assert catalog.handles("SELECT * FROM information_schema.tables")
    assert not catalog.handles("SELECT count(*) FROM pums")
    assert not catalog.handles("SELECT count(*) FROM pums, pg_class")
    assert not catalog.handles("SELECT 1")
    assert not catalog.handles("SELECT * FROM secret")


def test_undeclared_backend_table_never_visible(catalog):
    _, rows = catalog.execute("SELECT relname FROM pg_catalog.pg_class", user="alice")
    assert sorted(r[0] for r in rows) == ["people", "pums"]
    _, rows = catalog.execute("SELECT DISTINCT table_name FROM information_schema.columns", user="alice")
    assert sorted(r[0] for r in rows) == ["people", "pums"]
    _, rows = catalog.execute(
        "SELECT attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid WHERE c.relname = 'secret'",
        user="alice",
    )
    assert rows == []


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM pg_class, secret",
        "SELECT * FROM pg_class c JOIN public.pums p ON true",
        "SELECT * FROM pg_catalog.pg_shadow",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT version(), read_text('/etc/passwd')",
        "SELECT version(); SELECT 1",
        "DELETE FROM pg_class",
        "SELECT * FROM duckdb_tables()",
        "SELECT version() FROM",
    ],
)
def test_bad_statements_raise_clean_errors(catalog, sql):
    with pytest.raises(CatalogError) as err:
        cols, rows = catalog.execute(sql, user="alice")
        # an empty answer is acceptable only if nothing leaked
        assert rows == []
        raise CatalogError("00000", "empty")
    assert err.value.sqlstate


def test_describe(catalog):
    cols = catalog.describe(QUERIES["sqlalchemy_has_table"]["sql"], user="alice")
    assert cols == [("relname", 25)]


def test_threads():
    cat = Catalog(make_config(), database="db1")
    errors = []

    def work(i):
        try:
            for _ in range(20):
                _, rows = cat.execute("SELECT current_user, current_database()", user=f"u{i}")
                assert rows == [(f"u{i}", "db1")]
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_pgcli_and_adbc_statements_see_the_declared_tables(catalog):
    """pgspecial's \\dt (its relkinds inlined as an array literal), pgcli's completion with a
    bound relkind array, and ADBC's pg_type read give rows, not an empty answer."""
    dt = {r[1] for r in run(catalog, "pgspecial_dt")[1]}
    tables = {r[1] for r in run(catalog, "pgcli_tables")[1]}
    columns = {(r[1], r[2]) for r in run(catalog, "pgcli_columns")[1]}
    assert dt == tables == set(catalog.config.tables) and ("pums", "income") in columns
    assert {r[1] for r in run(catalog, "adbc_types")[1]} >= {"int8", "float8", "text", "date", "timestamp"}


def test_ibis_statements_list_and_describe_the_declared_tables(catalog):
    """ibis's list_tables() (information_schema, its temporary tables by UNION ALL) and
    table() (the columns of a relation by schema name in a bound array and table name)."""
    assert {r[0] for r in run(catalog, "ibis_list_tables")[1]} == set(catalog.config.tables)
    assert run(catalog, "ibis_temp_schema")[1] == []  # no temporary schema: no temporary views
    name = next(iter(catalog.config.tables))
    q = QUERIES["ibis_get_schema"]
    cols = catalog.execute(q["sql"], user="alice", params=[q["params"][0], name])[1]
    assert [r[0] for r in cols] == list(catalog.config.tables[name].columns)
