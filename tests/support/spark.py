"""A throwaway local Spark Connect server for tests: pyspark's own jars (``pip install
'dpgate[spark]'``), ``spark-submit`` of ``SparkConnectServer`` with ``local[2]`` on a free
loopback port, in a subprocess the session fixture stops. ``unavailable()`` says in one
line why it cannot run here (no pyspark, no Java). ``DPGATE_TEST_SPARK_REMOTE=sc://host:port``
uses a server already running instead (no start, no stop), as ``DPGATE_TEST_PG_DSN`` does
for Postgres."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from proxy import demo
from proxy.backends import DuckDBBackend


def unavailable() -> str | None:
    try:
        import pyspark  # noqa: F401
        from pyspark.sql.connect.session import SparkSession  # noqa: F401  (grpc, pyarrow)
    except ImportError as e:
        return f"pyspark's Connect client is not installed ({e.name}): pip install '.[spark]'"
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (Spark needs Java 17: apt-get install openjdk-17-jdk-headless)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSparkConnect:
    def __init__(self, workdir: Path):
        import pyspark
        self.home = Path(pyspark.__file__).parent
        self.workdir = Path(workdir)
        self.port = _free_port()
        self.proc = None
        self.log = self.workdir / "spark-connect.log"
        self.external = os.environ.get("DPGATE_TEST_SPARK_REMOTE")
        self.sessions: list = []

    @property
    def remote(self) -> str:
        return self.external or f"sc://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120) -> "LocalSparkConnect":
        if self.external:
            self.session().sql("SELECT 1").collect()
            return self
        env = dict(os.environ, SPARK_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1")
        cmd = [str(self.home / "bin" / "spark-submit"), "--class",
               "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[2]",
               "--conf", f"spark.connect.grpc.binding.port={self.port}",
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
               "--conf", f"spark.sql.warehouse.dir={self.workdir / 'warehouse'}",
               "--conf", "spark.ui.enabled=false", "--driver-memory", "1g", "spark-internal"]
        self.proc = subprocess.Popen(cmd, env=env, cwd=self.workdir, stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Spark Connect exited: {self.log.read_text()[-800:]}")
            try:
                self.session().sql("SELECT 1").collect()
                return self
            except Exception:
                time.sleep(1)
        self.stop()
        raise RuntimeError("Spark Connect did not start in time")

    def session(self):
        """A new Connect session, closed by :meth:`stop` (an open client keeps threads that
        can hold the interpreter's exit after a failed query)."""
        from pyspark.sql.connect.session import SparkSession
        s = SparkSession.builder.remote(self.remote).create()
        self.sessions.append(s)
        return s

    def stop(self) -> None:
        for s in self.sessions:          # close the clients only: the server is about to stop
            try:
                s.client.close()
            except Exception:
                pass
        self.sessions.clear()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


#: the demo's central tables (the local table ``trips`` is refused on Spark: config load)
DEMO_TABLES = ("pums", "people", "purchases", "accounts", "stores", "customers", "orders", "order_items")


def mirror_demo(session, duck_path: Path, parquet_dir: Path, people_rows: int,
                extra: dict[str, str] | None = None) -> None:
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
