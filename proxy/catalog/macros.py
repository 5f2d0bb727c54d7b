"""The catalog functions of the emulated PostgreSQL catalog, as DuckDB macros
(``pgc_*``: format_type, pg_table_is_visible, pg_get_userbyid, …). They answer from the
emulated relations built by :mod:`proxy.catalog.schema`; nothing reaches the data backend."""

from __future__ import annotations

import duckdb

from .schema import CATALOG_RELATION_OIDS, FIRST_VIEW_OID, LAST_VIEW_OID, RELATIONS, VIEWS


def create_macros(con: duckdb.DuckDBPyConnection, database: str, server_version: str) -> None:
    """Create the ``pgc_*`` macros in ``con``, after :func:`proxy.catalog.schema.build`."""
    db = database.replace("'", "''")
    version = (
        f"PostgreSQL {server_version} (dpgate differentially-private gateway) on x86_64-pc-linux-gnu, 64-bit"
    ).replace("'", "''")
    macros = {
        "pg_table_is_visible(x)": f"NOT (x BETWEEN {FIRST_VIEW_OID} AND {LAST_VIEW_OID})",  # dpgate.*: off the path
        "pg_type_is_visible(x)": "true",
        "pg_function_is_visible(x)": "true",
        "pg_collation_is_visible(x)": "true",
        "pg_opclass_is_visible(x)": "true",
        "pg_operator_is_visible(x)": "true",
        "format_type(t, m)": "(SELECT CASE WHEN m IS NULL THEN k_fmt_null ELSE k_fmt END FROM pgc.lk_type WHERE k_oid = t)",
        "pg_get_userbyid(x)": "COALESCE((SELECT usr FROM pgc.session WHERE x = 10), 'unknown (OID=' || CAST(x AS VARCHAR) || ')')",
        "obj_description(o)": "(SELECT min(k_description) FROM pgc.lk_desc WHERE k_objoid = o AND k_objsubid = 0)",
        "obj_description(o, c)": "(SELECT min(k_description) FROM pgc.lk_desc WHERE k_objoid = o AND k_objsubid = 0 AND k_classoid = pgc_regclass_oid(c))",
        "col_description(r, n)": "(SELECT min(k_description) FROM pgc.lk_desc WHERE k_objoid = r AND k_objsubid = n AND k_classoid = 1259)",
        "shobj_description(o, c)": "CAST(NULL AS VARCHAR)",
        "pg_get_expr(e, r)": "CAST(NULL AS VARCHAR)",
        "pg_get_expr(e, r, p)": "CAST(NULL AS VARCHAR)",
        "pg_encoding_to_char(e)": "CASE e WHEN 6 THEN 'UTF8' WHEN 0 THEN 'SQL_ASCII' ELSE '' END",
        "pg_get_indexdef(i)": "CAST(NULL AS VARCHAR)",
        "pg_get_indexdef(i, c, p)": "CAST(NULL AS VARCHAR)",
        "pg_get_constraintdef(i)": "CAST(NULL AS VARCHAR)",
        "pg_get_constraintdef(i, p)": "CAST(NULL AS VARCHAR)",
        "pg_get_triggerdef(i)": "CAST(NULL AS VARCHAR)",
        "pg_get_triggerdef(i, p)": "CAST(NULL AS VARCHAR)",
        "pg_get_viewdef(i)": "CAST(NULL AS VARCHAR)",
        "pg_get_viewdef(i, p)": "CAST(NULL AS VARCHAR)",
        "pg_get_ruledef(i)": "CAST(NULL AS VARCHAR)",
        "pg_get_ruledef(i, p)": "CAST(NULL AS VARCHAR)",
        "pg_get_partkeydef(i)": "CAST(NULL AS VARCHAR)",
        "pg_get_function_result(i)": "CAST(NULL AS VARCHAR)",
        "pg_get_function_arguments(i)": "CAST(NULL AS VARCHAR)",
        "pg_get_function_identity_arguments(i)": "CAST(NULL AS VARCHAR)",
        "pg_get_serial_sequence(t, c)": "CAST(NULL AS VARCHAR)",
        "pg_relation_is_publishable(x)": "false",
        "pg_get_statisticsobjdef_columns(x)": "CAST(NULL AS VARCHAR)",
        "current_schema()": "'public'",
        # the session's temporary schema (pg_temp_N), once it has a temporary view; else 0
        "pg_my_temp_schema()": "COALESCE((SELECT min(oid) FROM pgc.pg_namespace_session "
        "WHERE session = getvariable('dpgate_session')), 0)",
        "pg_is_other_temp_schema(x)": "false",
        "current_schemas(b)": "CASE WHEN b THEN ['pg_catalog', 'public'] ELSE ['public'] END",
        "current_database()": f"'{db}'",
        "current_user()": "(SELECT usr FROM pgc.session)",
        "has_table_privilege(t, p)": "true",
        "has_table_privilege(u, t, p)": "true",
        "has_schema_privilege(s, p)": "true",
        "has_schema_privilege(u, s, p)": "true",
        "has_database_privilege(d, p)": "true",
        "has_database_privilege(u, d, p)": "true",
        "has_column_privilege(t, c, p)": "true",
        "has_column_privilege(u, t, c, p)": "true",
        "has_function_privilege(f, p)": "true",
        "has_function_privilege(u, f, p)": "true",
        "has_sequence_privilege(s, p)": "true",
        "has_sequence_privilege(u, s, p)": "true",
        "pg_has_role(r, p)": "true",
        "pg_has_role(u, r, p)": "true",
        "version()": f"'{version}'",
        "quote_ident(x)": "CASE WHEN regexp_full_match(x, '[a-z_][a-z0-9_$]*') THEN x ELSE '\"' || replace(x, '\"', '\"\"') || '\"' END",
        "pg_size_pretty(x)": "CASE WHEN x IS NULL THEN NULL WHEN abs(x) < 10240 THEN CAST(x AS VARCHAR) || ' bytes' "
        "WHEN abs(x) < 10485760 THEN CAST(round(x / 1024) AS BIGINT) || ' kB' "
        "WHEN abs(x) < 10737418240 THEN CAST(round(x / 1048576) AS BIGINT) || ' MB' "
        "ELSE CAST(round(x / 1073741824) AS BIGINT) || ' GB' END",
        "pg_table_size(x)": "CAST(0 AS BIGINT)",
        "pg_total_relation_size(x)": "CAST(0 AS BIGINT)",
        "pg_relation_size(x)": "CAST(0 AS BIGINT)",
        "pg_relation_size(x, f)": "CAST(0 AS BIGINT)",
        "pg_indexes_size(x)": "CAST(0 AS BIGINT)",
        "pg_database_size(x)": "CAST(0 AS BIGINT)",
        "pg_tablespace_location(x)": "''",
        "pg_backend_pid()": "CAST(4242 AS INTEGER)",
        "inet_server_addr()": "CAST(NULL AS VARCHAR)",
        "inet_server_port()": "CAST(NULL AS INTEGER)",
        "inet_client_addr()": "CAST(NULL AS VARCHAR)",
        "inet_client_port()": "CAST(NULL AS INTEGER)",
        "pg_is_in_recovery()": "false",
        "pg_postmaster_start_time()": "CAST(TIMESTAMP '2000-01-01 00:00:00' AS TIMESTAMP WITH TIME ZONE)",
        "pg_client_encoding()": "'UTF8'",
        "current_setting(n)": "(SELECT k_setting FROM pgc.lk_settings WHERE lower(k_name) = lower(n))",
        "current_setting(n, m)": "(SELECT k_setting FROM pgc.lk_settings WHERE lower(k_name) = lower(n))",
        "set_config(n, v, l)": "v",
        "array_upper(a, d)": "CASE WHEN d = 1 AND len(a) > 0 THEN len(a) END",
        "array_lower(a, d)": "CASE WHEN d = 1 AND len(a) > 0 THEN 1 END",
        "txid_current()": "CAST(1 AS BIGINT)",
        "pg_advisory_unlock_all()": "CAST(NULL AS VARCHAR)",  # void; asyncpg's pool reset sends it
        "pg_encoding_max_length(e)": "4",
        "to_regclass(n)": "pgc_regclass_oid(n)",
        "to_regtype(n)": "pgc_regtype_oid(n)",
        "to_regnamespace(n)": "(SELECT k_oid FROM pgc.lk_ns WHERE k_nspname = n)",
        "to_regrole(n)": "(SELECT CAST(10 AS UINTEGER) FROM pgc.session WHERE usr = n)",
        "pg_get_keywords()": "CAST(NULL AS VARCHAR)",
        # casts to reg* types
        "regclass_oid(x)": "CAST(CASE WHEN regexp_full_match(CAST(x AS VARCHAR), '[0-9]+') THEN CAST(CAST(x AS VARCHAR) AS UBIGINT) "
        "ELSE COALESCE((SELECT k_oid FROM pgc.lk_class WHERE k_relname = regexp_replace(regexp_replace(CAST(x AS VARCHAR), '\"', '', 'g'), '^(public|pg_catalog)\\.', '')), "
        "pgc_catalog_oid(regexp_replace(CAST(x AS VARCHAR), '^pg_catalog\\.', ''))) END AS UINTEGER)",
        "regclass_strict(x)": "CASE WHEN pgc_regclass_oid(x) IS NOT NULL OR x IS NULL THEN pgc_regclass_oid(x) "
        "ELSE error('pgc:42P01:relation \"' || CAST(x AS VARCHAR) || '\" does not exist') END",
        "regtype_strict(x)": "CASE WHEN pgc_regtype_oid(x) IS NOT NULL OR x IS NULL THEN pgc_regtype_oid(x) "
        "ELSE error('pgc:42704:type \"' || CAST(x AS VARCHAR) || '\" does not exist') END",
        "regclass_name(x)": "COALESCE((SELECT k_relname FROM pgc.lk_class WHERE k_oid = x), "
        "(SELECT k_name FROM pgc.catalog_oids WHERE k_oid = x), CAST(x AS VARCHAR))",
        "regtype_oid(x)": "CAST(CASE WHEN regexp_full_match(CAST(x AS VARCHAR), '[0-9]+') THEN CAST(CAST(x AS VARCHAR) AS UBIGINT) "
        "ELSE (SELECT min(k_oid) FROM pgc.lk_type WHERE k_typname = regexp_replace(CAST(x AS VARCHAR), '^(public|pg_catalog)\\.', '') "
        "OR k_fmt = regexp_replace(CAST(x AS VARCHAR), '^pg_catalog\\.', '') "
        "OR k_fmt_null = regexp_replace(CAST(x AS VARCHAR), '^pg_catalog\\.', '')) END AS UINTEGER)",
        "regtype_name(x)": "COALESCE((SELECT coalesce(k_fmt_null, k_typname) FROM pgc.lk_type WHERE k_oid = x), CAST(x AS VARCHAR))",
        "regnamespace_name(x)": "COALESCE((SELECT k_nspname FROM pgc.lk_ns WHERE k_oid = x), CAST(x AS VARCHAR))",
        "regrole_name(x)": "COALESCE((SELECT usr FROM pgc.session WHERE x = 10), CAST(x AS VARCHAR))",
        "regproc_text(x)": "regexp_replace(CAST(x AS VARCHAR), '^pg_catalog\\.', '')",
        "catalog_oid(n)": "(SELECT k_oid FROM pgc.catalog_oids WHERE k_name = n)",
    }
    con.execute("CREATE TABLE pgc.catalog_oids (k_name VARCHAR, k_oid UINTEGER)")
    # lookup tables for the macros: their column names must not collide with the callers'
    # (a macro argument that is a bare column would bind inside the macro's subquery)
    con.execute(
        "CREATE TABLE pgc.lk_type AS SELECT t.oid AS k_oid, t.typname AS k_typname, f.fmt AS k_fmt, "
        "f.fmt_null AS k_fmt_null FROM pgc.pg_type t LEFT JOIN pgc.type_format f ON f.oid = t.oid"
    )
    con.execute("CREATE TABLE pgc.lk_class AS SELECT oid AS k_oid, relname AS k_relname FROM pgc.pg_class")
    con.execute("CREATE TABLE pgc.lk_ns AS SELECT oid AS k_oid, nspname AS k_nspname FROM pgc.pg_namespace")
    con.execute(
        "CREATE TABLE pgc.lk_desc AS SELECT objoid AS k_objoid, classoid AS k_classoid, "
        "objsubid AS k_objsubid, description AS k_description FROM pgc.pg_description"
    )
    con.execute(
        "CREATE TABLE pgc.lk_settings AS SELECT name AS k_name, setting AS k_setting FROM pgc.pg_settings"
    )
    # every other emulated relation gets an oid too, so that 'pg_roles'::regclass resolves
    others = sorted((set(RELATIONS) | set(VIEWS)) - set(CATALOG_RELATION_OIDS))
    oids = {**CATALOG_RELATION_OIDS, **{name: 12000 + i for i, name in enumerate(others)}}
    con.executemany("INSERT INTO pgc.catalog_oids VALUES (?, ?)", list(oids.items()))
    # group overloads by name: DuckDB takes them in one CREATE MACRO
    grouped: dict[str, list[str]] = {}
    for sig, body in macros.items():
        name, _, args = sig.partition("(")
        grouped.setdefault(name, []).append(f"({args} AS {body}")
    # some macros reference others: create in dependency-tolerant order (DuckDB binds lazily)
    pending = dict(grouped)
    while pending:
        failed: dict[str, list[str]] = {}
        error: Exception | None = None
        for name, overloads in pending.items():
            try:
                con.execute(f"CREATE MACRO pgc_{name}" + ", ".join(overloads))
            except duckdb.CatalogException as e:  # depends on a macro not created yet
                failed[name], error = overloads, e
        if len(failed) == len(pending):
            raise RuntimeError(f"cannot create catalog macros {sorted(failed)}: {error}")
        pending = failed


MACRO_NAMES = frozenset(
    [
        "pg_table_is_visible",
        "pg_type_is_visible",
        "pg_function_is_visible",
        "pg_collation_is_visible",
        "pg_opclass_is_visible",
        "pg_operator_is_visible",
        "format_type",
        "pg_get_userbyid",
        "obj_description",
        "col_description",
        "shobj_description",
        "pg_get_expr",
        "pg_encoding_to_char",
        "pg_get_indexdef",
        "pg_get_constraintdef",
        "pg_get_triggerdef",
        "pg_get_viewdef",
        "pg_get_ruledef",
        "pg_get_partkeydef",
        "pg_get_function_result",
        "pg_get_function_arguments",
        "pg_get_function_identity_arguments",
        "pg_get_serial_sequence",
        "pg_relation_is_publishable",
        "pg_get_statisticsobjdef_columns",
        "current_schema",
        "pg_my_temp_schema",
        "pg_is_other_temp_schema",
        "current_schemas",
        "current_database",
        "has_table_privilege",
        "has_schema_privilege",
        "has_database_privilege",
        "has_column_privilege",
        "has_function_privilege",
        "has_sequence_privilege",
        "pg_has_role",
        "version",
        "quote_ident",
        "pg_size_pretty",
        "pg_table_size",
        "pg_total_relation_size",
        "pg_relation_size",
        "pg_indexes_size",
        "pg_database_size",
        "pg_tablespace_location",
        "pg_backend_pid",
        "inet_server_addr",
        "inet_server_port",
        "inet_client_addr",
        "inet_client_port",
        "pg_is_in_recovery",
        "pg_postmaster_start_time",
        "pg_client_encoding",
        "current_setting",
        "set_config",
        "array_upper",
        "array_lower",
        "txid_current",
        "pg_encoding_max_length",
        "to_regclass",
        "to_regtype",
        "to_regnamespace",
        "to_regrole",
        "pg_get_keywords",
        "pg_advisory_unlock_all",
    ]
)
