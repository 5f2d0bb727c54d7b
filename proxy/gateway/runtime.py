"""The interpreter tuned for serving: the GIL switch interval and the cyclic garbage collector.

A release's mechanism and rows run on worker threads so that nothing heavy runs on the event
loop; the loop still shares the GIL with them. Two interpreter settings decide how long it can be
kept waiting: the switch interval (how long a CPU-bound thread keeps the GIL) and the collector's
full collections (each holds the GIL throughout, whichever thread runs it).
``tests/core/test_event_loop_latency.py`` measures the loop under both; ``tests/core/test_gc_settled.py``
checks the collector policy.
"""

from __future__ import annotations

import asyncio
import gc
import sys

SWITCH_INTERVAL_S = 0.0005
"""The interpreter's GIL switch interval while serving (``sys.setswitchinterval``; Python's
default is 5 ms). A CPU-bound worker thread keeps the GIL until the interval expires, and the
event loop waits for it again after every socket call; at a tenth of the default the loop gets
it back sooner (``tests/core/test_event_loop_latency.py`` measures the loop's delay)."""

GC_NOTE = """A full garbage collection holds the GIL throughout, whichever thread runs it, and
visits every tracked object: a started service holds about 140,000 (sqlglot, DuckDB, numpy, the
config). ``settle_gc`` freezes them (``gc.freeze``), so a collection visits only what was made
since."""

FULL_GC_OFF = 1 << 30  # a third threshold no count reaches: no automatic full collection
FULL_GC_AFTER = 10  # young collections between two full ones: Python's own third threshold
GC_CHECK_S = 1.0  # how often a running gateway checks whether a full collection is due
_SETTLED: list = []  # thresholds before the first settle_gc, and how many gateways run


def set_switch_interval() -> None:
    """The serving switch interval (``SWITCH_INTERVAL_S``): the event loop gets the GIL back sooner."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def settle_gc() -> None:
    """When a gateway starts: what exists now (config, parsers, mechanism tables) is frozen
    out of the cyclic collector's scans (GC_NOTE; :func:`unsettle_gc` unfreezes it), and the
    collector's full collections are no longer started by whichever thread allocates next (most
    often the event loop): the gateway checks every ``GC_CHECK_S`` and runs a due one on a worker
    thread (:func:`collect_when_due`; :func:`unsettle_gc` restores Python's thresholds when the
    last gateway closes). A full collection still holds the GIL while it runs. The young
    collections keep Python's thresholds (700, 10): larger ones make them rarer but each longer,
    beyond the event loop's step (``tests/core/test_event_loop_latency.py``)."""
    gc.collect()
    gc.freeze()
    if not _SETTLED:
        _SETTLED.extend([gc.get_threshold(), 0])
    _SETTLED[1] += 1
    t0, t1, _ = _SETTLED[0]
    gc.set_threshold(t0, t1, FULL_GC_OFF)


def full_gc_due() -> bool:
    """``FULL_GC_AFTER`` young collections since the last full one (Python's own count;
    :func:`settle_gc` turned its automatic start off)."""
    return gc.get_count()[2] >= FULL_GC_AFTER


def collect_if_due() -> bool:
    """The cyclic collector's full collection, in this thread, when it is due (:func:`full_gc_due`)."""
    if full_gc_due():
        gc.collect()
        return True
    return False


async def collect_when_due() -> None:
    """Full collections on a worker thread, never as a step of the loop (:func:`settle_gc`)."""
    while True:
        await asyncio.sleep(GC_CHECK_S)
        if full_gc_due():  # (checked here first: no thread hop when not)
            await asyncio.to_thread(collect_if_due)


def unsettle_gc() -> None:
    """A gateway closes: Python's thresholds again once the last one has closed, and what was
    frozen is collectable again (a process that starts several services, e.g. the tests,
    collects them)."""
    if _SETTLED:
        _SETTLED[1] -= 1
        if _SETTLED[1] <= 0:
            gc.set_threshold(*_SETTLED[0])
            _SETTLED.clear()
    gc.unfreeze()
