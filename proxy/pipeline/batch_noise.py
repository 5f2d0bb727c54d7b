"""A large release's noise drawn while its scan runs, so that the time after the scan does
not grow with the number of cells.

The noise of a GROUP BY over a public domain does not depend on the data: one draw per
cell of the plan's domain, in the domain's order, from each measurement's exact batch
sampler (``Measurement.draw_many``: geometric, discrete Laplace, the hourglass grid's
(I, K)). So it can be drawn before the data is known, on a thread of its own, while the
backend scans (:meth:`BatchNoise.start` runs as the scan starts, ``kind.fetch``'s
``during``); after the scan only the additions are left (``noisy_answer(…,
predrawn=…)``). The draws are used once, for exactly the cells they were drawn for: a
cell count other than the domain's (never for a public domain) draws live instead. The
privacy of the release is unchanged (the same draws from the same law, independent of
the data) and so are its timing and its charge (the scan starts either way).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from rewriter.plan import Plan

from .release import BATCH_MIN_CELLS, releases_of

_EXECUTOR: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """One drawing thread per process, made on first use (after a worker's fork)."""
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpgate-noise")
        return _EXECUTOR


class BatchNoise:
    """The noise of one statement's release, per measurement, for the ``plan.n_cells`` cells
    of its public domain."""

    def __init__(self, plan: Plan, epsilon: float, source) -> None:
        self.ms = releases_of(plan, epsilon)[2]
        self.cells, self.source = plan.n_cells, source
        self._future: Future | None = None

    @property
    def worthwhile(self) -> bool:
        """A batch release (``BATCH_MIN_CELLS`` cells or more) of a public domain."""
        return self.cells >= BATCH_MIN_CELLS

    def start(self) -> None:
        """Draw on the noise thread (returns at once: it is called on the event loop)."""
        if self._future is None:
            self._future = _executor().submit(self._draw)

    def _draw(self) -> list:
        return [m.draw_many(self.cells, self.source) for m in self.ms]

    def take(self, cells: int) -> list | None:
        """The draws per measurement (None where a measurement has no batch form), once;
        None if they were not started or are for another number of cells."""
        future, self._future = self._future, None
        if future is None or cells != self.cells:
            return None
        return future.result()
