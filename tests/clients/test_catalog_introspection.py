"""Catalog introspection as BI tools and IDEs send it (Metabase, Superset, DBeaver,
DataGrip, Grafana style: information_schema, pg_class/pg_attribute/pg_namespace joins,
pg_settings, SHOW, current_schema() …), on both backends, in text and binary formats.

Every query must succeed and see the declared tables and columns only: the table
``secret_salaries`` exists in each backend but is not declared, and no answer mentions it.
"""

from __future__ import annotations

import asyncio

import asyncpg
import psycopg
import pytest

from .scenario import PUMS_COLUMNS, SECRET, declared_tables

QUERIES = {
    "metabase_describe_database": """
        SELECT n.nspname AS schema, c.relname AS name,
               CASE c.relkind WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' WHEN 'v' THEN 'VIEW'
                    WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE NULL END AS type,
               d.description AS description, s.n_live_tup AS estimated_row_count
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON c.relnamespace = n.oid
        LEFT JOIN pg_catalog.pg_description d ON c.oid = d.objoid AND d.objsubid = 0
             AND d.classoid = 'pg_class'::regclass
        LEFT JOIN pg_stat_user_tables s ON n.nspname = s.schemaname AND c.relname = s.relname
        WHERE c.relkind IN ('r', 'p', 'v', 'f', 'm') AND n.nspname !~ '^information_schema|catalog$'
          AND pg_catalog.has_table_privilege(c.oid, 'SELECT')
        ORDER BY type, schema, name""",
    "metabase_schemas": """
        SELECT nspname FROM pg_catalog.pg_namespace
        WHERE nspname NOT LIKE 'pg_%' AND nspname <> 'information_schema' AND has_schema_privilege(nspname, 'USAGE')""",
    "dbeaver_namespaces": """
        SELECT n.oid, n.*, d.description FROM pg_catalog.pg_namespace n
        LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid = n.oid AND d.objsubid = 0
             AND d.classoid = 'pg_namespace'::regclass ORDER BY nspname""",
    "dbeaver_databases": """
        SELECT db.oid, db.* FROM pg_catalog.pg_database db WHERE datallowconn AND NOT datistemplate
        ORDER BY db.datname""",
    "dbeaver_tables": """
        SELECT c.oid, c.*, d.description, pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS partition_expr,
               pg_catalog.pg_get_partkeydef(c.oid) AS partition_key
        FROM pg_catalog.pg_class c
        LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid = c.oid AND d.objsubid = 0
             AND d.classoid = 'pg_class'::regclass
        WHERE c.relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'public')
          AND c.relkind NOT IN ('i', 'I', 'c')""",
    "dbeaver_columns": """
        SELECT c.relname, a.*, pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) AS def_value,
               dsc.description, dep.objid
        FROM pg_catalog.pg_attribute a
        JOIN pg_catalog.pg_class c ON (a.attrelid = c.oid)
        LEFT OUTER JOIN pg_catalog.pg_attrdef ad ON (a.attrelid = ad.adrelid AND a.attnum = ad.adnum)
        LEFT OUTER JOIN pg_catalog.pg_description dsc ON (c.oid = dsc.objoid AND a.attnum = dsc.objsubid)
        LEFT OUTER JOIN pg_depend dep ON dep.refobjid = a.attrelid AND dep.deptype = 'i'
             AND dep.refobjsubid = a.attnum AND dep.classid = dep.refclassid
        WHERE NOT a.attisdropped AND c.relkind NOT IN ('i', 'I', 'c') AND a.attnum > 0
        ORDER BY c.relname, a.attnum""",
    "dbeaver_types": """
        SELECT t.oid, t.*, c.relkind, pg_catalog.format_type(nullif(t.typbasetype, 0), t.typtypmod) AS base_type_name,
               d.description
        FROM pg_catalog.pg_type t
        LEFT OUTER JOIN pg_catalog.pg_class c ON c.oid = t.typrelid
        LEFT OUTER JOIN pg_catalog.pg_description d ON t.oid = d.objoid
        WHERE t.typname IS NOT NULL AND (c.relkind IS NULL OR c.relkind = 'c')""",
    "pg_settings_row": "SELECT * FROM pg_catalog.pg_settings WHERE name = 'standard_conforming_strings'",
    "pg_settings_names": """SELECT name, setting FROM pg_settings
        WHERE name IN ('max_identifier_length', 'server_version_num', 'TimeZone') ORDER BY name""",
    "show_search_path": "SHOW search_path",
    "show_server_version": "SHOW server_version",
    "show_timezone": "SHOW TimeZone",
    "session_functions": """SELECT current_schema(), current_schemas(false), current_database(), current_user,
        session_user, version()""",
    "info_tables": """SELECT table_schema, table_name, table_type FROM information_schema.tables
        WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2""",
    "info_columns": """SELECT table_name, column_name, data_type, is_nullable, ordinal_position, column_default,
        character_maximum_length, numeric_precision, numeric_scale, udt_name
        FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position""",
    "info_schemata": "SELECT * FROM information_schema.schemata",
    "info_foreign_keys": """SELECT tc.constraint_name, kcu.column_name, ccu.table_name AS foreign_table_name
        FROM information_schema.table_constraints tc
        JOIN information_schema.key_column_usage kcu ON tc.constraint_name = kcu.constraint_name
        JOIN information_schema.constraint_column_usage ccu ON ccu.constraint_name = tc.constraint_name
        WHERE tc.constraint_type = 'FOREIGN KEY'""",
    "info_views": "SELECT table_name FROM information_schema.views",
    "grafana_columns": """SELECT c.relname AS table_name, a.attname AS column_name,
        pg_catalog.format_type(a.atttypid, a.atttypmod) AS data_type, NOT a.attnotnull AS nullable,
        col_description(c.oid, a.attnum) AS comment
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v', 'm', 'f', 'p') AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY c.relname, a.attnum""",
    "pg_tables": """SELECT schemaname, tablename, tableowner FROM pg_catalog.pg_tables
        WHERE schemaname NOT IN ('pg_catalog', 'information_schema')""",
    "pg_views_matviews_indexes": """SELECT (SELECT count(*) FROM pg_catalog.pg_views WHERE schemaname = 'public'),
        (SELECT count(*) FROM pg_catalog.pg_matviews), (SELECT count(*) FROM pg_catalog.pg_indexes)""",
    "pg_stat_user_tables": "SELECT schemaname, relname, n_live_tup FROM pg_stat_user_tables ORDER BY relname",
    "pg_stats_empty": "SELECT attname, n_distinct, most_common_vals FROM pg_stats WHERE tablename = 'pums'",
    "regclass_lookups": """SELECT to_regclass('public.pums') IS NOT NULL, 'pums'::regclass::oid > 0,
        obj_description('public.pums'::regclass, 'pg_class') IS NOT NULL""",
    "sizes": """SELECT pg_catalog.pg_total_relation_size('public.pums'),
        pg_size_pretty(pg_database_size(current_database()))""",
    "extensions": "SELECT e.extname, e.extversion FROM pg_catalog.pg_extension e",
    "roles": "SELECT rolname, rolsuper, rolcreatedb FROM pg_catalog.pg_roles WHERE rolname = current_user",
    "optional_types": "SELECT typname, oid, typarray FROM pg_type WHERE typname IN ('hstore', 'geometry', 'citext')",
    "settings_functions": """SELECT current_setting('server_version_num')::int, current_setting('is_superuser'),
        current_setting('transaction_read_only'), pg_is_in_recovery()""",
    "constraints_and_indexes": """SELECT (SELECT count(*) FROM pg_catalog.pg_constraint WHERE conrelid = 'public.pums'::regclass),
        (SELECT count(*) FROM pg_class t JOIN pg_index ix ON t.oid = ix.indrelid WHERE t.relname = 'pums')""",
    "functions_in_public": """SELECT n.nspname, p.proname FROM pg_catalog.pg_proc p
        JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'""",
    "jdbc_schemas": """SELECT nspname AS table_schem, NULL AS table_catalog FROM pg_catalog.pg_namespace
        WHERE nspname <> 'pg_toast' AND (nspname !~ '^pg_temp_' OR nspname = (pg_catalog.current_schemas(true))[1])
        ORDER BY table_schem""",
    "secret_everywhere": f"""SELECT
        (SELECT count(*) FROM pg_catalog.pg_class WHERE relname = '{SECRET}'),
        (SELECT count(*) FROM information_schema.tables WHERE table_name = '{SECRET}'),
        (SELECT count(*) FROM information_schema.columns WHERE table_name = '{SECRET}'),
        (SELECT count(*) FROM pg_catalog.pg_tables WHERE tablename = '{SECRET}'),
        (SELECT count(*) FROM pg_stat_user_tables WHERE relname = '{SECRET}'),
        to_regclass('{SECRET}')""",
}

EXPECTED = {
    "metabase_schemas": lambda rows: sorted(rows) == [("dpgate",), ("public",)],
    "dbeaver_databases": lambda rows: [r[2] for r in rows] == ["demo"],
    "show_search_path": [('"$user", public',)],
    "show_timezone": [("UTC",)],
    "pg_settings_names": [
        ("TimeZone", "UTC"),
        ("max_identifier_length", "63"),
        ("server_version_num", "160000"),
    ],
    "session_functions": lambda rows: (
        rows[0][:5] == ("public", ["public"], "demo", "analyst", "analyst") and "PostgreSQL 16" in rows[0][5]
    ),
    "info_foreign_keys": [],
    "info_views": [],
    "functions_in_public": [],
    "pg_stats_empty": [],
    "pg_views_matviews_indexes": [(0, 0, 0)],
    "constraints_and_indexes": [(0, 0)],
    "regclass_lookups": [(True, True, True)],
    "roles": [("analyst", False, False)],
    "optional_types": [],
    "settings_functions": [(160000, "off", "on", False)],
    "jdbc_schemas": [("dpgate", None), ("information_schema", None), ("pg_catalog", None), ("public", None)],
    "secret_everywhere": [(0, 0, 0, 0, 0, None)],
}

# queries that list tables: (column index of the table name)
LISTINGS = {
    "metabase_describe_database": 1,
    "dbeaver_tables": 2,
    "info_tables": 1,
    "pg_tables": 1,
    "pg_stat_user_tables": 1,
}


DPGATE_VIEWS = [
    "budget",
    "coalition",
    "releases",
]  # listed under the schema dpgate, as Postgres would


def check(svc, name: str, rows: list[tuple]) -> None:
    assert SECRET not in repr(rows), (name, rows)
    if name in ("info_tables", "metabase_describe_database"):
        assert sorted(r[1] for r in rows if r[0] == "dpgate") == DPGATE_VIEWS
        assert {r[2] for r in rows if r[0] == "dpgate"} == {"VIEW"}
        rows = [r for r in rows if r[0] != "dpgate"]
    if name == "dbeaver_columns":  # no schema filter: the views' columns too
        assert {r[0] for r in rows} >= set(DPGATE_VIEWS)
        rows = [r for r in rows if r[0] not in DPGATE_VIEWS]
    if name in LISTINGS:
        assert sorted(r[LISTINGS[name]] for r in rows) == declared_tables(svc), (name, rows)
    if name in ("dbeaver_columns", "grafana_columns", "info_columns"):
        assert {r[0] for r in rows} == set(declared_tables(svc))
        assert [r[1] if name != "dbeaver_columns" else r[2] for r in rows if r[0] == "pums"] == PUMS_COLUMNS
    want = EXPECTED.get(name)
    if callable(want):
        assert want(rows), (name, rows)
    elif want is not None:
        assert rows == want, (name, rows)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_bi_introspection_psycopg(svc, binary):
    failures = {}
    with psycopg.connect(svc.dsn(), autocommit=True) as conn:
        for name, sql in QUERIES.items():
            try:
                cur = conn.cursor(binary=binary)
                rows = cur.execute(
                    sql, prepare=binary
                ).fetchall()  # binary: extended protocol, named statements
                check(svc, name, rows)
            except (psycopg.Error, AssertionError) as e:
                failures[name] = repr(e)[:500]
    assert failures == {}


def test_bi_introspection_asyncpg(svc):
    """asyncpg: Describe first, binary results (arrays, oids, booleans, name)."""

    async def main():
        conn = await asyncpg.connect(svc.url())
        failures = {}
        try:
            for name, sql in QUERIES.items():
                try:
                    rows = [tuple(r) for r in await conn.fetch(sql)]
                    check(svc, name, rows)
                except (asyncpg.PostgresError, AssertionError) as e:
                    failures[name] = repr(e)[:500]
        finally:
            await conn.close()
        return failures

    assert asyncio.run(main()) == {}


def test_secret_table_exists_in_the_backend(svc, request):
    """The invisibility tests are not vacuous: the undeclared table is really there."""
    if svc.kind == "duckdb":
        assert svc.gw.backend.query(f"SELECT count(*) FROM {SECRET}") == [(2,)]
    else:
        with psycopg.connect(request.getfixturevalue("postgres").dsn) as conn:
            assert conn.execute(f"SELECT count(*) > 0 FROM {SECRET}").fetchone() == (True,)


@pytest.mark.parametrize(
    "sql, state",
    [
        (f"SELECT COUNT(*) FROM {SECRET}", "42P01"),
        (f"SELECT COUNT(*) FROM public.{SECRET}", "42P01"),
        (f"SELECT SUM(x) FROM {SECRET}", "42P01"),
        (f"SELECT * FROM {SECRET}", "42P01"),
        (f"SELECT attname FROM pg_attribute WHERE attrelid = '{SECRET}'::regclass", "42P01"),
        (f"SELECT * FROM information_schema.columns c JOIN {SECRET} s ON true", "42P01"),
    ],
)
def test_querying_the_undeclared_table(svc, sql, state):
    with psycopg.connect(svc.dsn(), autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as e:
            conn.execute(sql)
        assert e.value.sqlstate == state, (sql, e.value)
        # the same answer as for a table that exists nowhere
        with pytest.raises(psycopg.Error) as nowhere:
            conn.execute(sql.replace(SECRET, "no_such_table"))
        assert nowhere.value.sqlstate == state
        assert str(nowhere.value).replace("no_such_table", SECRET) == str(e.value)


@pytest.mark.parametrize(
    "sql, types",
    [
        (
            "SELECT relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = $1 AND c.oid = $2",
            [19, 26],
        ),
        ("SELECT column_name FROM information_schema.columns WHERE table_name = $1", [25]),
        (
            "SELECT attname FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > $2 LIMIT $3",
            [2205, 21, 20],
        ),
        ("SELECT typname FROM pg_type WHERE oid = to_regtype($1)", [25]),
        ("SELECT 1 FROM pg_class WHERE relname IN ($2, $1)", [19, 19]),
        ("SELECT '$1' FROM pg_class -- $2", []),
    ],
)
def test_catalog_parameter_types(svc, sql, types):
    """What Describe reports for a catalog statement's parameters, as Postgres infers them."""
    assert svc.gw.catalog.param_types(sql) == types
