"""``dpgate serve --workers 1`` on a DuckDB file with no INSERT grant holds the file read-only
once it serves: another process can then open it read-only too (DuckDB allows several readers,
or one read-write process alone), and the answers keep coming."""

from __future__ import annotations

import duckdb
import psycopg

from bench.workers import dsn, prepare, start
from support.pg import free_port


def test_one_process_serves_from_a_read_only_file(tmp_path):
    port = free_port()
    cfg = prepare(tmp_path, port)
    proc = start(cfg, workers=1)
    try:
        with psycopg.connect(dsn(port), autocommit=True) as c:
            assert len(c.execute("SELECT sex, COUNT(*) FROM pums GROUP BY sex").fetchall()) == 2
        other = duckdb.connect(str(tmp_path / "data.duckdb"), read_only=True)  # refused were serve a writer
        try:
            assert other.execute("SELECT COUNT(*) FROM pums").fetchone()[0] == 1000
        finally:
            other.close()
        with psycopg.connect(dsn(port), autocommit=True) as c:
            ((n,),) = c.execute("SELECT COUNT(*) FROM pums WHERE age > 30").fetchall()
            assert isinstance(n, int)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
