"""``dpgate init``: a commented config TOML proposed from the data.

    dpgate init data.duckdb                  # every table and view of a DuckDB file
    dpgate init a.parquet 'b/*.parquet' c.csv  # files, read by DuckDB (read_parquet / read_csv)
    dpgate init --dsn postgresql://… [--schema public]   # a Postgres schema
    dpgate init --spark sc://host:15002 [--database db]  # a Spark catalog (Spark Connect)

The file declares each table (``source``: the relation as the backend names it), each column's
type, and proposals the owner must confirm: ``domain`` for low-cardinality columns (groupable),
``lower``/``upper`` for numeric and date columns (SUM/AVG clamp there). Every value read from the
rows is marked READ FROM THE PRIVATE DATA, and the top of the file says why that matters;
``--round`` widens bounds to a public grid, ``--dp-bounds EPS`` draws them ε-DP
(:mod:`.init_bounds`) and the file records the ε spent. Tiers and roles are a skeleton whose SCRAM
verifiers are of fresh random passwords printed once on stderr, so that
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
import re
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import sqlglot

from mechanisms.rng import default_source

from ..backends import BackendError, DuckDBBackend, PostgresBackend
from ..backends.spark import SparkBackend
from ..wire.auth import make_verifier
from . import init_bounds as ib
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


@dataclass
class Rel:
    name: str
    source: str  # SQL relation text, as `source` takes it
    cols: list[Col]
    skipped: list[str] = field(default_factory=list)


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

    def relations(self, args, taken: set[str]) -> list[tuple[str, str]]:
        return _duck_relations(self, args, taken)

    def column_name(self, col: str) -> str:
        """DuckDB matches identifiers case-insensitively: a column is declared lower case."""
        return col.lower()

    def close(self) -> None:
        self.con.close()


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

    def relations(self, args, taken: set[str]) -> list[tuple[str, str]]:
        return _pg_relations(self, args, taken)

    def column_name(self, col: str) -> str:
        return col

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

    def relations(self, args, taken: set[str]) -> list[tuple[str, str]]:
        return _spark_relations(self, args, taken)

    def column_name(self, col: str) -> str:
        return col

    def tables(self) -> list[str]:
        where = f" IN {self.database}" if self.database else ""
        return sorted(r[1] for r in self.backend.query(f"SHOW TABLES{where}") if not r[2])

    def close(self) -> None:
        asyncio.run(self.backend.close())


def _relations(args, reader) -> list[tuple[str, str]]:
    """(proposed name, source) of every relation to declare."""
    return reader.relations(args, set())


def _spark_relations(reader, args, taken: set[str]) -> list[tuple[str, str]]:
    out = []
    for t in reader.tables():
        if _simple(t):
            out.append((_table_name(t, taken), t))
        else:
            _progress(
                f"left out table {shown(t)}: not a lower-case identifier; rename it in a view to declare it"
            )
    return out


def _pg_relations(reader, args, taken: set[str]) -> list[tuple[str, str]]:
    rows = reader.query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
        (args.schema,),
    )
    schema = args.schema if _simple(args.schema) else _q(args.schema)
    return [(_table_name(t, taken), f"{schema}.{t if _simple(t) else _q(t)}") for (t,) in rows]


def _duck_relations(reader, args, taken: set[str]) -> list[tuple[str, str]]:
    if args.inputs and Path(args.inputs[0]).suffix.lower() in (".duckdb", ".db"):
        rows = reader.query(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_catalog = current_database() AND table_schema NOT IN "
            "('information_schema', 'pg_catalog') ORDER BY 1, 2"
        )
        out = []
        for schema, t in rows:
            rel = t if _simple(t) else _q(t)
            out.append((_table_name(t, taken), rel if schema == "main" else f"{_q(schema)}.{rel}"))
        return out
    out = []
    for f in args.inputs:
        p = Path(f)
        fn = next((v for k, v in _FILES.items() if p.name.lower().endswith(k)), None)
        if fn is None:
            raise InitError(f"{shown(f)}: not a .duckdb/.db, .parquet, .csv or .tsv file")
        path = str(p.resolve()) if "*" not in f else str(Path.cwd() / f) if not p.is_absolute() else f
        stem = p.name.split(".")[0].replace("*", "") or p.parent.name
        out.append((_table_name(stem, taken), f"{fn}('{path.replace(chr(39), chr(39) * 2)}')"))
    return out


def _columns(reader, name: str, source: str) -> Rel:
    rel = Rel(name, source, [])
    seen: set[str] = set()
    for col, btype in reader.describe(source):
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


# -- proposals -------------------------------------------------------------------
_PRIVATE = "READ FROM THE PRIVATE DATA"


def _iso(v) -> str:
    return v.isoformat(sep=" ") if isinstance(v, dt.datetime) else str(v)


def _propose(reader, rel: Rel, args, eps_col: float | None, source) -> tuple[int, list]:
    """Fill each column's TOML lines; returns (rows, [DpBound…])."""
    stats = []
    for c in rel.cols:
        q = _q(c.backend)
        stats.append(f"count({q})")
        if c.kind in ("int", "text", "bool"):
            stats.append(f"count(DISTINCT {q})")
        if c.kind in ("int", "float", "date", "timestamp"):
            stats += [f"min({q})", f"max({q})"]
    t0 = time.monotonic()
    row = list(reader.query(f"SELECT count(*), {', '.join(stats)} FROM {rel.source}")[0])
    n_rows, vals = int(row[0]), row[1:]
    big = n_rows >= args.progress_rows
    _progress(f"  {rel.name}: {n_rows:,} rows, {len(rel.cols)} columns ({time.monotonic() - t0:.1f} s)")
    spent = []
    for i, c in enumerate(rel.cols, 1):
        n = int(vals.pop(0))
        nd = int(vals.pop(0)) if c.kind in ("int", "text", "bool") else None
        lo, hi = (
            (vals.pop(0), vals.pop(0)) if c.kind in ("int", "float", "date", "timestamp") else (None, None)
        )
        if big:
            _progress(f"  {rel.name}: column {i}/{len(rel.cols)} {c.name}")
        c.lines.append(f'type = "{c.kind}"')
        if n == 0:
            c.lines.append("# no non-null values: declare bounds / a domain yourself if it needs them")
            continue
        if c.kind == "bool":
            c.lines.append("domain = [false, true]          # the type's values (public)")
        elif nd is not None and nd <= args.max_domain:
            dom = [
                r[0]
                for r in reader.query(
                    f"SELECT DISTINCT {_q(c.backend)} FROM {rel.source} WHERE {_q(c.backend)} IS NOT NULL ORDER BY 1"
                )
            ]
            dom = [int(v) for v in dom] if c.kind == "int" else [str(v) for v in dom]
            c.lines.append(
                f"# domain: the {len(dom)} values that occur, {_PRIVATE}: keep only public codes "
                "(a code book), add the ones that could occur; a GROUP BY releases one noisy cell each"
            )
            c.lines.append(f"domain = [{', '.join(toml_value(v) for v in dom)}]")
        elif c.kind in ("int", "text"):
            c.lines.append(
                f"# not groupable: more than {args.max_domain} distinct values; "
                "declare a public `domain` to GROUP BY it"
            )
        if c.kind in ("int", "float", "date", "timestamp"):
            b = _bounds(reader, rel, c, n, lo, hi, args, eps_col, source)
            if b is not None:
                spent.append(b)
    return n_rows, spent


def _bounds(reader, rel: Rel, c: Col, n: int, lo, hi, args, eps_col, source):
    """lower/upper lines for one column; a DpBound when drawn with DP."""
    timestamp, integral = c.kind == "timestamp", c.kind == "int"
    if eps_col is not None:
        q = _q(c.backend)
        if c.kind in ("date", "timestamp"):
            rows = reader.query(
                f"SELECT date_trunc('month', {q}), count(*) FROM {rel.source} "
                f"WHERE {q} IS NOT NULL GROUP BY 1"
            )
            counts: dict[int, int] = {}
            for m, k in rows:
                counts[ib.month_index(m)] = counts.get(ib.month_index(m), 0) + int(k)
            b = ib.dp_date_bounds(counts, timestamp, eps_col, source)
        else:
            g = ib.grid_125(integral)
            lit = [str(int(v)) if integral else repr(v) for v in g]
            sums = [f"sum(CASE WHEN {q} > {v} THEN 1 ELSE 0 END)" for v in lit]
            sums += [f"sum(CASE WHEN {q} < {v} THEN 1 ELSE 0 END)" for v in lit]
            r = [int(x or 0) for x in reader.query(f"SELECT {', '.join(sums)} FROM {rel.source}")[0]]
            b = ib.dp_numeric_bounds(r[: len(g)], r[len(g) :], integral, eps_col, source)
        c.lines.append(
            f"# lower/upper: ε-DP (ε {eps_col:g} for this column, ε/2 each: AboveThreshold over a "
            f"public grid): w.p. 95% fewer than {b.rows} rows lie beyond each; SUM/AVG clamp them"
        )
        c.lines += [f"lower = {toml_value(b.lower)}", f"upper = {toml_value(b.upper)}"]
        return b
    if c.kind in ("date", "timestamp"):
        if args.round:
            lo_s, hi_s = ib.month_floor(lo, timestamp), ib.month_ceil(hi, timestamp)
            how = "the earliest and latest value rounded out to whole months"
        else:
            lo_s, hi_s, how = _iso(lo), _iso(hi), "the earliest and latest value"
        c.lines.append(
            f"# lower/upper: {how}, {_PRIVATE}: publish a public range instead "
            "(or rerun with --round / --dp-bounds EPS)"
        )
        c.lines += [f"lower = {toml_value(lo_s)}", f"upper = {toml_value(hi_s)}"]
        return None
    lo_v, hi_v = (int(lo), int(hi)) if integral else (float(lo), float(hi))
    if args.round:
        lo_v, hi_v = ib.round_down(lo_v, integral), ib.round_up(hi_v, integral)
        how = "the smallest and largest value rounded out to the 1-2-5 grid"
    else:
        how = "the smallest and largest value"
    c.lines.append(
        f"# lower/upper: {how}, {_PRIVATE}: publish a public range instead "
        "(or rerun with --round / --dp-bounds EPS)"
    )
    c.lines += [f"lower = {toml_value(lo_v)}", f"upper = {toml_value(hi_v)}"]
    return None


# -- the file --------------------------------------------------------------------
_HEADER = """\
# dpgate config written by `dpgate init` ({when}) from {what}.
#
# READ THIS FIRST. Each `domain`, `lower` and `upper` marked READ FROM THE PRIVATE DATA below
# was computed from the rows themselves. Publishing them is itself a disclosure: analysts see
# them (`\\d table`, EXPLAIN, refusal hints), an exact maximum is one person's value, and a domain
# lists values that occur. Before serving, replace each with a public fact (a legal range, a
# code book), or rerun with --round (outward to a public grid) or --dp-bounds EPS (ε-DP bounds).
{dp}#
# Tiers and roles are a skeleton: each role's `scram` verifier is of a random password printed
# once by `dpgate init` on stderr; make your own with `dpgate hash-password`.
# Check it against the backend: dpgate check-config --backend FILE; then: dpgate serve --config FILE
# Every key: dpgate config-reference.
"""


def render(what: str, backend_lines: list[str], rels: list[Rel], roles: dict[str, str], dp_note: str) -> str:
    out = [_HEADER.format(when=dt.date.today().isoformat(), what=what, dp=dp_note)]
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
    out += [
        "[tiers.analysts]",
        "epsilon = 1.0                        # ε charged per released query",
        "budget = 10.0                        # per period",
        'period = "day"',
        "",
        "[tiers.owner]",
        "epsilon = 1.0",
        "budget = 10.0",
        'period = "day"',
        "",
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
    for rel in rels:
        out += [f"[tables.{toml_key(rel.name)}]", f"source = {toml_value(rel.source)}", ""]
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
    if args.dp_bounds is not None and not args.dp_bounds > 0:
        print("dpgate: --dp-bounds takes ε > 0", file=sys.stderr)
        return 2
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
        rels, dp_note = _read(args, reader)
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
    passwords = {r: secrets.token_urlsafe(12) for r in ("analyst", "admin")}
    text = render(what, backend, rels, {r: make_verifier(p) for r, p in passwords.items()}, dp_note)
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
        _progress(f"wrote {shown(str(out))} ({len(rels)} tables)")
    for r, p in passwords.items():
        _progress(f"role {r}: password {p} (shown once; its verifier is in the file)")
    if args.dsn:
        _progress(
            f"serve as a role that can only read these tables (docs/least-privilege.md); as their "
            f"owner run:\n{grant_script(reader.dbname, args.schema, [r.source for r in rels])}"
            f"then set [backend] dsn to postgresql://{READER}@…/{reader.dbname} and "
            "require_least_privilege = true"
        )
    return 0


def _read(args, reader) -> tuple[list[Rel], str]:
    rels = []
    wanted = set(args.tables.split(",")) if args.tables else None
    for name, source in _relations(args, reader):
        if wanted is None or name in wanted:
            rels.append(_columns(reader, name, source))
    if not rels:
        raise InitError("no tables found" + (f" in schema {args.schema}" if args.dsn else ""))
    bounded = sum(c.kind in ("int", "float", "date", "timestamp") for r in rels for c in r.cols)
    eps_col = args.dp_bounds / bounded if args.dp_bounds is not None and bounded else None
    source = default_source()
    spent = []
    for i, rel in enumerate(rels, 1):
        _progress(f"table {i}/{len(rels)} {rel.name} ({shown(rel.source)}) …")
        spent += _propose(reader, rel, args, eps_col, source)[1]
    note = ""
    if eps_col is not None:
        note = (
            f"#\n# --dp-bounds: ε = {eps_col * len(spent):g} SPENT in all on the {len(spent)} columns' bounds "
            f"(ε {eps_col:g} per column, ε/2 per bound; sequential composition). It is the owner's\n"
            "# ε, not charged to any role: count it against the data's total budget. Domains are not "
            "DP: they are still read from the data.\n"
        )
    return rels, note


def add_parser(sub) -> None:
    p = sub.add_parser(
        "init",
        help="propose a commented config TOML from a DuckDB file, Parquet/CSV files or a Postgres schema",
    )
    p.add_argument("inputs", nargs="*", help="a DuckDB file, or Parquet/CSV files (globs allowed)")
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
        "--round",
        action="store_true",
        help="round bounds outward to a public grid (1-2-5 powers of ten; whole months)",
    )
    p.add_argument(
        "--dp-bounds",
        type=float,
        metavar="EPS",
        help="draw bounds ε-DP (exponential mechanism over a public grid), EPS in all",
    )
    p.add_argument(
        "--max-domain",
        type=int,
        default=MAX_DOMAIN,
        help=f"propose a domain for columns with at most this many values (default {MAX_DOMAIN})",
    )
    p.add_argument("--progress-rows", type=int, default=1_000_000, help=argparse.SUPPRESS)
    p.set_defaults(fn=cmd_init)
