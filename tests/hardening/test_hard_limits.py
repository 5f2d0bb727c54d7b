"""Limits: auth-failure rate limiting, per-role concurrent statement cap."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import psycopg
import pytest


def test_auth_failure_rate_limit(duck_service):
    svc = duck_service
    srv = svc.server
    srv.max_auth_failures, srv.auth_failure_window = 3, 30.0
    bad = svc.dsn("analyst").replace("password=analyst-pw", "password=wrong")
    try:
        for _ in range(3):
            with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
                psycopg.connect(bad)
        # Now even the right password is turned away from this address for the window.
        with pytest.raises(psycopg.OperationalError, match="too many failed authentication attempts"):
            psycopg.connect(svc.dsn("analyst"))
        srv.failed_logins.clear()  # the window passing
        psycopg.connect(svc.dsn("analyst")).close()
    finally:
        srv.max_auth_failures, srv.auth_failure_window = 10, 60.0
        srv.failed_logins.clear()


def test_per_role_statement_cap(duck_service):
    svc = duck_service
    gw = svc.gw
    real = gw.backend.fetch
    gate = asyncio.Event()

    async def slow(sql, *a, **k):
        await asyncio.wait_for(gate.wait(), 10)
        return await real(sql, *a, **k)

    cap = gw.config.server.limits.max_statements_per_role

    async def main():
        conns = [await asyncpg.connect(svc.url("other")) for _ in range(cap + 1)]
        try:
            tasks = [
                asyncio.ensure_future(c.fetch(f"SELECT COUNT(*) FROM pums WHERE age > {100 + i}"))
                for i, c in enumerate(conns)
            ]
            done, _ = await asyncio.wait(tasks, timeout=5, return_when=asyncio.FIRST_EXCEPTION)
            svc.loop.call_soon_threadsafe(gate.set)
            results = await asyncio.gather(*tasks, return_exceptions=True)
            return results
        finally:
            for c in conns:
                await c.close()

    gw.backend.fetch = slow
    try:
        results = asyncio.run(main())
    finally:
        gw.backend.fetch = real
    errors = [r for r in results if isinstance(r, Exception)]
    assert len(errors) == 1 and errors[0].sqlstate == "53300" and "concurrent statements" in str(errors[0])


def test_require_tls_spares_loopback_only():
    from proxy.wire.server import _loopback

    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("::ffff:127.0.0.1")
    assert not _loopback("10.0.0.5") and not _loopback("192.168.1.2")


def test_one_megabyte_statement_refused_before_parsing(duck_service):
    """A 1 MB statement (a DP query padded with a comment) is refused 54000 by the wire
    layer, in both protocols, charging nothing; the session then answers normally."""
    svc = duck_service
    big = "SELECT COUNT(*) FROM pums WHERE age > 17 /*" + "x" * 1_000_000 + "*/"
    before = len(svc.gw.ledger.releases("analyst"))
    with psycopg.connect(svc.dsn("analyst"), autocommit=True) as conn:
        for prepare in (False, True):
            with pytest.raises(
                psycopg.errors.ProgramLimitExceeded, match=r"statement too long: \d+ bytes, limit 262144"
            ):
                conn.execute(big, prepare=prepare)
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert len(svc.gw.ledger.releases("analyst")) == before


@pytest.mark.perf
def test_one_megabyte_statements_do_not_stall_other_sessions(duck_service):
    """1 MB statements on one connection (refused by size, before parsing) delay a
    stream of `SELECT 1` on another by < 50 ms at p99."""
    svc = duck_service
    big = "SELECT COUNT(*) FROM pums WHERE age > 17 /*" + "x" * 1_000_000 + "*/"

    async def main():
        a = await asyncpg.connect(svc.url("analyst"))
        b = await asyncpg.connect(svc.url("analyst"))
        lat, stop = [], asyncio.Event()

        async def stream():
            while not stop.is_set() or len(lat) < 200:
                t = time.perf_counter()
                assert await a.fetchval("SELECT 1") == 1
                lat.append(time.perf_counter() - t)

        async def flood():
            for _ in range(10):
                with pytest.raises(asyncpg.ProgramLimitExceededError):
                    await b.execute(big)
            stop.set()

        try:
            await asyncio.gather(stream(), flood())
        finally:
            await a.close()
            await b.close()
        return sorted(lat)

    lat = asyncio.run(main())
    p99 = lat[int(0.99 * (len(lat) - 1))]
    assert p99 < 0.05, f"p99 {p99 * 1000:.1f} ms over {len(lat)} SELECT 1"
