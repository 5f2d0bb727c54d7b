"""A real dpgate service in a process of its own, for event-loop latency tests (nothing
heavy on the event loop).

    python tests/support/loop_service.py STATE_DIR [--switch SECONDS] [--workers N]

Starts :class:`support.service.Service` on the demo config plus a table ``cells`` (a
GROUP BY over its column ``g`` releases ``CELLS`` cells: a public domain), with budgets
large enough for thousands of fresh releases, prints its port, and serves until its
stdin closes; a line ``phase NAME`` on stdin starts a phase of the loop probe
(:class:`LoopProbe`), ``stats`` prints its figures as one JSON line. Its own process: the measuring clients never share its GIL. ``--switch``
sets ``sys.setswitchinterval`` after the gateway has set its own (an experiment).
``--workers N`` serves the same config and data with ``dpgate serve --workers N`` instead
(:func:`serve_workers`; no loop probe), to compare a slow session on the repeats' worker
with one on another worker.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository

from support.service import Service, config_toml, make_config


class LoopProbe:
    """CPU time of every event-loop callback (``time.thread_time``: the loop thread's own
    work, not its waits for the GIL or for a core), per phase named by the test; the
    longest are kept with where their task stopped."""

    def __init__(self) -> None:
        self.phase = "warmup"
        self.cpu: dict[str, list[float]] = {}
        self.top: list[tuple[float, str]] = []
        self.gc: list[tuple[float, int]] = []
        self.steps: dict[str, int] = {}
        self.by_task: dict[tuple[str, str], list[float]] = {}

    def install(self) -> None:
        orig = asyncio.events.Handle._run
        probe = self

        def _run(handle):
            start = _where(handle)
            t0 = time.thread_time()
            s0 = resource.getrusage(resource.RUSAGE_THREAD).ru_stime
            try:
                return orig(handle)
            finally:
                dt = time.thread_time() - t0
                probe.cpu.setdefault(probe.phase, []).append(dt)
                tname = start.split("]")[0][1:] if start.startswith("[") else "-"
                probe.steps[tname] = probe.steps.get(tname, 0) + 1
                if probe.phase != "warmup":
                    probe.by_task.setdefault((probe.phase, tname), []).append(dt)
                if dt > 0.001 and probe.phase != "warmup":
                    sys_ms = (resource.getrusage(resource.RUSAGE_THREAD).ru_stime - s0) * 1000
                    probe.top.append(
                        (dt, f"{probe.phase} (system {sys_ms:.2f} ms): from {start} to {_where(handle)}")
                    )

        asyncio.events.Handle._run = _run
        loop_thread = []
        started = {}

        def on_gc(phase, info):  # garbage collections of the loop thread, and their time
            if not loop_thread or threading.get_ident() != loop_thread[0]:
                return
            if phase == "start":
                started["t"] = time.perf_counter()
            elif "t" in started and probe.phase != "warmup":
                probe.gc.append((time.perf_counter() - started.pop("t"), info["generation"]))

        gc.callbacks.append(on_gc)
        self.mark_loop_thread = lambda: loop_thread.append(threading.get_ident())

    def stats(self) -> dict:
        out = {ph: sorted(xs) for ph, xs in self.cpu.items()}
        return {
            "cpu_ms": {ph: [x * 1000 for x in xs[-20:]] for ph, xs in out.items()},
            "n": {ph: len(xs) for ph, xs in out.items()},
            "top": [f"{dt * 1000:.2f} ms {w}" for dt, w in sorted(self.top, reverse=True)[:15]],
            "over_ms": {
                ph: {str(ms): sum(x > ms / 1000 for x in xs) for ms in (1, 2, 5)} for ph, xs in out.items()
            },
            "steps": dict(sorted(self.steps.items(), key=lambda kv: -kv[1])[:6]),
            "others_ms": self._others(),
            "objects": len(gc.get_objects()),
            "frozen": gc.get_freeze_count(),
            "gc": [f"gen{g} {dt * 1000:.2f} ms" for dt, g in sorted(self.gc, reverse=True)[:8]],
            "gc_max_ms": max((dt * 1000 for dt, _ in self.gc), default=0.0),
        }

    def _others(self) -> dict:
        """Per phase, the longest step (ms) of every task but the busiest one (the stream of
        repeats being timed): what the other sessions' statements cost the loop at a time."""
        busiest = max(self.steps, key=lambda k: (k != "-", self.steps[k]), default=None)
        out: dict[str, float] = {}
        for (ph, task), xs in self.by_task.items():
            if task != busiest:
                out[ph] = max(out.get(ph, 0.0), max(xs) * 1000)
        return out


def _where(handle) -> str:
    cb = handle._callback
    task = getattr(cb, "__self__", None)
    coro = getattr(task, "get_coro", lambda: None)()
    frame = getattr(coro, "cr_frame", None)
    chain = []
    while coro is not None and frame is not None:
        chain.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        coro = getattr(coro, "cr_await", None)
        frame = getattr(coro, "cr_frame", None)
    name = task.get_name() if hasattr(task, "get_name") else ""
    return f"[{name}] " + " > ".join(chain[-4:]) if chain else repr(cb)[:120]


CELLS = 10_000
ROWS = 200_000
BIG_BUDGET = 1e9


def config() -> dict:
    cfg = make_config()
    cfg["tables"]["cells"] = {
        "description": "a 10,000-value public domain (event-loop latency tests)",
        "columns": {
            "g": {"type": "int", "domain_range": [1, CELLS], "description": "cell"},
            "x": {"type": "int", "lower": 0, "upper": 100, "description": "an int"},
            "y": {"type": "float", "lower": 0, "upper": 1000, "description": "a float"},
        },
    }
    for tier in ("default", "bronze", "silver", "gold"):
        cfg["tiers"][tier]["budget"] = BIG_BUDGET
    return cfg


def create_cells(svc: Service, rows: int = ROWS) -> None:
    """The table ``cells`` in the service's DuckDB (every g of the domain has rows)."""
    svc.gw.backend.execute_script(
        f"CREATE TABLE IF NOT EXISTS cells AS SELECT (i % {CELLS}) + 1 AS g, (i * 7919) % 101 AS x, "
        f"((i * 104729) % 100000) / 100.0 AS y FROM range(0, {int(rows)}) t(i)"
    )


def serve_workers(state: Path, workers: int) -> int:
    """``dpgate serve --workers N`` on the same config and data (the DuckDB file is written
    here first: the workers open it read-only); prints its port, stops when stdin closes."""
    from proxy import demo
    from proxy.backends.duckdb import DuckDBBackend

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.workers import free_port, start

    state.mkdir(parents=True, exist_ok=True)
    db = state / "data.duckdb"
    backend = DuckDBBackend(db)
    demo.load_duckdb(backend, n_people=20_000)
    backend.execute_script(
        f"CREATE TABLE IF NOT EXISTS cells AS SELECT (i % {CELLS}) + 1 AS g, (i * 7919) % 101 AS x, "
        f"((i * 104729) % 100000) / 100.0 AS y FROM range(0, {ROWS}) t(i)"
    )
    asyncio.run(backend.close())
    cfg = config()
    port = free_port()
    cfg.pop("demo", None)
    cfg["server"].update(host="127.0.0.1", port=port, state_dir=str(state))
    cfg["server"].setdefault("limits", {})["max_statements_per_role"] = 64
    cfg["backend"] = {"kind": "duckdb", "path": str(db)}
    for spec in cfg["roles"].values():  # read-only workers: no INSERT grants
        spec.pop("insert", None)
        spec.pop("insert_rows_per_minute", None)
    path = state / "dpgate.toml"
    path.write_text(config_toml(cfg))
    proc = start(path, workers=workers)
    from proxy.gateway.runtime import SWITCH_INTERVAL_S

    print(port, SWITCH_INTERVAL_S, flush=True)  # what each worker's gateway sets
    try:
        for line in sys.stdin:
            if line.split()[:1] == ["stats"]:
                print(json.dumps(None), flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("state_dir")
    ap.add_argument("--switch", type=float, default=None)
    ap.add_argument("--debug", action="store_true")
    ap.add_argument("--duckdb-threads", type=int, default=None)
    ap.add_argument(
        "--workers",
        type=int,
        default=None,
        help="serve with dpgate serve --workers N instead (no loop probe)",
    )
    args = ap.parse_args(argv)
    if args.workers:
        return serve_workers(Path(args.state_dir), args.workers)
    probe = LoopProbe()
    probe.install()
    svc = Service(config(), Path(args.state_dir), people_rows=20_000).start()
    svc.loop.call_soon_threadsafe(probe.mark_loop_thread)
    create_cells(svc)
    if args.duckdb_threads:
        svc.gw.backend.execute_script(f"SET threads = {args.duckdb_threads}")
    if args.switch is not None:
        sys.setswitchinterval(args.switch)
    if args.debug:  # asyncio names every callback that holds the loop > 2 ms
        logging.basicConfig(level=logging.WARNING)
        svc.loop.call_soon_threadsafe(svc.loop.set_debug, True)
        svc.loop.slow_callback_duration = 0.002
    print(svc.port, sys.getswitchinterval(), flush=True)
    try:
        for line in sys.stdin:  # "phase NAME" | "stats": the loop probe
            cmd = line.split()
            if cmd[:1] == ["phase"]:
                probe.phase = cmd[1]
            elif cmd[:1] == ["stats"]:
                print(json.dumps(probe.stats()), flush=True)
    finally:
        svc.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
