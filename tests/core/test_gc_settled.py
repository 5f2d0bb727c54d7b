"""A started gateway settles the cyclic garbage collector: what exists is frozen
out of its scans (a full collection no longer walks the service's ≈140,000 objects), and
closing it unfreezes them."""

from __future__ import annotations

import asyncio
import gc
import threading

from config import parse_config
from proxy.gateway import Gateway
from support.service import make_config


def test_a_started_gateway_settles_the_collector(tmp_path):
    gw = Gateway(
        parse_config(make_config({"kind": "duckdb", "path": str(tmp_path / "d.duckdb")})), tmp_path / "state"
    )
    try:
        asyncio.run(gw.start())
        assert gc.get_freeze_count() > 0
    finally:
        asyncio.run(gw.close())
    assert gc.get_freeze_count() == 0


def test_full_collections_are_the_gateways_own_off_the_loop(tmp_path):
    """A started gateway turns Python's automatic full collections off (they came from whichever
    thread allocated next, most often the event loop) and runs each when due, from a check every
    ``GC_CHECK_S`` on a worker thread; closing it gives Python's thresholds back."""
    from proxy.gateway import runtime as gwm

    before = gc.get_threshold()
    gw = Gateway(
        parse_config(make_config({"kind": "duckdb", "path": str(tmp_path / "d.duckdb")})), tmp_path / "state"
    )
    full = []

    def on_gc(phase, info):
        if phase == "stop" and info["generation"] == 2:
            full.append(threading.get_ident())

    async def run():
        await gw.start()
        assert gc.get_threshold() == (before[0], before[1], gwm.FULL_GC_OFF)
        gc.callbacks.append(on_gc)
        try:
            kept = [[] for _ in range(300_000)]  # ≈40 young collections, automatic ones
            assert gc.get_count()[2] >= gwm.FULL_GC_AFTER and full == []  # Python's would have run
            del kept
            assert gwm.collect_if_due() and len(full) == 1  # due: run when asked
            assert not gwm.collect_if_due() and len(full) == 1  # and the count starts again
            full.clear()
            for _ in range(gwm.FULL_GC_AFTER):
                gc.collect(1)
            await asyncio.sleep(gwm.GC_CHECK_S * 1.5)  # the gateway's check runs it, on a worker thread
            assert len(full) == 1 and full[0] != threading.get_ident()
        finally:
            gc.callbacks.remove(on_gc)
            await gw.close()

    asyncio.run(run())
    assert gc.get_threshold() == before
