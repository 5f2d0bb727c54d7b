"""A throwaway local Spark Connect server: pyspark's own jars (``pip install 'dpgate[spark]'``),
``spark-submit`` of ``SparkConnectServer`` with ``local[2]`` on a free loopback port, in a
subprocess :meth:`LocalSparkConnect.stop` ends. Used by ``python -m bench.scale`` and by the
Spark tests (tests/support/spark.py); ``remote`` given: a server already running (no start,
no stop). The same two commands are in the README, "Running on Spark"."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["LocalSparkConnect", "free_port", "unavailable"]


def unavailable() -> str | None:
    """Why a local Spark Connect server cannot run here, in one line (None: it can)."""
    try:
        import pyspark  # noqa: F401
        from pyspark.sql.connect.session import SparkSession  # noqa: F401  (grpc, pyarrow)
    except ImportError as e:
        return f"pyspark's Connect client is not installed ({e.name}): pip install '.[spark]'"
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (Spark needs Java 17: apt-get install openjdk-17-jdk-headless)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSparkConnect:
    def __init__(self, workdir: Path, *, driver_memory: str = "1g", remote: str | None = None):
        import pyspark
        self.home = Path(pyspark.__file__).parent
        self.workdir = Path(workdir)
        self.port = free_port()
        self.driver_memory = driver_memory
        self.proc = None
        self.log = self.workdir / "spark-connect.log"
        self.external = remote
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
               "--conf", "spark.ui.enabled=false", "--driver-memory", self.driver_memory, "spark-internal"]
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
