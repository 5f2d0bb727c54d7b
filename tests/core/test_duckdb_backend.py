"""The embedded DuckDB backend: a timeout interrupts a running scan; errors carry
a SQLSTATE and no data."""

from __future__ import annotations

import asyncio
import time

import pytest

from proxy.backends import BackendError, BackendRefused, BackendTimeout, DuckDBBackend


def test_timeout_interrupts_a_long_scan():
    b = DuckDBBackend(None)
    t0 = time.time()
    with pytest.raises(BackendTimeout) as e:
        asyncio.run(b.fetch("SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3", 0.3))
    assert e.value.sqlstate == "57014" and time.time() - t0 < 5
    assert asyncio.run(b.fetch("SELECT 42")) == [(42,)]  # usable afterwards


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
    """An error while running is 58000; one while binding (nothing read) is a BackendRefused
    of class 42. Neither carries the backend's text (it names the backend's schema)."""
    b = DuckDBBackend(None)
    with pytest.raises(BackendError) as e:
        asyncio.run(b.fetch("SELECT * FROM no_such_table"))
    assert isinstance(e.value, BackendRefused) and e.value.sqlstate == "42P01"
    assert "no_such_table" not in e.value.message
    with pytest.raises(BackendError) as e:
        asyncio.run(b.fetch("SELECT nope FROM range(3)"))
    assert (
        isinstance(e.value, BackendRefused) and e.value.sqlstate == "42703" and "nope" not in e.value.message
    )
    with pytest.raises(BackendError) as e:
        asyncio.run(b.fetch("SELECT error('boom ' || i) FROM range(3) t(i)"))
    assert (
        not isinstance(e.value, BackendRefused)
        and e.value.sqlstate == "58000"
        and "boom" not in e.value.message
    )


def test_cancel_signal_interrupts_without_a_watcher_and_cursor_is_reused():
    from proxy.backends.base import CancelSignal

    b = DuckDBBackend(None)

    async def main():
        sig = CancelSignal()
        asyncio.get_running_loop().call_later(0.2, sig.set)
        with pytest.raises(BackendError) as e:
            await b.fetch("SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3", None, sig)
        assert "user request" in e.value.message and not sig._callbacks  # unsubscribed
        sig.clear()
        return await b.fetch("SELECT 7", None, sig)

    assert asyncio.run(main()) == [(7,)]
    asyncio.run(b.close())


def test_cancel_before_the_scan_starts():
    from proxy.backends.base import CancelSignal
    from proxy.backends.duckdb import _Scan

    b = DuckDBBackend(None)
    scan = _Scan()
    scan.stop("cancel")  # the cancel arrived first
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
        time.sleep(0.5)  # longer than the timeout below
        seen.append(rows)
        return "charged"

    async def main():
        return await b.fetch(
            "SELECT 42", 0.2, None, then=then, timing=timing, during=lambda: during.append(True)
        )

    assert asyncio.run(main()) == "charged" and seen == [[(42,)]]
    assert timing["backend_ms"] < 500 and during == [True]  # then's 0.5 s is not the scan's


def test_scans_counts_statements_in_flight():
    """``scans`` (read by the noise reservoir: it draws only while no scan runs)
    is 1 during a scan and back to 0 after success, error and timeout."""
    b = DuckDBBackend(None)

    async def main():
        seen = []
        task = asyncio.ensure_future(
            b.fetch("SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3", 0.3)
        )
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


SLOW = "SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3"


def test_a_timed_out_scan_frees_its_worker():
    """With one worker, a 2 s timeout on a scan that would run for minutes: the
    next statement (which needs that worker) has its answer within 3 s."""
    import concurrent.futures

    b = DuckDBBackend(None)
    b._pool = concurrent.futures.ThreadPoolExecutor(1)
    timing = {}

    async def main():
        t0 = time.perf_counter()
        slow = asyncio.ensure_future(b.fetch(SLOW, 2.0, timing=timing))
        await asyncio.sleep(0.1)
        nxt = await b.fetch("SELECT 42")  # queued behind the slow scan
        with pytest.raises(BackendTimeout) as e:
            await slow
        return time.perf_counter() - t0, nxt, e.value

    elapsed, nxt, err = asyncio.run(main())
    assert nxt == [(42,)] and 1.9 < elapsed < 3.0, elapsed
    assert "statement timeout (2 s)" in err.message and timing["started"] is True


def test_an_interrupt_just_before_the_query_starts_is_repeated():
    """DuckDB drops an interrupt that lands before its query starts: the backend
    interrupts again until the worker returns."""
    b = DuckDBBackend(None)
    real = b._run

    def late(cur, sql):
        time.sleep(0.4)  # the timeout fires in this gap
        return real(cur, sql)

    b._run = late
    t0 = time.perf_counter()
    with pytest.raises(BackendTimeout):
        asyncio.run(b.fetch(SLOW, 0.2))
    assert time.perf_counter() - t0 < 2.0


def test_a_cancelled_task_interrupts_its_scan():
    """A statement task cancelled (client gone, shutdown): the worker is freed too."""
    import concurrent.futures

    b = DuckDBBackend(None)
    b._pool = concurrent.futures.ThreadPoolExecutor(1)

    async def main():
        task = asyncio.ensure_future(b.fetch(SLOW, None))
        await asyncio.sleep(0.3)
        task.cancel()
        t0 = time.perf_counter()
        rows = await b.fetch("SELECT 1")
        return time.perf_counter() - t0, rows

    elapsed, rows = asyncio.run(main())
    assert rows == [(1,)] and elapsed < 1.5


def test_started_is_not_set_when_stopped_before_the_start():
    import duckdb

    from proxy.backends.duckdb import _Scan

    b, scan, timing = DuckDBBackend(None), _Scan(), {}
    scan.stop("cancel")
    with pytest.raises(duckdb.InterruptException):
        b._scan("SELECT 1", scan, None, timing, None)
    assert "started" not in timing  # nothing ran: the charge is refunded


def test_a_prepared_scan_times_out_and_its_worker_goes_on():
    """A statement run from its prepared template (``ParamSQL``) is interrupted by the
    timeout like a text (BackendTimeout: 57014), and the worker's cursor then runs the
    next prepared statement as usual."""
    from rewriter.template import ParamSQL

    b = DuckDBBackend(None)
    try:
        slow = ParamSQL("SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3")
        slow.template = "SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = CAST($1 AS INTEGER)"
        slow.params = (3,)
        t0 = time.perf_counter()
        with pytest.raises(BackendTimeout):
            asyncio.run(b.fetch(slow, 0.3))
        assert time.perf_counter() - t0 < 3.0 and b.prepared_runs == 1
        fast = ParamSQL("SELECT 40 + 2")
        fast.template, fast.params = "SELECT 40 + CAST($1 AS INTEGER)", (2,)
        assert asyncio.run(b.fetch(fast)) == [(42,)] and b.prepared_runs == 2
    finally:
        b._close_cursors()


def test_the_configured_thread_count_is_duckdbs(tmp_path):
    """``[backend] threads`` (config/service.py): each process's embedded DuckDB runs with it;
    unset, DuckDB's own default (a thread per core)."""
    import os

    from config import parse_config
    from proxy.backends import open_backend
    from support.service import make_config

    data = make_config(backend={"kind": "duckdb", "path": str(tmp_path / "t.duckdb"), "threads": 1})
    b = open_backend(parse_config(data, "t"), tmp_path)
    assert asyncio.run(b.fetch("SELECT current_setting('threads')")) == [(1,)]
    asyncio.run(b.close())
    default = DuckDBBackend(None)
    assert asyncio.run(default.fetch("SELECT current_setting('threads')")) == [(os.cpu_count(),)]
