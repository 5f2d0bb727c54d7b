"""What ``dpgate init`` reads: the relations of a DuckDB file, of Parquet/CSV files (one table
per file, or per glob of one schema), of a Postgres schema or of a Spark catalog, with their
columns, types and the keys and foreign keys the engine declares (:class:`Facts`)."""

from __future__ import annotations

import asyncio
import glob as globlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlglot

from ..backends import BackendError, DuckDBBackend, PostgresBackend
from ..backends.spark import SparkBackend
from .init_text import InitError, progress, shown
from .schema_check import kind_of

FILES = {".parquet": "read_parquet", ".csv": "read_csv", ".tsv": "read_csv", ".gz": "read_csv"}


@dataclass
class Col:
    name: str  # the config's name (lower-case identifier)
    backend: str  # the backend's name (quoted in SQL)
    btype: str
    kind: str | None  # dpgate type, None: not representable
    lines: list[str] = field(default_factory=list)
    n: int = 0  # non-null values
    distinct: int | None = None  # int, text, bool
    lo: Any = None  # numbers, dates (as the driver reads them)
    hi: Any = None
    avg_len: float | None = None  # text
    max_len: int | None = None


@dataclass
class Rel:
    name: str
    source: str  # SQL relation text, as `source` takes it
    cols: list[Col]
    skipped: list[str] = field(default_factory=list)
    origin: tuple | None = None  # (schema, table) in a database, (table function, path) for files
    rows: int = 0
    head: list[str] = field(default_factory=list)  # the table's own lines (unit, key, references, …)

    def col(self, name: str) -> Col:
        return next(c for c in self.cols if c.name == name)


def quote_ident(ident: str) -> str:
    return '"' + ident.replace('"', '""') + '"'


def simple_ident(ident: str) -> bool:
    return ident.isidentifier() and ident == ident.lower() and ident.isascii()


def table_name(raw: str, taken: set[str]) -> str:
    name = re.sub(r"\W", "_", raw.lower(), flags=re.ASCII).strip("_") or "t"
    name = "t_" + name if name[0].isdigit() else name
    out, i = name, 2
    while out in taken:
        out, i = f"{name}_{i}", i + 1
    taken.add(out)
    return out


# -- readers: DuckDB (a file, or files through table functions) and Postgres ---------
@dataclass
class Facts:
    """What the schema declares: NOT NULL columns, unique keys and foreign keys, by the
    proposed table and column names."""

    not_null: dict[str, set[str]] = field(default_factory=dict)
    keys: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    fks: list[tuple[str, str, str, str]] = field(default_factory=list)  # (table, col, target, target col)


def _by_origin(rels: list[Rel]) -> dict[object, Rel]:
    return {r.origin: r for r in rels if r.origin is not None}


def _facts_from(rows, rels: list[Rel], fold) -> Facts:
    """Facts from catalog rows (schema, table, kind, [columns], referenced table, [columns]),
    kind 'p'/'u' (a key), 'f' (a foreign key) or 'n' (NOT NULL); ``fold`` maps a backend
    column name to the config's."""
    by = _by_origin(rels)
    out = Facts()
    for schema, table, kind, cols, ref, ref_cols in rows:
        rel = by.get((schema, table))
        if rel is None:
            continue
        names = tuple(fold(c) for c in cols or ())
        if kind == "n":
            out.not_null.setdefault(rel.name, set()).update(names)
        elif kind in ("p", "u"):
            out.keys.setdefault(rel.name, []).append(names)
        elif kind == "f" and len(names) == 1 and ref_cols and len(ref_cols) == 1:
            target = by.get((schema, ref))
            if target is not None:
                out.fks.append((rel.name, names[0], target.name, fold(ref_cols[0])))
    return out


class DuckReader:
    kind = DuckDBBackend.kind

    def __init__(self, path: str | None):
        import duckdb

        try:
            self.con = duckdb.connect(path or ":memory:", read_only=path is not None)
        except duckdb.Error as e:
            raise InitError(f"cannot open {path}: {str(e).splitlines()[0]}") from None

    def query(self, sql: str) -> list[tuple]:
        return self.con.execute(sql).fetchall()

    def describe(self, source: str) -> list[tuple[str, str]]:
        return [(r[0], str(r[1])) for r in self.query(f"DESCRIBE SELECT * FROM {source} LIMIT 0")]

    def relations(self, args, taken: set[str]) -> list[Rel]:
        return _duck_relations(self, args, taken)

    def column_name(self, col: str) -> str:
        """DuckDB matches identifiers case-insensitively: a column is declared lower case."""
        return col.lower()

    def facts(self, rels: list[Rel]) -> Facts:
        """A DuckDB file's declared constraints (duckdb_constraints(), duckdb_columns()); a
        Parquet file's REQUIRED fields (parquet_schema()): NOT NULL in every file read."""
        rows = [
            (s, t, {"PRIMARY KEY": "p", "UNIQUE": "u", "FOREIGN KEY": "f"}[k], cols, ref, ref_cols)
            for s, t, k, cols, ref, ref_cols in self.query(
                "SELECT schema_name, table_name, constraint_type, constraint_column_names, "
                "referenced_table, referenced_column_names FROM duckdb_constraints() "
                "WHERE database_name = current_database() "
                "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE', 'FOREIGN KEY')"
            )
        ]
        rows += [
            (s, t, "n", [c], None, None)
            for s, t, c in self.query(
                "SELECT schema_name, table_name, column_name FROM duckdb_columns() "
                "WHERE database_name = current_database() AND NOT is_nullable"
            )
        ]
        out = _facts_from(rows, rels, self.column_name)
        for rel in rels:
            if rel.origin is not None and rel.origin[0] == "read_parquet":
                fields: dict[str, set[str]] = {}
                for name, rep in self.query(
                    f"SELECT name, repetition_type FROM parquet_schema({_lit(rel.origin[1])}) "
                    "WHERE num_children IS NULL OR num_children = 0"
                ):
                    fields.setdefault(self.column_name(name), set()).add(rep)
                req = {c for c, reps in fields.items() if reps == {"REQUIRED"}}
                if req:
                    out.not_null.setdefault(rel.name, set()).update(req)
        return out

    def close(self) -> None:
        self.con.close()


_PG_FACTS = """
SELECT n.nspname, c.relname, k.contype,
       ARRAY(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY u(n, o)
             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n ORDER BY u.o),
       f.relname,
       ARRAY(SELECT a.attname FROM unnest(k.confkey) WITH ORDINALITY u(n, o)
             JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n ORDER BY u.o)
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_class f ON f.oid = k.confrelid
WHERE n.nspname = %s AND k.contype IN ('p', 'u', 'f')
UNION ALL
SELECT table_schema, table_name, 'n', ARRAY[column_name::text], NULL, NULL
FROM information_schema.columns WHERE table_schema = %s AND is_nullable = 'NO'
"""


class PgReader:
    kind = PostgresBackend.kind

    def __init__(self, dsn: str):
        import psycopg

        try:
            self.con = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        except psycopg.Error as e:
            raise InitError(f"cannot connect to {dsn}: {str(e).strip().splitlines()[0]}") from None
        self.dbname = self.con.info.dbname

    def query(self, sql: str, params=None) -> list[tuple]:
        return self.con.execute(sql, params).fetchall()

    def describe(self, source: str) -> list[tuple[str, str]]:
        from psycopg.postgres import types as pg_types

        cur = self.con.execute(f"SELECT * FROM {source} LIMIT 0")
        out = []
        for d in cur.description or ():
            info = pg_types.get(d.type_code)
            out.append((d.name, info.name if info is not None else f"oid {d.type_code}"))
        return out

    def relations(self, args, taken: set[str]) -> list[Rel]:
        return _pg_relations(self, args, taken)

    def column_name(self, col: str) -> str:
        return col

    def facts(self, rels: list[Rel]) -> Facts:
        """The schema's constraints (pg_constraint) and NOT NULL columns (information_schema)."""
        schema = next((r.origin[0] for r in rels if r.origin is not None), None)
        if schema is None:
            return Facts()
        return _facts_from(self.query(_PG_FACTS, (schema, schema)), rels, self.column_name)

    def close(self) -> None:
        self.con.close()


class SparkReader:
    """A Spark catalog through Spark Connect (``--spark sc://host:15002 [--database db]``).
    init's SQL is written in Postgres's spelling and transpiled to Spark SQL by sqlglot."""

    kind = SparkBackend.kind

    def __init__(self, remote: str, database: str | None):
        self.backend = SparkBackend(remote, database=database)
        self.database = database
        try:
            self.backend.query("SELECT 1")
        except BackendError as e:
            raise InitError(f"cannot reach Spark Connect at {remote}: {e.message}") from None

    def query(self, sql: str) -> list[tuple]:
        return self.backend.query(sqlglot.transpile(sql, read="postgres", write=self.kind)[0])

    def describe(self, source: str) -> list[tuple[str, str]]:
        cols = self.backend.describe_now(source)
        return list(cols.items()) if cols else []

    def relations(self, args, taken: set[str]) -> list[Rel]:
        return _spark_relations(self, args, taken)

    def column_name(self, col: str) -> str:
        return col

    def facts(self, rels: list[Rel]) -> Facts:
        """Spark declares no keys or NOT NULL that init reads: evidence only."""
        return Facts()

    def tables(self) -> list[str]:
        where = f" IN {self.database}" if self.database else ""
        return sorted(r[1] for r in self.backend.query(f"SHOW TABLES{where}") if not r[2])

    def close(self) -> None:
        asyncio.run(self.backend.close())


def _lit(text: str) -> str:
    """An SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _spark_relations(reader, args, taken: set[str]) -> list[Rel]:
    out = []
    for t in reader.tables():
        if simple_ident(t):
            out.append(Rel(table_name(t, taken), t, [], origin=(reader.database, t)))
        else:
            progress(
                f"left out table {shown(t)}: not a lower-case identifier; rename it in a view to declare it"
            )
    return out


def _pg_relations(reader, args, taken: set[str]) -> list[Rel]:
    rows = reader.query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
        (args.schema,),
    )
    schema = args.schema if simple_ident(args.schema) else quote_ident(args.schema)
    return [
        Rel(
            table_name(t, taken),
            f"{schema}.{t if simple_ident(t) else quote_ident(t)}",
            [],
            origin=(args.schema, t),
        )
        for (t,) in rows
    ]


def _duck_relations(reader, args, taken: set[str]) -> list[Rel]:
    if args.inputs and Path(args.inputs[0]).suffix.lower() in (".duckdb", ".db"):
        rows = reader.query(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_catalog = current_database() AND table_schema NOT IN "
            "('information_schema', 'pg_catalog') ORDER BY 1, 2"
        )
        out = []
        for schema, t in rows:
            rel = t if simple_ident(t) else quote_ident(t)
            src = rel if schema == "main" else f"{quote_ident(schema)}.{rel}"
            out.append(Rel(table_name(t, taken), src, [], origin=(schema, t)))
        return out
    out = []
    for f in args.inputs:
        p = Path(f)
        fn = next((v for k, v in FILES.items() if p.name.lower().endswith(k)), None)
        if fn is None:
            raise InitError(f"{shown(f)}: not a .duckdb/.db, .parquet, .csv or .tsv file")
        if not _GLOB.search(f) or p.exists():  # a file whose name holds [ or * is that file
            path = str(p.resolve())
            out.append(Rel(table_name(_stem(p.name), taken), _call(fn, path), [], origin=(fn, path)))
            continue
        out += _glob_relations(reader, fn, f, taken)
    return out


_GLOB = re.compile(r"[*?\[]")


def _stem(filename: str) -> str:
    return filename.split(".")[0]


def _call(fn: str, path: str) -> str:
    return f"{fn}({_lit(path)})"


def _glob_relations(reader, fn: str, pattern: str, taken: set[str]) -> list[Rel]:
    """A quoted glob: one table over its files when they share one schema, else one table per
    file stem (a file's schema is DuckDB's DESCRIBE of it alone)."""
    full = pattern if Path(pattern).is_absolute() else str(Path.cwd() / pattern)
    files = sorted(globlib.glob(full))
    if not files:
        raise InitError(f"{shown(pattern)}: no file matches")
    schemas: dict[tuple, list[str]] = {}
    for f in files:
        schemas.setdefault(tuple(reader.describe(_call(fn, f))), []).append(f)
    if len(schemas) == 1:
        stem = Path(pattern).name.split(".")[0].replace("*", "").strip("_-") or Path(full).parent.name
        return [Rel(table_name(stem, taken), _call(fn, full), [], origin=(fn, full))]
    progress(
        f"{shown(pattern)}: its {len(files)} files have {len(schemas)} different schemas: one table per file"
    )
    by_stem: dict[str, list[str]] = {}
    for f in files:
        by_stem.setdefault(_stem(Path(f).name), []).append(f)
    return [
        Rel(table_name(stem, taken), _call(fn, fs[0]), [], origin=(fn, fs[0])) for stem, fs in by_stem.items()
    ]


def read_columns(reader, rel: Rel) -> Rel:
    seen: set[str] = set()
    for col, btype in reader.describe(rel.source):
        cname = reader.column_name(col)
        if not simple_ident(cname) or cname in seen:
            rel.skipped.append(
                f"{shown(col)} ({shown(btype)}): "
                "not a lower-case identifier; rename it in a view to declare it"
            )
            continue
        kind = kind_of(btype)
        if kind is None:
            rel.skipped.append(
                f"{shown(col)} ({shown(btype)}): no dpgate type (int, float, text, bool, date, timestamp)"
            )
            continue
        seen.add(cname)
        rel.cols.append(Col(cname, col, btype, kind))
    return rel
