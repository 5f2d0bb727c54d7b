"""The embedded DuckDB backend: a timeout interrupts a running scan; errors carry
a SQLSTATE and no data."""
from __future__ import annotations

import asyncio
import time

import pytest

from proxy.backends import BackendError, BackendTimeout, DuckDBBackend


def test_timeout_interrupts_a_long_scan():
    b = DuckDBBackend(None)
    t0 = time.time()
    with pytest.raises(BackendTimeout) as e:
        asyncio.run(b.fetch("SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3", 0.3))
    assert e.value.sqlstate == "57014" and time.time() - t0 < 5
    assert asyncio.run(b.fetch("SELECT 42")) == [(42,)]       # usable afterwards


def test_cancel_event_interrupts():
    b = DuckDBBackend(None)

    async def main():
        ev = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, ev.set)
        return await b.fetch("SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3", None, ev)

    with pytest.raises(BackendError) as e:
        asyncio.run(main())
    assert e.value.sqlstate == "57014" and "user request" in e.value.message


def test_errors_are_generic():
    b = DuckDBBackend(None)
    with pytest.raises(BackendError) as e:
        asyncio.run(b.fetch("SELECT * FROM no_such_table"))
    assert e.value.sqlstate == "58000" and "no_such_table" not in e.value.message


def test_cancel_signal_interrupts_without_a_watcher_and_cursor_is_reused():
    from proxy.backends.base import CancelSignal
    b = DuckDBBackend(None)

    async def main():
        sig = CancelSignal()
        asyncio.get_running_loop().call_later(0.2, sig.set)
        with pytest.raises(BackendError) as e:
            await b.fetch("SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3", None, sig)
        assert "user request" in e.value.message and not sig._callbacks    # unsubscribed
        sig.clear()
        return await b.fetch("SELECT 7", None, sig)

    assert asyncio.run(main()) == [(7,)]
    asyncio.run(b.close())


def test_cancel_before_the_scan_starts():
    from proxy.backends.base import CancelSignal
    from proxy.backends.duckdb import _Scan
    b = DuckDBBackend(None)
    scan = _Scan()
    scan.stop("cancel")                           # the cancel arrived first
    import duckdb
    with pytest.raises(duckdb.InterruptException):
        b._scan("SELECT 1", scan, None, None, None)
    assert isinstance(CancelSignal(), asyncio.Event)


def test_then_runs_after_the_scan_and_outside_the_timeout():
    """``then`` (noise + ledger charge in the proxy) is never interrupted by the
    statement timeout: once the scan is done the release completes."""
    b = DuckDBBackend(None)
    seen, timing, during = [], {}, []

    def then(rows):
        time.sleep(0.5)                           # longer than the timeout below
        seen.append(rows)
        return "charged"

    async def main():
        return await b.fetch("SELECT 42", 0.2, None, then=then, timing=timing,
                             during=lambda: during.append(True))

    assert asyncio.run(main()) == "charged" and seen == [[(42,)]]
    assert timing["backend_ms"] < 200 and during == [True]


def test_scans_counts_statements_in_flight():
    """``scans`` (read by the noise reservoir: it draws only while no scan runs)
    is 1 during a scan and back to 0 after success, error and timeout."""
    b = DuckDBBackend(None)

    async def main():
        seen = []
        task = asyncio.ensure_future(b.fetch("SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3",
                                             0.3))
        await asyncio.sleep(0.1)
        seen.append(b.scans)
        with pytest.raises(BackendTimeout):
            await task
        seen.append(b.scans)
        with pytest.raises(BackendError):
            await b.fetch("SELECT * FROM no_such_table")
        seen.append(b.scans)
        await b.fetch("SELECT 1")
        seen.append(b.scans)
        return seen

    assert asyncio.run(main()) == [1, 0, 0, 0]
