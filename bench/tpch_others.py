"""The 22 TPC-H queries through SmartNoise SQL, Qrlew and OpenDP, for ``bench/tpch.py``.

    python bench/tpch_others.py RAW.duckdb SPEC.json OUT.json

Run by ``bench.tpch`` in the interpreter that has the three libraries (they are in the
``bench`` extra; a tool that cannot be imported is reported as such). Each receives the
statements exactly as ``bench/tpch_queries.py`` writes them, with the same customer privacy
unit, the same column bounds as dpgate's config and the same contribution bound R (rows per
customer, ``SPEC.json``), at ε = 1:

* SmartNoise SQL 1.x over a SQLite copy of the tables (its ``sqlite`` reader); it has no
  foreign-key paths, so each private table carries its customer as a column
  (``lineitem.o_custkey``, the bench's own join) for ``private_id``; ``max_ids`` = R.
* Qrlew (``pyqrlew``): the dataset read from the same SQLite copy, the customer reached through
  Qrlew's privacy-unit paths (orders by o_custkey, lineitem through orders), the dimension tables
  left out of the privacy unit (public), ``max_multiplicity`` = R; its rewritten SQL runs on the
  raw DuckDB file.
* OpenDP (``opendp.extras.polars``): OpenDP takes no SQL; the statement becomes a Polars plan
  (``polars.SQLContext``) over one LazyFrame per table, which ``make_private_lazyframe`` must
  accept as a DP plan (one input frame, ``contributions`` = R rows per customer).

OUT.json: {tool: {"note": one line, "queries": {n: {"answered", "message", "columns", "rows",
"seconds"}}}}.
"""

from __future__ import annotations

import datetime
import decimal
import json
import re
import sqlite3
import sys
import time
import traceback
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import tpch_queries  # noqa: E402  (run as a script in another interpreter)

EPS = 1.0
DELTA = 1e-6
TABLES = ("region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem")
PRIVATE_ID = {"customer": "c_custkey", "orders": "o_custkey", "lineitem": "o_custkey"}


def plain(v):
    """A value as JSON: numbers as float/int, dates as ISO text."""
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if hasattr(v, "item"):  # numpy scalars
        return v.item()
    return v


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:200]


def sqlite_copy(raw: Path, path: Path) -> None:
    """The eight tables into a SQLite file (dates as ISO text, money as REAL); lineitem with its
    order's customer ``o_custkey`` beside its own columns (SmartNoise's private_id)."""
    import duckdb

    con = duckdb.connect(str(raw), read_only=True)
    out = sqlite3.connect(str(path))
    for t in TABLES:
        src = t
        if t == "lineitem":
            src = "(SELECT l.*, o.o_custkey FROM lineitem l JOIN orders o ON l.l_orderkey = o.o_orderkey)"
        cur = con.execute(f"SELECT * FROM {src}")
        cols = [d[0] for d in cur.description]
        types = [str(d[1]) for d in cur.description]
        decl = []
        for c, ty in zip(cols, types):
            sqlt = (
                "INTEGER"
                if "INT" in ty.upper()
                else "REAL"
                if ("DECIMAL" in ty.upper() or "DOUBLE" in ty.upper())
                else "TEXT"
            )
            decl.append(f"{c} {sqlt}")
        out.execute(f"CREATE TABLE {t} ({', '.join(decl)})")
        rows = [tuple(plain(v) for v in r) for r in cur.fetchall()]
        out.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(cols))})", rows)
    out.commit()
    out.close()
    con.close()


def query_of(n: int) -> str:
    """The statement each tool receives: Q15 as its approved variant A (WITH) — none of the
    three runs DDL."""
    return tpch_queries.Q15_WITH if n == 15 else tpch_queries.statements(n)[0]


# ------------------------------------------------------------------ SmartNoise SQL


def smartnoise(db: Path, spec: dict) -> dict:
    import snsql
    from snsql import Privacy

    cols = spec["columns"]
    r = spec["rows_per_unit"]
    tables = {}
    for t in TABLES:
        meta: dict = {"row_privacy": False} if t in PRIVATE_ID else {"row_privacy": True}
        if t in PRIVATE_ID:
            meta["max_ids"] = r[t]
        decl = dict(cols[t])
        if t == "lineitem":
            decl["o_custkey"] = {"type": "int"}
        for c, d in decl.items():
            m = {
                "type": {"float": "float", "int": "int", "date": "datetime", "bool": "boolean"}.get(
                    d["type"], "string"
                )
            }
            if d.get("lower") is not None and m["type"] in ("int", "float"):
                m["lower"], m["upper"] = d["lower"], d["upper"]
            if t in PRIVATE_ID and c == PRIVATE_ID[t]:
                m["private_id"] = True
            meta[c] = m
        tables[t] = meta
    metadata = {"Collection": {"": tables}}
    conn = sqlite3.connect(str(db))
    reader = snsql.from_connection(
        conn, engine="sqlite", privacy=Privacy(epsilon=EPS, delta=DELTA), metadata=metadata
    )
    out = {}
    for n in sorted(tpch_queries.QUERIES):
        t0 = time.perf_counter()
        try:
            res = reader.execute(query_of(n))
            out[n] = {
                "answered": True,
                "columns": list(res[0]),
                "rows": [[plain(v) for v in row] for row in res[1:]],
                "seconds": time.perf_counter() - t0,
            }
        except Exception as e:  # a refusal: its message
            out[n] = {"answered": False, "message": first_line(e)}
    return {
        "note": f"smartnoise-sql {version('smartnoise-sql')} on SQLite, private_id = the customer, max_ids = R",
        "queries": out,
    }


# ------------------------------------------------------------------ Qrlew


def qrlew(db: Path, raw: Path, spec: dict) -> dict:
    import duckdb
    import pyqrlew as qrl
    import sqlalchemy

    engine = sqlalchemy.create_engine(f"sqlite:///{db}")
    ds = qrl.Dataset.from_database("tpch", engine, ranges=False)
    for t, cols in spec["columns"].items():
        for c, d in cols.items():
            if d.get("lower") is not None and d["type"] in ("int", "float"):
                ds = ds.with_range(None, t, c, float(d["lower"]), float(d["upper"]))
    ds = ds.with_constraint(None, "customer", "c_custkey", "Unique").with_constraint(
        None, "orders", "o_orderkey", "Unique"
    )
    unit = [
        ("customer", [], "c_custkey"),
        ("orders", [("o_custkey", "customer", "c_custkey")], "c_custkey"),
        (
            "lineitem",
            [("l_orderkey", "orders", "o_orderkey"), ("o_custkey", "customer", "c_custkey")],
            "c_custkey",
        ),
    ]
    con = duckdb.connect(str(raw), read_only=True)
    r = max(spec["rows_per_unit"].values())
    out = {}
    for n in sorted(tpch_queries.QUERIES):
        t0 = time.perf_counter()
        try:
            rel = ds.relation(query_of(n))
            dp = rel.rewrite_with_differential_privacy(
                ds, unit, {"epsilon": EPS, "delta": DELTA}, max_multiplicity=float(r)
            )
            sql = dp.relation().to_query()
            cur = con.execute(sql)
            out[n] = {
                "answered": True,
                "columns": [d[0] for d in cur.description],
                "rows": [[plain(v) for v in row] for row in cur.fetchall()],
                "seconds": time.perf_counter() - t0,
            }
        except BaseException as e:  # a refusal (pyo3 panics are BaseException)
            if isinstance(e, KeyboardInterrupt):
                raise
            out[n] = {"answered": False, "message": first_line(e)}
    con.close()
    return {
        "note": f"pyqrlew {version('pyqrlew')}, the customer through its privacy-unit paths, dimension tables public",
        "queries": out,
    }


# ------------------------------------------------------------------ OpenDP


def opendp_polars(raw: Path, spec: dict) -> dict:
    import duckdb
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    con = duckdb.connect(str(raw), read_only=True)
    frames = {}
    for t in TABLES:
        cur = con.execute(f"SELECT * FROM {t}")
        cols = [d[0] for d in cur.description]
        data = [tuple(plain(v) for v in row) for row in cur.fetchall()]
        frames[t] = pl.LazyFrame(data, schema=cols, orient="row")
    con.close()
    ctx = pl.SQLContext(frames)
    out = {}
    for n in sorted(tpch_queries.QUERIES):
        t0 = time.perf_counter()
        try:
            plan = ctx.execute(query_of(n))
            read = [t for t in reversed(TABLES) if re.search(rf"\b{t}\b", query_of(n))]
            base = frames[read[0]]  # OpenDP takes one input frame: the query's first private table
            r = spec["rows_per_unit"].get(read[0], 1)
            m = dp.m.make_private_lazyframe(
                input_domain=dp.domain_of(base, infer=True),
                input_metric=dp.symmetric_distance(),
                output_measure=dp.max_divergence(),
                lazyframe=plan,
                global_scale=float(r) / EPS,
            )
            res = m(base).collect()
            out[n] = {
                "answered": True,
                "columns": list(res.columns),
                "rows": [[plain(v) for v in row] for row in res.rows()],
                "seconds": time.perf_counter() - t0,
                "r": r,
            }
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            out[n] = {"answered": False, "message": first_line(e)}
    return {
        "note": f"opendp {version('opendp')}: the SQL as a Polars plan (polars.SQLContext), make_private_lazyframe",
        "queries": out,
    }


def main(argv: list[str]) -> int:
    raw, spec_path, out_path = Path(argv[0]), Path(argv[1]), Path(argv[2])
    spec = json.loads(spec_path.read_text())
    db = out_path.with_suffix(".sqlite")
    sqlite_copy(raw, db)
    result: dict = {}
    for name, fn in (
        ("SmartNoise SQL", lambda: smartnoise(db, spec)),
        ("Qrlew", lambda: qrlew(db, raw, spec)),
        ("OpenDP", lambda: opendp_polars(raw, spec)),
    ):
        try:
            result[name] = fn()
        except ImportError as e:
            result[name] = {"note": f"not installed here ({first_line(e)})", "queries": {}}
        except Exception as e:
            result[name] = {"note": f"failed to start: {first_line(e)}", "queries": {}}
            traceback.print_exc()
    out_path.write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
