"""With the Postgres backend down, statements fail with 08006 within the connect
timeout (default 2 s), not after the pool's 10 s queue wait; they recover when it is back."""

from __future__ import annotations

import asyncio
import time

import pytest

from config import parse_config
from proxy.backends import BackendError, PostgresBackend
from support.pg import TempPostgres, free_port


async def _timed_fetch(be, sql="SELECT 1"):
    t0 = time.perf_counter()
    try:
        return await be.fetch(sql, timeout_s=5), time.perf_counter() - t0
    except BackendError as e:
        return e, time.perf_counter() - t0


def test_never_reachable_backend_fails_fast():
    async def main():
        be = PostgresBackend(f"postgresql://postgres@127.0.0.1:{free_port()}/postgres", 2)
        await be.connect()
        try:
            for _ in range(3):
                err, took = await _timed_fetch(be)
                assert isinstance(err, BackendError) and err.sqlstate == "08006"
                assert took < 3.0, took
        finally:
            await be.close()

    asyncio.run(main())


def test_backend_stopped_then_back():
    pg = TempPostgres().start()
    try:

        async def main():
            be = PostgresBackend(pg.dsn, 2, connect_timeout_s=1.0)
            await be.connect()
            try:
                rows, _ = await _timed_fetch(be)
                assert rows == [(1,)]
                pg.kill_and_wait()
                for _ in range(4):  # broken pooled connections, then no pool
                    err, took = await _timed_fetch(be)
                    assert isinstance(err, BackendError) and err.sqlstate == "08006"
                    assert took < 3.0, took
                pg.resume()
                deadline = time.time() + 30
                while True:
                    got, _ = await _timed_fetch(be)
                    if not isinstance(got, BackendError) or time.time() > deadline:
                        break
                    await asyncio.sleep(0.3)
                assert got == [(1,)]
                # healthy again: a checkout may wait in the queue (pool busy), not just 1 s
                assert be._up
            finally:
                await be.close()

        asyncio.run(main())
    finally:
        pg.stop()


def test_connect_timeout_is_configurable():
    base = {
        "server": {"auth": "trust"},
        "tiers": {"d": {"epsilon": 1, "budget": 10}},
        "roles": {"a": {"tier": "d"}},
        "tables": {"t": {"columns": {"x": {"type": "int"}}}},
        "backend": {"kind": "postgres", "dsn": "postgresql://x@h/db", "connect_timeout_s": 0.5},
    }
    assert parse_config(base).backend.connect_timeout_s == 0.5
    base["backend"].pop("connect_timeout_s")
    assert parse_config(base).backend.connect_timeout_s == 2.0
    with pytest.raises(Exception):
        parse_config({**base, "backend": {**base["backend"], "connect_timeout_s": 0}})
