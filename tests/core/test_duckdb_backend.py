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
