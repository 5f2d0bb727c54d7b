"""A throwaway local Spark Connect server for tests: pyspark's own jars (``pip install
'dpgate[spark]'``), ``spark-submit`` of ``SparkConnectServer`` with ``local[2]`` on a free
loopback port, in a subprocess the session fixture stops. ``unavailable()`` says in one
line why it cannot run here (no pyspark, no Java). ``DPGATE_TEST_SPARK_REMOTE=sc://host:port``
uses a server already running instead (no start, no stop), as ``DPGATE_TEST_PG_DSN`` does
for Postgres."""

from __future__ import annotations

import os
from pathlib import Path

from bench.spark_local import LocalSparkConnect as SparkServer
from bench.spark_local import unavailable  # noqa: F401  (the fixture imports it from here)
from proxy import demo
from proxy.backends import DuckDBBackend


class LocalSparkConnect(SparkServer):
    """The tests' server: ``DPGATE_TEST_SPARK_REMOTE`` reuses one already running."""

    def __init__(self, workdir: Path):
        super().__init__(workdir, remote=os.environ.get("DPGATE_TEST_SPARK_REMOTE"))


#: the demo's central tables (the local table ``trips``: tests/spark/test_spark_local.py)
DEMO_TABLES = ("pums", "people", "purchases", "accounts", "stores", "customers", "orders", "order_items")


def mirror_demo(
    session, duck_path: Path, parquet_dir: Path, people_rows: int, extra: dict[str, str] | None = None
) -> None:
    """The demo's central tables, made by the DuckDB loader (the same rows a DuckDB
    service has), written to Parquet and registered in Spark's catalog; ``extra`` maps
    more Spark view names to their SELECT (e.g. a slow scan for timeout tests)."""
    duck = DuckDBBackend(duck_path)
    demo.load_duckdb(duck, people_rows)
    parquet_dir = Path(parquet_dir)
    parquet_dir.mkdir(parents=True, exist_ok=True)
    for t in DEMO_TABLES:
        path = parquet_dir / f"{t}.parquet"
        duck.execute_script(f"COPY {t} TO '{path}' (FORMAT parquet)")
        session.sql(f"DROP TABLE IF EXISTS {t}")
        session.sql(f"CREATE TABLE {t} USING parquet LOCATION '{path}'")
    for name, select in (extra or {}).items():
        session.sql(f"CREATE OR REPLACE VIEW {name} AS {select}")
    duck._con.close()
