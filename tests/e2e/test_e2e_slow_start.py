"""A child of ``dpgate serve --workers 2`` that is slow to start, or keeps dying, never takes
down the workers that serve (proxy/cli/workers.py): past the ready deadline the service is
announced without it, and a child that dies again and again is restarted later and later
instead of stopping the service. The heavy-statement lane starts at the workers' priority
(at SCHED_IDLE a saturated host never gives it the CPU to start) and drops to SCHED_IDLE
once ready. A slow start is made by the test seam ``DPGATE_TEST_START_DELAY`` (no real
saturation needed); the deadline is shortened by ``DPGATE_READY_TIMEOUT_S``."""

from __future__ import annotations

import os
import re
import signal
import time

import psycopg
import pytest

from bench.workers import dsn, free_port, prepare, start

LIGHT = "SELECT sex, COUNT(*) FROM pums WHERE age > {x} GROUP BY sex"


def _children(pid: int) -> list[int]:
    return [int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()]


def _workers(proc) -> list[int]:
    line = next(x for x in proc.output if x.startswith("dpgate: listening on"))
    return [int(p) for p in re.search(r"2 workers: pids (\d+), (\d+)", line).groups()]


@pytest.fixture
def serve(tmp_path, monkeypatch):
    procs = []

    def go(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        port = free_port()
        proc = start(prepare(tmp_path / "s", port), workers=2)
        proc.port = port
        procs.append(proc)
        return proc

    yield go
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except Exception:
                p.kill()
                p.wait(10)


def test_a_lane_slow_to_start_never_stops_the_serving_workers(serve):
    svc = serve(DPGATE_TEST_START_DELAY="lane:10", DPGATE_READY_TIMEOUT_S="2")
    workers = _workers(svc)
    assert any("not ready after 2 s; serving meanwhile" in x for x in svc.output), svc.output
    lane = next(p for p in _children(svc.pid) if p not in workers)
    assert os.sched_getscheduler(lane) == os.SCHED_OTHER  # starting: the workers' priority
    with psycopg.connect(dsn(svc.port), autocommit=True) as c:
        assert len(c.execute(LIGHT.format(x=20)).fetchall()) == 2
    deadline = time.time() + 60  # the lane gets ready: SCHED_IDLE
    while time.time() < deadline and os.sched_getscheduler(lane) != os.SCHED_IDLE:
        time.sleep(0.1)
    assert os.sched_getscheduler(lane) == os.SCHED_IDLE
    tids = os.listdir(f"/proc/{lane}/task")  # every thread it has, DuckDB's too
    assert len(tids) > 1 and all(os.sched_getscheduler(int(t)) == os.SCHED_IDLE for t in tids)
    assert svc.poll() is None and sorted(_children(svc.pid)) == sorted(workers + [lane])
    with psycopg.connect(dsn(svc.port), autocommit=True) as c:
        assert len(c.execute(LIGHT.format(x=21)).fetchall()) == 2


def test_a_lane_that_keeps_dying_is_restarted_later_and_the_service_stays(serve):
    svc = serve()
    workers = _workers(svc)
    for k in range(8):  # more deaths within a minute than are restarted at once
        deadline = time.time() + 60
        while (
            time.time() < deadline and len(others := [p for p in _children(svc.pid) if p not in workers]) != 1
        ):
            time.sleep(0.05)
        assert len(others) == 1 and svc.poll() is None, "".join(svc.output)
        os.kill(others[0], signal.SIGKILL)
        while others[0] in _children(svc.pid):
            time.sleep(0.02)
    time.sleep(0.5)
    assert svc.poll() is None, "".join(svc.output)
    assert any(re.search(r"deaths within 60 s: restarting it in \d+ s", x) for x in svc.output), svc.output
    with psycopg.connect(dsn(svc.port), autocommit=True) as c:  # the workers serve meanwhile
        assert len(c.execute(LIGHT.format(x=22)).fetchall()) == 2
    deadline = time.time() + 60  # and the lane comes back
    while time.time() < deadline and len([p for p in _children(svc.pid) if p not in workers]) != 1:
        time.sleep(0.1)
    assert len(_children(svc.pid)) == 3 and svc.poll() is None
