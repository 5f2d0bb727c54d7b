"""Crash safety: kill -9 the proxy at random points during a run of queries, 20
times. After every restart no charge is lost, no released answer is re-drawn
differently, and the ledger passes its integrity check (docs/operations.md "Budget and releases"
documents the write ordering that guarantees this). A kill between the durable
charge and the recorded answer leaves an open reservation: still charged."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg

from support.pg import free_port
from support.service import PASSWORDS, config_toml, make_config


def _write_config(path: Path, state: Path, port: int) -> None:
    cfg = make_config(
        {"kind": "duckdb", "path": str(state / "crash.duckdb")},
        tiers={"default": {"epsilon": 1.0, "budget": 100000.0, "period": "never"}},
    )
    cfg["server"].update(port=port, state_dir=str(state))
    path.write_text(config_toml(cfg))


def _start(cfg: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("dpgate did not start")


def test_kill_dash_9_twenty_times(tmp_path):
    port = free_port()
    cfg = tmp_path / "crash.toml"
    _write_config(cfg, tmp_path, port)
    dsn = (
        f"host=127.0.0.1 port={port} dbname=demo user=analyst password={PASSWORDS['analyst']} sslmode=disable"
    )
    rng = random.Random(1234)
    received: dict[str, list] = {}  # query -> the rows a client got back
    lock = threading.Lock()
    queries = [
        f"SELECT sex, COUNT(*), SUM(income) FROM pums WHERE age > {a} GROUP BY sex" for a in range(18, 90)
    ]

    def client(stop: threading.Event, seed: int):
        r = random.Random(seed)
        while not stop.is_set():
            q = r.choice(queries)
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as c:
                    rows = c.execute(q).fetchall()
            except psycopg.Error:
                time.sleep(0.01)
                continue
            with lock:
                if q in received:
                    assert received[q] == rows, f"answer re-drawn for {q}"
                received[q] = rows

    for _ in range(20):
        proc = _start(cfg, port)
        stop = threading.Event()
        threads = [threading.Thread(target=client, args=(stop, rng.random())) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.05, 0.6))
        os.kill(proc.pid, signal.SIGKILL)  # at a random point, mid-traffic
        proc.wait()
        stop.set()
        for t in threads:
            t.join()

    from proxy.stores.ledger import Ledger

    led = Ledger(tmp_path / "ledger.sqlite3")
    assert led.integrity_check()  # spend total == stored releases + open reservations
    n_released = len(led.releases("analyst", limit=10_000))
    held = sum(r["epsilon"] for r in led.open_reservations())  # killed between charge and record
    assert led.spent("analyst", "never") == float(n_released) + held
    assert len(received) > 10
    led.close()
    # Every answer a client ever saw is the stored one: ask them all again, for free.
    proc = _start(cfg, port)
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            for q, rows in received.items():
                assert c.execute(q).fetchall() == rows
        led = Ledger(tmp_path / "ledger.sqlite3")
        assert led.spent("analyst", "never") == float(n_released) + held
    finally:
        proc.terminate()
        proc.wait(10)
