"""``[server] cpu_affinity`` (proxy/cli/affinity.py) on a real ``dpgate serve --workers 2``:
with ``auto`` each worker's event-loop thread, and the threads it starts to serve (the scans'),
are held to that worker's core; DuckDB's scheduler threads, started before, and the whole
heavy-statement lane keep every core; with ``off`` no thread is held. Read from the kernel
(``Cpus_allowed_list`` of every thread in ``/proc``)."""

from __future__ import annotations

import os
import re

import psycopg
import pytest

from bench.workers import dsn, free_port, prepare, start
from proxy.cli.affinity import share

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="one core here: there is nothing to hold the workers to"
)


def _allowed(pid: int) -> dict[int, set[int]]:
    """Each thread of ``pid``: the cores it may run on."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = open(f"/proc/{pid}/task/{tid}/status").read()
        except OSError:  # a thread that just ended
            continue
        cpus: set[int] = set()
        for part in re.search(r"Cpus_allowed_list:\s*(\S+)", text).group(1).split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        out[int(tid)] = cpus
    return out


def _serve(tmp_path, mode: str | None):
    port = free_port()
    cfg = prepare(tmp_path, port)
    if mode is not None:
        cfg.write_text(cfg.read_text().replace("[server]\n", f'[server]\ncpu_affinity = "{mode}"\n', 1))
    proc = start(cfg, workers=2, cpus=set(os.sched_getaffinity(0)))
    line = next(x for x in proc.output if x.startswith("dpgate: listening on"))
    workers = [int(p) for p in re.search(r"2 workers: pids (\d+), (\d+)", line).groups()]
    children = [int(p) for p in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()]
    lane = next(p for p in children if p not in workers)
    for _ in range(12):  # statements on both workers: their scan threads
        with psycopg.connect(dsn(port), autocommit=True) as c:
            c.execute("SELECT sex, COUNT(*) FROM pums WHERE age > %s GROUP BY sex" % (20 + _)).fetchall()
    return proc, workers, lane


def test_auto_holds_each_workers_serving_threads_to_its_core(tmp_path):
    every = set(os.sched_getaffinity(0))
    proc, workers, lane = _serve(tmp_path, None)  # the default: auto
    try:
        for i, pid in enumerate(workers):
            threads = _allowed(pid)
            mine = share(i, 2, sorted(every))
            assert threads[pid] == mine  # the event loop
            held = [t for t, c in threads.items() if c == mine]
            assert len(held) >= 2  # … and threads it started (scans)
            assert any(c == every for c in threads.values())  # DuckDB's own: free
            assert set().union(*threads.values()) == every  # and nothing outside the service's
        assert all(c == every for c in _allowed(lane).values())  # the lane: never held
        assert all(c == every for c in _allowed(proc.pid).values())
    finally:
        proc.terminate()
        proc.wait(30)


def test_off_holds_nothing(tmp_path):
    every = set(os.sched_getaffinity(0))
    proc, workers, lane = _serve(tmp_path, "off")
    try:
        for pid in workers + [lane]:
            assert all(c == every for c in _allowed(pid).values())
    finally:
        proc.terminate()
        proc.wait(30)
