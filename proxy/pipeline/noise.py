"""A statement's noise, drawn before its data is known.

The noise of a release does not depend on the data: each measurement's exact integer sampler
(``Measurement.draw`` for one cell, ``Measurement.draw_many`` for all the cells of a public
domain: geometric, discrete Laplace, the hourglass grid's (I, K)) draws it from the CSPRNG, and
``apply``/``apply_many`` adds it to the exact value later with exactly the law of a live
release. So the draws may be made early, as long as each is used once and for the cell it was
drawn for (cell ``c`` of the plan's public domain, in the domain's order — never a
data-dependent order). When they are drawn is the only thing that varies:

- ahead, in idle time after a reply, for the next statement of the same shape
  (:class:`NoiseReservoir`, per cell, in memory only);
- while the scan runs, for a small statement, on the event loop, taking the reservoir's
  draws first (:class:`NoisePool`, at most ``NoisePool.MAX_DRAWS``);
- while the scan runs, for a large public domain, on a thread of its own (:class:`BatchNoise`,
  from ``BATCH_MIN_CELLS`` cells: one ``draw_many`` per measurement);
- or at release time, in :func:`.release.noisy_answer`, where none was drawn early (a cell
  beyond the pool, a pool not filled in time, a cell count other than the domain's).

The two drawn while the scan runs are one seam, :class:`ScanNoise`: :func:`scan_noise` chooses
a statement's once, the release kind starts it as the scan starts and hands it to
``noisy_answer``, which takes its draws per cell or per measurement.

The privacy of the release is the same whichever it was (the same draws from the same law,
independent of the data), and so are its timing and its charge (the scan starts either way).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from mechanisms.accounting import Cost
from rewriter.lru import LRU
from rewriter.plan import Plan

from .release import BATCH_MIN_CELLS, releases_of


class NoiseReservoir:
    """Noise drawn ahead of demand, per measurement (``Measurement.draw``; its law
    depends only on the measurement's public parameters, never on data or
    predicates). After a reply the server tops it up on the event loop to
    ``DEPTH`` statements' worth of the shape just answered, one draw per callback
    and only while no scan runs (Python work beside a scan slows it: the scan
    thread needs the GIL to finish), so the next statement of that shape finds
    its noise ready. Each draw is handed out once (``take`` removes it); draws
    live in memory only."""

    MAX_MEASUREMENTS = 256
    DEPTH = 2
    IDLE_POLL_S = 0.002

    def __init__(self, source) -> None:
        self.source = source
        self._draws: LRU = LRU(self.MAX_MEASUREMENTS)  # measurement -> [draw, …], recently used
        self._filling: set = set()  # measurement tuples being topped up
        self._take_lock = threading.Lock()  # takers: the loop, and scan threads (NoisePool.take)

    def take(self, m, n: int) -> list:
        """Up to ``n`` draws for ``m``, each handed out once (refills only append)."""
        with self._take_lock:
            got = self._draws.get(m)
            if not got:
                return []
            out = got[:n]
            del got[:n]
        return out

    def refill(self, ms, n: int) -> None:
        """Top up each of ``ms`` to ``n`` draws (at most ``NoisePool.MAX_DRAWS``)."""
        for _ in self._steps(ms, n):
            pass

    def refill_soon(self, loop, ms, cells: int, busy=lambda: False) -> None:
        """:meth:`refill` to ``DEPTH * cells`` on ``loop``, one draw per callback
        (an arriving statement is read between two draws), waiting while
        ``busy()`` (a scan is running)."""
        key = tuple(ms)
        if key in self._filling:
            return
        self._filling.add(key)
        steps = self._steps(ms, self.DEPTH * cells)

        def step() -> None:
            if busy():
                loop.call_later(self.IDLE_POLL_S, step)
            elif next(steps, None) is not None:
                loop.call_soon(step)
            else:
                self._filling.discard(key)

        loop.call_soon(step)

    def _steps(self, ms, n: int):
        n = min(n, NoisePool.MAX_DRAWS)
        for m in ms:
            got = self._draws.get(m)
            if got is None:
                got = []
                self._draws.put(m, got)
            while len(got) < n:
                d = m.draw(self.source)
                if d is None:  # this measurement draws at apply time
                    break
                got.append(d)
                yield d

    def __len__(self) -> int:
        return sum(map(len, self._draws.values()))


class ScanNoise:
    """A statement's noise, drawn while its scan runs: :meth:`start` is called as the scan
    starts (on the event loop: it returns at once or draws a few), ``noisy_answer`` takes the
    draws after it (:meth:`cell_draws` for its cell-by-cell path, :meth:`batch_draws` for its
    batch path; each draw is taken once), and :meth:`after_reply` may draw the next
    statement's noise."""

    columnar = False  # whether the scan should fetch its cells as columns (the batch path)

    def __init__(self, plan: Plan, epsilon: float | Cost, source) -> None:
        self.ms = releases_of(plan, epsilon)[2]
        self.cells, self.source = plan.n_cells, source

    def start(self) -> None:
        raise NotImplementedError

    def cell_draws(self) -> list:
        """Per cell, the draw of each measurement (None: drawn live); [] when none."""
        return []

    def batch_draws(self, cells: int) -> list | None:
        """Per measurement, its batch draw for ``cells`` cells; None when none."""
        return None

    def after_reply(self, loop, busy) -> None:
        """After the reply is sent (``busy()``: a scan is running)."""
        return None


def scan_noise(
    plan: Plan, epsilon: float | Cost, source, reservoir: NoiseReservoir | None
) -> ScanNoise | None:
    """The noise ``plan`` draws while its scan runs at ``epsilon``: per cell for a small
    statement, per measurement for a large public domain (not for a sparse-vector selection,
    whose released cells are not the domain's), or none."""
    pool = NoisePool(plan, epsilon, source, reservoir)
    if pool.worthwhile:
        return pool
    if not plan.selected:
        batch = BatchNoise(plan, epsilon, source)
        if batch.worthwhile:
            return batch
    return None


class NoisePool(ScanNoise):
    """A statement's noise drawn before its data is known (``Measurement.draw``):
    taken from the reservoir, the rest drawn on the event loop while the backend
    scans, so only additions remain after the scan. Draw ``c`` goes to cell ``c``
    — the cell order is the plan's public domain order, never data-dependent —
    and each draw is used at most once (``take`` empties the pool); cells beyond
    the pool, or a pool not filled in time, draw live. Only small statements are
    pre-drawn (``MAX_DRAWS``) so a large GROUP BY never blocks the event loop."""

    MAX_DRAWS = 64

    def __init__(
        self, plan: Plan, epsilon: float | Cost, source, reservoir: NoiseReservoir | None = None
    ) -> None:
        super().__init__(plan, epsilon, source)
        self.reservoir = reservoir
        self._lock = threading.Lock()
        self._draws: list | None = None
        self._taken = False

    @property
    def worthwhile(self) -> bool:
        return 0 < self.cells * len(self.ms) <= self.MAX_DRAWS

    def start(self) -> None:
        """The draws, the reservoir's first (on the event loop while the scan runs)."""
        with self._lock:
            if not self._taken and self._draws is None:
                ready = [
                    self.reservoir.take(m, self.cells) if self.reservoir is not None else [] for m in self.ms
                ]
                self._draws = [
                    [r[c] if c < len(r) else m.draw(self.source) for m, r in zip(self.ms, ready)]
                    for c in range(self.cells)
                ]

    def take(self) -> list:
        """The pre-drawn noise, per cell; a pool the loop did not get to fill in time (a
        fast scan) still takes what the reservoir holds, the rest is drawn live (None)."""
        with self._lock:
            self._taken = True
            draws, self._draws = self._draws, None
            if draws is None and self.reservoir is not None and self.worthwhile:
                ready = [self.reservoir.take(m, self.cells) for m in self.ms]
                draws = [[r[c] if c < len(r) else None for r in ready] for c in range(self.cells)]
        return draws or []

    def cell_draws(self) -> list:
        return self.take()

    def after_reply(self, loop, busy) -> None:
        """The next statement of this shape's noise, into the reservoir while no scan runs."""
        if self.reservoir is not None:
            self.reservoir.refill_soon(loop, self.ms, self.cells, busy=busy)


_EXECUTOR: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """One drawing thread per process, made on first use (after a worker's fork)."""
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpgate-noise")
        return _EXECUTOR


class BatchNoise(ScanNoise):
    """The noise of one statement's release, per measurement, for the ``plan.n_cells`` cells
    of its public domain."""

    columnar = True

    def __init__(self, plan: Plan, epsilon: float | Cost, source) -> None:
        super().__init__(plan, epsilon, source)
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

    def batch_draws(self, cells: int) -> list | None:
        return self.take(cells)
