"""Large results over the wire: a fresh release, its first repeat after a start and a kept
repeat, against the analyst's own query on the raw engine, for 100, 10,000 and 100,000 cells.

    python -m bench.repeats [--quick]

A DuckDB file holds ``grid(g, v)``, ``rows`` rows over ``cells`` public keys ``g``; the
statement is ``SELECT g, COUNT(*), AVG(v) FROM grid GROUP BY g`` (one row per key). dpgate
serves it over the Postgres wire (in this process, a thread) to a psycopg client:

* **fresh**: a new release (new data version each time: the scan, the noise, the ledger);
* **repeat, first after a start**: the stored release decoded, the statement's rows built
  and encoded (what a repeat costs when its rows are not kept: the service started again);
* **repeat**: the rows kept encoded by the first reply (``proxy/pipeline/repeat_rows.py``)
  written as they are.

"raw DuckDB" is the same statement on the same file, in process, with ``fetchall()``: the
engine's fetch of the same rows without any wire. Each dpgate timing is paired with a raw one
taken next to it (the order alternating); the ratio is the median of the pairs' ratios.
HEADLINE: a repeat of a 10,000-row release ≤ 2× the raw engine's fetch of the same rows.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import duckdb
import psycopg

from config import parse_config
from proxy.demo import demo_config_path
from proxy.gateway import Gateway
from proxy.wire.server import Server

QUERY = "SELECT g, COUNT(*) AS n, AVG(v) AS a FROM grid GROUP BY g"
GOAL_CELLS, GOAL_RATIO = 10_000, 2.0


def _config(state: Path, db: Path, cells: int):
    data = tomllib.loads(demo_config_path().read_text())
    data.pop("demo", None)
    data["server"].update(auth="trust", host="127.0.0.1", state_dir=str(state), port=0)
    data["backend"] = {"kind": "duckdb", "path": str(db)}
    data["tables"] = {
        "grid": {
            "columns": {
                "g": {"type": "int", "domain_range": [1, cells]},
                "v": {"type": "float", "lower": 0, "upper": 100},
            }
        }
    }
    data["tiers"] = {"bench": {"epsilon": 1.0, "budget": 1e9, "period": "never"}}
    data["roles"] = {"bench": {"tier": "bench"}}
    return parse_config(data, "bench.repeats")


class _Served:
    """dpgate on ``db`` in a thread, listening on loopback."""

    def __init__(self, state: Path, db: Path, cells: int) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.cfg = _config(state, db, cells)
        self.gw, self.server = self._call(self._start(state))

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(600)

    async def _start(self, state: Path):
        gw = Gateway(self.cfg, state)
        await gw.start()
        server = Server(gw.handler_factory, authenticator=gw, host="127.0.0.1", port=0)
        await server.start()
        return gw, server

    def close(self) -> None:
        async def stop():
            await self.server.stop()
            await self.gw.close()

        self._call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)

    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.server.port} user=bench dbname=demo sslmode=disable"


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(cells: int, rows: int, pairs: int) -> dict:
    """Median times (s) and paired ratios for one size."""
    with tempfile.TemporaryDirectory(prefix="dpgate-repeats-") as tmp:
        tmp_path = Path(tmp)
        db, raw_db = tmp_path / "grid.duckdb", tmp_path / "raw.duckdb"
        with duckdb.connect(str(db)) as c:
            c.execute(
                f"CREATE TABLE grid AS SELECT CAST(1 + hash(i) % {cells} AS BIGINT) AS g, "
                f"CAST(hash(i + 2) % 100000 AS DOUBLE) / 1000 AS v FROM range({rows}) t(i)"
            )
        shutil.copy(db, raw_db)  # the raw engine's own file: no lock shared with the service
        raw = duckdb.connect(str(raw_db))
        served = _Served(tmp_path / "state", db, cells)
        out: dict[str, list[float]] = {k: [] for k in ("raw", "fresh", "cold", "kept")}
        ratios: dict[str, list[float]] = {k: [] for k in ("fresh", "cold", "kept")}
        try:
            with psycopg.connect(served.dsn(), autocommit=True) as pc:
                n = len(pc.execute(QUERY).fetchall())  # warm: plan cache, first release
                raw.execute(QUERY).fetchall()
                assert n == cells, f"{n} rows for {cells} cells"
                for i in range(pairs):
                    served.gw.ledger.advance_data_version()  # the next statement is a fresh release
                    steps = {
                        "fresh": lambda: pc.execute(QUERY).fetchall(),
                        "cold": lambda: (served.gw.repeat_rows.clear(), pc.execute(QUERY).fetchall()),
                        "kept": lambda: pc.execute(QUERY).fetchall(),
                    }
                    for name, step in steps.items():  # in this order: fresh, then its repeats
                        first_raw = i % 2 == 0
                        r = _timed(lambda: raw.execute(QUERY).fetchall()) if first_raw else None
                        d = _timed(step)
                        r = r if r is not None else _timed(lambda: raw.execute(QUERY).fetchall())
                        out["raw"].append(r)
                        out[name].append(d)
                        ratios[name].append(d / r)
        finally:
            served.close()
            raw.close()
    return {
        "ms": {k: 1000 * statistics.median(v) for k, v in out.items()},
        "ratio": {k: statistics.median(v) for k, v in ratios.items()},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rows and pairs (under 50 s)")
    args = ap.parse_args(argv)
    rows, pairs = (200_000, 5) if args.quick else (1_000_000, 15)
    sizes = (100, 10_000, 100_000)
    print(f"{rows:,} rows; {QUERY}; {pairs} paired runs per size (median)")
    head = f"{'cells':>8} {'raw DuckDB':>11} {'fresh':>18} {'repeat, 1st after start':>25} {'repeat':>18}"
    print(head)
    print("-" * len(head))
    results = {}
    for cells in sizes:
        res = results[cells] = measure(cells, rows, pairs)
        ms, ratio = res["ms"], res["ratio"]
        cols = [f"{ms[k]:8.1f} ms {ratio[k]:5.2f}×" for k in ("fresh", "cold", "kept")]
        print(f"{cells:>8,} {ms['raw']:8.1f} ms {cols[0]:>18} {cols[1]:>25} {cols[2]:>18}")
    print("(× : the median of paired ratios dpgate / raw DuckDB; dpgate over the wire to psycopg)")
    got = results[GOAL_CELLS]["ratio"]["kept"]
    verdict = "met" if got <= GOAL_RATIO else "NOT met"
    print(
        f"HEADLINE: a repeat of a {GOAL_CELLS:,}-row release costs {got:.2f}× the raw engine's fetch of the "
        f"same rows (first repeat after a start {results[GOAL_CELLS]['ratio']['cold']:.2f}×); "
        f"goal ≤ {GOAL_RATIO:g}×: {verdict}"
    )
    return 0 if got <= GOAL_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
