"""Bulk ingestion into local tables (Xiang et al. 2020): `dpgate ldp-load` from a CSV, from a
backend table and as pre-made reports (`ldp-perturb`, the producer side); ≥ 1M rows/min;
one transaction; and the demo `trips` table loaded through the bulk path."""

from __future__ import annotations

import asyncio
import csv

import duckdb
import numpy as np
import psycopg
import pytest

from config import load_config, parse_config
from mechanisms import SeededSource
from proxy.demo import trips as demo_trips
from proxy.pipeline.local import local_answer
from proxy.pipeline.local_bind import scan
from rewriter import parse
from rewriter.local import plan_local
from support.ldp import run_cli
from support.ldp import write_csv as support_write_csv

CONFIG = """
[server]
auth = "trust"
[backend]
kind = "duckdb"
path = "{db}"
[tiers.t]
epsilon = 1.0
budget = 10.0
[roles.analyst]
tier = "t"
[tables.tl]
mode = "local"
[tables.tl.columns]
x = {{ type = "int" }}
y = {{ type = "float" }}
amount = {{ type = "float" }}
grp = {{ type = "text", domain = ["a", "b"] }}
w = {{ type = "int", lower = 0, upper = 5 }}
[tables.tl.local]
estimator = "known_n"
weight = "amount"
joint = [["x", "y", "amount"]]
[tables.tl.local.columns]
x = {{ lo = 0, hi = 20, buckets = 20, epsilon = 2.0 }}
y = {{ lo = 0, hi = 10, buckets = 10, epsilon = 2.0 }}
amount = {{ lo = 0, hi = 10, buckets = 2, epsilon = 2.0 }}
"""


def raw(n, seed):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.binomial(19, 0.4, n),
        "y": np.round(rng.uniform(0, 10, n), 2),
        "amount": np.round(rng.uniform(0, 10, n), 2),
        "grp": np.where(rng.random(n) < 0.3, "a", "b"),
        "w": rng.integers(0, 6, n),
    }


def write_csv(path, data, cols=("x", "y", "amount", "grp", "w")):
    support_write_csv(path, data, cols)


@pytest.fixture()
def setup(tmp_path):
    cfgfile = tmp_path / "dpgate.toml"
    cfgfile.write_text(CONFIG.format(db=str(tmp_path / "d.duckdb")))
    return tmp_path, str(cfgfile), load_config(cfgfile)


def estimate(db, cfg, sql):
    con = duckdb.connect(db, read_only=True)
    try:
        plan = plan_local(parse(sql), cfg, [])
        rows, notice = local_answer(plan, con.execute(scan(plan, "duckdb")[0]).fetchall())
    finally:
        con.close()
    std = float(notice.split("±", 1)[1].split()[0].rstrip(",;")) if "±" in notice else 0.0
    return rows, std


def test_csv_bulk_load_accuracy(setup, capsys):
    """(Its speed, >= 1M rows/min, is measured by ``python -m bench.metric_ldp``.)"""
    tmp, cfgfile, cfg = setup
    n = 300_000
    data = raw(n, 1)
    write_csv(tmp / "raw.csv", data)
    assert run_cli("ldp-load", "-c", cfgfile, "--table", "tl", str(tmp / "raw.csv")) == 0
    err = capsys.readouterr().err
    assert "300,000 reports appended to tl_reports" in err and "rows/min" in err
    db = str(tmp / "d.duckdb")
    con = duckdb.connect(db, read_only=True)
    cols = [r[0] for r in con.execute("DESCRIBE tl_reports").fetchall()]
    assert con.execute("SELECT COUNT(*) FROM tl_reports").fetchone()[0] == n
    con.close()
    assert not {"x", "y", "amount"} & set(cols)
    (est,), std = estimate(db, cfg, "SELECT COUNT(*) FROM tl WHERE x BETWEEN 4 AND 8 AND y < 2.5")
    truth = ((data["x"] >= 4) & (data["x"] <= 8) & (data["y"] < 2.5)).sum()
    assert abs(est[0] - truth) <= 4 * std


def test_reports_from_producer_and_from_table(setup):
    tmp, cfgfile, cfg = setup
    data = raw(20_000, 2)
    write_csv(tmp / "raw.csv", data)
    # the producer side: raw CSV -> reports CSV with the same randomizer, no server, no backend
    assert (
        run_cli(
            "ldp-perturb",
            "-c",
            cfgfile,
            "--table",
            "tl",
            str(tmp / "raw.csv"),
            "-o",
            str(tmp / "reports.csv"),
        )
        == 0
    )
    with open(tmp / "reports.csv", newline="") as f:
        rd = csv.reader(f)
        header = next(rd)
        first = next(rd)
    assert header == ["grp", "w", "x_bits", "y_bits", "amount_bits"]
    assert len(first[2]) == 20 and set(first[2]) <= {"0", "1"} and len(first[4]) == 2
    assert run_cli("ldp-load", "-c", cfgfile, "--table", "tl", "--reports", str(tmp / "reports.csv")) == 0
    # a raw staging table in the backend, perturbed in bulk
    db = str(tmp / "d.duckdb")
    con = duckdb.connect(db)
    con.execute(f"CREATE TABLE staging AS SELECT *, 7 AS id FROM read_csv('{tmp / 'raw.csv'}')")
    con.close()
    assert run_cli("ldp-load", "-c", cfgfile, "--table", "tl", "--from-table", "staging", "-q") == 0
    (rows,), std = estimate(db, cfg, "SELECT COUNT(*) FROM tl WHERE x <= 6")
    truth = 2 * (data["x"] <= 6).sum()
    assert abs(rows[0] - truth) <= 4 * std
    (rows,), _ = estimate(db, cfg, "SELECT COUNT(*) FROM tl")
    assert rows[0] == 40_000


def test_bad_row_loads_nothing(setup, capsys):
    tmp, cfgfile, _ = setup
    data = raw(1000, 3)
    write_csv(tmp / "ok.csv", data)
    assert run_cli("ldp-load", "-c", cfgfile, "--table", "tl", str(tmp / "ok.csv"), "-q") == 0
    data["x"] = data["x"].astype(object)
    data["x"][500] = ""
    write_csv(tmp / "bad.csv", data)
    assert run_cli("ldp-load", "-c", cfgfile, "--table", "tl", str(tmp / "bad.csv"), "--batch", "100") == 1
    assert "NULL in private column x" in capsys.readouterr().err
    con = duckdb.connect(str(tmp / "d.duckdb"), read_only=True)
    assert con.execute("SELECT COUNT(*) FROM tl_reports").fetchone()[0] == 1000  # one transaction
    con.close()


def _trips_cfg(backend=None):
    from support.service import make_config

    data = make_config(backend)
    data["tables"]["trips"] = demo_trips.trips_table_dict()
    return parse_config(data)


def _check_trips(cfg, fetch, n):
    raw = demo_trips.trips_rows(n)
    h, d, fare = raw["hour"], raw["distance"], raw["fare"]

    def ask(sql):
        plan = plan_local(parse(sql), cfg, [])
        return local_answer(plan, fetch(scan(plan, dialect)[0]))

    dialect = cfg.backend.kind
    rows, notice = ask("SELECT COUNT(*) FROM trips WHERE hour BETWEEN 7 AND 9 AND distance <= 5")
    std = float(notice.split("count ±")[1].split()[0].rstrip(",;"))
    assert abs(rows[0][0] - ((h >= 7) & (h <= 9) & (d <= 5)).sum()) <= 4 * std
    rows, notice = ask("SELECT SUM(fare) AS s FROM trips WHERE distance >= 10")
    std = float(notice.split("s ±")[1].split()[0].rstrip(",;"))
    assert abs(rows[0][0] - fare[d >= 10].sum()) <= 4 * std
    rows, notice = ask("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY hour) FROM trips")
    bound = float(notice.split("rank error ≤ ")[1].split("%")[0]) / 100
    med = rows[0][0]
    assert np.mean(h <= med - 1) - bound < 0.5 <= np.mean(h <= med) + bound


def test_demo_trips_duckdb():
    from proxy.backends import DuckDBBackend

    cfg = _trips_cfg()
    be = DuckDBBackend(None)
    assert demo_trips.load_duckdb(be, cfg, source=SeededSource(11)) is True
    assert be.query("SELECT COUNT(*) FROM trips_reports")[0][0] == demo_trips.TRIPS_ROWS >= 100_000
    assert demo_trips.load_duckdb(be, cfg) is False  # first start only
    _check_trips(cfg, be.query, demo_trips.TRIPS_ROWS)


def test_demo_trips_postgres(postgres):
    from proxy.backends import PostgresBackend

    cfg = _trips_cfg({"kind": "postgres", "dsn": postgres.dsn})
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS trips_reports")
    n = 100_000

    async def go():
        be = PostgresBackend(postgres.dsn, 2)
        await be.connect()
        try:
            assert await demo_trips.load_postgres(be, cfg, n=n, source=SeededSource(12)) is True
            assert await demo_trips.load_postgres(be, cfg, n=n) is False
        finally:
            await be.close()

    asyncio.run(go())
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        assert c.execute("SELECT COUNT(*) FROM trips_reports").fetchone()[0] == n
        _check_trips(cfg, lambda sql: c.execute(sql).fetchall(), n)
        c.execute("DROP TABLE trips_reports")
