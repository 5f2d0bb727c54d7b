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
import datetime as dt
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from mechanisms.rng import default_source

from ..wire.auth import make_verifier
from . import init_bounds as ib
from . import init_links as il
from .init_readers import Col, DuckReader, Facts, PgReader, Rel, SparkReader, quote_ident, read_columns
from .init_text import InitError, progress, shown, toml_key, toml_quote, toml_value
from .privileges import READER, grant_script

__all__ = ["add_parser", "cmd_init"]

MAX_DOMAIN = 50  # default: at most this many distinct values -> a proposed domain
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
        q = quote_ident(c.backend)
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
    progress(f"  {rel.name}: {rel.rows:,} rows, {len(rel.cols)} columns ({time.monotonic() - t0:.1f} s)")
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
        ca, cb = quote_ident(a.col(column).backend), quote_ident(b.col(keys[target]).backend)
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
            qa, qb = quote_ident(a.backend), quote_ident(b.backend)
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
        return f"{rel.source} t0", f"t0.{quote_ident(rel.col(links.keys[rel.name]).backend)}"
    frm = f"{rel.source} t0"
    for i, r in enumerate(path[:-1]):
        src, tgt = by[r.table], by[r.target]
        frm += (
            f" JOIN {tgt.source} t{i + 1} ON t{i}.{quote_ident(src.col(r.column).backend)} = "
            f"t{i + 1}.{quote_ident(tgt.col(links.keys[r.target]).backend)}"
        )
    last = path[-1]
    return frm, f"t{len(path) - 1}.{quote_ident(by[last.table].col(last.column).backend)}"


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
            progress(f"  {rel.name}: column {i}/{len(rel.cols)} {c.name}")
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
    q = quote_ident(c.backend)
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
    q = quote_ident(tk.backend)
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
        v = f"t0.{quote_ident(c.backend)}"
        ext = f"SELECT {u} AS u, max({v}) AS hi, min({v}) AS lo FROM {frm} WHERE {v} IS NOT NULL AND {u} IS NOT NULL GROUP BY {u}"
        who, per = "units", f"per {unit} unit"
    else:
        v = quote_ident(c.backend)
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
            PgReader(args.dsn)
            if args.dsn
            else SparkReader(args.spark, args.database)
            if args.spark
            else DuckReader(str(Path(args.inputs[0]).resolve()) if duck_file else None)
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
        progress(f"wrote {shown(str(out))} ({len(rels)} tables)")
    if links.unit is None:
        progress(" ".join(_advice(links)))
    for r, p in passwords.items():
        progress(f"role {r}: password {p} (shown once; its verifier is in the file)")
    if isinstance(reader, PgReader):  # --dsn
        progress(
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
        progress(f"table {i}/{len(rels)} {rel.name} ({shown(rel.source)}) …")
        read_columns(reader, rel)
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
