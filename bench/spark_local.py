"""A throwaway local Spark Connect server: pyspark's own jars (``pip install 'dpgate[spark]'``),
``spark-submit`` of ``SparkConnectServer`` with ``local[2]`` on a free loopback port, in a
subprocess :meth:`LocalSparkConnect.stop` ends. Used by ``python -m bench.scale`` and by the
Spark tests (tests/support/spark.py); ``remote`` given: a server already running (no start,
no stop). The same two commands are in docs/operations.md, "Running on Spark".

    python -m bench.spark_local memory [--cells 1000000]

measures the proxy's peak memory while it fetches a GROUP BY of ``--cells`` cells from a
local server: ``collect()`` (the whole Arrow result, a ``Row`` per cell, then the tuples)
against the backend's streamed fetch (``proxy.backends.spark.stream``: one Arrow batch at
a time), each in a fresh process (peak RSS above the process's level before the query,
and tracemalloc's peak of the Python heap)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
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

    def start(self, timeout_s: float = 120) -> LocalSparkConnect:
        if self.external:
            self.session().sql("SELECT 1").collect()
            return self
        env = dict(os.environ, SPARK_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1")
        cmd = [
            str(self.home / "bin" / "spark-submit"),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master",
            "local[2]",
            "--conf",
            f"spark.connect.grpc.binding.port={self.port}",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            f"spark.sql.warehouse.dir={self.workdir / 'warehouse'}",
            "--conf",
            "spark.ui.enabled=false",
            "--driver-memory",
            self.driver_memory,
            "spark-internal",
        ]
        self.proc = subprocess.Popen(
            cmd, env=env, cwd=self.workdir, stdout=open(self.log, "w"), stderr=subprocess.STDOUT
        )
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Spark Connect exited: {self.log.read_text()[-800:]}")
            if self._listening():  # only then a session: the client's own retries of an
                try:  # unreachable server back off for up to a minute
                    self.session().sql("SELECT 1").collect()
                    return self
                except Exception:
                    pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("Spark Connect did not start in time")

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def kill(self) -> None:
        """Kill the server at once (SIGKILL: a lost cluster, not a shutdown)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(20)
            self.proc = None

    def session(self):
        """A new Connect session, closed by :meth:`stop` (an open client keeps threads that
        can hold the interpreter's exit after a failed query)."""
        from pyspark.sql.connect.session import SparkSession

        s = SparkSession.builder.remote(self.remote).create()
        self.sessions.append(s)
        return s

    def stop(self) -> None:
        for s in self.sessions:  # close the clients only: the server is about to stop
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


# -- python -m bench.spark_local memory ---------------------------------------------------
CELLS_SQL = "SELECT id AS k, COUNT(*) AS n, SUM(id % 97) AS s FROM range({n}) GROUP BY id"


def _measure(remote: str, mode: str, cells: int) -> dict:
    """In this (fresh) process: peak memory of fetching ``cells`` cells by ``mode``."""
    from pyspark.sql.connect.session import SparkSession

    from proxy.backends.spark import stream

    s = SparkSession.builder.remote(remote).create()
    s.sql("SELECT 1").collect()
    sql = CELLS_SQL.format(n=cells)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    t0 = time.perf_counter()
    rows = [tuple(r) for r in s.sql(sql).collect()] if mode == "collect" else stream(s.sql(sql))
    dt = time.perf_counter() - t0
    _, heap_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    s.client.close()
    return {
        "mode": mode,
        "cells": len(rows),
        "rss_peak_mb": (peak - base) / 1024,
        "heap_peak_mb": heap_peak / 2**20,
        "seconds": dt,
    }


def memory(cells: int, remote: str | None) -> list[dict]:
    """Both modes, each in its own process, against ``remote`` or a local server."""
    with tempfile.TemporaryDirectory() as work:
        server = LocalSparkConnect(Path(work), remote=remote).start()
        try:
            out = []
            for mode in ("collect", "stream"):
                r = subprocess.run(
                    [sys.executable, "-m", "bench.spark_local", "_measure", server.remote, mode, str(cells)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                out.append(json.loads(r.stdout.strip().splitlines()[-1]))
            return out
        finally:
            server.stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_local")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("memory", help="peak proxy memory of a large GROUP BY: collect vs stream")
    m.add_argument("--cells", type=int, default=1_000_000)
    m.add_argument("--remote", help="a running Spark Connect server (default: start a local one)")
    inner = sub.add_parser("_measure")
    inner.add_argument("remote")
    inner.add_argument("mode", choices=["collect", "stream"])
    inner.add_argument("cells", type=int)
    args = ap.parse_args(argv)
    if args.cmd == "_measure":
        print(json.dumps(_measure(args.remote, args.mode, args.cells)))
        return
    why = unavailable()
    if why:
        sys.exit(f"bench.spark_local: {why}")
    for r in memory(args.cells, args.remote):
        print(
            f"{r['mode']:8s} {r['cells']:>9,} cells  peak RSS +{r['rss_peak_mb']:7.1f} MB  "
            f"Python heap peak {r['heap_peak_mb']:7.1f} MB  {r['seconds']:6.2f} s"
        )


if __name__ == "__main__":
    main()
