"""The Spark backend against a local Spark Connect server: a central plan's one
scan in Spark SQL gives the same exact cells as on DuckDB (integer division included:
Spark has no one-argument TRUNC), the source is read once, and an unreachable cluster
is 08006 before anything runs. A large result streams in (many Arrow batches) and equals
``collect()``'s, value for value and type for type."""

from __future__ import annotations

import asyncio
import re
import tomllib

import duckdb
import pytest

import rewriter
from config import parse_config
from proxy.backends import BackendError
from proxy.backends.spark import SparkBackend, connect_url, stream
from proxy.demo import demo_config_path, pums_csv

QUERIES = [
    "SELECT sex, COUNT(*), SUM(age), AVG(income) FROM pums GROUP BY sex",
    "SELECT educ, COUNT(*) FROM pums WHERE age > 40 AND married = 1 GROUP BY educ",
    "SELECT race, VAR_SAMP(age) FROM pums GROUP BY race",
    "SELECT age / 10 * 10 AS b, COUNT(*) FROM pums GROUP BY 1",
    "SELECT COUNT(*), SUM(age + 1) FROM pums WHERE age / 3 = 10",
]


@pytest.fixture(scope="module")
def pums(spark_connect, tmp_path_factory):
    path = tmp_path_factory.mktemp("pums") / "pums.parquet"
    con = duckdb.connect()
    con.execute(f"CREATE TABLE pums AS SELECT * FROM read_csv_auto('{pums_csv()}')")
    con.execute(f"COPY pums TO '{path}' (FORMAT parquet)")
    s = spark_connect.session()
    s.sql("DROP TABLE IF EXISTS pums")
    s.sql(f"CREATE TABLE pums USING parquet LOCATION '{path}'")
    data = tomllib.loads(demo_config_path().read_text())
    data["server"]["auth"] = "trust"
    return con, parse_config(data)


@pytest.mark.parametrize("sql", QUERIES)
def test_spark_cells_equal_duckdb(spark_connect, pums, sql):
    con, cfg = pums
    plan = rewriter.build_plan(rewriter.parse(sql), cfg)
    backend = SparkBackend(spark_connect.remote)
    timing: dict = {}
    try:
        got = asyncio.run(backend.fetch(rewriter.to_sql(plan, "spark"), 60, timing=timing))
    finally:
        asyncio.run(backend.close())
    want = rewriter.complete(plan, con.execute(rewriter.to_sql(plan, "duckdb")).fetchall())
    got = rewriter.complete(plan, got)
    flat = lambda rows: [
        float(v) if isinstance(v, (int, float)) or hasattr(v, "as_tuple") else v for r in rows for v in r
    ]
    a, b = flat(got), flat(want)
    assert len(got) == len(want) and [v is None for v in a] == [v is None for v in b]
    assert [v for v in a if v is not None] == pytest.approx([v for v in b if v is not None], rel=1e-9)
    assert timing["started"] and timing["backend_ms"] > 0


#: 60k cells of every type a scan returns (NULLs, NaN, dates, timestamps, decimals) from 8
#: partitions: the Connect server sends at least one Arrow batch per partition
MANY = (
    "SELECT id AS k, id % 3 AS n, id * 3 AS s, CAST(id AS DOUBLE) / 7 AS a, "
    "CASE WHEN id % 5 = 0 THEN NULL ELSE CAST(id AS STRING) END AS t, id % 2 = 0 AS b, "
    "DATE_ADD(DATE'2020-01-01', CAST(id % 1000 AS INT)) AS d, TIMESTAMP'2021-03-04 05:06:07' AS ts, "
    "CAST(id AS DECIMAL(20, 2)) / 3 AS dec, CASE WHEN id % 7 = 0 THEN DOUBLE('NaN') END AS nan "
    "FROM range(0, 60000, 1, 8)"
)


def test_streamed_cells_equal_collected(spark_connect):
    s = spark_connect.session()
    df = s.sql(MANY)
    batches = [
        x for x in s.client.to_table_as_iterator(df._plan.to_proto(s.client), {}) if not hasattr(x, "fields")
    ]
    assert len(batches) > 1 and sum(b.num_rows for b in batches) == 60_000  # it does come in batches
    backend = SparkBackend(spark_connect.remote)
    try:
        got = asyncio.run(backend.fetch(MANY, 120))
    finally:
        asyncio.run(backend.close())
    want = [tuple(r) for r in s.sql(MANY).collect()]
    key = lambda r: r[0]  # no ORDER BY: the engine's order
    got, want = sorted(got, key=key), sorted(want, key=key)
    assert len(got) == len(want) == 60_000
    assert [tuple(map(type, r)) for r in got] == [tuple(map(type, r)) for r in want]
    assert [repr(r) for r in got] == [repr(r) for r in want]  # NaN == NaN by repr
    assert stream(s.sql("SELECT 1 AS x WHERE false")) == []


def test_one_scan_of_the_source(spark_connect, pums):
    _, cfg = pums
    plan = rewriter.build_plan(rewriter.parse(QUERIES[0]), cfg)
    text = "\n".join(
        r[0]
        for r in spark_connect.session().sql("EXPLAIN FORMATTED " + rewriter.to_sql(plan, "spark")).collect()
    )
    # the formatted plan names each node once in its tree and once as "(n) <node>"
    assert len(re.findall(r"^\(\d+\) Scan parquet", text, re.M)) == 1, text


def test_unreachable_cluster_is_08006_before_the_scan():
    backend = SparkBackend("sc://127.0.0.1:1")
    timing: dict = {}
    with pytest.raises(BackendError) as e:
        asyncio.run(backend.fetch("SELECT 1", 5, timing=timing))
    assert e.value.sqlstate == "08006" and not timing.get("started")


def test_connect_url():
    assert connect_url("sc://h:15002", token="t") == "sc://h:15002;token=t"
    assert connect_url("h:15002", use_ssl=True) == "sc://h:15002;use_ssl=true"
