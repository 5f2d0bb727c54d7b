"""Fresh-release and repeat throughput of ``dpgate serve --workers N``.

    python -m bench.workers [--quick] [--psycopg]

A real ``dpgate serve`` subprocess on the PUMS table (1,000 rows, the demo's declaration),
trust auth on loopback, one DuckDB file prepared before the start; ``C`` client
connections for a fixed time per phase:

* **fresh**: every statement is a release never made before (``SELECT sex, COUNT(*),
  AVG(income) FROM pums WHERE age BETWEEN <lo> AND <hi> AND educ >= <e> GROUP BY sex`` with a
  ``(lo, hi, e)`` no other statement of the run uses), so each is a scan, a mechanism and a
  durable charge; run with 1 worker, then with 2 (a fresh state dir each: same data, new ledger);
* **with $n**: the same fresh statements sent as ``$1..$3`` parameters (Parse / Bind / Describe /
  Execute each time, as drivers send them);
* **repeat**: 40 statements released before the clock starts, again and again (release store
  hits, nothing charged).

The clients are ``pgbench`` (:mod:`bench.pgbench_load`: PostgreSQL's C client, one thread, a few
per cent of a core) where it is installed, else — or with ``--psycopg`` — psycopg threads in
``CLIENT_PROCS`` processes (their own CPU then competes with the proxy: lower bounds). Beside
each rate, the proxy's CPU time per statement (its processes, all threads, from ``/proc``), and
the cores the clients used. Then one worker held to one core (``sched_setaffinity`` before it starts:
every thread of it, DuckDB's included), fresh releases only: how the service scales with cores
rather than with workers. One table and one ``HEADLINE:`` line against the goals: fresh ≥ 1.8×
from 1 to 2 workers (and, beside it, per core), ≥ 300 fresh/s and ≥ 3,000 repeats/s with 2. The
lines before it say how far 2 cores allow the first goal at one worker's CPU per statement (its
scans already run beside its event loop) and what the 1-core worker measured.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import duckdb

from bench import pgbench_load
from proxy.demo import demo_config_path, pums_rows

GOAL_SPEEDUP, GOAL_FRESH, GOAL_REPEAT = 1.8, 300.0, 3000.0
CLIENT_PROCS = 2
FRESH = (
    "SELECT sex, COUNT(*), AVG(income) FROM pums WHERE age BETWEEN {lo} AND {hi} AND educ >= {e} GROUP BY sex"
)
HOT = [FRESH.format(lo=lo, hi=lo + 30, e=20) for lo in range(40)]  # educ >= 20: no fresh statement's


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml(v) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(v)


def prepare(
    state: Path,
    port: int,
    *,
    workers: int | None = None,
    tiny_budget: float = 5.0,
    timeout_ms: int = 30_000,
    max_catalog_rows: int | None = None,
) -> Path:
    """A state dir with a DuckDB file holding PUMS and a config serving it (trust auth;
    roles ``bench``: ε 1, unlimited, ``tiny``: ε 1, budget ``tiny_budget``); the config's path.
    ``max_catalog_rows``: raise the catalog's row cap (a test that needs a long catalog query)."""
    state.mkdir(parents=True, exist_ok=True)
    db = state / "data.duckdb"
    if not db.exists():
        con = duckdb.connect(str(db))
        con.execute(
            "CREATE TABLE pums (age INTEGER, sex INTEGER, educ INTEGER, race INTEGER, "
            "income DOUBLE, married INTEGER)"
        )
        con.executemany("INSERT INTO pums VALUES (?,?,?,?,?,?)", pums_rows())
        con.close()
    cols = tomllib.loads(demo_config_path().read_text())["tables"]["pums"]["columns"]
    lines = [
        "[server]",
        'host = "127.0.0.1"',
        f"port = {port}",
        'database = "demo"',
        'auth = "trust"',
        f"state_dir = {_toml(str(state))}",
    ]
    if workers is not None:
        lines.append(f"workers = {workers}")
    lines += [
        "[server.limits]",
        "max_statements_per_role = 256",
        "max_connections = 512",
        f"statement_timeout_ms = {timeout_ms}",
        "shutdown_grace_s = 2",
        *([f"max_catalog_rows = {max_catalog_rows}"] if max_catalog_rows is not None else []),
        "[backend]",
        'kind = "duckdb"',
        f"path = {_toml(str(db))}",
        "[tiers.bench]",
        "epsilon = 1.0",
        "budget = 1000000000",
        'period = "never"',
        "[tiers.tiny]",
        "epsilon = 1.0",
        f"budget = {tiny_budget}",
        'period = "day"',
        "[roles.bench]",
        'tier = "bench"',
        "[roles.tiny]",
        'tier = "tiny"',
        "[tables.pums.columns]",
    ]
    for name, col in cols.items():
        lines.append(
            f"{name} = {{ "
            + ", ".join(f"{k} = {_toml(v)}" for k, v in col.items() if k != "description")
            + " }"
        )
    path = state / "dpgate.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start(
    config: Path, workers: int | None = None, extra: list[str] = (), cpus: set[int] | None = None
) -> subprocess.Popen:
    """``dpgate serve --config`` as a subprocess; returns once it printed its listening line.
    ``cpus``: the cores it (and every process it forks) may run on."""
    cmd = [sys.executable, "-m", "proxy.cli", "serve", "--config", str(config), *extra]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        preexec_fn=pin,
    )
    out: list[str] = []
    deadline = time.time() + 90
    for line in proc.stdout:
        out.append(line)
        if line.startswith("dpgate: listening on"):
            threading.Thread(target=lambda: [out.append(x) for x in proc.stdout], daemon=True).start()
            proc.output = out
            return proc
        if time.time() > deadline:
            break
    proc.kill()
    raise RuntimeError("dpgate did not start:\n" + "".join(out))


def dsn(port: int, role: str = "bench") -> str:
    return f"host=127.0.0.1 port={port} dbname=demo user={role} sslmode=disable"


def _drive_part(port: int, clients: int, seconds: float, kind: str, part: int, parts: int, start_at: float):
    """One client process: ``clients`` threads, one connection each, until ``start_at + seconds``:
    (statements done, errors, connections per backend pid)."""
    import psycopg

    conns = [psycopg.connect(dsn(port), autocommit=True) for _ in range(clients)]
    pids = [c.info.backend_pid for c in conns]
    nxt = (
        fresh_statements(part, parts)
        if kind == "fresh"
        else repeat_statements(part)
        if kind == "repeat"
        else warm_statements(part)
    )
    done, errors, lock = [0], [0], threading.Lock()

    def run(c):
        n = e = 0
        while time.time() < start_at:
            time.sleep(0.001)
        while time.time() < start_at + seconds:
            try:
                c.execute(nxt()).fetchall()
                n += 1
            except psycopg.Error:
                e += 1
        with lock:
            done[0] += n
            errors[0] += e

    threads = [threading.Thread(target=run, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in conns:
        c.close()
    return done[0], errors[0], pids


def _drive(port: int, clients: int, seconds: float, kind: str, procs: int = CLIENT_PROCS):
    """``clients`` connections in ``procs`` client processes (so the clients' own Python is
    not one GIL) for ``seconds``: (statements per second, errors, backend pids)."""
    ctx = multiprocessing.get_context("fork")
    start_at = time.time() + 0.5 + 0.05 * clients / procs  # all connected before the clock starts
    with ctx.Pool(procs) as pool:
        parts = pool.starmap(
            _drive_part,
            [
                (port, clients // procs + (i < clients % procs), seconds, kind, i, procs, start_at)
                for i in range(procs)
            ],
        )
    return (
        sum(p[0] for p in parts) / seconds,
        sum(p[1] for p in parts),
        [pid for p in parts for pid in p[2]],
    )


def fresh_statements(part: int = 0, parts: int = 1):
    """Distinct (lo, hi, e): no statement repeats within a run (client process ``part`` of
    ``parts`` takes every ``parts``-th)."""
    combos = itertools.islice(
        ((lo, lo + span, e) for e in range(1, 17) for span in range(0, 101) for lo in range(0, 101 - span)),
        part,
        None,
        parts,
    )
    lock = threading.Lock()

    def next_sql() -> str:
        with lock:
            lo, hi, e = next(combos)
        return FRESH.format(lo=lo, hi=hi, e=e)

    return next_sql


def warm_statements(part: int = 0):
    """Warm-up statements (educ >= 18: neither a fresh nor a repeat statement of the run)."""
    count, lock = itertools.count(part * 1000), threading.Lock()

    def next_sql() -> str:
        with lock:
            i = next(count)
        return FRESH.format(lo=i % 101, hi=100 + i // 101, e=18)

    return next_sql


def repeat_statements(part: int = 0):
    """The same 40 statements over and over (released once in the warm-up)."""
    cycle, lock = itertools.islice(itertools.cycle(HOT), part * 7, None), threading.Lock()

    def next_sql() -> str:
        with lock:
            return next(cycle)

    return next_sql


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) of ``pid`` and its live children so far."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        kids = open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        kids = []
    total = 0.0
    for p in [pid, *map(int, kids)]:
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14, 15)
    return total


def measure(
    workers: int,
    clients: int,
    seconds: float,
    use_pgbench: bool,
    cpus: set[int] | None = None,
    fresh_only: bool = False,
) -> dict:
    """One server with ``workers`` (on the cores ``cpus``, default all): fresh releases (and,
    with pgbench, fresh releases with parameters), then repeats, or only the first with
    ``fresh_only``; rates, the proxy's CPU per statement, the clients' cores."""
    with tempfile.TemporaryDirectory(prefix="dpgate-bench-workers-") as tmp:
        port = free_port()
        proc = start(prepare(Path(tmp), port), workers, cpus=cpus)
        out = {"workers": workers, "err": 0, "client_cores": []}

        def phase(name: str, kind: str, mode: str = "simple", offset: int = 0) -> None:
            cpu0 = cpu_seconds(proc.pid)
            if use_pgbench:
                r = pgbench_load.run(port, clients, seconds, kind, mode, offset)
                rate, err = r["rate"], r["errors"]
                out["done_" + name] = r["done"]
                out["client_cores"].append(r["client_cpu"] / seconds)
            else:
                rate, err, _ = _drive(port, clients, seconds, kind)
            out[name], out["err"] = rate, out["err"] + err
            out["cpu_" + name] = (cpu_seconds(proc.pid) - cpu0) / max(rate * seconds, 1) * 1000

        try:
            _drive(port, 4, 0.5, "warm", procs=1)  # warm-up (plans, caches)
            phase("fresh", "fresh")
            if fresh_only:
                return out
            if use_pgbench:  # the same, as $1..$3 parameters
                phase(
                    "fresh_params", "fresh", "extended", offset=out["done_fresh"] + 1
                )  # past any client's counter
            _drive(port, 4, 0.5, "repeat", procs=1)  # the 40 are released once
            phase("repeat", "repeat")
            return out
        finally:
            proc.terminate()
            proc.wait(30)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.workers")
    ap.add_argument("--quick", action="store_true", help="short runs (< 50 s in all)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument(
        "--psycopg", action="store_true", help="Python clients (psycopg threads) even if pgbench is here"
    )
    args = ap.parse_args(argv)
    seconds = 3.0 if args.quick else 15.0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    use_pgbench = pgbench_load.available() is not None and not args.psycopg
    one = measure(1, args.clients, seconds, use_pgbench)
    two = measure(2, args.clients, seconds, use_pgbench)
    pinned = (
        measure(1, args.clients, seconds, use_pgbench, cpus={min(os.sched_getaffinity(0))}, fresh_only=True)
        if cores >= 2 and hasattr(os, "sched_setaffinity")
        else None
    )
    speed = two["fresh"] / one["fresh"] if one["fresh"] else 0.0
    client = (
        "pgbench (C, one thread)"
        if use_pgbench
        else f"psycopg threads in {CLIENT_PROCS} processes"
        + ("" if pgbench_load.available() else "; no pgbench here")
    )
    print(
        f"bench.workers: PUMS (1,000 rows), {args.clients} clients, {seconds:g} s per phase, {cores} cores; "
        f"clients: {client}, on the same cores"
    )
    print(
        f"{'workers':>7} {'fresh q/s':>10} {'CPU ms':>7} {'cores':>6} {'with $n q/s':>12} {'CPU ms':>7} "
        f"{'repeat q/s':>11} {'CPU ms':>7} {'cores':>6} {'errors':>7} {'client cores':>13}"
    )
    for r in (one, two):
        params = (
            f"{r['fresh_params']:>12.0f} {r['cpu_fresh_params']:>7.2f}"
            if "fresh_params" in r
            else f"{'-':>12} {'-':>7}"
        )
        clients = f"{max(r['client_cores']):>13.2f}" if r["client_cores"] else f"{'-':>13}"
        print(
            f"{r['workers']:>7} {r['fresh']:>10.0f} {r['cpu_fresh']:>7.2f} {r['fresh'] * r['cpu_fresh'] / 1000:>6.2f} "
            f"{params} {r['repeat']:>11.0f} {r['cpu_repeat']:>7.2f} {r['repeat'] * r['cpu_repeat'] / 1000:>6.2f} "
            f"{r['err']:>7} {clients}"
        )
    print(
        "(CPU ms: the proxy's CPU time per statement, its processes and threads, clients not counted; "
        "cores: the cores it got, CPU s per s; with $n: the fresh statements sent as parameters, "
        "Parse/Bind/Describe/Execute each time; client cores: the most any phase's clients used)"
    )
    used = one["fresh"] * one["cpu_fresh"] / 1000
    if one["client_cores"]:
        spare = cores - max(one["client_cores"])
        print(
            f"(1 worker already uses {used:.2f} cores: its scans run in DuckDB outside the GIL; at its "
            f"{one['cpu_fresh']:.2f} ms of CPU per statement the {spare:.2f} cores the clients leave would allow "
            f"{spare / used if used else 0:.2f}x from 1 to 2 workers; 2 workers spent {two['cpu_fresh']:.2f} ms "
            f"each, their threads held to their cores: [server] cpu_affinity)"
        )
    else:
        print(
            f"(1 worker already uses {used:.2f} cores: its scans run in DuckDB outside the GIL; the Python "
            f"clients' own CPU is not measured)"
        )
    per_core = ""
    if pinned is not None and pinned["fresh"]:
        per_core = f"; per core {two['fresh'] / pinned['fresh']:.2f}x"
        print(
            f"(cores, not workers: 1 worker held to 1 core (sched_setaffinity, its threads and DuckDB's "
            f"included) {pinned['fresh']:.0f} fresh q/s, {pinned['cpu_fresh']:.2f} CPU ms each; 2 workers on "
            f"the {cores} cores {two['fresh']:.0f} q/s: {two['fresh'] / pinned['fresh']:.2f}x from 1 to 2 cores)"
        )
    ok = speed >= GOAL_SPEEDUP and two["fresh"] >= GOAL_FRESH and two["repeat"] >= GOAL_REPEAT
    print(
        f"HEADLINE: fresh releases {one['fresh']:.0f} -> {two['fresh']:.0f} q/s from 1 to 2 workers "
        f"({speed:.2f}x{per_core}, goal >= {GOAL_SPEEDUP}x; goal >= {GOAL_FRESH:.0f} q/s), repeats "
        f"{two['repeat']:.0f} q/s with 2 (goal >= {GOAL_REPEAT:.0f}) {'PASS' if ok else 'MISS'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
