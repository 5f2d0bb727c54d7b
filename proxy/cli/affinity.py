"""Each worker's serving threads held to its own cores (``[server] cpu_affinity = "auto"``).

A fresh release crosses threads — the event loop hands the ledger's reservation to the
writer thread and the scan to a backend thread, whose result wakes the loop again. Left to
the kernel, two workers on two cores have those threads woken on the other core about as
often as on their own: cross-CPU wake-ups, task switches and cold caches. Held to one core
each, the workers serve more fresh releases per second at less CPU each (``bench.workers``;
the figures are in docs/performance.md).

:func:`hold` runs in a worker once its backend is open and before its gateway starts: it sets the
affinity of the calling thread (Linux: ``sched_setaffinity`` of thread 0 is the caller),
which every thread it starts later inherits. Threads that already exist keep theirs — DuckDB's
scheduler threads, started when the database opened, stay free to run a large scan on every
core, as does the heavy-statement lane, which is never held.
"""

from __future__ import annotations

import os

__all__ = ["hold", "share"]


def share(index: int, n: int, cpus: list[int]) -> set[int]:
    """Worker ``index`` of ``n``'s cores among ``cpus`` (sorted): ``len(cpus) // n`` or one
    more, contiguous, every core to one worker; one core each, in turn, when there are more
    workers than cores."""
    c = len(cpus)
    if n <= c:
        return set(cpus[index * c // n : (index + 1) * c // n])
    return {cpus[index % c]}


def hold(index: int, n: int, mode: str) -> set[int] | None:
    """Hold the calling thread (and the threads it starts) to worker ``index``'s share of the
    cores this process may use; the share, or None when nothing was changed (``mode``
    ``"off"``, one worker, or no affinity on this platform)."""
    if mode != "auto" or n < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        cpus = sorted(os.sched_getaffinity(0))
        mine = share(index, n, cpus)
        if mine == set(cpus):
            return None
        os.sched_setaffinity(0, mine)
    except OSError:  # a container that forbids it: the kernel places them
        return None
    return mine
