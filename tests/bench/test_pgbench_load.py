"""bench.workers' pgbench load (bench/pgbench_load.py) against a real ``dpgate serve``: every
fresh statement is a distinct release — as text and as $n parameters, across clients and
across two runs of one server — and the repeat script only repeats."""

from __future__ import annotations

import sqlite3

import pytest

from bench import pgbench_load
from bench.workers import free_port, prepare, start

pytestmark = pytest.mark.skipif(pgbench_load.available() is None, reason="pgbench is not installed here")


def test_fresh_statements_are_distinct_releases_and_repeats_repeat(tmp_path):
    port = free_port()
    proc = start(prepare(tmp_path, port))
    try:
        a = pgbench_load.run(port, 4, 1.0, "fresh", "simple")
        b = pgbench_load.run(port, 4, 1.0, "fresh", "extended", offset=a["done"] + 1)
        db = sqlite3.connect(tmp_path / "ledger.sqlite3")
        released = db.execute("SELECT COUNT(*), COUNT(DISTINCT canonical) FROM releases").fetchone()
        c = pgbench_load.run(port, 4, 1.0, "repeat", "simple")
        hot = db.execute("SELECT COUNT(*) FROM releases").fetchone()[0] - released[0]
        db.close()
    finally:
        proc.terminate()
        proc.wait(30)
    assert a["errors"] == b["errors"] == c["errors"] == 0
    assert a["done"] > 20 and b["done"] > 20 and c["done"] > 40
    assert released == (a["done"] + b["done"], a["done"] + b["done"])  # each its own release
    assert hot <= 40  # 40 statements, at most once each
