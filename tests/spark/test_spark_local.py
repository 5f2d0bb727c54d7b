"""Local (metric-LDP) tables stored in Spark (Xiang et al. 2020 spec §8, Wang et al. 2026 §5).

The demo's ``trips`` reports, made by the DuckDB loader, are copied to a Spark table; then
``INSERT … VALUES`` through a DuckDB and a Spark service, with the same seeded randomness,
appends the same reports (Spark: one Spark SQL INSERT; a report table that does not exist
yet, ``rides``, is created in Spark), and every local query (metric-LDP COUNT/SUM/AVG,
GROUP BY a public column, a private range, a percentile, a Subset column for two ladder
tiers) gives the same rows and NOTICE on the Spark service as on the DuckDB one, over the
copied reports and the inserted ones;
``ldp-load``'s Spark path (``load_rows_spark``: one job) stores exactly the reports the
DuckDB loader stores. Floats: the scans sum 0/1 bits times constants in a different order
on each engine; the summation-order bound |Δ| ≤ (n−1)·u·Σ|xᵢ| (u = 2⁻⁵³, n ≤ 1,100 reports)
is far below the 1e-9 relative tolerance used.
"""

from __future__ import annotations

import dataclasses
import math

import psycopg
import pyarrow.parquet as pq
import pytest

from config import parse_config
from mechanisms import SeededSource
from proxy.backends import DuckDBBackend
from proxy.backends.spark import SparkBackend
from proxy.ingest.ldp_load import load_rows_duckdb
from proxy.ingest.ldp_spark import load_rows_spark
from rewriter.local import layout
from support.service import Service, make_config

TRIPS = 1000
QUERIES = [
    ("analyst", "SELECT COUNT(*), AVG(distance), SUM(fare) FROM {t}"),
    ("analyst", "SELECT vendor, COUNT(*), AVG(hour) FROM {t} WHERE payment = 'card' GROUP BY vendor"),
    ("analyst", "SELECT COUNT(*) FROM {t} WHERE hour BETWEEN 7 AND 9 AND distance <= 5"),
    ("analyst", "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY hour) FROM {t}"),
    ("bronze", "SELECT zone, COUNT(*) FROM {t} GROUP BY zone ORDER BY zone"),  # Subset, tier bronze
    ("gold", "SELECT zone, COUNT(*) FROM {t} WHERE payment = 'cash' GROUP BY zone ORDER BY zone"),
]
COLS = "(hour, distance, fare, vendor, payment, passengers, zone)"
ZONES = ["downtown", "midtown", "uptown", "airport", "harbor", "suburbs"]
ROWS = [
    (
        i % 24,
        (i * 7 % 300) / 10,
        (i * 13 % 1000) / 10,
        1 + i % 2,
        ["card", "cash"][i % 3 == 0],
        1 + i % 6,
        ZONES[i % 6],
    )
    for i in range(60)
]


def _config(backend: dict) -> dict:
    cfg = make_config(backend)
    cfg["tables"]["rides"] = dict(cfg["tables"]["trips"], description="a second local table, empty at start")
    cfg["roles"]["producer"]["insert"] = ["trips", "rides"]
    return cfg


def _spark_config(remote: str) -> dict:
    cfg = _config({"kind": "spark", "remote": remote})
    cfg["demo"] = False
    for name in [n for n, t in cfg["tables"].items() if t.get("mode") != "local"]:
        del cfg["tables"][name]  # the central tables are not needed here
    return cfg


@pytest.fixture(scope="module")
def services(spark_connect, tmp_path_factory):
    work = tmp_path_factory.mktemp("spark_local")
    duck = Service(
        _config({"kind": "duckdb", "path": str(work / "d.duckdb")}),
        work / "duck_state",
        people_rows=200,
        trips_rows=TRIPS,
        source=SeededSource(22),
    ).start()
    s = spark_connect.session()
    for t in ("trips_reports", "rides_reports"):
        s.sql(f"DROP TABLE IF EXISTS {t}")
    path = work / "trips_reports.parquet"
    cur = duck.gw.backend._cursor()  # the service's DuckDB writes no file outside its sources:
    try:  # the reports go to Parquet from here
        pq.write_table(cur.sql("SELECT * FROM trips_reports").to_arrow_table(), str(path))
    finally:
        cur.close()
    s.sql(f"CREATE TABLE trips_reports USING parquet AS SELECT * FROM parquet.`{path}`")
    spark = Service(
        _spark_config(spark_connect.remote), work / "spark_state", source=SeededSource(22)
    ).start()
    yield duck, spark
    spark.close()
    duck.close()


def _ask(svc, sql, role):
    notes: list = []
    with psycopg.connect(svc.dsn(role), autocommit=True, connect_timeout=10) as conn:
        conn.add_notice_handler(lambda d: notes.append(d.message_primary))
        return conn.execute(sql).fetchall(), notes


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def _agree(duck, spark, table: str, queries=QUERIES) -> None:
    for role, q in queries:
        sql = q.format(t=table)
        (want, wnotes), (got, gnotes) = _ask(duck, sql, role), _ask(spark, sql, role)
        assert len(got) == len(want) and want, sql
        for g, w in zip(got, want):
            assert len(g) == len(w) and all(_same(x, y) for x, y in zip(g, w)), (
                f"{sql}: spark {g} != duckdb {w}"
            )
        assert gnotes == wnotes and wnotes, sql  # the same estimates' std and half-widths


def _insert(svc, table: str) -> None:
    svc.gw.source = SeededSource(2222)  # the same randomness for the same rows on both
    values = ", ".join(f"({h}, {d}, {f}, {v}, '{p}', {n}, '{z}')" for h, d, f, v, p, n, z in ROWS)
    with psycopg.connect(svc.dsn("producer"), autocommit=True, connect_timeout=10) as conn:
        assert (
            conn.execute(f"INSERT INTO {table} {COLS} VALUES {values}").statusmessage
            == f"INSERT 0 {len(ROWS)}"
        )


def test_insert_stores_reports_in_spark(services, spark_connect):
    duck, spark = services
    for table in ("trips", "rides"):  # rides_reports does not exist yet: created in Spark
        _insert(duck, table)
        _insert(spark, table)
    s = spark_connect.session()
    assert s.sql("SELECT COUNT(*) FROM trips_reports").collect()[0][0] == TRIPS + len(ROWS)
    assert s.sql("SELECT COUNT(*) FROM rides_reports").collect()[0][0] == len(ROWS)
    _agree(duck, spark, "trips")
    _agree(duck, spark, "rides", QUERIES[::2])


def test_ldp_load_writes_the_same_reports(spark_connect, tmp_path):
    cfg = parse_config(_spark_config(spark_connect.remote))
    lay = dataclasses.replace(layout("rides", cfg.tables["rides"], cfg.tiers), reports="loaded_reports")
    batches = [
        {c: [r[i] for r in ROWS[k : k + 25]] for i, c in enumerate(COLS[1:-1].split(", "))}
        for k in range(0, len(ROWS), 25)
    ]
    duck = DuckDBBackend(tmp_path / "l.duckdb")
    spark = SparkBackend(spark_connect.remote)
    spark.execute_script(f"DROP TABLE IF EXISTS `{lay.reports}`")
    try:
        assert load_rows_duckdb(duck, lay, batches, source=SeededSource(5)) == len(ROWS)
        assert load_rows_spark(spark, lay, batches, source=SeededSource(5)) == len(ROWS)
        cols = ", ".join(f'"{c}"' for c, _ in lay.report_schema())
        want = sorted(duck.query(f'SELECT {cols} FROM "{lay.reports}"'))
        got = sorted(spark.query(f"SELECT {cols.replace(chr(34), '`')} FROM `{lay.reports}`"))
        assert got == want and len(got) == len(ROWS)
        assert not [t for t in spark.query("SHOW TABLES") if "dpgate_load" in t[1]]  # staging dropped
    finally:
        duck._con.close()
        spark._lost()
