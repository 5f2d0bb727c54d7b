"""Per-person scan time on TPC-H: dpgate's bounded scan against the analyst's own query.

    python -m bench.user_level [--scale 3] [--backend duckdb|postgres] [--speed-only]

The speed table of :mod:`bench.user_level`. The customer (``o_custkey``) is the privacy
unit with the error part's declarations (:func:`bench.user_level.dp_config`, ``max_rows_scope
= "total"``, R the 95th percentile of rows per customer, G every cell of the public domain so
that it binds nothing; the year's domain has 8 cells, 1992..1998 and NULL). Each query is timed as the analyst's
own SQL (``raw``) and as dpgate's one bounded scan (``dp``: ``rewriter.build_plan`` /
``to_sql`` with the backend's dialect and a salt bound as the backend binds it), beside the
other plan of the bounded scan (``other``: with or without the heavy units apart,
:attr:`rewriter.dialects.SQLDialect.unit_heavy_apart` — the dialect's choice is the faster one
on its backend) and SmartNoise SQL's own rewrite of the query (its per-customer reservoir
sampling, :meth:`bench.user_level.SmartNoise.scan_sql`, DuckDB only), on the same database:
median of ``pairs`` rounds, the order rotating each round; the ratios are medians of the
paired ratios. Data: ``tpchgen-cli`` at each scale factor, kept under
``/tmp/dpgate-bench-tpch/sf<scale>`` between runs (DuckDB file; copied into a throwaway
PostgreSQL server, ``tests/support/pg.py``, for ``--backend postgres``).

The HEADLINE's goals, at SF 1: per-person COUNT/SUM/AVG by a small key (``orders`` by
``o_orderpriority``) ≤ 3× raw and its ratio at SF 1 no larger than at SF 0.1 (the cost over the
analyst's query does not grow with the rows); the foreign-key path (revenue by year,
``lineitem ⋈ orders``: the unit read through the analyst's own join) ≤ 4× raw; dpgate's scan
no slower than SmartNoise's rewrite on every query that expresses. Each goal is printed with its
measured ratio and PASS or MISS. On DuckDB the file is held read-only, as ``dpgate serve`` holds it
when no role writes, so ``dp`` reads the rows of the customers above the bound from the relation kept
for the table (:func:`rewriter.unit.heavy_rows`) and, a statement without a WHERE, its customers'
(customer, cell) rows with the bound's running sums from a relation made from those rows for the
statement's keys and measures (:func:`rewriter.unit.per_unit_scan`'s ``heavy_cells``); making them,
once per process, and checking the premises is ``kept ms``; ``unkept`` times the scan that finds
them itself (a file a role writes to, Postgres, Spark); beside it, its floor: the per-unit count alone (``GROUP BY o_custkey HAVING COUNT(*) > T``, timed in
the same rounds), which a scan must compute to know which customers it binds when it cannot keep
them — a hash aggregate into one group per customer where the analyst's query has a handful. Q1 over ``lineitem``
alone is printed without a goal: its raw query reads no customer. Computing the bound, the scan
joins every line to its order to find one; with the units kept (both tables frozen and every
line finding one order with a customer, :func:`rewriter.unit.lookup_premise`, checked once as
the service checks it) it reads the heavy customers' lines from the kept relation alone. The
statement with a WHERE (orders since 1995) is printed without a goal: its (customer, cell) rows
depend on the WHERE, so the scan aggregates the kept rows and runs the window itself.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

import rewriter
from bench import tpch
from config.service import Backend
from proxy.backends.duckdb import ENGINE_CONFIG, KEPT_CATALOG, decimal_columns, keep_relation
from proxy.pipeline.central import premise_sql
from rewriter import dialects
from rewriter.params import needs

SPEED_SCALES = (0.1, 1.0)
GOAL_SMALL = 3.0  # per-person COUNT/SUM/AVG by a small key, × raw at SF 1
GOAL_FK = 4.0  # the foreign-key path's query, × raw at SF 1
GOAL_SN = 1.0  # dpgate's bounded scan ≤ this × SmartNoise's rewrite
DATA = Path("/tmp/dpgate-bench-tpch")
SALT = "5eedfacecafe0123"
PG_OPTIONS = "-c work_mem=256MB -c shared_buffers=512MB"


@dataclass(frozen=True)
class Speed:
    """One timed statement: ``goal`` "small" (≤ GOAL_SMALL × raw), "fk" (≤ GOAL_FK × raw) or ""."""

    name: str
    table: str  # the error part's table name, for SmartNoise's rewrite ("" when it has none)
    group: tuple[str, ...]
    aggs: tuple[str, ...]
    goal: str
    source: str = ""  # FROM …, when not ``table``
    where: str = ""  # the statement's WHERE, if any (SmartNoise's rewrite is timed only without)

    def sql(self) -> str:
        cols = ", ".join([*self.group, *self.aggs])
        out = f"SELECT {cols} FROM {self.source or self.table}" + (
            f" WHERE {self.where}" if self.where else ""
        )
        return out + (" GROUP BY " + ", ".join(self.group) if self.group else "")


SPEEDS = (
    Speed("COUNT by o_orderpriority", "orders", ("o_orderpriority",), ("COUNT(*)",), "small"),
    Speed(
        "COUNT, SUM, AVG by o_orderpriority",
        "orders",
        ("o_orderpriority",),
        ("COUNT(*)", "SUM(o_totalprice)", "AVG(o_totalprice)"),
        "small",
    ),
    Speed(
        "COUNT, SUM, AVG by priority, WHERE",
        "orders",
        ("o_orderpriority",),
        ("COUNT(*)", "SUM(o_totalprice)", "AVG(o_totalprice)"),
        "",
        where="o_orderdate >= DATE '1995-01-01'",
    ),
    Speed(
        "Q1 lineitem (unit by FK lookup)",
        "lineitem",
        ("l_returnflag", "l_linestatus"),
        ("SUM(l_quantity)", "AVG(l_extendedprice)", "COUNT(*)"),
        "",
    ),
    Speed(
        "revenue by year, lineitem ⋈ orders",
        "",
        ("EXTRACT(YEAR FROM o_orderdate)",),
        ("SUM(l_extendedprice * (1 - l_discount))",),
        "fk",
        source="lineitem JOIN orders ON l_orderkey = o_orderkey",
    ),
)
YEAR_CELLS = 8  # the year's public domain: 1992..1998 and NULL (o_orderdate is nullable)


def data(scale: float) -> Path:
    """The DuckDB file of TPC-H at ``scale`` (generated once, kept under :data:`DATA`)."""
    d = DATA / f"sf{scale:g}"
    db = d / "tpch.duckdb"
    if not db.exists():
        d.mkdir(parents=True, exist_ok=True)
        part = d / "tpch.duckdb.part"
        part.unlink(missing_ok=True)
        tpch.load(tpch.generate(scale, d / "parquet"), part)
        part.rename(db)
    return db


def config(con, ul) -> object:
    """The error part's declarations, read from this scale's data, and ``o_orderdate``."""
    bounds = {
        t: tpch.bounds(con, ul.UNIT_ROWS[t], ul.UNIT, ul.GROUPS[t], total=ul.domain_cells(t))
        for t in ul.COLUMNS
    }
    g, r = bounds["lineitem"]
    bounds["lineitem"] = (max(g, YEAR_CELLS), r)
    cols = copy.deepcopy(ul.COLUMNS)
    cols["orders"]["o_orderdate"] = {"type": "date", "lower": "1992-01-01", "upper": "1998-12-31"}
    return ul.dp_config(bounds, "total", columns=cols)


def other_plan(dialect: str) -> dialects.SQLDialect:
    """The dialect with the other bounded-scan plan (the candidate it did not choose)."""
    d = copy.copy(dialects.get(dialect))
    d.unit_heavy_apart = not d.unit_heavy_apart
    return d


def keeps(con, plan) -> dict:
    """What the service holds of ``plan``'s source on the DuckDB file ``con`` holds read-only, as
    :func:`rewriter.to_sql`'s keywords (:func:`proxy.pipeline.central.held`): the heavy units kept
    (a unit looked up through a reference only where its premise holds,
    :func:`rewriter.unit.lookup_premise`) and their rows where they are few enough
    (:func:`rewriter.unit.rows_premise`), each premise asked once, and then a total-mode
    statement's heavy (unit, cell) rows with their running sums; the table's DECIMAL columns
    (:func:`proxy.backends.duckdb.decimal_columns`)."""
    frozen = (
        not rewriter.unit.lookup_splits(plan)
        or con.execute(premise_sql(plan, "duckdb")).fetchone()[0] is True
    )
    bound = Backend().kept_rows  # the default
    rows = frozen and con.execute(premise_sql(plan, "duckdb", rows_at_most=bound)).fetchone()[0] is True
    decimals = decimal_columns(lambda sql, params: con.execute(sql, params).fetchall(), plan.source)
    return {"frozen": frozen, "rows": rows, "cells": rows, "decimals": decimals}


def served_scan(con, plan, salt: str):
    """dpgate's scan of ``plan`` as the service runs it on the DuckDB file ``con`` holds read-only:
    the heavy units read from the relations kept for it (:func:`keeps`), made on ``con`` first if
    not yet (as the backend makes them once per process; not part of a statement's time)."""
    sql = rewriter.to_sql(plan, "duckdb", salt, **keeps(con, plan))
    for name, select in needs(sql):
        keep(con, name, select)
    return sql


def keep(con, name: str, select: str) -> None:
    """Make the relation ``name`` a scan reads as the backend keeps it (its own compressed in-memory
    catalog, :func:`proxy.backends.duckdb.keep_relation`), read through a view of that name; once."""
    if con.execute("SELECT COUNT(*) FROM duckdb_views() WHERE view_name = ?", [name]).fetchone()[0]:
        return
    catalog = f"{KEPT_CATALOG}_{con.execute('SELECT COUNT(*) FROM duckdb_databases()').fetchone()[0]}"
    con.execute(f'CREATE TEMP VIEW "{name}" AS SELECT * FROM {keep_relation(con, catalog, name, select)}')


class Duck:
    """The DuckDB file opened read-only, as ``dpgate serve`` holds it once it serves: the relations a
    scan needs (the heavy units' rows, :func:`rewriter.params.needs`) are made on first use, as the
    backend makes them once per process, and the time that took is kept in ``made_ms``."""

    name = "duckdb"

    def __init__(self, db: Path) -> None:
        self.con = duckdb.connect(str(db), read_only=True, config=ENGINE_CONFIG)
        self.made_ms: dict[str, float] = {}
        self.premise_ms = 0.0

    def keeps(self, plan) -> dict:
        """:func:`keeps`, the premises' time kept in ``premise_ms`` (added to ``kept ms``)."""
        t = time.perf_counter()
        out = keeps(self.con, plan)
        self.premise_ms = 1000 * (time.perf_counter() - t)
        return out

    def run(self, sql: str) -> None:
        for name, select in needs(sql):
            if name not in self.made_ms:
                t = time.perf_counter()
                keep(self.con, name, select)
                self.made_ms[name] = 1000 * (time.perf_counter() - t)
        named = getattr(sql, "params", None)
        (self.con.execute(sql, named) if named else self.con.execute(str(sql))).fetchall()

    def close(self) -> None:
        self.con.close()


class Postgres:
    """A throwaway PostgreSQL server (``tests/support/pg.py``) holding ``orders`` and
    ``lineitem`` copied from the DuckDB file (DECIMAL as numeric, as the tests load them)."""

    name = "postgres"

    def __init__(self, db: Path) -> None:
        import psycopg

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from support.pg import TempPostgres  # deferred: the tests' support, only for this backend

        self.pg = TempPostgres(PG_OPTIONS).start()
        duck = duckdb.connect(str(db), read_only=True)
        self.con = psycopg.connect(self.pg.dsn, autocommit=True)
        types = {"BIGINT": "bigint", "INTEGER": "integer", "VARCHAR": "text", "DATE": "date"}
        for t in ("orders", "lineitem"):
            cols = duck.execute(f"DESCRIBE {t}").fetchall()
            ddl = ", ".join(
                f"{n} {'numeric(15,2)' if typ.startswith('DECIMAL') else types[typ]}" for n, typ, *_ in cols
            )
            self.con.execute(f"CREATE TABLE {t} ({ddl})")
            csv = db.parent / f"{t}.csv"
            if not csv.exists():
                duck.execute(f"COPY {t} TO '{csv}' (FORMAT csv, HEADER false)")
            with self.con.cursor().copy(f"COPY {t} FROM STDIN (FORMAT csv)") as cp, open(csv, "rb") as f:
                while chunk := f.read(1 << 20):
                    cp.write(chunk)
            self.con.execute(f"ANALYZE {t}")
        duck.close()

    def run(self, sql: str) -> None:
        named = getattr(sql, "params", None)
        for k, v in (
            named or {}
        ).items():  # the salt: a session setting, as the backend's startup packet sets it
            self.con.execute("SELECT set_config(%s, %s, false)", (k, v))
        self.con.execute(str(sql)).fetchall()

    def close(self) -> None:
        self.con.close()
        self.pg.stop()


class Spark:
    """A Spark Connect session with ``orders`` and ``lineitem`` as temporary views over the
    scale's Parquet files (the salt bound as ``spark.sql(text, args=…)``, as the backend does)."""

    name = "spark"

    def __init__(self, session, parquet: Path) -> None:
        self.s = session
        for t in ("orders", "lineitem"):
            self.s.read.parquet(str(parquet / f"{t}.parquet")).createOrReplaceTempView(t)

    def run(self, sql: str) -> None:
        named = getattr(sql, "params", None)
        self.s.sql(str(sql), args=named or None).collect()

    def close(self) -> None:
        pass


def paired(run: Callable[[str], None], sqls: dict[str, str], pairs: int) -> dict[str, float]:
    """Median ms of each statement over ``pairs`` rounds (order rotating; one warm-up each)
    and ``<name>/raw`` (and ``dp/sn``): medians of the paired ratios."""

    def once(sql: str) -> float:
        t = time.perf_counter()
        run(sql)
        return time.perf_counter() - t

    for sql in sqls.values():
        once(sql)
    got: dict[str, list[float]] = {k: [] for k in sqls}
    names = list(sqls)
    for i in range(pairs):
        for k in names[i % len(names) :] + names[: i % len(names)]:
            got[k].append(once(sqls[k]))
    out = {k: 1000 * statistics.median(v) for k, v in got.items()}
    for k in names:
        if k != "raw":
            out[k + "/raw"] = statistics.median(a / b for a, b in zip(got[k], got["raw"]))
    if "sn" in got:
        out["dp/sn"] = statistics.median(a / b for a, b in zip(got["dp"], got["sn"]))
    return out


def floor_sql(s: Speed, plan) -> str:
    """The per-unit count alone: the units with more than T rows (``GROUP BY unit HAVING
    COUNT(*) > T``, :func:`rewriter.unit.heavy_threshold`) — the one aggregate of every row by
    the unit that any exact bound needs, to know which units it binds."""
    u = plan.unit.column
    t = rewriter.unit.heavy_threshold(plan)
    return f"SELECT {u}, COUNT(*) FROM {s.table} WHERE {u} IS NOT NULL GROUP BY {u} HAVING COUNT(*) > {t}"


def measure(scale: float, backend: str, pairs: int, ul, engine=None) -> list[tuple[Speed, dict]]:
    """Per speed query, :func:`paired`'s figures at ``scale`` on ``backend`` (``engine``: one
    already open, e.g. :class:`Spark`; else DuckDB or a throwaway PostgreSQL server); a
    small-key query also times :func:`floor_sql` (``floor``)."""
    db = data(scale)
    con = duckdb.connect(str(db), read_only=True)
    cfg = config(con, ul)
    sn = None
    if backend == "duckdb":
        try:
            sn = ul.SmartNoise(con, rewrite_only=True)
        except ImportError:
            sn = None
    sn_sqls = {}
    for s in SPEEDS:
        if sn is not None and s.table and not s.where:
            q = ul.Query(s.name, s.table, s.group, s.aggs)
            plan = rewriter.build_plan(rewriter.parse(s.sql()), cfg)
            sn_sqls[s.name] = sn.scan_sql(q, rewriter.unit.factor(plan))
    con.close()
    eng = engine or (Duck(db) if backend == "duckdb" else Postgres(db))
    duck = isinstance(eng, Duck)  # a file held read-only: no writer while it is open (Backend.frozen)
    out = []
    try:
        for s in SPEEDS:
            plan = rewriter.build_plan(rewriter.parse(s.sql()), cfg)
            kept = eng.keeps(plan) if duck else {}
            sqls = {
                "raw": s.sql(),
                "dp": rewriter.to_sql(plan, backend, SALT, **kept),
                "other": rewriter.to_sql(plan, other_plan(backend), SALT),
            }
            if needs(sqls["dp"]):  # the heavy units computed by the statement itself
                sqls["unkept"] = rewriter.to_sql(plan, backend, SALT)
            if s.goal == "small":
                sqls["floor"] = floor_sql(s, plan)
            if sn_sqls.get(s.name):
                sqls["sn"] = sn_sqls[s.name]
            if sqls["other"] == sqls.get(
                "unkept", sqls["dp"]
            ):  # one plan only (a join, COUNT(DISTINCT unit))
                del sqls["other"]
            t = paired(eng.run, sqls, pairs)
            if needs(sqls["dp"]):
                made = getattr(eng, "made_ms", {})
                t["kept"] = sum(made.get(name, float("nan")) for name, _ in needs(sqls["dp"]))
                t["kept"] += eng.premise_ms
            out.append((s, t))
    finally:
        eng.close()
    return out


def _verdict(ok: bool | None) -> str:
    return "PASS" if ok else "MISS" if ok is False else "not measured"


def report(
    results: dict[float, list[tuple[Speed, dict]]], backend: str, pairs: int, headline: bool = True
) -> bool:
    """Print the speed table and its HEADLINE (``headline`` False: the same line, not named
    HEADLINE, for a bench whose own HEADLINE closes its output): each goal with its measured
    ratio and PASS or MISS, and beside the small-key goal its floor (:func:`floor_sql` × raw);
    True if every goal is met."""
    lead = "HEADLINE: per-person speed" if headline else "Per-person speed"
    d = dialects.get(backend)
    chosen = "heavy units apart" if d.unit_heavy_apart else "one pass per (unit, cell)"
    print(f"\nPer-person scan time on {backend} (TPC-H; the customer is the unit; dialect's plan: {chosen})")
    head = (
        f"{'query':36} {'SF':>4} | {'raw ms':>8} {'dp ms':>8} {'dp/raw':>7} | {'kept ms':>7} | {'unkept':>7} "
        f"{'floor':>7} | {'other ms':>8} {'oth/raw':>7} | {'SN ms':>8} {'dp/SN':>6}"
    )
    print(head)
    print("-" * len(head))
    for scale, rows in sorted(results.items()):
        for s, t in rows:
            other = f"{t['other']:8.1f} {t['other/raw']:6.2f}×" if "other" in t else f"{'-':>8} {'-':>7}"
            sn = f"{t['sn']:8.1f} {t['dp/sn']:5.2f}×" if "sn" in t else f"{'-':>8} {'-':>6}"
            floor = f"{t['floor/raw']:6.2f}×" if "floor" in t else f"{'-':>7}"
            kept = f"{t['kept']:7.1f}" if "kept" in t else f"{'-':>7}"
            unkept = f"{t['unkept/raw']:6.2f}×" if "unkept" in t else f"{'-':>7}"
            print(
                f"{s.name[:36]:36} {scale:>4g} | {t['raw']:8.1f} {t['dp']:8.1f} {t['dp/raw']:6.2f}× | {kept} | "
                f"{unkept} {floor} | {other} | {sn}"
            )
    print(
        f"Median of {pairs} rounds, order rotating; ratios: medians of the paired ratios. raw = the analyst's SQL;\n"
        "dp = dpgate's bounded scan (the dialect's plan; on DuckDB, the file held read-only as serve holds it, the\n"
        "heavy customers' rows read from the relation kept for the table: rewriter.unit.heavy_rows; for Q1 their\n"
        "lines; and their (customer, cell) rows with running sums from one kept for the statement's keys and\n"
        "measures: per_unit_scan's heavy_cells); kept ms = making those relations, once per process, and checking\n"
        "the premises once (not in dp ms);\n"
        "unkept = the scan that computes the heavy\n"
        "units itself (a file a role writes to, Postgres, Spark) × raw; floor = that computation alone (SELECT\n"
        "unit, COUNT(*) … GROUP BY unit HAVING COUNT(*) > T) × raw: the least a scan that computes them reads;\n"
        "other = the other plan (heavy units apart <-> one aggregation per (unit, cell) of every unit; '-': one\n"
        "plan, the source is a join); SN = SmartNoise's own rewrite (DuckDB). Bounds: max_rows_scope = total,\n"
        "R = 95th percentile of rows per customer, G = every cell."
    )
    one = results.get(1.0)
    tenth = results.get(0.1)
    if not one:
        print(f"{lead} on {backend}: no SF 1 run — MISS")
        return False

    def worst(rows: list[tuple[Speed, dict]], goal: str, key: str = "dp/raw") -> float:
        return max((t[key] for s, t in rows if s.goal == goal and key in t), default=float("nan"))

    small, fk = worst(one, "small"), worst(one, "fk")
    floor = worst(one, "small", "floor/raw")
    unkept = worst(one, "small", "unkept/raw")
    small_ok = small <= GOAL_SMALL
    fk_ok = fk <= GOAL_FK
    grow_ok = small <= worst(tenth, "small") if tenth else None
    vs_sn = [t["dp/sn"] for rows in results.values() for _, t in rows if "dp/sn" in t]
    sn_ok = all(r <= GOAL_SN for r in vs_sn) if vs_sn else None
    grow = (
        f"{small:.2f}× at SF 1 vs {worst(tenth, 'small'):.2f}× at SF 0.1 (floor {floor:.2f}× vs "
        f"{worst(tenth, 'small', 'floor/raw'):.2f}×)"
        if tenth
        else "no SF 0.1 run"
    )
    sn_text = f"≤ {max(vs_sn):.2f}× over {len(vs_sn)} timings" if vs_sn else "not timed"
    ok = small_ok and fk_ok and grow_ok is not False and sn_ok is not False
    print(
        f"{lead} on {backend}: "
        f"[1] small key at SF 1 ≤ {GOAL_SMALL:g}× raw: {_verdict(small_ok)} ({small:.2f}×"
        + (f"; the heavy units computed by the scan {unkept:.2f}×" if unkept == unkept else "")
        + f"; the per-unit count alone {floor:.2f}×); "
        f"[2] SF 1 ratio ≤ SF 0.1's: {_verdict(grow_ok)} ({grow}); "
        f"[3] FK path ≤ {GOAL_FK:g}× raw: {_verdict(fk_ok)} ({fk:.2f}×); "
        f"[4] bounded scan ≤ {GOAL_SN:g}× SmartNoise's rewrite: {_verdict(sn_ok)} ({sn_text}) "
        f"— {'PASS' if ok else 'MISS'}"
    )
    return ok


def run(scales: tuple[float, ...], backend: str, pairs: int, ul) -> bool:
    results = {s: measure(s, backend, pairs, ul) for s in scales}
    return report(results, backend, pairs)
