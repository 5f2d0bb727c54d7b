"""``proxy.cli.affinity``: how N workers share the cores, and that holding a worker's
thread changes that thread (and the threads it starts), never the others."""

from __future__ import annotations

import os
import threading

import pytest

from proxy.cli.affinity import hold, share


@pytest.mark.parametrize("cores", [1, 2, 3, 4, 7, 8, 16])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 20])
def test_every_core_goes_to_one_worker_and_every_worker_gets_one(cores, n):
    cpus = [2 * c + 1 for c in range(cores)]  # any sorted ids, not 0..c-1
    shares = [share(i, n, cpus) for i in range(n)]
    assert all(s and s <= set(cpus) for s in shares)
    if n <= cores:
        assert set().union(*shares) == set(cpus)  # every core used …
        assert sum(map(len, shares)) == cores  # … by exactly one worker
        assert {len(s) for s in shares} <= {cores // n, cores // n + 1}
        for s in shares:  # contiguous in the list
            idx = sorted(cpus.index(c) for c in s)
            assert idx == list(range(idx[0], idx[0] + len(idx)))
    else:
        assert all(len(s) == 1 for s in shares)
        assert [min(s) for s in shares] == [cpus[i % cores] for i in range(n)]


def _in_thread(fn):
    box = {}
    t = threading.Thread(target=lambda: box.update(r=fn()))
    t.start()
    t.join()
    return box["r"]


def test_off_or_one_worker_changes_nothing():
    assert _in_thread(lambda: (hold(0, 2, "off"), os.sched_getaffinity(0))) == (None, os.sched_getaffinity(0))
    assert _in_thread(lambda: hold(0, 1, "auto")) is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core here: nothing to hold a worker to")
def test_hold_sets_the_calling_thread_and_the_threads_it_starts_only():
    mine = sorted(os.sched_getaffinity(0))

    def worker_1_of_2():
        held = hold(1, 2, "auto")
        child = _in_thread(lambda: os.sched_getaffinity(0))  # started after: inherits it
        return held, os.sched_getaffinity(0), child

    held, own, child = _in_thread(worker_1_of_2)
    assert held == own == child == share(1, 2, mine)
    assert sorted(os.sched_getaffinity(0)) == mine  # this thread: untouched
