"""``dpgate serve --workers 2`` (proxy/cli/workers.py): a real
subprocess on PUMS, psycopg clients. Answers from both workers (BackendKeyData pid ≡ worker
index mod 2); a repeat is identical and free on the other worker, also when fired at both
at once (one answer, one charge); concurrent fresh statements never overspend the tier's
budget (counted in the ledger); a CancelRequest accepted by the other worker cancels a slow
statement (the owner is stopped while the cancel is accepted, so the other worker must take
it); the owner page runs once; a killed worker is restarted; SIGTERM stops every worker
(and the heavy-statement lane: tests/e2e/test_e2e_lane.py);
a config that needs a DuckDB writer is refused more than one worker; workers that keep
dying stop the service (exit 1)."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from argparse import Namespace

import psycopg
import pytest

from bench.workers import dsn, free_port, prepare, start
from config import ConfigError, parse_config
from proxy.cli.workers import default_workers, resolve_workers
from proxy.stores.ledger import Ledger
from support.service import make_config

SLOW = (
    "SELECT count(*) FROM pg_class, range(200000000) r, range(1000) s "
    "WHERE (r.range * s.range) % 7 = 3"
)  # a catalog query that runs for minutes (max_catalog_rows raised)


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    state = tmp_path_factory.mktemp("workers")
    port, aport = free_port(), free_port()
    proc = start(
        prepare(state, port, tiny_budget=5.0, timeout_ms=600_000, max_catalog_rows=10**13),
        workers=2,
        extra=["--admin-http", f"127.0.0.1:{aport}"],
    )
    line = next(x for x in proc.output if x.startswith("dpgate: listening on"))
    proc.port, proc.aport, proc.state = port, aport, state
    proc.workers = [int(p) for p in re.search(r"2 workers: pids (\d+), (\d+)", line).groups()]
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def test_the_owner_page_runs_in_one_worker(svc):
    deadline = time.time() + 10
    while time.time() < deadline and not any("owner page on" in x for x in svc.output):
        time.sleep(0.05)
    lines = [x for x in svc.output if "owner page on" in x]
    assert len(lines) == 1 and f"http://127.0.0.1:{svc.aport}/" in lines[0], "".join(svc.output)
    with pytest.raises(urllib.error.HTTPError) as e:  # there, and asks for a sign-in
        urllib.request.urlopen(f"http://127.0.0.1:{svc.aport}/", timeout=10)
    assert e.value.code == 401


def _on_each_worker(svc, role="bench") -> dict[int, psycopg.Connection]:
    """One open connection per worker (the BackendKeyData pid says which); a worker that
    is (re)starting is waited for, up to 30 s."""
    got: dict[int, psycopg.Connection] = {}
    deadline = time.time() + 30
    while len(got) < 2 and time.time() < deadline:
        c = psycopg.connect(dsn(svc.port, role), autocommit=True)
        w = c.info.backend_pid % 2
        if w in got:
            c.close()
            time.sleep(0.05)
        else:
            got[w] = c
    assert set(got) == {0, 1}, "for 30 s every connection landed on one worker"
    return got


def _run(c: psycopg.Connection, sql: str):
    notes: list[str] = []
    c.add_notice_handler(lambda d: notes.append(d.message_primary))
    rows = c.execute(sql).fetchall()
    charged = [float(m.group(1)) for n in notes if (m := re.search(r"ε charged ([0-9.]+)", n))]
    return rows, charged


def _ledger(svc) -> Ledger:
    return Ledger(svc.state / "ledger.sqlite3")


def test_both_workers_answer_and_a_repeat_is_free_on_the_other(svc):
    conns = _on_each_worker(svc)
    q = "SELECT sex, COUNT(*), AVG(income) FROM pums WHERE age > 40 GROUP BY sex"
    rows0, ch0 = _run(conns[0], q)
    rows1, ch1 = _run(conns[1], q)  # worker 1's own CSPRNG: equal only as a repeat
    assert len(rows0) == 2 and rows1 == rows0 and ch0 == [1.0] and ch1 == [0.0]
    for c in conns.values():
        c.close()


def test_a_repeat_fired_at_both_workers_at_once_gets_one_answer_and_one_charge(svc):
    conns = _on_each_worker(svc)
    led = _ledger(svc)
    before = led.spent("bench", "never")
    for k in range(6):
        q = f"SELECT sex, COUNT(*), SUM(income) FROM pums WHERE age BETWEEN {k} AND {k + 50} GROUP BY sex"
        gate, out = threading.Barrier(2), {}

        def fire(w):
            gate.wait()
            out[w] = _run(conns[w], q)

        threads = [threading.Thread(target=fire, args=(w,)) for w in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert out[0][0] == out[1][0], q  # one answer
        assert sorted(out[0][1] + out[1][1]) == [0.0, 1.0], q  # one charge
    assert led.spent("bench", "never") - before == 6.0 and led.integrity_check()
    led.close()
    for c in conns.values():
        c.close()


def test_concurrent_fresh_statements_never_overspend_the_budget(svc):
    """tiny: ε 1 per query, budget 5 per day; 24 distinct statements from 24 connections on
    both workers at once: exactly 5 are released, the rest refused (53400)."""
    conns = [psycopg.connect(dsn(svc.port, "tiny"), autocommit=True) for _ in range(24)]
    assert {c.info.backend_pid % 2 for c in conns} == {0, 1}
    gate, ok, refused, lock = threading.Barrier(len(conns)), [], [], threading.Lock()

    def fire(i, c):
        gate.wait()
        try:
            c.execute(f"SELECT COUNT(*) FROM pums WHERE age > {i}").fetchall()
            with lock:
                ok.append(i)
        except psycopg.errors.lookup("53400"):
            with lock:
                refused.append(i)

    threads = [threading.Thread(target=fire, args=(i, c)) for i, c in enumerate(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for c in conns:
        c.close()
    led = _ledger(svc)
    try:
        assert len(ok) == 5 and len(refused) == 19
        assert led.spent("tiny", "day") == 5.0 and led.integrity_check()
        assert len(led.releases("tiny")) == 5
    finally:
        led.close()


def test_a_cancel_accepted_by_the_other_worker_cancels_the_statement(svc):
    conns = _on_each_worker(svc)
    conns[1].close()
    slow, errors = conns[0], []

    def run():
        try:
            slow.execute(SLOW)
        except psycopg.Error as e:
            errors.append(e)

    th = threading.Thread(target=run)
    th.start()
    time.sleep(0.5)
    owner = svc.workers[0]
    os.kill(owner, signal.SIGSTOP)  # worker 0 cannot accept: worker 1 takes the cancel
    try:
        t0 = time.perf_counter()
        slow.cancel()  # libpq: a CancelRequest on a new connection
    finally:
        os.kill(owner, signal.SIGCONT)
    th.join(20)
    assert not th.is_alive() and len(errors) == 1
    assert isinstance(errors[0], psycopg.errors.QueryCanceled), errors
    assert time.perf_counter() - t0 < 10
    assert slow.execute("SELECT 1").fetchone() == (1,)  # the session goes on
    slow.close()


def test_a_killed_worker_is_restarted(svc):
    os.kill(svc.workers[1], signal.SIGKILL)
    deadline = time.time() + 30
    while time.time() < deadline and not any("worker 1 (pid" in x and "restarting" in x for x in svc.output):
        time.sleep(0.1)
    assert any("worker 1 (pid" in x and "restarting" in x for x in svc.output), "".join(svc.output)
    conns = _on_each_worker(svc)  # both residues answer again
    for c in conns.values():
        assert _run(c, "SELECT COUNT(*) FROM pums WHERE age > 40")[0]
        c.close()


def test_sigterm_stops_every_worker(svc):
    idle = psycopg.connect(dsn(svc.port), autocommit=True)
    children = [int(p) for p in open(f"/proc/{svc.pid}/task/{svc.pid}/children").read().split()]
    assert len(children) == 3  # the workers and the heavy-statement lane
    svc.send_signal(signal.SIGTERM)
    assert svc.wait(30) == 0
    time.sleep(0.2)
    assert svc.output[-1].strip() == "dpgate: stopped", "".join(svc.output)
    assert any(x.startswith("dpgate: shutting down") for x in svc.output)
    with pytest.raises(psycopg.errors.AdminShutdown):
        idle.execute("SELECT 1")
    for pid in children:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_a_config_that_needs_a_duckdb_writer_gets_one_worker():
    writer = parse_config(make_config({"kind": "duckdb", "path": "x.duckdb"}), "t")  # INSERT into trips
    assert resolve_workers(writer, Namespace(workers=None)) == 1
    assert resolve_workers(writer, Namespace(workers=1)) == 1
    with pytest.raises(
        ConfigError, match=r"--workers 2: the duckdb backend.s local tables take one writer.*producer"
    ):
        resolve_workers(writer, Namespace(workers=2))
    data = make_config({"kind": "duckdb", "path": "x.duckdb"})
    for spec in data["roles"].values():
        spec.pop("insert", None)
    reader = parse_config(data, "t")
    assert resolve_workers(reader, Namespace(workers=None)) == default_workers()
    data["server"]["workers"] = 3
    assert resolve_workers(parse_config(data, "t"), Namespace(workers=None)) == 3
    assert resolve_workers(parse_config(data, "t"), Namespace(workers=2)) == 2


def test_workers_that_keep_dying_stop_the_service_with_exit_1(tmp_path):
    """Every worker killed as it appears: none serves, so the service stops (exit 1)."""
    port = free_port()
    proc = start(prepare(tmp_path, port), workers=2)
    killed: set[int] = set()
    deadline = time.time() + 30
    while proc.poll() is None and time.time() < deadline:
        try:
            kids = [int(p) for p in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()]
        except OSError:
            break
        for pid in set(kids) - killed:
            killed.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    try:
        assert proc.wait(15) == 1, "".join(proc.output)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    time.sleep(0.2)
    assert any("worker deaths within 60 s and no worker serving: stopping" in x for x in proc.output), (
        "".join(proc.output)
    )
    assert len(killed) >= 6 and not any("dpgate: stopped" in x for x in proc.output)


def test_a_spark_config_with_insert_grants_gets_one_worker():
    """Spark's reports table takes one INSERT at a time (pipeline.local), so the rule is DuckDB's."""
    data = make_config({"kind": "spark", "remote": "sc://localhost:15002"})
    data["demo"] = False  # demo data is DuckDB's or Postgres's
    writer = parse_config(data, "t")
    assert resolve_workers(writer, Namespace(workers=None)) == 1
    with pytest.raises(ConfigError, match=r"--workers 2: the spark backend.s local tables take one writer"):
        resolve_workers(writer, Namespace(workers=2))
