"""TPC-H as the acceptance suite: the 22 queries as the specification writes them, sent to
dpgate over the wire with the customer as the privacy unit.

    python -m bench.tpch [--quick] [--scale S]

The data owner's path, as a newcomer takes it: ``tpchgen-cli`` writes TPC-H (SF 0.1; --quick
SF 0.01) as parquet into a temporary directory, the tables are loaded into a DuckDB file with
the specification's primary and foreign keys (clause 1.4.2), ``dpgate init`` proposes the
config (with ``--privacy-unit customer`` where the installed ``init`` takes it; otherwise the
bench adds the declarations that option proposes, :func:`propose_units`), only the budget is
raised (:func:`raise_budget`), ``dpgate serve`` serves it, and psycopg sends the 22 queries of
``bench/tpch_queries.py`` as the analyst ``init`` created, with the password it printed.

Per query, one row of ONE table:

* dpgate: answered, or refused with its SQLSTATE and the construct its message names;
* for an answered query, the result shape against the exact answer (the same SQL on raw
  DuckDB, :func:`shape`): the same column names, and its key rows (the columns that are not
  aggregates, :data:`KEYS`) among the exact answer's — a row outside them is a row the SQL
  excludes, a wrong answer; rows the release leaves out (partition selection, noisy LIMIT) are
  counted beside;
* the median relative error of the released values at ε = 1 per customer (|released − exact| /
  |exact| over the value cells with a nonzero exact value, rows matched by key; a key row the
  release leaves out counts 1): the bias of contribution bounding and the noise together;
* the time over the wire against the same SQL on raw DuckDB (median of a few runs);
* what SmartNoise SQL, Qrlew and OpenDP do with the same statement (``bench/tpch_others.py``,
  run in the interpreter that has them: ``DPGATE_BENCH_PYTHON`` or /work/bench-venv; a tool
  that is not installed is a column saying so).

The HEADLINE counts the answered queries against the goal of 14 (of the 16 that customer-level DP
answers in principle, ``tpch_queries.EXPECTED``) and the rows the SQL excludes (goal 0).

The module also keeps the TPC-H data helpers of ``bench/user_level.py``: :data:`TABLES`,
:data:`LINEITEM_UNIT` (lineitem ⋈ orders carrying ``o_custkey``: the bench's own reading of
the raw data, for the bounds' percentiles and for SmartNoise SQL, which has no foreign-key
paths), :func:`generate`, :func:`load`, :func:`percentile` and :func:`bounds`.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
from sqlglot import exp, parse_one

from bench import tpch_keys, tpch_queries

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("customer", "orders", "lineitem")
ALL_TABLES = ("region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem")
GOAL = 14
RAW_RUNS = 3

LINEITEM_UNIT = """(SELECT o.o_custkey, l.l_quantity::DOUBLE AS l_quantity,
       l.l_extendedprice::DOUBLE AS l_extendedprice, l.l_discount::DOUBLE AS l_discount,
       l.l_returnflag, l.l_linestatus, l.l_shipdate
FROM lineitem l JOIN orders o ON l.l_orderkey = o.o_orderkey)"""

# The specification's keys (TPC-H 3.0, clause 1.4.2): each table's primary key and its foreign keys.
PRIMARY = {
    "region": ("r_regionkey",),
    "nation": ("n_nationkey",),
    "part": ("p_partkey",),
    "supplier": ("s_suppkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"),
    "customer": ("c_custkey",),
    "orders": ("o_orderkey",),
    "lineitem": ("l_orderkey", "l_linenumber"),
}
FOREIGN = {
    "nation": {"n_regionkey": "region"},
    "supplier": {"s_nationkey": "nation"},
    "partsupp": {"ps_partkey": "part", "ps_suppkey": "supplier"},
    "customer": {"c_nationkey": "nation"},
    "orders": {"o_custkey": "customer"},
    "lineitem": {"l_orderkey": "orders", "l_partkey": "part", "l_suppkey": "supplier"},
}
UNIT_TABLE = "customer"
PRINCIPLE = {  # tpch_queries.EXPECTED, in the table's words
    "dp": "DP answer",
    "public": "exact (public)",
    "singles_out": "refuse: singles out",
    "other": "beyond customer DP",
}
PUBLIC = ("region", "nation", "part", "supplier", "partsupp")  # tables that do not reach a customer
PUBLIC_SET = frozenset(PUBLIC)

# Each query's key columns (its non-aggregate outputs): the columns a row is matched on.
KEYS: dict[int, tuple[str, ...]] = {
    1: ("l_returnflag", "l_linestatus"),
    2: ("s_acctbal", "s_name", "n_name", "p_partkey", "p_mfgr", "s_address", "s_phone", "s_comment"),
    3: ("l_orderkey", "o_orderdate", "o_shippriority"),
    4: ("o_orderpriority",),
    5: ("n_name",),
    6: (),
    7: ("supp_nation", "cust_nation", "l_year"),
    8: ("o_year",),
    9: ("nation", "o_year"),
    10: ("c_custkey", "c_name", "c_acctbal", "n_name", "c_address", "c_phone", "c_comment"),
    11: ("ps_partkey",),
    12: ("l_shipmode",),
    13: ("c_count",),
    14: (),
    15: ("s_suppkey", "s_name", "s_address", "s_phone"),
    16: ("p_brand", "p_type", "p_size"),
    17: (),
    18: ("c_name", "c_custkey", "o_orderkey", "o_orderdate", "o_totalprice"),
    19: (),
    20: ("s_name", "s_address"),
    21: ("s_name",),
    22: ("cntrycode",),
}


# ------------------------------------------------------------------ data


def tpchgen() -> str | None:
    """The ``tpchgen-cli`` executable (beside this interpreter, or on PATH), or None."""
    here = Path(sys.executable).with_name("tpchgen-cli")
    return str(here) if here.exists() else shutil.which("tpchgen-cli")


def generate(scale: float, out: Path, tables: tuple[str, ...] = TABLES) -> Path:
    """TPC-H ``tables`` at ``scale`` as parquet files under ``out``."""
    exe = tpchgen()
    if exe is None:
        raise FileNotFoundError("tpchgen-cli is not installed (pip install '.[bench]')")
    subprocess.run(
        [exe, "parquet", "-s", str(scale), "-o", str(out), "--tables", ",".join(tables)],
        check=True,
        capture_output=True,
    )
    return out


def load(parquet_dir: Path, db: Path) -> None:
    """The parquet files of :data:`TABLES` into a DuckDB file ``db``."""
    con = duckdb.connect(str(db))
    try:
        for t in TABLES:
            con.execute(f"CREATE TABLE {t} AS SELECT * FROM read_parquet('{parquet_dir / (t + '.parquet')}')")
    finally:
        con.close()


def load_declared(parquet_dir: Path, db: Path) -> None:
    """All eight tables into ``db`` as the specification declares them: NOT NULL columns, the
    primary key and the foreign keys (:data:`PRIMARY`, :data:`FOREIGN`), which ``dpgate init``
    reads (``duckdb_constraints()``)."""
    con = duckdb.connect(str(db))
    try:
        for t in ALL_TABLES:
            src = f"read_parquet('{parquet_dir / (t + '.parquet')}')"
            cols = [
                f"{name} {typ} NOT NULL"
                for name, typ, *_ in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()
            ]
            cols.append(f"PRIMARY KEY ({', '.join(PRIMARY[t])})")
            cols += [
                f"FOREIGN KEY ({c}) REFERENCES {r} ({PRIMARY[r][0]})" for c, r in FOREIGN.get(t, {}).items()
            ]
            con.execute(f"CREATE TABLE {t} ({', '.join(cols)})")
            con.execute(f"INSERT INTO {t} SELECT * FROM {src}")
        con.execute("CHECKPOINT")
    finally:
        con.close()


def percentile(con, sql: str, p: float) -> int:
    """The ``p``-quantile (nearest rank, rounded up) of the single column ``n`` of ``sql``."""
    ((v,),) = con.execute(f"SELECT quantile_disc(n, {p}) FROM ({sql})").fetchall()
    return max(1, int(v))


def bounds(con, source: str, unit: str, group: list[str], p: float = 0.95, total: int = 0) -> tuple[int, int]:
    """(G, R) from the data's per-unit distribution: R = the ``p``-quantile of rows per
    (unit, cell of ``group``), G = the ``p``-quantile of cells per unit (1 without a group).
    ``total`` > 0 (``max_rows_scope = "total"``): R = the ``p``-quantile of rows per unit
    in all, G = ``total``, the number of cells of the group's public domain (binds nothing,
    so the scan has no L0 ranking).
    Read from the raw data by the owner, outside any budget: in a real deployment these
    come from public knowledge of the schema (a bench shortcut, said in its footnote)."""
    keys = ", ".join([unit, *([] if total else group)])
    r = percentile(con, f"SELECT COUNT(*) AS n FROM {source} GROUP BY {keys}", p)
    if not group:
        return 1, r
    cells = ", ".join(group)
    if total:
        return total, r
    g = percentile(con, f"SELECT COUNT(DISTINCT ({cells})) AS n FROM {source} GROUP BY {unit}", p)
    return g, r


# ------------------------------------------------------------------ config


def init_takes_privacy_unit() -> bool:
    """Whether the installed ``dpgate init`` proposes units itself (``--privacy-unit``)."""
    p = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "init", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    return "--privacy-unit" in p.stdout


def run_init(db: Path, out: Path) -> tuple[dict, str, str]:
    """``dpgate init`` on the DuckDB file: (the config it wrote, the analyst's password it
    printed, the command). ``--privacy-unit customer`` where ``init`` takes it (its defaults draw
    every bound ε-DP); otherwise ``--dp-bounds 1`` (never an exact min/max)."""
    cmd = ["init", str(db), "-o", str(out), "--force"]
    cmd += ["--privacy-unit", UNIT_TABLE] if init_takes_privacy_unit() else ["--dp-bounds", "1"]
    p = subprocess.run([sys.executable, "-m", "proxy.cli", *cmd], capture_output=True, text=True, cwd=ROOT)
    if p.returncode:
        raise RuntimeError(f"dpgate {' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    m = re.search(r"role analyst: password (\S+)", p.stderr)
    if m is None:
        raise RuntimeError("dpgate init printed no password for the role analyst:\n" + p.stderr[-2000:])
    shown = ["dpgate", "init", "tpch.duckdb", *(a for a in cmd[2:] if a not in (str(out), "-o", "--force"))]
    return tomllib.loads(out.read_text()), m.group(1), " ".join(shown)


def unit_rows(con) -> dict[str, int]:
    """Rows per customer at the 95th percentile, per private table (orders, lineitem): the
    contribution bound R the bench proposes where ``init`` proposes none — read from the raw data
    by the owner outside any budget (a bench shortcut; DP choices are lane ``auto``'s
    ``"auto"`` bounds)."""
    return {
        "customer": 1,
        "orders": percentile(con, "SELECT COUNT(*) AS n FROM orders GROUP BY o_custkey", 0.95),
        "lineitem": percentile(
            con,
            "SELECT COUNT(*) AS n FROM lineitem JOIN orders ON l_orderkey = o_orderkey GROUP BY o_custkey",
            0.95,
        ),
    }


def propose_units(cfg: dict, rows: dict[str, int]) -> dict:
    """The declarations ``dpgate init --privacy-unit customer`` proposes, added to an ``init``
    config that has none: ``[units.customer]`` (customer by ``c_custkey``); each table's
    ``references`` from the declared foreign keys (orders reaches the customer by ``o_custkey``,
    lineitem through orders by ``l_orderkey``); the dimension tables, which reach no customer,
    public with their keys (partsupp's composite); each private table's contribution bound from
    ``rows`` (rows per customer, in total over a statement). Where the installed config has no
    ``[units]`` section, today's spelling instead: ``privacy_unit`` columns, lineitem's
    ``"orders.o_custkey"``."""
    from config import Config

    tables = cfg["tables"]
    entity = "units" in Config.model_fields
    for t, refs in FOREIGN.items():
        if t in PUBLIC_SET or not entity:
            continue
        tables[t]["references"] = dict(refs)
    if entity:
        cfg["units"] = {UNIT_TABLE: {"table": UNIT_TABLE, "key": PRIMARY[UNIT_TABLE][0]}}
    else:
        tables["lineitem"]["references"] = {"l_orderkey": "orders"}
        for t, unit in {
            "customer": "c_custkey",
            "orders": "o_custkey",
            "lineitem": "orders.o_custkey",
        }.items():
            tables[t]["privacy_unit"] = unit
    for t in ("customer", "orders", "lineitem"):
        spec = tables[t]
        if len(PRIMARY[t]) == 1:
            spec["key"] = PRIMARY[t][0]
        spec["max_rows_per_unit"] = rows[t]
        spec["max_groups_per_unit"] = 1000
        spec["max_rows_scope"] = "total"
    for t in PUBLIC:
        key = PRIMARY[t]
        if len(key) > 1 and not composite_keys():
            continue  # a composite key is not declarable: the table stays private (no unit: refused)
        tables[t]["public"] = True
        tables[t]["key"] = list(key) if len(key) > 1 else key[0]
    return cfg


def composite_keys() -> bool:
    """Whether the config takes a list of columns as a public table's ``key``."""
    from config.models import Table

    try:
        Table.model_validate(
            {"public": True, "key": ["a", "b"], "columns": {"a": {"type": "int"}, "b": {"type": "int"}}}
        )
    except ValueError:
        return False
    return True


def raise_budget(cfg: dict, port: int, state: Path) -> dict:
    """The one edit: every tier's budget raised so 22 queries fit (and the port and state
    directory of this run)."""
    for tier in cfg["tiers"].values():
        tier["budget"] = 1e9
    cfg["server"]["port"] = port
    cfg["server"]["state_dir"] = str(state)
    return cfg


def toml_text(cfg: dict) -> str:
    """A config dict as TOML: scalars, lists and flat dicts (``references``) as values; every
    other nested dict a [section]."""
    lines: list[str] = []

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=False)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(type(v))

    def section(prefix: str, d: dict) -> None:
        if prefix:
            lines.append(f"[{prefix}]")
        nested = {k: v for k, v in d.items() if isinstance(v, dict) and k not in INLINE}
        lines.extend(f"{json.dumps(k)} = {value(v)}" for k, v in d.items() if k not in nested)
        for k, v in nested.items():
            section(f"{prefix}.{json.dumps(k)}" if prefix else json.dumps(k), v)

    section("", cfg)
    return "\n".join(lines) + "\n"


INLINE = ("references",)  # dicts written as inline tables


# ------------------------------------------------------------------ serving


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serve:
    """``dpgate serve --config FILE`` as a subprocess, ready once it prints its listening line."""

    def __init__(self, config: Path, log: Path):
        self.config, self.log = config, log
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Serve:
        out = open(self.log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "proxy.cli", "serve", "--config", str(self.config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        out.close()
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("dpgate serve exited:\n" + self.log.read_text()[-3000:])
            if b"dpgate: listening on" in self.log.read_bytes():
                return self
            time.sleep(0.05)
        raise RuntimeError("dpgate serve did not start:\n" + self.log.read_text()[-3000:])

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# ------------------------------------------------------------------ one query


@dataclass
class Outcome:
    """One query through dpgate: answered (columns, rows, seconds) or refused (SQLSTATE, message)."""

    n: int
    answered: bool = False
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    seconds: float = 0.0
    sqlstate: str = ""
    message: str = ""
    variant: str = ""  # "" (as the specification writes it) or the approved variant sent instead


def send(conn, n: int) -> Outcome:
    """Query ``n``'s statements over the wire, in order; its last statement's answer. Q15: the
    specification's view statements, or — where the view's DDL is refused — its approved variant
    A (the view as a WITH clause, :data:`tpch_queries.Q15_WITH`)."""
    import psycopg

    out = Outcome(n)
    stmts = tpch_queries.statements(n)
    t0 = time.perf_counter()
    try:
        for sql in stmts:
            cur = conn.execute(sql)
            if cur.description:  # the last statement that returns rows
                out.columns = [d.name for d in cur.description]
                out.rows = cur.fetchall()
        out.answered = True
    except psycopg.Error as e:
        out.sqlstate = e.sqlstate or ""
        out.message = (e.diag.message_primary or str(e)).strip()
        if n == 15 and not out.answered:
            first = Outcome(n, sqlstate=out.sqlstate, message=out.message)
            try:
                t0 = time.perf_counter()
                cur = conn.execute(tpch_queries.Q15_WITH)
                out = Outcome(n, True, [d.name for d in cur.description], cur.fetchall(), variant="A (WITH)")
            except psycopg.Error as e2:
                out = first
                out.message += f" — variant A (WITH): {e2.sqlstate} {(e2.diag.message_primary or '').strip()}"
    out.seconds = time.perf_counter() - t0
    return out


def exact(con, n: int) -> tuple[list[str], list[tuple], float]:
    """The exact answer on raw DuckDB: (column names, rows, median seconds of RAW_RUNS runs).
    Q15 runs its approved variant A (the same answer without DDL)."""
    sql = query_sql(n)
    times = []
    for _ in range(RAW_RUNS):
        t0 = time.perf_counter()
        cur = con.execute(sql)
        rows = cur.fetchall()
        times.append(time.perf_counter() - t0)
    return [d[0] for d in cur.description], rows, statistics.median(times)


def norm(v):
    """A value as both sides can compare it: numbers as float, dates as ISO text, text stripped."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float, decimal.Decimal)):
        return float(v)
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    return str(v).strip()


@dataclass
class Shape:
    """An answered query against its exact answer."""

    same_columns: bool
    excluded: list[tuple]  # released key rows the SQL excludes whatever the data (a wrong answer)
    empty: list[tuple]  # released key rows the SQL keeps that the data has no rows for (empty cells)
    missing: int  # exact key rows the release does not hold
    rel_error: float | None  # median relative error over the value cells (None: no nonzero cell)
    ordered: bool | None  # the rows in the SQL's ORDER BY over the released values (None: not checked)


def shape(
    n: int, got_cols: list[str], got_rows: list[tuple], cols: list[str], rows: list[tuple], possible=None
) -> Shape:
    """Compare a release with the exact answer, rows matched on :data:`KEYS`. ``possible``: a
    function given the released key tuples the exact answer does not hold (only when there are
    some), returning those the SQL can produce at all (:mod:`bench.tpch_keys`), or None for
    "cannot be told"."""
    same = [c.lower() for c in got_cols] == [c.lower() for c in cols]
    keys = [c for c in KEYS[n] if c in cols]
    kpos = [cols.index(c) for c in keys]
    vpos = [i for i in range(len(cols)) if i not in kpos]
    gkpos = [[c.lower() for c in got_cols].index(c) for c in keys] if same else kpos

    def key(r, pos):
        return tuple(norm(r[i]) for i in pos)

    truth = {key(r, kpos): r for r in rows}
    got = {key(r, gkpos): r for r in got_rows}
    extra = [k for k in got if k not in truth]
    excluded: list[tuple] = []
    if extra and possible is not None:
        can = possible([tuple(got[k][i] for i in gkpos) for k in extra])
        if can is not None:
            can = {tuple(norm(v) for v in k) for k in can}
            excluded = [k for k in extra if k not in can]
    empty = [k for k in extra if k not in excluded]
    missing = sum(1 for k in truth if k not in got)
    errs = []
    for k, r in truth.items():
        g = got.get(k)
        for i in vpos:
            t = norm(r[i])
            if not isinstance(t, float) or t == 0:
                continue
            v = norm(g[i]) if g is not None and i < len(g) else None
            errs.append(abs(v - t) / abs(t) if isinstance(v, float) else 1.0)
    return Shape(
        same,
        excluded,
        empty,
        missing,
        statistics.median(errs) if errs else None,
        in_order(n, got_cols, got_rows) if same else None,
    )


def in_order(n: int, cols: list[str], rows: list[tuple]) -> bool | None:
    """Whether ``rows`` follow the query's ORDER BY over their own (released) values — ties in
    any order. None when an ORDER BY item is not an output column's name."""
    tree = parse_one(query_sql(n), read="postgres")
    order = tree.args.get("order")
    if order is None:
        return None
    names = [c.lower() for c in cols]
    spec = []
    for o in order.expressions:
        e = o.this
        if not isinstance(e, exp.Column) or e.name.lower() not in names:
            return None
        spec.append((names.index(e.name.lower()), bool(o.args.get("desc"))))
    for a, b in zip(rows, rows[1:]):
        for i, desc in spec:
            x, y = norm(a[i]), norm(b[i])
            if x is None or y is None or x == y:
                continue
            if (x > y) != desc:
                return False
            break
    return True


def query_sql(n: int) -> str:
    """Query ``n``'s SELECT (Q15: its approved variant A, the same rows without DDL)."""
    return tpch_queries.Q15_WITH if n == 15 else tpch_queries.statements(n)[0]


def construct(message: str, width: int = 70) -> str:
    """The construct a refusal names: its message's first sentence, shortened to ``width``."""
    first = message.split("\n", 1)[0]
    first = re.split(r"(?<=[.;])\s", first, maxsplit=1)[0]
    return first if len(first) <= width else first[: width - 1] + "…"


# ------------------------------------------------------------------ the others


def others_python() -> str | None:
    """The interpreter with SmartNoise SQL, Qrlew and OpenDP: ``DPGATE_BENCH_PYTHON``, or
    /work/bench-venv's, or this one."""
    for cand in (os.environ.get("DPGATE_BENCH_PYTHON"), "/work/bench-venv/bin/python"):
        if cand and Path(cand).exists():
            return cand
    return sys.executable


def run_others(raw: Path, cfg: dict, rows: dict[str, int], tmp: Path) -> dict:
    """``bench/tpch_others.py`` in :func:`others_python` on the raw DuckDB copy, with the served
    config's column bounds and the contribution bound R: {tool: {"note", "queries": {n: …}}}."""
    spec = {
        "columns": {
            t: {
                c: {k: v for k, v in d.items() if k in ("type", "lower", "upper")}
                for c, d in s["columns"].items()
            }
            for t, s in cfg["tables"].items()
        },
        "rows_per_unit": rows,
    }
    (tmp / "others-spec.json").write_text(json.dumps(spec))
    out = tmp / "others.json"
    p = subprocess.run(
        [
            others_python(),
            str(ROOT / "bench" / "tpch_others.py"),
            str(raw),
            str(tmp / "others-spec.json"),
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
        env={**os.environ, "RUST_BACKTRACE": "0"},
    )
    if p.returncode or not out.exists():
        return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:160]}
    return json.loads(out.read_text())


def other_cell(q: dict | None) -> str:
    """One tool's outcome for one query, in a few words: "answered", or its error's first words
    (the exception's class left out)."""
    if not q:
        return ""
    if q.get("answered"):
        return "answered"
    msg = q.get("message", "").split(": ", 1)[-1]
    msg = msg.removeprefix("called `Result::unwrap()` on an `Err` value: ")
    return "refused: " + construct(msg, 34)


# ------------------------------------------------------------------ the run


def run(scale: float, others: bool = True, work: Path | None = None) -> dict:
    """The whole bench at ``scale``: {"rows": per query, "config": how it was made, "others": …}."""
    import psycopg

    tmp = Path(work or tempfile.mkdtemp(prefix="dpgate-tpch-"))
    tmp.mkdir(parents=True, exist_ok=True)
    pq, db, raw = tmp / "pq", tmp / "tpch.duckdb", tmp / "raw.duckdb"
    t0 = time.perf_counter()
    generate(scale, pq, ALL_TABLES)
    load_declared(pq, db)
    shutil.copy(db, raw)  # the exact side reads its own copy while dpgate has the file open
    t_data = time.perf_counter() - t0
    cfg, password, command = run_init(db, tmp / "init.toml")
    con = duckdb.connect(str(raw), read_only=True)
    proposed_by_init = "units" in cfg or any(
        "privacy_unit" in t or "references" in t for t in cfg.get("tables", {}).values()
    )
    rows_per_unit = unit_rows(con)  # for the other tools where init's bound is "auto" or absent
    if proposed_by_init:
        for t, spec in cfg["tables"].items():
            if isinstance(spec.get("max_rows_per_unit"), int):
                rows_per_unit[t] = spec["max_rows_per_unit"]
    else:
        cfg = propose_units(cfg, rows_per_unit)
    port = free_port()
    cfg = raise_budget(cfg, port, tmp / "state")
    path = tmp / "dpgate.toml"
    path.write_text(toml_text(cfg))
    public = {t for t, spec in cfg["tables"].items() if spec.get("public")}
    columns: dict[str, set[str]] = {}
    for t, c in con.execute("SELECT table_name, column_name FROM information_schema.columns").fetchall():
        columns.setdefault(t, set()).add(c)
    results = []
    with Serve(path, tmp / "serve.log"):
        dsn = f"host=127.0.0.1 port={port} dbname={cfg['server'].get('database', 'dpgate')} user=analyst password={password} sslmode=disable"
        with psycopg.connect(dsn, autocommit=True) as conn:
            for n in sorted(tpch_queries.QUERIES):
                got = send(conn, n)
                cols, rows, t_raw = exact(con, n)
                sh = None
                if got.answered:
                    keys = tuple(c for c in KEYS[n] if c in cols)
                    sh = shape(
                        n,
                        got.columns,
                        got.rows,
                        cols,
                        rows,
                        lambda extra: tpch_keys.possible_keys(
                            con, query_sql(n), keys, public, columns, extra
                        ),
                    )
                results.append({"n": n, "got": got, "exact_rows": len(rows), "raw_s": t_raw, "shape": sh})
    con.close()
    tools = run_others(raw, cfg, rows_per_unit, tmp) if others else {}
    return {
        "scale": scale,
        "rows": results,
        "init": command,
        "units_by": "init" if proposed_by_init else "bench",
        "rows_per_unit": rows_per_unit,
        "bounds_shown": {
            t: spec["max_rows_per_unit"]
            for t, spec in sorted(cfg["tables"].items())
            if "max_rows_per_unit" in spec and not spec.get("public")
        },
        "others": tools,
        "data_s": t_data,
        "dir": tmp,
    }


def verdict(r: dict) -> str:
    got: Outcome = r["got"]
    if not got.answered:
        return f"refused {got.sqlstate}: {construct(got.message)}"
    sh: Shape = r["shape"]
    bits = ["answered" + (f" (variant {got.variant})" if got.variant else "")]
    if not sh.same_columns:
        bits.append("columns differ")
    if sh.excluded:
        bits.append(f"{len(sh.excluded)} row(s) the SQL excludes")
    if sh.empty:
        bits.append(f"{len(sh.empty)} empty cell(s) of the domain")
    if sh.ordered is False:
        bits.append("not in its ORDER BY")
    if sh.missing:
        bits.append(f"{sh.missing}/{r['exact_rows']} exact row(s) not released")
    return "; ".join(bits)


def report(res: dict) -> int:
    tools = res["others"]
    names = [t for t in ("SmartNoise SQL", "Qrlew", "OpenDP") if t in tools]
    head = ["Q", "in principle", "dpgate", "rel. error ε=1", "dpgate s", "raw DuckDB s", *names]
    table = []
    for r in res["rows"]:
        got, sh = r["got"], r["shape"]
        err = "" if sh is None or sh.rel_error is None else f"{sh.rel_error:.3g}"
        row = [
            f"Q{r['n']}",
            PRINCIPLE[tpch_queries.EXPECTED[r["n"]]],
            verdict(r),
            err,
            f"{got.seconds:.3f}" if got.answered else "",
            f"{r['raw_s']:.3f}",
        ]
        for t in names:
            row.append(other_cell(tools[t].get("queries", {}).get(str(r["n"]))))
        table.append(row)
    w = [max(len(str(x[i])) for x in [head, *table]) for i in range(len(head))]
    print(
        f"TPC-H SF {res['scale']:g}, the 22 queries as the specification writes them, over the wire "
        f"(config: `{res['init']}`{'' if res['units_by'] == 'init' else ' + the unit declarations it should propose (bench.tpch.propose_units)'}; "
        f"only the budget raised; customer as the privacy unit, ε = 1 per query)"
    )
    print(" | ".join(h.ljust(x) for h, x in zip(head, w)))
    print("-+-".join("-" * x for x in w))
    for row in table:
        print(" | ".join(str(c).ljust(x) for c, x in zip(row, w)))
    for t in names:
        q = tools[t].get("queries", {})
        n_ans = sum(1 for x in q.values() if x.get("answered"))
        print(f"{t}: answered {n_ans}/22 — {tools[t]['note']}")
    if "error" in tools:
        print(f"SmartNoise SQL / Qrlew / OpenDP: not run ({tools['error']})")
    print(
        f"rel. error: median over the value cells of |released − exact| / |exact| (one release; bias of the "
        f"contribution bounds max_rows_per_unit = {res['bounds_shown']} "
        f"({'proposed by init' if res['units_by'] == 'init' else 'the 95th percentile of rows per customer, in total per statement'}) "
        "and noise together); time: one release over the wire vs the median of "
        f"{RAW_RUNS} runs of the same SQL on raw DuckDB"
    )
    answered = sum(r["got"].answered for r in res["rows"])
    excluded = sum(len(r["shape"].excluded) for r in res["rows"] if r["shape"] is not None)
    ok = answered >= GOAL and excluded == 0
    print(
        f"HEADLINE: answered {answered}/22 (goal ≥ {GOAL}); rows the SQL excludes: {excluded} (goal 0) "
        f"{'PASS' if ok else 'MISS'}"
    )
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tpch", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="scale factor 0.01")
    ap.add_argument("--scale", type=float, default=None, help="TPC-H scale factor (default 0.1)")
    ap.add_argument("--no-others", action="store_true", help="skip SmartNoise SQL, Qrlew and OpenDP")
    ap.add_argument(
        "--keep", type=Path, default=None, help="work in this directory and keep it (data, configs, log)"
    )
    args = ap.parse_args(argv)
    if args.keep is not None and args.keep.exists() and any(args.keep.iterdir()):
        ap.error(f"--keep {args.keep}: not an empty directory")
    scale = args.scale or (0.01 if args.quick else 0.1)
    res = run(scale, others=not args.no_others, work=args.keep)
    try:
        return report(res)
    finally:
        if args.keep is None:
            shutil.rmtree(res["dir"], ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
