"""``dpgate init``: a commented config TOML proposed from the data.

    dpgate init --privacy-unit customer data.duckdb   # every table and view of a DuckDB file
    dpgate init a.parquet 'b/*.parquet' c.csv  # files, read by DuckDB (read_parquet / read_csv)
    dpgate init --dsn postgresql://… [--schema public]   # a Postgres schema
    dpgate init --spark sc://host:15002 [--database db]  # a Spark catalog (Spark Connect)

The file declares each table (``source``: the relation as the backend names it), each column's
type, and proposals the owner must confirm. One scan per table reads its statistics; then
:mod:`.init_links` finds each table's key and references (declared by the schema, else guessed
from names and values) and, with ``--privacy-unit``, which tables reach the unit (they protect
each person with all their rows) and which are public lookup tables. Per column: ``nullable =
false`` where the schema says NOT NULL, a ``domain`` for low-cardinality columns that are not
free text, and ``lower``/``upper`` for numeric and date columns drawn ε-DP per unit
(:mod:`.init_bounds`; ``--exact-bounds`` for the exact extremes, ``--round`` to widen them),
and per table reaching the unit ``max_rows_per_unit`` drawn likewise; the file states each ε and
their sum. Every value read from the rows and not drawn with DP is marked READ FROM THE PRIVATE
DATA, and the top of the file says why that matters. Tiers get a day's budget; roles are a
skeleton whose SCRAM verifiers are of fresh random passwords printed once on stderr, so that
``dpgate serve --config FILE`` runs the result as is. Progress goes to stderr.

Names and values come from whoever wrote the data. Each one that reaches the file (table,
column and type names, domain values, bounds, paths, the DSN) is written by :func:`toml_quote`
— as a value, a key or inside a comment — so none can end its string or its line and add a key,
a table or a role. A column whose name is not a lower-case identifier is left out with its
quoted name and the reason; a table is declared under a sanitized name whose ``source`` quotes
the backend's name as an SQL identifier.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import glob as globlib
import re
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlglot

from mechanisms.rng import default_source

from ..backends import BackendError, DuckDBBackend, PostgresBackend
from ..backends.spark import SparkBackend
from ..wire.auth import make_verifier
from . import init_bounds as ib
from . import init_links as il
from .privileges import READER, grant_script
from .schema_check import kind_of

__all__ = ["add_parser", "cmd_init"]

MAX_DOMAIN = 50  # default: at most this many distinct values -> a proposed domain
_FILES = {".parquet": "read_parquet", ".csv": "read_csv", ".tsv": "read_csv", ".gz": "read_csv"}


class InitError(Exception):
    """A one-line reason init cannot read its input."""


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


def _q(ident: str) -> str:
    return '"' + ident.replace('"', '""') + '"'


def _simple(ident: str) -> bool:
    return ident.isidentifier() and ident == ident.lower() and ident.isascii()


# -- TOML text: every name and value read from the data or the command line reaches the file
# through toml_quote (as a value, a key, or inside a comment) ---------------------------------
_BARE = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def toml_quote(s: str) -> str:
    """``s`` as a TOML basic string on one printable line (TOML 1.0, "String"): ``"`` and ``\\``
    escaped, and every character that ``str.isprintable`` rejects — C0/C1 controls with NUL, DEL
    and NEL (U+0085), the line and paragraph separators U+2028/U+2029, format characters such as
    bidi overrides, unassigned code points — written as an escape. So a name or value read from
    the data can neither end the string nor start a line, in TOML or in any editor or tool that
    breaks lines at Unicode separators. A lone surrogate is no Unicode scalar value, which TOML
    cannot spell: InitError."""
    out = ['"']
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            raise InitError(
                f"a name or value read from the data holds a lone surrogate (U+{ord(ch):04X}), "
                "which TOML cannot spell"
            )
        else:
            out.append(f"\\u{ord(ch):04X}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08X}")
    return "".join(out) + '"'


def toml_key(name: str) -> str:
    """A TOML key: bare when it is one (``A-Za-z0-9_-``), else quoted by :func:`toml_quote`."""
    return name if _BARE.fullmatch(name) else toml_quote(name)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    return toml_quote(str(v))


def shown(text: str) -> str:
    """A name or type inside a comment or a progress line: as is when it is a bare word, else
    quoted by :func:`toml_quote` (so it cannot end the comment's line)."""
    return toml_key(text)


def _table_name(raw: str, taken: set[str]) -> str:
    name = re.sub(r"\W", "_", raw.lower(), flags=re.ASCII).strip("_") or "t"
    name = "t_" + name if name[0].isdigit() else name
    out, i = name, 2
    while out in taken:
        out, i = f"{name}_{i}", i + 1
    taken.add(out)
    return out


def _progress(msg: str) -> None:
    print(f"dpgate init: {msg}", file=sys.stderr, flush=True)


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


class _Duck:
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


class _Pg:
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


class _Spark:
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
        if _simple(t):
            out.append(Rel(_table_name(t, taken), t, [], origin=(reader.database, t)))
        else:
            _progress(
                f"left out table {shown(t)}: not a lower-case identifier; rename it in a view to declare it"
            )
    return out


def _pg_relations(reader, args, taken: set[str]) -> list[Rel]:
    rows = reader.query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
        (args.schema,),
    )
    schema = args.schema if _simple(args.schema) else _q(args.schema)
    return [
        Rel(_table_name(t, taken), f"{schema}.{t if _simple(t) else _q(t)}", [], origin=(args.schema, t))
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
            rel = t if _simple(t) else _q(t)
            src = rel if schema == "main" else f"{_q(schema)}.{rel}"
            out.append(Rel(_table_name(t, taken), src, [], origin=(schema, t)))
        return out
    out = []
    for f in args.inputs:
        p = Path(f)
        fn = next((v for k, v in _FILES.items() if p.name.lower().endswith(k)), None)
        if fn is None:
            raise InitError(f"{shown(f)}: not a .duckdb/.db, .parquet, .csv or .tsv file")
        if not _GLOB.search(f) or p.exists():  # a file whose name holds [ or * is that file
            path = str(p.resolve())
            out.append(Rel(_table_name(_stem(p.name), taken), _call(fn, path), [], origin=(fn, path)))
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
        return [Rel(_table_name(stem, taken), _call(fn, full), [], origin=(fn, full))]
    _progress(
        f"{shown(pattern)}: its {len(files)} files have {len(schemas)} different schemas: one table per file"
    )
    by_stem: dict[str, list[str]] = {}
    for f in files:
        by_stem.setdefault(_stem(Path(f).name), []).append(f)
    return [
        Rel(_table_name(stem, taken), _call(fn, fs[0]), [], origin=(fn, fs[0]))
        for stem, fs in by_stem.items()
    ]


def _columns(reader, rel: Rel) -> Rel:
    seen: set[str] = set()
    for col, btype in reader.describe(rel.source):
        cname = reader.column_name(col)
        if not _simple(cname) or cname in seen:
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


# -- statistics: one scan per table --------------------------------------------------
_PRIVATE = "READ FROM THE PRIVATE DATA"
_NUMERIC = ("int", "float")
_BOUNDED = ("int", "float", "date", "timestamp")
FREE_TEXT_AVG = 30  # a text column whose values average this many characters is free text


def _stats(reader, rel: Rel, args) -> None:
    """Row count and, per column, non-null and distinct counts, extremes and text lengths: one
    scan. Extremes and lengths are private: they decide what init proposes (never written as
    bounds unless --exact-bounds; lengths only say "free text")."""
    stats = []
    for c in rel.cols:
        q = _q(c.backend)
        stats.append(f"count({q})")
        if c.kind in ("int", "text", "bool"):
            stats.append(f"count(DISTINCT {q})")
        if c.kind in _BOUNDED:
            stats += [f"min({q})", f"max({q})"]
        if c.kind == "text":
            stats += [f"avg(length({q}))", f"max(length({q}))"]
    t0 = time.monotonic()
    row = list(reader.query(f"SELECT count(*), {', '.join(stats)} FROM {rel.source}")[0])
    rel.rows, vals = int(row[0]), row[1:]
    _progress(f"  {rel.name}: {rel.rows:,} rows, {len(rel.cols)} columns ({time.monotonic() - t0:.1f} s)")
    for c in rel.cols:
        c.n = int(vals.pop(0))
        if c.kind in ("int", "text", "bool"):
            c.distinct = int(vals.pop(0))
        if c.kind in _BOUNDED:
            c.lo, c.hi = vals.pop(0), vals.pop(0)
        if c.kind == "text":
            avg, mx = vals.pop(0), vals.pop(0)
            c.avg_len, c.max_len = (
                (float(avg) if avg is not None else None),
                (int(mx) if mx is not None else None),
            )


def _unique(rel: Rel, c: Col) -> bool:
    return c.kind in ("int", "text") and rel.rows > 0 and c.n == rel.rows and c.distinct == rel.rows


def _free_text(c: Col) -> bool:
    return c.kind == "text" and (c.avg_len or 0) >= FREE_TEXT_AVG


# -- keys, references, the unit --------------------------------------------------------
@dataclass
class Links:
    keys: dict[str, str]  # table -> its one-column key
    key_how: dict[str, str]  # table -> why (declared / a guess)
    refs: list[il.Ref]
    composite: dict[str, tuple[str, ...]] = field(default_factory=dict)  # public tables
    unit: str | None = None  # the unit's table (and the unit's name)
    paths: dict[str, list[il.Ref]] = field(default_factory=dict)  # tables reaching the unit
    public: set[str] = field(default_factory=set)
    left_out: dict[str, str] = field(default_factory=dict)  # table -> why
    suggestion: tuple[str, str] | None = None


def _single_keys(rels: list[Rel], facts: Facts) -> tuple[dict[str, str], dict[str, str]]:
    keys, how = {}, {}
    for rel in rels:
        names = {c.name for c in rel.cols}
        declared = [k[0] for k in facts.keys.get(rel.name, []) if len(k) == 1 and k[0] in names]
        if declared:
            keys[rel.name], how[rel.name] = declared[0], "the schema's PRIMARY KEY / UNIQUE"
            continue
        unique = [c.name for c in rel.cols if _unique(rel, c) and not _free_text(c)]
        named = [c for c in unique if il.key_like(c)]
        if named:
            keys[rel.name] = named[0]
            how[rel.name] = "a guess: its values are all present and distinct, and its name says key"
    return keys, how


def _contained(reader, by: dict[str, Rel], keys: dict[str, str]):
    def ask(table: str, column: str, target: str) -> bool:
        a, b = by[table], by[target]
        ca, cb = _q(a.col(column).backend), _q(b.col(keys[target]).backend)
        if a.col(column).n == 0:
            return False
        (n,) = reader.query(
            f"SELECT count(*) FROM {a.source} a WHERE a.{ca} IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {b.source} b WHERE b.{cb} = a.{ca})"
        )[0]
        return int(n) == 0

    return ask


def _composite_key(reader, rel: Rel) -> tuple[str, ...] | None:
    """Two key-like columns, all present, whose pairs are distinct (partsupp's ps_partkey,
    ps_suppkey): a guess, from the values."""
    cand = [c for c in rel.cols if c.kind in ("int", "text") and c.n == rel.rows and il.key_like(c.name)]
    for i, a in enumerate(cand):
        for b in cand[i + 1 :]:
            qa, qb = _q(a.backend), _q(b.backend)
            (n,) = reader.query(
                f"SELECT count(*) FROM (SELECT {qa}, {qb} FROM {rel.source} GROUP BY {qa}, {qb}) g"
            )[0]
            if int(n) == rel.rows:
                return a.name, b.name
    return None


def _links(reader, rels: list[Rel], facts: Facts, args) -> Links:
    by = {r.name: r for r in rels}
    keys, how = _single_keys(rels, facts)
    unit = None
    if args.privacy_unit:
        t, _, col = args.privacy_unit.partition(".")
        if t not in by:
            raise InitError(f"--privacy-unit {shown(t)}: no such table (tables: {', '.join(by)})")
        rel = by[t]
        if col:
            c = next((x for x in rel.cols if x.name == col), None)
            if c is None or c.kind not in ("int", "text"):
                raise InitError(f"--privacy-unit {shown(t)}.{shown(col)}: not an int or text column of {t}")
            if not (_unique(rel, c) or (col,) in facts.keys.get(t, [])):
                raise InitError(
                    f"--privacy-unit {t}.{col}: {col} is not unique in {t}; the unit's table has one row "
                    "per unit (name the table of the people, e.g. customers.customer_id)"
                )
            keys[t], how[t] = col, "the unit's key (--privacy-unit)"
        elif t not in keys:
            raise InitError(
                f"--privacy-unit {t}: {t} has no column that looks like its key (all present, distinct, "
                f"named …key or …id); name it: --privacy-unit {t}.COLUMN"
            )
        unit = t
    types = {r.name: {c.name: c.kind or "" for c in r.cols} for r in rels}
    refs = []
    for table, col, target, tcol in facts.fks:
        if keys.get(target) == tcol and table in types and col in types[table]:
            refs.append(il.Ref(table, col, target, declared=True))
    if not refs:
        refs = il.guess_refs(types, keys, _contained(reader, by, keys))
    links = Links(keys, how, refs, unit=unit)
    if unit is None:
        links.suggestion = il.suggest_unit({r.name: r.rows for r in rels}, keys, refs, args.max_domain)
        return links
    links.paths = il.paths_to(unit, refs)
    for rel in rels:
        if rel.name in links.paths:
            continue
        names = {c.name for c in rel.cols}
        declared = [k for k in facts.keys.get(rel.name, []) if len(k) > 1 and set(k) <= names]
        if rel.name not in keys and not declared:  # a lookup table's key may have any name (code, sku)
            unique = [c.name for c in rel.cols if _unique(rel, c) and not _free_text(c)]
            if unique:
                keys[rel.name] = unique[0]
                how[rel.name] = "a guess: its values are all present and distinct"
        if rel.name not in keys:
            ck = declared[0] if declared else _composite_key(reader, rel)
            if ck is None:
                links.left_out[rel.name] = (
                    f"it reaches no {unit} (no reference leads there) and has no unique column(s) to be "
                    "a public lookup table: declare its references to reach the unit, or a key"
                )
                continue
            links.composite[rel.name] = ck
            links.key_how[rel.name] = (
                "the schema's PRIMARY KEY / UNIQUE"
                if declared
                else "a guess: these columns' pairs are distinct"
            )
        links.public.add(rel.name)
    links.refs = [r for r in refs if r.table not in links.left_out and r.target not in links.left_out]
    return links


def _unit_from(by: dict[str, Rel], links: Links, rel: Rel) -> tuple[str, str]:
    """(FROM text, unit expression) reading each row of ``rel`` (alias t0) with its unit: the
    key of the unit's table, or the last column on its chain of references."""
    path = links.paths[rel.name]
    if not path:
        return f"{rel.source} t0", f"t0.{_q(rel.col(links.keys[rel.name]).backend)}"
    frm = f"{rel.source} t0"
    for i, r in enumerate(path[:-1]):
        src, tgt = by[r.table], by[r.target]
        frm += (
            f" JOIN {tgt.source} t{i + 1} ON t{i}.{_q(src.col(r.column).backend)} = "
            f"t{i + 1}.{_q(tgt.col(links.keys[r.target]).backend)}"
        )
    last = path[-1]
    return frm, f"t{len(path) - 1}.{_q(by[last.table].col(last.column).backend)}"


# -- proposals -------------------------------------------------------------------
@dataclass
class Spent:
    what: str
    epsilon: float


def _iso(v) -> str:
    return v.isoformat(sep=" ") if isinstance(v, dt.datetime) else str(v)


def _propose(
    reader, rel: Rel, by: dict[str, Rel], links: Links, facts: Facts, args, eps, source
) -> list[Spent]:
    """Fill the table's and each column's TOML lines; returns the ε each DP draw spent."""
    unit = links.unit
    public = rel.name in links.public
    reaching = rel.name in links.paths
    own_refs = {r.column: r for r in links.refs if r.table == rel.name}
    key = links.keys.get(rel.name)
    spent: list[Spent] = []
    big = rel.rows >= args.progress_rows
    _table_lines(rel, links, key, own_refs)
    if reaching and links.paths[rel.name] and args.auto_bounds:
        rel.head += [
            '# max_rows_per_unit, max_groups_per_unit: "auto": chosen by dpgate once per data version, ε-DP,',
            "# from each unit's rows here, charged to the [auto_bounds] budget (docs/configuration.md)",
            'max_rows_scope = "total"',
            'max_rows_per_unit = "auto"',
            'max_groups_per_unit = "auto"',
        ]
    elif reaching and links.paths[rel.name]:
        spent += _contribution(reader, rel, by, links, eps, source)
    not_null = facts.not_null.get(rel.name, set())
    for i, c in enumerate(rel.cols, 1):
        if big:
            _progress(f"  {rel.name}: column {i}/{len(rel.cols)} {c.name}")
        c.lines.append(f'type = "{c.kind}"')
        if c.name in not_null:
            c.lines.append("nullable = false                     # the schema says NOT NULL")
        if c.n == 0:
            c.lines.append("# no non-null values: declare bounds / a domain yourself if it needs them")
            continue
        ref = own_refs.get(c.name)
        is_key = c.name == key or c.name in links.composite.get(rel.name, ())
        if c.kind == "bool":
            c.lines.append("domain = [false, true]          # the type's values (public)")
        elif ref is not None and ref.target in links.public:
            _domain_of_public_key(reader, c, by[ref.target], links, args)
        elif _free_text(c):
            c.lines.append("# free text (long strings): no domain, not groupable")
        elif c.distinct is not None and c.distinct <= args.max_domain:
            _domain(reader, rel, c, public)
        elif c.kind in ("int", "text"):
            c.lines.append(
                f"# not groupable: more than {args.max_domain} distinct values; "
                "declare a public `domain` to GROUP BY it"
            )
        if c.kind not in _BOUNDED:
            continue
        if is_key or ref is not None:
            c.lines.append("# a key: not summed, no bounds")
        elif public:
            _exact_bounds(c, "the smallest and largest value of this public table", args.round)
        elif args.exact_bounds:
            why = "the smallest and largest value" + (
                ", rounded out to the public grid" if args.round else ""
            )
            c.lines.append(f"# lower/upper: {why}, {_PRIVATE}: publish a public range instead")
            _exact_bounds(c, None, args.round)
        elif args.auto_bounds and reaching and c.kind in _NUMERIC:
            c.lines += [
                '# lower/upper: "auto": chosen by dpgate once per data version, ε-DP, from each unit\'s',
                "# smallest and largest value, charged to the [auto_bounds] budget",
                'lower = "auto"',
                'upper = "auto"',
            ]
        else:
            spent += _dp_bounds(reader, rel, c, by, links, eps, source, unit if reaching else None)
    return spent


def _table_lines(rel: Rel, links: Links, key: str | None, own_refs: dict) -> None:
    unit, h = links.unit, rel.head
    if unit is not None and rel.name in links.paths:
        path = links.paths[rel.name]
        if not path:
            h.append(f"# the unit's table: one row per {unit}, its key {key} identifies the {unit}")
        else:
            chain = " → ".join(f"{r.table}.{r.column}" for r in path) + f" → {unit}"
            to_unit = [r for r in own_refs.values() if r.target in links.paths]
            spelling = (
                unit
                if len(to_unit) == 1
                else ".".join([*(r.target for r in path[:-1]), path[-1].column])
                if len(path) > 1
                else path[0].column
            )
            h.append(f"privacy_unit = {toml_value(spelling)}   # its rows belong to a {unit}: {chain}")
    elif rel.name in links.public:
        h.append(
            f"public = true                        # reaches no {unit}: a lookup table every role reads "
            "exactly, with no noise and no charge; CONFIRM it holds no personal data"
        )
    if rel.name in links.composite:
        cols = links.composite[rel.name]
        h.append(f"key = [{', '.join(toml_value(c) for c in cols)}]   # unique: {links.key_how[rel.name]}")
    elif key is not None:
        h.append(f"key = {toml_value(key)}   # unique: {links.key_how[rel.name]}")
    if own_refs:
        for r in own_refs.values():
            how = (
                "the schema's FOREIGN KEY"
                if r.declared
                else f"a GUESS (the names agree and every value is a key of {r.target}): confirm"
            )
            h.append(f"# {r.column} holds {r.target}'s key: {how}")
        inline = ", ".join(f"{toml_key(r.column)} = {toml_value(r.target)}" for r in own_refs.values())
        h.append(f"references = {{ {inline} }}")


def _domain(reader, rel: Rel, c: Col, public: bool) -> None:
    q = _q(c.backend)
    dom = [
        r[0] for r in reader.query(f"SELECT DISTINCT {q} FROM {rel.source} WHERE {q} IS NOT NULL ORDER BY 1")
    ]
    dom = [int(v) for v in dom] if c.kind == "int" else [str(v) for v in dom]
    if public:
        c.lines.append(
            f"# domain: the {len(dom)} values of this public table; a GROUP BY releases one cell each"
        )
    else:
        c.lines.append(
            f"# domain: the {len(dom)} values that occur, {_PRIVATE}: keep only public codes "
            "(a code book), add the ones that could occur; a GROUP BY releases one noisy cell each"
        )
    c.lines.append(f"domain = [{', '.join(toml_value(v) for v in dom)}]")


def _domain_of_public_key(reader, c: Col, target: Rel, links: Links, args) -> None:
    tk = target.col(links.keys[target.name])
    if tk.distinct is None or tk.distinct > args.max_domain:
        c.lines.append(f"# not groupable by itself: group by a column of {target.name} (a lookup join)")
        return
    q = _q(tk.backend)
    dom = [
        r[0]
        for r in reader.query(f"SELECT DISTINCT {q} FROM {target.source} WHERE {q} IS NOT NULL ORDER BY 1")
    ]
    dom = [int(v) for v in dom] if c.kind == "int" else [str(v) for v in dom]
    c.lines.append(f"# domain: the keys of the public table {target.name}")
    c.lines.append(f"domain = [{', '.join(toml_value(v) for v in dom)}]")


def _exact_bounds(c: Col, comment: str | None, rounded: bool) -> None:
    lo, hi = c.lo, c.hi
    if c.kind in ("date", "timestamp"):
        ts = c.kind == "timestamp"
        lo_s, hi_s = (ib.month_floor(lo, ts), ib.month_ceil(hi, ts)) if rounded else (_iso(lo), _iso(hi))
        vals = (toml_value(lo_s), toml_value(hi_s))
    else:
        integral = c.kind == "int"
        lo_v, hi_v = (int(lo), int(hi)) if integral else (float(lo), float(hi))
        if rounded:
            lo_v, hi_v = ib.round_down(lo_v, integral), ib.round_up(hi_v, integral)
        vals = (toml_value(lo_v), toml_value(hi_v))
    if comment:
        c.lines.append(f"# lower/upper: {comment}")
    c.lines += [f"lower = {vals[0]}", f"upper = {vals[1]}"]


def _dp_bounds(
    reader, rel: Rel, c: Col, by, links: Links, eps: float, source, unit: str | None
) -> list[Spent]:
    """ε-DP clamp bounds (:mod:`.init_bounds`): per unit (each unit's largest and smallest
    value) when the table reaches the unit, else per row."""
    if unit is not None:
        frm, u = _unit_from(by, links, rel)
        v = f"t0.{_q(c.backend)}"
        ext = f"SELECT {u} AS u, max({v}) AS hi, min({v}) AS lo FROM {frm} WHERE {v} IS NOT NULL AND {u} IS NOT NULL GROUP BY {u}"
        who, per = "units", f"per {unit} unit"
    else:
        v = _q(c.backend)
        ext = f"SELECT {v} AS hi, {v} AS lo FROM {rel.source} WHERE {v} IS NOT NULL"
        who, per = "rows", "per row"
    if c.kind in ("date", "timestamp"):
        up = dict(reader.query(f"SELECT EXTRACT(year FROM hi), count(*) FROM ({ext}) e GROUP BY 1"))
        low = dict(reader.query(f"SELECT EXTRACT(year FROM lo), count(*) FROM ({ext}) e GROUP BY 1"))
        b = ib.dp_date_bounds(up, low, c.kind == "timestamp", eps, source)
        grid = "whole years"
    else:
        integral = c.kind == "int"
        g = ib.grid_125(integral)
        lit = [str(int(x)) if integral else repr(x) for x in g]
        sums = [f"sum(CASE WHEN hi > {x} THEN 1 ELSE 0 END)" for x in lit]
        sums += [f"sum(CASE WHEN lo < {x} THEN 1 ELSE 0 END)" for x in lit]
        r = [int(x or 0) for x in reader.query(f"SELECT count(*), {', '.join(sums)} FROM ({ext}) e")[0]]
        b = ib.dp_numeric_bounds(r[0], r[1 : len(g) + 1], r[len(g) + 1 :], integral, eps, source)
        grid = "the 1-2-5 grid"
    if b.lower is None or b.lower == b.upper:
        c.lines.append(
            f"# lower/upper: too few {who} for ε {eps:g} to propose bounds (no grid cell passed): "
            "declare a public range to SUM/AVG it"
        )
    else:
        c.lines.append(
            f"# lower/upper: ε-DP (ε {eps:g}, ε/2 each; {per}), on {grid}: the outermost cells "
            f"holding many {who}' largest/smallest values (w.p. 95% each cell beyond holds fewer than "
            f"{b.units}); SUM/AVG clamp values beyond them"
        )
        c.lines += [f"lower = {toml_value(b.lower)}", f"upper = {toml_value(b.upper)}"]
    return [Spent(f"{rel.name}.{c.name} bounds", eps)]


def _contribution(reader, rel: Rel, by, links: Links, eps: float, source) -> list[Spent]:
    """max_rows_per_unit: ε-DP over each unit's row count (:func:`.init_bounds.dp_contribution_bound`)."""
    frm, u = _unit_from(by, links, rel)
    hist = dict(
        reader.query(
            f"SELECT n, count(*) FROM (SELECT {u} AS u, count(*) AS n FROM {frm} WHERE {u} IS NOT NULL "
            f"GROUP BY {u}) e GROUP BY n"
        )
    )
    r = ib.dp_contribution_bound(hist, eps, source)
    unit = links.unit
    if r is None:
        rel.head.append(
            f"# max_rows_per_unit: too few {unit}s for ε {eps:g} to propose one; set it (rows one {unit} "
            "may contribute; more are left out)"
        )
    else:
        t = ib.threshold(eps, len(ib.CONTRIBUTION_GRID))
        q = f"{ib.CONTRIBUTION_QUANTILE:.0%}"
        rel.head += [
            f"# max_rows_per_unit: ε-DP (ε {eps:g}): the {q} quantile of each {unit}'s number of rows here, from a",
            f"# noisy histogram on a public grid (cells of fewer than about {t} {unit}s dropped). A {unit} with",
            "# more rows keeps this many in each answer (chosen by a keyed hash); noise grows with it. `total`: in",
            "# the whole statement, spread over its groups (at most max_groups_per_unit)",
            'max_rows_scope = "total"',
            f"max_rows_per_unit = {r}",
            f"max_groups_per_unit = {min(r, 1000)}",
        ]
    return [Spent(f"{rel.name} max_rows_per_unit", eps)]


# -- the file --------------------------------------------------------------------
_HEADER = """\
# dpgate config written by `dpgate init` ({when}) from {what}.
#
# READ THIS FIRST. Values marked READ FROM THE PRIVATE DATA below were computed from the rows
# themselves: publishing them is itself a disclosure (analysts see them in `\\d table`, EXPLAIN,
# refusal hints; a domain lists values that occur). Replace each with a public fact (a code book,
# a legal range). {bounds}
{unit}{dp}#
# Tiers and roles are a skeleton: each role's `scram` verifier is of a random password printed
# once by `dpgate init` on stderr; make your own with `dpgate hash-password`.
# Check it against the backend: dpgate check-config --backend FILE; then: dpgate serve --config FILE
# Every key: dpgate config-reference.
"""


def render(
    what: str,
    backend_lines: list[str],
    rels: list[Rel],
    roles: dict[str, str],
    dp_note: str,
    links: Links | None = None,
    unit_note: str = "",
    exact: bool = False,
) -> str:
    bounds = (
        "Bounds and contribution limits are drawn with differential privacy (their ε\n# is stated "
        "below and beside each); --exact-bounds writes the exact extremes instead (marked)."
        if not exact
        else "Bounds are the exact extremes (--exact-bounds), marked: an exact maximum is\n# one "
        "person's value; rerun without --exact-bounds for bounds drawn with differential privacy."
    )
    head = _HEADER.format(
        when=dt.date.today().isoformat(), what=what, dp=dp_note, unit=unit_note, bounds=bounds
    )
    out = [head]
    out += [
        "[server]",
        'host = "127.0.0.1"',
        "port = 6432",
        'database = "dpgate"',
        'auth = "scram"',
        'state_dir = "dpgate-state"           # ledger (and a DuckDB file); relative to this file',
        "",
    ]
    out += ["[backend]", *backend_lines, ""]
    tier = [
        "epsilon = 1.0                        # ε charged per released statement (a repeat is free)",
        "budget = 100.0                       # a day of work: about 100 released statements; it is",
        "                                     # also the ε one person's data may meet per day: lower",
        "                                     # it (or epsilon) for a stronger guarantee",
        'period = "day"',
        "delta = 1e-7                         # δ per GROUP BY over keys with no public domain",
        "delta_budget = 1e-5                  # (partition selection); 0 refuses those",
    ]
    out += ["[tiers.analysts]", *tier, "", "[tiers.owner]", *tier, ""]
    out += [
        "[roles.analyst]",
        'tier = "analysts"',
        f"scram = {toml_quote(roles['analyst'])}",
        "",
        "[roles.admin]                        # the data owner: every role's budget and releases",
        'tier = "owner"',
        "admin = true",
        f"scram = {toml_quote(roles['admin'])}",
        "",
    ]
    if links is not None and links.unit is not None:
        u = links.unit
        out += [
            f"[units.{toml_key(u)}]                     # the privacy unit: every answer is ε-DP for each "
            f"{shown(u)} and ALL their rows",
            f"table = {toml_value(u)}",
            f"key = {toml_value(links.keys[u])}",
            "",
        ]
    autos = sum(
        line.endswith('= "auto"')
        for rel in rels
        for line in rel.head + [x for c in rel.cols for x in c.lines]
    )
    if autos:
        out += [
            '[auto_bounds]                        # the owner\'s budget for the bounds written "auto"',
            "epsilon = 0.1                        # ε of each choice (per unit), made once per data version",
            f"budget = {toml_value(round(autos * 0.1, 6))}                       # the {autos} choices of one data version",
            "",
        ]
    for name, why in (links.left_out if links is not None else {}).items():
        out.append(f"# left out: table {shown(name)}: {why}")
    for rel in rels:
        out += [f"[tables.{toml_key(rel.name)}]", f"source = {toml_value(rel.source)}", *rel.head, ""]
        for s in rel.skipped:
            out.append(f"# left out: {s}")
        for c in rel.cols:
            out.append(f"[tables.{toml_key(rel.name)}.columns.{toml_key(c.name)}]        # {shown(c.btype)}")
            out += c.lines + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def cmd_init(args) -> int:
    if sum(map(bool, (args.dsn, args.inputs, args.spark))) != 1:
        print(
            "dpgate: init takes a DuckDB file, Parquet/CSV files, --dsn (a Postgres database) or "
            "--spark (a Spark Connect URL)",
            file=sys.stderr,
        )
        return 2
    for flag, v in (("--dp-bounds", args.dp_bounds), ("--dp-epsilon", args.dp_epsilon)):
        if v is not None and not v > 0:
            print(f"dpgate: {flag} takes ε > 0", file=sys.stderr)
            return 2
    if args.round and not args.exact_bounds and args.dp_bounds is None:
        args.exact_bounds = True  # --round widens the exact extremes
    out = Path(args.output) if args.output and args.output != "-" else None
    if out is not None and out.exists() and not args.force:
        print(f"dpgate: {out} exists (--force to overwrite)", file=sys.stderr)
        return 2
    duck_file = args.inputs and Path(args.inputs[0]).suffix.lower() in (".duckdb", ".db")
    try:
        reader = (
            _Pg(args.dsn)
            if args.dsn
            else _Spark(args.spark, args.database)
            if args.spark
            else _Duck(str(Path(args.inputs[0]).resolve()) if duck_file else None)
        )
    except InitError as e:
        print(f"dpgate: {e}", file=sys.stderr)
        return 1
    try:
        rels, dp_note, links = _read(args, reader)
    except InitError as e:
        print(f"dpgate: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a backend error: one line, no traceback
        print(
            f"dpgate: init: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}",
            file=sys.stderr,
        )
        return 1
    finally:
        reader.close()
    if args.spark:
        what = f"the Spark catalog at {shown(args.spark)}" + (
            f" (database {shown(args.database)})" if args.database else ""
        )
        backend = [f'kind = "{reader.kind}"', f"remote = {toml_value(args.spark)}"] + (
            [f"database = {toml_value(args.database)}"] if args.database else []
        )
    elif args.dsn:
        what = f"the Postgres schema {shown(args.schema)}"
        backend = [
            f'kind = "{reader.kind}"',
            "# the DSN given to init: a password in it is now in this file too",
            "# serve as a read-only role instead: init printed its GRANT script (docs/least-privilege.md)",
            f"dsn = {toml_value(args.dsn)}",
        ]
    elif duck_file:
        what = f"the DuckDB file {shown(str(Path(args.inputs[0]).resolve()))}"
        backend = [f'kind = "{reader.kind}"', f"path = {toml_value(str(Path(args.inputs[0]).resolve()))}"]
    else:
        what = ", ".join(shown(f) for f in args.inputs)
        backend = [
            f'kind = "{reader.kind}"',
            'path = "dpgate.duckdb"               # an empty working file in '
            "the state dir; the tables are read from the files by `source`",
        ]
    unit_note = _unit_note(links)
    passwords = {r: secrets.token_urlsafe(12) for r in ("analyst", "admin")}
    verifiers = {r: make_verifier(p) for r, p in passwords.items()}
    text = render(what, backend, rels, verifiers, dp_note, links, unit_note, args.exact_bounds)
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
        _progress(f"wrote {shown(str(out))} ({len(rels)} tables)")
    if links.unit is None:
        _progress(" ".join(_advice(links)))
    for r, p in passwords.items():
        _progress(f"role {r}: password {p} (shown once; its verifier is in the file)")
    if isinstance(reader, _Pg):  # --dsn
        _progress(
            f"serve as a role that can only read these tables (docs/least-privilege.md); as their "
            f"owner run:\n{grant_script(reader.dbname, args.schema, [r.source for r in rels])}"
            f"then set [backend] dsn to postgresql://{READER}@…/{reader.dbname} and "
            "require_least_privilege = true"
        )
    return 0


def _unit_note(links: Links) -> str:
    """The privacy unit's paragraph of the header (and, without one, the advice init prints)."""
    if links.unit is not None:
        u = shown(links.unit)
        return (
            f"#\n# Privacy unit: {u} (--privacy-unit). {len(links.paths)} table(s) reach it through their\n"
            f"# references: every answer protects each {u} with all their rows. {len(links.public)} reach it\n"
            "# not and are proposed PUBLIC lookup tables: confirm they hold no personal data.\n"
        )
    return "#\n# " + "\n# ".join(_advice(links)) + "\n"


def _advice(links: Links) -> list[str]:
    if links.suggestion is None:
        return [
            "No privacy unit: each ROW is protected on its own, not each person. If a table holds the",
            "people (one row each), rerun with --privacy-unit TABLE[.COLUMN].",
        ]
    t, why = links.suggestion
    return [
        "No privacy unit: each ROW is protected on its own, not each person.",
        f"{shown(t)} looks like the people ({why}):",
        f"rerun with --privacy-unit {shown(t)} to protect each of its rows' people with all their rows.",
    ]


def _read(args, reader) -> tuple[list[Rel], str, Links]:
    wanted = set(args.tables.split(",")) if args.tables else None
    rels = [r for r in reader.relations(args, set()) if wanted is None or r.name in wanted]
    if not rels:
        raise InitError("no tables found" + (f" in schema {args.schema}" if args.dsn else ""))
    for i, rel in enumerate(rels, 1):
        _progress(f"table {i}/{len(rels)} {rel.name} ({shown(rel.source)}) …")
        _columns(reader, rel)
        _stats(reader, rel, args)
    facts = reader.facts(rels)
    links = _links(reader, rels, facts, args)
    rels = [r for r in rels if r.name not in links.left_out]
    by = {r.name: r for r in rels}
    draws = 0
    if not args.exact_bounds:
        for rel in rels:
            if rel.name in links.public:
                continue
            keyish = {links.keys.get(rel.name)} | {r.column for r in links.refs if r.table == rel.name}
            auto = args.auto_bounds and rel.name in links.paths
            drawn = ("date", "timestamp") if auto else _BOUNDED
            draws += sum(c.kind in drawn and c.n > 0 and c.name not in keyish for c in rel.cols)
    if not args.auto_bounds:
        draws += sum(1 for t, p in links.paths.items() if p)
    eps = args.dp_epsilon if args.dp_epsilon is not None else ib.DEFAULT_EPSILON
    if args.dp_bounds is not None and draws:
        eps = args.dp_bounds / draws
    noise = default_source()
    spent: list[Spent] = []
    for rel in rels:
        spent += _propose(reader, rel, by, links, facts, args, eps, noise)
    note = ""
    if spent:
        total = sum(s.epsilon for s in spent)
        note = (
            f"#\n# ε = {total:g} SPENT in all by init on {len(spent)} DP proposals (ε {eps:g} each: a column's "
            "bounds, a table's max_rows_per_unit; sequential composition). It is the owner's ε, not\n"
            "# charged to any role: count it against the data's total budget. Domains are not DP.\n"
        )
    return rels, note, links


def add_parser(sub) -> None:
    p = sub.add_parser(
        "init",
        help="propose a commented config TOML from a DuckDB file, Parquet/CSV files or a Postgres schema",
    )
    p.add_argument("inputs", nargs="*", help="a DuckDB file, or Parquet/CSV files (globs allowed)")
    p.add_argument(
        "--privacy-unit",
        metavar="TABLE[.COLUMN]",
        help="the table of the people (one row each; COLUMN: its key): every table that reaches it "
        "through references protects each of them with all their rows; the others are proposed public",
    )
    p.add_argument("--dsn", help="a Postgres database (its --schema is read)")
    p.add_argument("--schema", default="public", help="Postgres schema (default public)")
    p.add_argument(
        "--spark", metavar="URL", help="a Spark Connect server (sc://host:15002): its tables are read"
    )
    p.add_argument("--database", help="with --spark: the Spark database (default: the current one)")
    p.add_argument("--tables", help="only these tables (comma-separated proposed names)")
    p.add_argument("--output", "-o", help="write the TOML here (default: stdout)")
    p.add_argument("--force", action="store_true", help="overwrite --output")
    p.add_argument(
        "--dp-epsilon",
        type=float,
        metavar="EPS",
        help=f"ε of each DP proposal: a column's bounds, a table's max_rows_per_unit (default {ib.DEFAULT_EPSILON})",
    )
    p.add_argument(
        "--dp-bounds",
        type=float,
        metavar="EPS",
        help="ε in all for the DP proposals, split evenly (instead of --dp-epsilon)",
    )
    p.add_argument(
        "--auto-bounds",
        action="store_true",
        help='with --privacy-unit: write "auto" for the numeric bounds and contribution limits of the '
        "tables that reach the unit (dpgate chooses them, ε-DP, at serve time; dates are drawn by init)",
    )
    p.add_argument(
        "--exact-bounds",
        action="store_true",
        help="write each column's exact smallest and largest value as its bounds (read from the private data)",
    )
    p.add_argument(
        "--round",
        action="store_true",
        help="with exact bounds: round them outward to a public grid (1-2-5 powers of ten; whole months)",
    )
    p.add_argument(
        "--max-domain",
        type=int,
        default=MAX_DOMAIN,
        help=f"propose a domain for columns with at most this many values (default {MAX_DOMAIN})",
    )
    p.add_argument("--progress-rows", type=int, default=1_000_000, help=argparse.SUPPRESS)
    p.set_defaults(fn=cmd_init)
