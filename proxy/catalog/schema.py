"""The emulated PostgreSQL catalog: DDL and rows built from the dpgate config alone.

Everything lives in a private in-memory DuckDB database, in the schemas ``pgc``
(pg_catalog relations) and ``pgc_is`` (information_schema views).  Only the
declared tables appear; the data backend is never consulted.
"""

from __future__ import annotations

import duckdb

from config.models import Config

from .facts import column_comment, table_comment
from .pg_types import PG_RANGE_COLUMNS, PG_RANGES, PG_TYPE_COLUMNS, PG_TYPES

# oids -----------------------------------------------------------------------------
NS_PG_CATALOG = 11
NS_PUBLIC = 2200
NS_INFORMATION_SCHEMA = 13207
USER_OID = 10
DATABASE_OID = 16383
FIRST_TABLE_OID = 16384
FIRST_ROWTYPE_OID = 24576
HEAP_AM = 2
DEFAULT_COLLATION = 100
PG_CLASS_OID = 1259
# dpgate's own views (dpgate.budget …): schema dpgate, off the search path (psql's \dv dpgate.*)
NS_DPGATE = 14999
FIRST_VIEW_OID = 15000
LAST_VIEW_OID = 15099
_VIEW_TYPES = {"VARCHAR": "text", "DOUBLE": "float", "BIGINT": "int", "INTEGER": "int", "BOOLEAN": "bool"}

# catalog relations' oids (what 'pg_class'::regclass gives)
CATALOG_RELATION_OIDS = {
    "pg_type": 1247,
    "pg_attribute": 1249,
    "pg_proc": 1255,
    "pg_class": 1259,
    "pg_attrdef": 2604,
    "pg_constraint": 2606,
    "pg_inherits": 2611,
    "pg_index": 2610,
    "pg_operator": 2617,
    "pg_opclass": 2616,
    "pg_am": 2601,
    "pg_namespace": 2615,
    "pg_database": 1262,
    "pg_authid": 1260,
    "pg_description": 2609,
    "pg_trigger": 2620,
    "pg_collation": 3456,
    "pg_extension": 3079,
    "pg_enum": 3501,
    "pg_range": 3541,
    "pg_tablespace": 1213,
    "pg_policy": 3256,
    "pg_statistic_ext": 3381,
    "pg_publication": 6104,
    "pg_rewrite": 2618,
    "pg_sequence": 2224,
}

# declared column type -> (type oid, typname, format_type, typlen, typalign, attstorage, collation,
#                           information_schema data_type, numeric_precision)
COLUMN_TYPES = {
    "int": (20, "int8", "bigint", 8, "d", "p", 0, "bigint", 64),
    "float": (701, "float8", "double precision", 8, "d", "p", 0, "double precision", 53),
    "text": (25, "text", "text", -1, "i", "x", DEFAULT_COLLATION, "text", None),
    "bool": (16, "bool", "boolean", 1, "c", "p", 0, "boolean", None),
    "date": (1082, "date", "date", 4, "i", "p", 0, "date", None),
    "timestamp": (
        1114,
        "timestamp",
        "timestamp without time zone",
        8,
        "d",
        "p",
        0,
        "timestamp without time zone",
        None,
    ),
}

# Postgres type -> DuckDB column type used in the emulated tables
_T = {
    "oid": "UINTEGER",
    "name": "VARCHAR",
    "text": "VARCHAR",
    "char": "VARCHAR",
    "bool": "BOOLEAN",
    "int2": "SMALLINT",
    "int4": "INTEGER",
    "int8": "BIGINT",
    "float4": "REAL",
    "float8": "DOUBLE",
    "oid[]": "UINTEGER[]",
    "text[]": "VARCHAR[]",
    "int2[]": "SMALLINT[]",
    "char[]": "VARCHAR[]",
    "node": "VARCHAR",
    "xid": "UINTEGER",
    "ts": "TIMESTAMP WITH TIME ZONE",
}

# name -> list of (column, pg type); empty relations only need the columns
RELATIONS: dict[str, list[tuple[str, str]]] = {
    "pg_namespace": [("oid", "oid"), ("nspname", "name"), ("nspowner", "oid"), ("nspacl", "text[]")],
    "pg_class": [
        ("oid", "oid"),
        ("relname", "name"),
        ("relnamespace", "oid"),
        ("reltype", "oid"),
        ("reloftype", "oid"),
        ("relowner", "oid"),
        ("relam", "oid"),
        ("relfilenode", "oid"),
        ("reltablespace", "oid"),
        ("relpages", "int4"),
        ("reltuples", "float4"),
        ("relallvisible", "int4"),
        ("reltoastrelid", "oid"),
        ("relhasindex", "bool"),
        ("relisshared", "bool"),
        ("relpersistence", "char"),
        ("relkind", "char"),
        ("relnatts", "int2"),
        ("relchecks", "int2"),
        ("relhasrules", "bool"),
        ("relhastriggers", "bool"),
        ("relhassubclass", "bool"),
        ("relrowsecurity", "bool"),
        ("relforcerowsecurity", "bool"),
        ("relispopulated", "bool"),
        ("relreplident", "char"),
        ("relispartition", "bool"),
        ("relrewrite", "oid"),
        ("relfrozenxid", "xid"),
        ("relminmxid", "xid"),
        ("relacl", "text[]"),
        ("reloptions", "text[]"),
        ("relpartbound", "node"),
        ("relhasoids", "bool"),
    ],
    "pg_attribute": [
        ("attrelid", "oid"),
        ("attname", "name"),
        ("atttypid", "oid"),
        ("attstattarget", "int4"),
        ("attlen", "int2"),
        ("attnum", "int2"),
        ("attndims", "int4"),
        ("attcacheoff", "int4"),
        ("atttypmod", "int4"),
        ("attbyval", "bool"),
        ("attalign", "char"),
        ("attstorage", "char"),
        ("attcompression", "char"),
        ("attnotnull", "bool"),
        ("atthasdef", "bool"),
        ("atthasmissing", "bool"),
        ("attidentity", "char"),
        ("attgenerated", "char"),
        ("attisdropped", "bool"),
        ("attislocal", "bool"),
        ("attinhcount", "int4"),
        ("attcollation", "oid"),
        ("attacl", "text[]"),
        ("attoptions", "text[]"),
        ("attfdwoptions", "text[]"),
        ("attmissingval", "text"),
    ],
    "pg_type": [
        ("oid", "oid"),
        ("typname", "name"),
        ("typnamespace", "oid"),
        ("typowner", "oid"),
        ("typlen", "int2"),
        ("typbyval", "bool"),
        ("typtype", "char"),
        ("typcategory", "char"),
        ("typispreferred", "bool"),
        ("typisdefined", "bool"),
        ("typdelim", "char"),
        ("typrelid", "oid"),
        ("typsubscript", "text"),
        ("typelem", "oid"),
        ("typarray", "oid"),
        ("typinput", "text"),
        ("typoutput", "text"),
        ("typreceive", "text"),
        ("typsend", "text"),
        ("typmodin", "text"),
        ("typmodout", "text"),
        ("typanalyze", "text"),
        ("typalign", "char"),
        ("typstorage", "char"),
        ("typnotnull", "bool"),
        ("typbasetype", "oid"),
        ("typtypmod", "int4"),
        ("typndims", "int4"),
        ("typcollation", "oid"),
        ("typdefaultbin", "node"),
        ("typdefault", "text"),
        ("typacl", "text[]"),
    ],
    "pg_database": [
        ("oid", "oid"),
        ("datname", "name"),
        ("datdba", "oid"),
        ("encoding", "int4"),
        ("datlocprovider", "char"),
        ("datistemplate", "bool"),
        ("datallowconn", "bool"),
        ("datconnlimit", "int4"),
        ("datfrozenxid", "xid"),
        ("datminmxid", "xid"),
        ("dattablespace", "oid"),
        ("datcollate", "text"),
        ("datctype", "text"),
        ("daticulocale", "text"),
        ("daticurules", "text"),
        ("datlocale", "text"),
        ("datcollversion", "text"),
        ("datacl", "text[]"),
    ],
    "pg_am": [("oid", "oid"), ("amname", "name"), ("amhandler", "text"), ("amtype", "char")],
    "pg_description": [("objoid", "oid"), ("classoid", "oid"), ("objsubid", "int4"), ("description", "text")],
    "pg_shdescription": [("objoid", "oid"), ("classoid", "oid"), ("description", "text")],
    "pg_range": [
        ("rngtypid", "oid"),
        ("rngsubtype", "oid"),
        ("rngmultitypid", "oid"),
        ("rngcollation", "oid"),
        ("rngsubopc", "oid"),
        ("rngcanonical", "text"),
        ("rngsubdiff", "text"),
    ],
    "pg_tablespace": [
        ("oid", "oid"),
        ("spcname", "name"),
        ("spcowner", "oid"),
        ("spcacl", "text[]"),
        ("spcoptions", "text[]"),
    ],
    "pg_collation": [
        ("oid", "oid"),
        ("collname", "name"),
        ("collnamespace", "oid"),
        ("collowner", "oid"),
        ("collprovider", "char"),
        ("collisdeterministic", "bool"),
        ("collencoding", "int4"),
        ("collcollate", "text"),
        ("collctype", "text"),
        ("colliculocale", "text"),
        ("collversion", "text"),
    ],
    "pg_extension": [
        ("oid", "oid"),
        ("extname", "name"),
        ("extowner", "oid"),
        ("extnamespace", "oid"),
        ("extrelocatable", "bool"),
        ("extversion", "text"),
        ("extconfig", "oid[]"),
        ("extcondition", "text[]"),
    ],
    "pg_settings": [
        ("name", "text"),
        ("setting", "text"),
        ("unit", "text"),
        ("category", "text"),
        ("short_desc", "text"),
        ("extra_desc", "text"),
        ("context", "text"),
        ("vartype", "text"),
        ("source", "text"),
        ("min_val", "text"),
        ("max_val", "text"),
        ("enumvals", "text[]"),
        ("boot_val", "text"),
        ("reset_val", "text"),
        ("sourcefile", "text"),
        ("sourceline", "int4"),
        ("pending_restart", "bool"),
    ],
    # empty relations
    "pg_index": [
        ("indexrelid", "oid"),
        ("indrelid", "oid"),
        ("indnatts", "int2"),
        ("indnkeyatts", "int2"),
        ("indisunique", "bool"),
        ("indnullsnotdistinct", "bool"),
        ("indisprimary", "bool"),
        ("indisexclusion", "bool"),
        ("indimmediate", "bool"),
        ("indisclustered", "bool"),
        ("indisvalid", "bool"),
        ("indcheckxmin", "bool"),
        ("indisready", "bool"),
        ("indislive", "bool"),
        ("indisreplident", "bool"),
        ("indkey", "int2[]"),
        ("indcollation", "oid[]"),
        ("indclass", "oid[]"),
        ("indoption", "int2[]"),
        ("indexprs", "node"),
        ("indpred", "node"),
    ],
    "pg_constraint": [
        ("oid", "oid"),
        ("conname", "name"),
        ("connamespace", "oid"),
        ("contype", "char"),
        ("condeferrable", "bool"),
        ("condeferred", "bool"),
        ("convalidated", "bool"),
        ("conrelid", "oid"),
        ("contypid", "oid"),
        ("conindid", "oid"),
        ("conparentid", "oid"),
        ("confrelid", "oid"),
        ("confupdtype", "char"),
        ("confdeltype", "char"),
        ("confmatchtype", "char"),
        ("conislocal", "bool"),
        ("coninhcount", "int4"),
        ("connoinherit", "bool"),
        ("conkey", "int2[]"),
        ("confkey", "int2[]"),
        ("conpfeqop", "oid[]"),
        ("conppeqop", "oid[]"),
        ("conffeqop", "oid[]"),
        ("confdelsetcols", "int2[]"),
        ("conexclop", "oid[]"),
        ("conbin", "node"),
    ],
    "pg_inherits": [
        ("inhrelid", "oid"),
        ("inhparent", "oid"),
        ("inhseqno", "int4"),
        ("inhdetachpending", "bool"),
    ],
    "pg_attrdef": [("oid", "oid"), ("adrelid", "oid"), ("adnum", "int2"), ("adbin", "node")],
    "pg_trigger": [
        ("oid", "oid"),
        ("tgrelid", "oid"),
        ("tgparentid", "oid"),
        ("tgname", "name"),
        ("tgfoid", "oid"),
        ("tgtype", "int2"),
        ("tgenabled", "char"),
        ("tgisinternal", "bool"),
        ("tgconstrrelid", "oid"),
        ("tgconstrindid", "oid"),
        ("tgconstraint", "oid"),
        ("tgdeferrable", "bool"),
        ("tginitdeferred", "bool"),
        ("tgnargs", "int2"),
        ("tgattr", "int2[]"),
        ("tgqual", "node"),
    ],
    "pg_policy": [
        ("oid", "oid"),
        ("polname", "name"),
        ("polrelid", "oid"),
        ("polcmd", "char"),
        ("polpermissive", "bool"),
        ("polroles", "oid[]"),
        ("polqual", "node"),
        ("polwithcheck", "node"),
    ],
    "pg_statistic_ext": [
        ("oid", "oid"),
        ("stxrelid", "oid"),
        ("stxname", "name"),
        ("stxnamespace", "oid"),
        ("stxowner", "oid"),
        ("stxstattarget", "int4"),
        ("stxkeys", "int2[]"),
        ("stxkind", "char[]"),
        ("stxexprs", "node"),
    ],
    "pg_publication": [
        ("oid", "oid"),
        ("pubname", "name"),
        ("pubowner", "oid"),
        ("puballtables", "bool"),
        ("pubinsert", "bool"),
        ("pubupdate", "bool"),
        ("pubdelete", "bool"),
        ("pubtruncate", "bool"),
        ("pubviaroot", "bool"),
    ],
    "pg_publication_namespace": [("oid", "oid"), ("pnpubid", "oid"), ("pnnspid", "oid")],
    "pg_publication_rel": [
        ("oid", "oid"),
        ("prpubid", "oid"),
        ("prrelid", "oid"),
        ("prqual", "node"),
        ("prattrs", "int2[]"),
    ],
    "pg_proc": [
        ("oid", "oid"),
        ("proname", "name"),
        ("pronamespace", "oid"),
        ("proowner", "oid"),
        ("prolang", "oid"),
        ("procost", "float4"),
        ("prorows", "float4"),
        ("provariadic", "oid"),
        ("prosupport", "text"),
        ("prokind", "char"),
        ("prosecdef", "bool"),
        ("proleakproof", "bool"),
        ("proisstrict", "bool"),
        ("proretset", "bool"),
        ("provolatile", "char"),
        ("proparallel", "char"),
        ("pronargs", "int2"),
        ("pronargdefaults", "int2"),
        ("prorettype", "oid"),
        ("proargtypes", "oid[]"),
        ("proallargtypes", "oid[]"),
        ("proargmodes", "char[]"),
        ("proargnames", "text[]"),
        ("proargdefaults", "node"),
        ("protrftypes", "oid[]"),
        ("prosrc", "text"),
        ("probin", "text"),
        ("prosqlbody", "node"),
        ("proconfig", "text[]"),
        ("proacl", "text[]"),
    ],
    "pg_enum": [("oid", "oid"), ("enumtypid", "oid"), ("enumsortorder", "float4"), ("enumlabel", "name")],
    "pg_opclass": [
        ("oid", "oid"),
        ("opcmethod", "oid"),
        ("opcname", "name"),
        ("opcnamespace", "oid"),
        ("opcowner", "oid"),
        ("opcfamily", "oid"),
        ("opcintype", "oid"),
        ("opcdefault", "bool"),
        ("opckeytype", "oid"),
    ],
    "pg_operator": [
        ("oid", "oid"),
        ("oprname", "name"),
        ("oprnamespace", "oid"),
        ("oprleft", "oid"),
        ("oprright", "oid"),
        ("oprresult", "oid"),
    ],
    "pg_sequence": [
        ("seqrelid", "oid"),
        ("seqtypid", "oid"),
        ("seqstart", "int8"),
        ("seqincrement", "int8"),
        ("seqmax", "int8"),
        ("seqmin", "int8"),
        ("seqcache", "int8"),
        ("seqcycle", "bool"),
    ],
    "pg_auth_members": [("roleid", "oid"), ("member", "oid"), ("grantor", "oid"), ("admin_option", "bool")],
    "pg_rewrite": [
        ("oid", "oid"),
        ("rulename", "name"),
        ("ev_class", "oid"),
        ("ev_type", "char"),
        ("ev_enabled", "char"),
        ("is_instead", "bool"),
    ],
    "pg_foreign_table": [("ftrelid", "oid"), ("ftserver", "oid"), ("ftoptions", "text[]")],
    "pg_partitioned_table": [
        ("partrelid", "oid"),
        ("partstrat", "char"),
        ("partnatts", "int2"),
        ("partdefid", "oid"),
    ],
    "pg_event_trigger": [
        ("oid", "oid"),
        ("evtname", "name"),
        ("evtevent", "name"),
        ("evtowner", "oid"),
        ("evtfoid", "oid"),
        ("evtenabled", "char"),
    ],
    "pg_language": [
        ("oid", "oid"),
        ("lanname", "name"),
        ("lanowner", "oid"),
        ("lanispl", "bool"),
        ("lanpltrusted", "bool"),
    ],
    "pg_cast": [
        ("oid", "oid"),
        ("castsource", "oid"),
        ("casttarget", "oid"),
        ("castfunc", "oid"),
        ("castcontext", "char"),
        ("castmethod", "char"),
    ],
    "pg_conversion": [("oid", "oid"), ("conname", "name"), ("connamespace", "oid")],
    "pg_aggregate": [("aggfnoid", "text"), ("aggkind", "char"), ("aggnumdirectargs", "int2")],
    "pg_depend": [
        ("classid", "oid"),
        ("objid", "oid"),
        ("objsubid", "int4"),
        ("refclassid", "oid"),
        ("refobjid", "oid"),
        ("refobjsubid", "int4"),
        ("deptype", "char"),
    ],
    "pg_foreign_server": [("oid", "oid"), ("srvname", "name"), ("srvowner", "oid"), ("srvfdw", "oid")],
    "pg_foreign_data_wrapper": [("oid", "oid"), ("fdwname", "name"), ("fdwowner", "oid")],
    "pg_user_mapping": [("oid", "oid"), ("umuser", "oid"), ("umserver", "oid")],
    "pg_ts_config": [("oid", "oid"), ("cfgname", "name"), ("cfgnamespace", "oid")],
    "pg_default_acl": [
        ("oid", "oid"),
        ("defaclrole", "oid"),
        ("defaclnamespace", "oid"),
        ("defaclobjtype", "char"),
        ("defaclacl", "text[]"),
    ],
    "pg_init_privs": [("objoid", "oid"), ("classoid", "oid"), ("objsubid", "int4"), ("privtype", "char")],
    "pg_seclabel": [
        ("objoid", "oid"),
        ("classoid", "oid"),
        ("objsubid", "int4"),
        ("provider", "text"),
        ("label", "text"),
    ],
    "pg_statistic_ext_data": [("stxoid", "oid")],
    "pg_subscription": [("oid", "oid"), ("subname", "name"), ("subowner", "oid"), ("subenabled", "bool")],
    "pg_largeobject_metadata": [("oid", "oid"), ("lomowner", "oid")],
    "pg_matviews": [
        ("schemaname", "name"),
        ("matviewname", "name"),
        ("matviewowner", "name"),
        ("definition", "text"),
    ],
    "pg_views": [("schemaname", "name"), ("viewname", "name"), ("viewowner", "name"), ("definition", "text")],
    "pg_sequences": [("schemaname", "name"), ("sequencename", "name"), ("sequenceowner", "name")],
    "pg_indexes": [
        ("schemaname", "name"),
        ("tablename", "name"),
        ("indexname", "name"),
        ("tablespace", "name"),
        ("indexdef", "text"),
    ],
    "pg_stat_activity": [
        ("datid", "oid"),
        ("datname", "name"),
        ("pid", "int4"),
        ("usename", "name"),
        ("application_name", "text"),
        ("state", "text"),
        ("query", "text"),
    ],
    "pg_locks": [
        ("locktype", "text"),
        ("database", "oid"),
        ("relation", "oid"),
        ("pid", "int4"),
        ("mode", "text"),
        ("granted", "bool"),
    ],
    "pg_prepared_xacts": [("transaction", "xid"), ("gid", "text"), ("owner", "name"), ("database", "name")],
    "pg_stats": [
        ("schemaname", "name"),
        ("tablename", "name"),
        ("attname", "name"),
        ("inherited", "bool"),
        ("null_frac", "float4"),
        ("avg_width", "int4"),
        ("n_distinct", "float4"),
        ("most_common_vals", "text[]"),
        ("most_common_freqs", "text[]"),
        ("histogram_bounds", "text[]"),
        ("correlation", "float4"),
    ],
    "pg_timezone_names": [("name", "text"), ("abbrev", "text"), ("utc_offset", "text"), ("is_dst", "bool")],
}

_STAT_TABLES = (
    "SELECT c.oid AS relid, n.nspname AS schemaname, c.relname, "
    + ", ".join(
        f"CAST(0 AS BIGINT) AS {k}"
        for k in (
            "seq_scan",
            "seq_tup_read",
            "idx_scan",
            "idx_tup_fetch",
            "n_tup_ins",
            "n_tup_upd",
            "n_tup_del",
            "n_tup_hot_upd",
            "n_tup_newpage_upd",
            "n_live_tup",
            "n_dead_tup",
            "n_mod_since_analyze",
            "n_ins_since_vacuum",
            "vacuum_count",
            "autovacuum_count",
            "analyze_count",
            "autoanalyze_count",
        )
    )
    + ", "
    + ", ".join(
        f"CAST(NULL AS TIMESTAMP WITH TIME ZONE) AS {k}"
        for k in (
            "last_seq_scan",
            "last_idx_scan",
            "last_vacuum",
            "last_autovacuum",
            "last_analyze",
            "last_autoanalyze",
        )
    )
    + " FROM pgc.pg_class c JOIN pgc.pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r'"
)

# Views over pgc.session (the user of the current call) and the declared tables.
VIEWS = {
    "pg_roles": """SELECT s.usr AS rolname, false AS rolsuper, true AS rolinherit, false AS rolcreaterole,
        false AS rolcreatedb, true AS rolcanlogin, false AS rolreplication, -1 AS rolconnlimit,
        '********' AS rolpassword, CAST(NULL AS TIMESTAMP WITH TIME ZONE) AS rolvaliduntil,
        false AS rolbypassrls, CAST(NULL AS VARCHAR[]) AS rolconfig, CAST(10 AS UINTEGER) AS oid
        FROM pgc.session s""",
    "pg_authid": "SELECT oid, rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication, rolbypassrls, rolconnlimit, CAST(NULL AS VARCHAR) AS rolpassword, rolvaliduntil FROM pgc.pg_roles",
    "pg_user": """SELECT s.usr AS usename, CAST(10 AS UINTEGER) AS usesysid, false AS usecreatedb, false AS usesuper,
        false AS userepl, false AS usebypassrls, '********' AS passwd,
        CAST(NULL AS TIMESTAMP WITH TIME ZONE) AS valuntil, CAST(NULL AS VARCHAR[]) AS useconfig FROM pgc.session s""",
    # activity statistics would describe the data: every counter is 0 (as after a stats reset)
    "pg_stat_user_tables": _STAT_TABLES,
    "pg_stat_all_tables": _STAT_TABLES,
    "pg_tables": """SELECT n.nspname AS schemaname, c.relname AS tablename, r.rolname AS tableowner,
        CAST(NULL AS VARCHAR) AS tablespace, false AS hasindexes, false AS hasrules, false AS hastriggers,
        false AS rowsecurity FROM pgc.pg_class c JOIN pgc.pg_namespace n ON n.oid = c.relnamespace,
        pgc.pg_roles r WHERE c.relkind = 'r'""",
}

INFO_SCHEMA_RELATIONS = (
    "tables",
    "columns",
    "schemata",
    "views",
    "table_constraints",
    "key_column_usage",
    "referential_constraints",
    "routines",
    "parameters",
    "sequences",
    "check_constraints",
    "constraint_column_usage",
    "triggers",
    "table_privileges",
    "column_privileges",
    "character_sets",
    "enabled_roles",
    "applicable_roles",
    "domains",
    "element_types",
)

SETTINGS = {
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "TimeZone": "UTC",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "transaction_isolation": "read committed",
    "jit": "off",
    "search_path": '"$user", public',
    "max_identifier_length": "63",
    "IntervalStyle": "postgres",
    "application_name": "",
    "default_transaction_read_only": "on",
    "transaction_read_only": "on",
    "is_superuser": "off",
    "lc_collate": "C.UTF-8",
    "lc_ctype": "C.UTF-8",
    "lc_messages": "C.UTF-8",
    "lc_monetary": "C.UTF-8",
    "lc_numeric": "C.UTF-8",
    "lc_time": "C.UTF-8",
    "max_index_keys": "32",
    "block_size": "8192",
    "default_transaction_isolation": "read committed",
    "extra_float_digits": "1",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "bytea_output": "hex",
    "row_security": "on",
    "session_authorization": "",
    "default_tablespace": "",
    "server_version": "",
    "server_version_num": "",
}


#: relations that also hold rows of one session only (its temporary views, :func:`session_rows`),
#: seen by the catalog queries of that session (the cursor's ``dpgate_session`` variable)
SESSION_RELATIONS = ("pg_namespace", "pg_class", "pg_attribute")
FIRST_SESSION_OID = 40000
"""Oids of sessions' temporary schemas and views count up from here."""


def session_rows(
    namespace: tuple[int, str], oid: int, name: str, columns: list[tuple[str, str]]
) -> dict[str, list[dict]]:
    """The rows of a session's temporary view ``name`` (relkind 'v', schema ``namespace``
    (oid, name): the session's pg_temp_N) with ``columns`` [(name, COLUMN_TYPES key)], per
    relation of :data:`SESSION_RELATIONS` (the namespace row is the caller's, once per session)."""
    cls: dict[str, object] = {c: None for c, _ in RELATIONS["pg_class"]}
    cls.update(
        oid=oid,
        relname=name,
        relnamespace=namespace[0],
        reltype=0,
        reloftype=0,
        relowner=USER_OID,
        relam=0,
        relfilenode=0,
        reltablespace=0,
        relpages=0,
        reltuples=-1.0,
        relallvisible=0,
        reltoastrelid=0,
        relhasindex=False,
        relisshared=False,
        relpersistence="t",
        relkind="v",
        relnatts=len(columns),
        relchecks=0,
        relhasrules=True,
        relhastriggers=False,
        relhassubclass=False,
        relrowsecurity=False,
        relforcerowsecurity=False,
        relispopulated=True,
        relreplident="n",
        relispartition=False,
        relrewrite=0,
        relfrozenxid=0,
        relminmxid=0,
        relhasoids=False,
    )
    attrs = []
    for num, (cname, typ) in enumerate(columns, start=1):
        toid, _, _, tlen, align, storage, coll, _, _ = COLUMN_TYPES[typ]
        attrs.append(
            {
                "attrelid": oid,
                "attname": cname,
                "atttypid": toid,
                "attstattarget": -1,
                "attlen": tlen,
                "attnum": num,
                "attndims": 0,
                "attcacheoff": -1,
                "atttypmod": -1,
                "attbyval": tlen > 0,
                "attalign": align,
                "attstorage": storage,
                "attcompression": "",
                "attnotnull": False,
                "atthasdef": False,
                "atthasmissing": False,
                "attidentity": "",
                "attgenerated": "",
                "attisdropped": False,
                "attislocal": True,
                "attinhcount": 0,
                "attcollation": coll,
            }
        )
    return {"pg_class": [cls], "pg_attribute": attrs}


def temp_namespace(oid: int, name: str) -> dict:
    return {"oid": oid, "nspname": name, "nspowner": USER_OID}


def _ddl_type(pgtype: str) -> str:
    return _T[pgtype]


def build(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    *,
    database: str,
    server_version: str,
    views: dict[str, tuple[str, list[tuple[str, str]]]] | None = None,
) -> None:
    """Create and fill the emulated catalog's relations in ``con`` (its functions, which read
    them: :func:`proxy.catalog.macros.create_macros`, run after this). ``views``: dpgate's own
    views, name -> (description, [(column, DuckDB type)]), listed in the schema ``dpgate``."""
    con.execute("CREATE SCHEMA pgc")
    con.execute("CREATE SCHEMA pgc_is")
    # the user of the current call: a variable of each query's own cursor (no shared state)
    con.execute("CREATE VIEW pgc.session AS SELECT COALESCE(getvariable('dpgate_user'), 'postgres') AS usr")
    for name, cols in RELATIONS.items():
        body = ", ".join(f'"{c}" {_ddl_type(t)}' for c, t in cols)
        if name in SESSION_RELATIONS:  # the shared rows, and each session's own (its temporary views)
            con.execute(f"CREATE TABLE pgc.{name}_shared ({body})")
            con.execute(f'CREATE TABLE pgc.{name}_session ({body}, "session" UBIGINT)')
            con.execute(
                f"CREATE VIEW pgc.{name} AS SELECT * FROM pgc.{name}_shared UNION ALL SELECT * EXCLUDE "
                f"(session) FROM pgc.{name}_session WHERE session = getvariable('dpgate_session')"
            )
        else:
            con.execute(f"CREATE TABLE pgc.{name} ({body})")
    for name, sql in VIEWS.items():
        con.execute(f"CREATE VIEW pgc.{name} AS {sql}")

    def insert(rel: str, rows: list[dict]) -> None:
        if not rows:
            return
        cols = [c for c, _ in RELATIONS[rel]]
        data = [tuple(r.get(c) for c in cols) for r in rows]
        marks = ", ".join("?" for _ in cols)
        target = f"{rel}_shared" if rel in SESSION_RELATIONS else rel
        con.executemany(f"INSERT INTO pgc.{target} VALUES ({marks})", data)

    insert(
        "pg_namespace",
        [
            {"oid": NS_PG_CATALOG, "nspname": "pg_catalog", "nspowner": USER_OID},
            {"oid": NS_PUBLIC, "nspname": "public", "nspowner": USER_OID},
            {"oid": NS_INFORMATION_SCHEMA, "nspname": "information_schema", "nspowner": USER_OID},
        ]
        + ([{"oid": NS_DPGATE, "nspname": "dpgate", "nspowner": USER_OID}] if views else []),
    )
    insert(
        "pg_am",
        [
            {"oid": HEAP_AM, "amname": "heap", "amhandler": "heap_tableam_handler", "amtype": "t"},
            {"oid": 403, "amname": "btree", "amhandler": "bthandler", "amtype": "i"},
        ],
    )
    insert(
        "pg_database",
        [
            {
                "oid": DATABASE_OID,
                "datname": database,
                "datdba": USER_OID,
                "encoding": 6,
                "datlocprovider": "c",
                "datistemplate": False,
                "datallowconn": True,
                "datconnlimit": -1,
                "datfrozenxid": 0,
                "datminmxid": 1,
                "dattablespace": 1663,
                "datcollate": "C.UTF-8",
                "datctype": "C.UTF-8",
            }
        ],
    )
    insert(
        "pg_tablespace",
        [
            {"oid": 1663, "spcname": "pg_default", "spcowner": USER_OID},
        ],
    )
    insert(
        "pg_collation",
        [
            {
                "oid": 100,
                "collname": "default",
                "collnamespace": NS_PG_CATALOG,
                "collowner": USER_OID,
                "collprovider": "d",
                "collisdeterministic": True,
                "collencoding": -1,
            },
            {
                "oid": 950,
                "collname": "C",
                "collnamespace": NS_PG_CATALOG,
                "collowner": USER_OID,
                "collprovider": "c",
                "collisdeterministic": True,
                "collencoding": -1,
                "collcollate": "C",
                "collctype": "C",
            },
        ],
    )
    insert(
        "pg_extension",
        [
            {
                "oid": 13000,
                "extname": "plpgsql",
                "extowner": USER_OID,
                "extnamespace": NS_PG_CATALOG,
                "extrelocatable": False,
                "extversion": "1.0",
            }
        ],
    )
    settings = dict(SETTINGS)
    settings["server_version"] = server_version
    try:
        major, _, minor = server_version.partition(".")
        settings["server_version_num"] = str(int(major) * 10000 + int(minor.split(".")[0] or "0"))
    except ValueError:
        settings["server_version_num"] = "160000"
    insert(
        "pg_settings",
        [
            {
                "name": k,
                "setting": v,
                "category": "dpgate",
                "short_desc": "",
                "context": "user",
                "vartype": "string",
                "source": "default",
                "boot_val": v,
                "reset_val": v,
                "pending_restart": False,
            }
            for k, v in settings.items()
        ],
    )

    types = []
    for row in PG_TYPES:
        t = dict(zip(PG_TYPE_COLUMNS, row))
        t.pop("fmt"), t.pop("fmt_null")
        t.update(typnamespace=NS_PG_CATALOG, typowner=USER_OID, typisdefined=True, typnotnull=False)
        types.append(t)
    insert("pg_range", [dict(zip(PG_RANGE_COLUMNS, r)) for r in PG_RANGES])

    classes, attrs, descs = [], [], []
    for i, (tname, table) in enumerate(config.tables.items()):
        oid = FIRST_TABLE_OID + i
        rowtype = FIRST_ROWTYPE_OID + i
        classes.append(
            {
                "oid": oid,
                "relname": tname,
                "relnamespace": NS_PUBLIC,
                "reltype": rowtype,
                "reloftype": 0,
                "relowner": USER_OID,
                "relam": HEAP_AM,
                "relfilenode": oid,
                "reltablespace": 0,
                "relpages": 0,
                "reltuples": -1.0,
                "relallvisible": 0,
                "reltoastrelid": 0,
                "relhasindex": False,
                "relisshared": False,
                "relpersistence": "p",
                "relkind": "r",
                "relnatts": len(table.columns),
                "relchecks": 0,
                "relhasrules": False,
                "relhastriggers": False,
                "relhassubclass": False,
                "relrowsecurity": False,
                "relforcerowsecurity": False,
                "relispopulated": True,
                "relreplident": "d",
                "relispartition": False,
                "relrewrite": 0,
                "relfrozenxid": 0,
                "relminmxid": 1,
                "relhasoids": False,
            }
        )
        types.append(_row_type(rowtype, tname, NS_PUBLIC, oid))
        descs.append(
            {"objoid": oid, "classoid": PG_CLASS_OID, "objsubid": 0, "description": table_comment(table)}
        )
        for num, (cname, col) in enumerate(table.columns.items(), start=1):
            toid, _, _, tlen, align, storage, coll, _, _ = COLUMN_TYPES[col.type]
            attrs.append(
                {
                    "attrelid": oid,
                    "attname": cname,
                    "atttypid": toid,
                    "attstattarget": -1,
                    "attlen": tlen,
                    "attnum": num,
                    "attndims": 0,
                    "attcacheoff": -1,
                    "atttypmod": -1,
                    "attbyval": tlen > 0,
                    "attalign": align,
                    "attstorage": storage,
                    "attcompression": "",
                    "attnotnull": not col.nullable,
                    "atthasdef": False,
                    "atthasmissing": False,
                    "attidentity": "",
                    "attgenerated": "",
                    "attisdropped": False,
                    "attislocal": True,
                    "attinhcount": 0,
                    "attcollation": coll,
                }
            )
            if comment := column_comment(table, cname, col):  # the DP facts
                descs.append(
                    {"objoid": oid, "classoid": PG_CLASS_OID, "objsubid": num, "description": comment}
                )
    _views(views or {}, classes, attrs, types, descs)
    insert("pg_type", types)
    insert("pg_class", classes)
    insert("pg_attribute", attrs)
    insert("pg_description", descs)

    # format_type() lookup
    con.execute("CREATE TABLE pgc.type_format (oid UINTEGER, fmt VARCHAR, fmt_null VARCHAR)")
    con.executemany(
        "INSERT INTO pgc.type_format VALUES (?, ?, ?)",
        [(r[0], r[PG_TYPE_COLUMNS.index("fmt")], r[PG_TYPE_COLUMNS.index("fmt_null")]) for r in PG_TYPES],
    )

    _info_schema(con, database)


def _views(views: dict, classes: list, attrs: list, types: list, descs: list) -> None:
    """dpgate.budget, dpgate.releases, dpgate.coalition as views (relkind 'v') of the schema dpgate."""
    for j, (vname, (description, cols)) in enumerate(views.items()):
        oid = FIRST_VIEW_OID + j
        classes.append(
            {
                "oid": oid,
                "relname": vname,
                "relnamespace": NS_DPGATE,
                "reltype": oid + 50,
                "reloftype": 0,
                "relowner": USER_OID,
                "relam": 0,
                "relfilenode": 0,
                "reltablespace": 0,
                "relpages": 0,
                "reltuples": -1.0,
                "relallvisible": 0,
                "reltoastrelid": 0,
                "relhasindex": False,
                "relisshared": False,
                "relpersistence": "p",
                "relkind": "v",
                "relnatts": len(cols),
                "relchecks": 0,
                "relhasrules": False,
                "relhastriggers": False,
                "relhassubclass": False,
                "relrowsecurity": False,
                "relforcerowsecurity": False,
                "relispopulated": True,
                "relreplident": "n",
                "relispartition": False,
                "relrewrite": 0,
                "relfrozenxid": 0,
                "relminmxid": 0,
                "relhasoids": False,
            }
        )
        types.append(_row_type(oid + 50, vname, NS_DPGATE, oid))
        descs.append({"objoid": oid, "classoid": PG_CLASS_OID, "objsubid": 0, "description": description})
        for num, (cname, duck) in enumerate(cols, start=1):
            toid, _, _, tlen, align, storage, coll, _, _ = COLUMN_TYPES[_VIEW_TYPES[duck]]
            attrs.append(
                {
                    "attrelid": oid,
                    "attname": cname,
                    "atttypid": toid,
                    "attstattarget": -1,
                    "attlen": tlen,
                    "attnum": num,
                    "attndims": 0,
                    "attcacheoff": -1,
                    "atttypmod": -1,
                    "attbyval": tlen > 0,
                    "attalign": align,
                    "attstorage": storage,
                    "attcompression": "",
                    "attnotnull": False,
                    "atthasdef": False,
                    "atthasmissing": False,
                    "attidentity": "",
                    "attgenerated": "",
                    "attisdropped": False,
                    "attislocal": True,
                    "attinhcount": 0,
                    "attcollation": coll,
                }
            )


def _info_schema(con: duckdb.DuckDBPyConnection, database: str) -> None:
    db = database.replace("'", "''")

    def cases(idx: int) -> str:
        return " ".join(
            f"WHEN {v[0]} THEN {('NULL' if v[idx] is None else repr(v[idx]))}" for v in COLUMN_TYPES.values()
        )

    con.execute(f"""CREATE VIEW pgc_is.tables AS SELECT '{db}' AS table_catalog, n.nspname AS table_schema,
        c.relname AS table_name, CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'BASE TABLE' END AS table_type,
        CAST(NULL AS VARCHAR) AS self_referencing_column_name, CAST(NULL AS VARCHAR) AS reference_generation,
        CAST(NULL AS VARCHAR) AS user_defined_type_catalog, CAST(NULL AS VARCHAR) AS user_defined_type_schema,
        CAST(NULL AS VARCHAR) AS user_defined_type_name, 'NO' AS is_insertable_into, 'NO' AS is_typed,
        CAST(NULL AS VARCHAR) AS commit_action
        FROM pgc.pg_class c JOIN pgc.pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'v')""")
    con.execute(f"""CREATE VIEW pgc_is.columns AS SELECT '{db}' AS table_catalog,
        CASE WHEN c.relnamespace = {NS_DPGATE} THEN 'dpgate' ELSE 'public' END AS table_schema,
        c.relname AS table_name, a.attname AS column_name, CAST(a.attnum AS INTEGER) AS ordinal_position,
        CAST(NULL AS VARCHAR) AS column_default, CASE WHEN a.attnotnull THEN 'NO' ELSE 'YES' END AS is_nullable,
        CASE a.atttypid {cases(7)} END AS data_type,
        CAST(NULL AS INTEGER) AS character_maximum_length,
        CASE WHEN a.atttypid = 25 THEN 1073741824 END AS character_octet_length,
        CAST(CASE a.atttypid {cases(8)} END AS INTEGER) AS numeric_precision,
        CASE WHEN a.atttypid IN (20, 701) THEN 2 END AS numeric_precision_radix,
        CASE WHEN a.atttypid = 20 THEN 0 END AS numeric_scale,
        CAST(NULL AS INTEGER) AS datetime_precision, CAST(NULL AS VARCHAR) AS interval_type,
        CAST(NULL AS INTEGER) AS interval_precision,
        CAST(NULL AS VARCHAR) AS character_set_catalog, CAST(NULL AS VARCHAR) AS character_set_schema,
        CAST(NULL AS VARCHAR) AS character_set_name,
        CASE WHEN a.atttypid = 25 THEN '{db}' END AS collation_catalog,
        CASE WHEN a.atttypid = 25 THEN 'pg_catalog' END AS collation_schema,
        CASE WHEN a.atttypid = 25 THEN 'default' END AS collation_name,
        CAST(NULL AS VARCHAR) AS domain_catalog, CAST(NULL AS VARCHAR) AS domain_schema,
        CAST(NULL AS VARCHAR) AS domain_name,
        '{db}' AS udt_catalog, 'pg_catalog' AS udt_schema, CASE a.atttypid {cases(1)} END AS udt_name,
        CAST(NULL AS VARCHAR) AS scope_catalog, CAST(NULL AS VARCHAR) AS scope_schema,
        CAST(NULL AS VARCHAR) AS scope_name, CAST(NULL AS INTEGER) AS maximum_cardinality,
        CAST(a.attnum AS VARCHAR) AS dtd_identifier, 'NO' AS is_self_referencing, 'NO' AS is_identity,
        CAST(NULL AS VARCHAR) AS identity_generation, CAST(NULL AS VARCHAR) AS identity_start,
        CAST(NULL AS VARCHAR) AS identity_increment, CAST(NULL AS VARCHAR) AS identity_maximum,
        CAST(NULL AS VARCHAR) AS identity_minimum, CAST(NULL AS VARCHAR) AS identity_cycle,
        'NEVER' AS is_generated, CAST(NULL AS VARCHAR) AS generation_expression, 'NO' AS is_updatable
        FROM pgc.pg_attribute a JOIN pgc.pg_class c ON c.oid = a.attrelid
        WHERE a.attnum > 0 AND NOT a.attisdropped""")
    con.execute(f"""CREATE VIEW pgc_is.schemata AS SELECT '{db}' AS catalog_name, nspname AS schema_name,
        (SELECT usr FROM pgc.session) AS schema_owner, CAST(NULL AS VARCHAR) AS default_character_set_catalog,
        CAST(NULL AS VARCHAR) AS default_character_set_schema, CAST(NULL AS VARCHAR) AS default_character_set_name,
        CAST(NULL AS VARCHAR) AS sql_path FROM pgc.pg_namespace""")
    con.execute("""CREATE VIEW pgc_is.enabled_roles AS SELECT usr AS role_name FROM pgc.session""")
    con.execute(
        """CREATE VIEW pgc_is.applicable_roles AS SELECT usr AS grantee, usr AS role_name, 'NO' AS is_grantable FROM pgc.session WHERE false"""
    )
    empty = {
        "views": [
            "table_catalog",
            "table_schema",
            "table_name",
            "view_definition",
            "check_option",
            "is_updatable",
            "is_insertable_into",
            "is_trigger_updatable",
            "is_trigger_deletable",
            "is_trigger_insertable_into",
        ],
        "table_constraints": [
            "constraint_catalog",
            "constraint_schema",
            "constraint_name",
            "table_catalog",
            "table_schema",
            "table_name",
            "constraint_type",
            "is_deferrable",
            "initially_deferred",
            "enforced",
            "nulls_distinct",
        ],
        "key_column_usage": [
            "constraint_catalog",
            "constraint_schema",
            "constraint_name",
            "table_catalog",
            "table_schema",
            "table_name",
            "column_name",
            "ordinal_position",
            "position_in_unique_constraint",
        ],
        "referential_constraints": [
            "constraint_catalog",
            "constraint_schema",
            "constraint_name",
            "unique_constraint_catalog",
            "unique_constraint_schema",
            "unique_constraint_name",
            "match_option",
            "update_rule",
            "delete_rule",
        ],
        "constraint_column_usage": [
            "table_catalog",
            "table_schema",
            "table_name",
            "column_name",
            "constraint_catalog",
            "constraint_schema",
            "constraint_name",
        ],
        "check_constraints": ["constraint_catalog", "constraint_schema", "constraint_name", "check_clause"],
        "routines": [
            "specific_catalog",
            "specific_schema",
            "specific_name",
            "routine_catalog",
            "routine_schema",
            "routine_name",
            "routine_type",
            "data_type",
        ],
        "parameters": [
            "specific_catalog",
            "specific_schema",
            "specific_name",
            "ordinal_position",
            "parameter_mode",
            "parameter_name",
            "data_type",
        ],
        "sequences": ["sequence_catalog", "sequence_schema", "sequence_name", "data_type"],
        "triggers": [
            "trigger_catalog",
            "trigger_schema",
            "trigger_name",
            "event_manipulation",
            "event_object_catalog",
            "event_object_schema",
            "event_object_table",
            "action_statement",
        ],
        "table_privileges": [
            "grantor",
            "grantee",
            "table_catalog",
            "table_schema",
            "table_name",
            "privilege_type",
            "is_grantable",
            "with_hierarchy",
        ],
        "column_privileges": [
            "grantor",
            "grantee",
            "table_catalog",
            "table_schema",
            "table_name",
            "column_name",
            "privilege_type",
            "is_grantable",
        ],
        "character_sets": [
            "character_set_catalog",
            "character_set_schema",
            "character_set_name",
            "character_repertoire",
            "form_of_use",
            "default_collate_catalog",
            "default_collate_schema",
            "default_collate_name",
        ],
        "domains": ["domain_catalog", "domain_schema", "domain_name", "data_type"],
        "element_types": [
            "object_catalog",
            "object_schema",
            "object_name",
            "object_type",
            "collection_type_identifier",
            "data_type",
        ],
    }
    for name, cols in empty.items():
        body = ", ".join(
            f'"{c}" {"INTEGER" if c in ("ordinal_position", "position_in_unique_constraint") else "VARCHAR"}'
            for c in cols
        )
        con.execute(f"CREATE TABLE pgc_is.{name} ({body})")


def _row_type(oid: int, name: str, namespace: int, relid: int) -> dict[str, object]:
    """The pg_type row of a relation's composite row type (typtype 'c'), as Postgres lists it."""
    return {
        "oid": oid,
        "typname": name,
        "typnamespace": namespace,
        "typowner": USER_OID,
        "typlen": -1,
        "typbyval": False,
        "typtype": "c",
        "typcategory": "C",
        "typispreferred": False,
        "typisdefined": True,
        "typdelim": ",",
        "typrelid": relid,
        "typsubscript": "-",
        "typelem": 0,
        "typarray": 0,
        "typinput": "record_in",
        "typoutput": "record_out",
        "typreceive": "record_recv",
        "typsend": "record_send",
        "typmodin": "-",
        "typmodout": "-",
        "typanalyze": "-",
        "typalign": "d",
        "typstorage": "x",
        "typnotnull": False,
        "typbasetype": 0,
        "typtypmod": -1,
        "typndims": 0,
        "typcollation": 0,
    }
