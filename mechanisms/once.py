"""Single-flight memo for set-up computed from public parameters only.

Half-width tables and similar per-(mechanism, ε, bounds) constants are pure
functions of public parameters; releases run in worker threads, so the first
statements at a new ε may ask for the same constant at once. :class:`SingleFlight`
computes each key once: concurrent first callers wait for that one computation
(``threading.Event``), later callers read the stored value. A failing
computation is not stored (each waiter sees its exception; the next call retries).
Least recently used keys are dropped beyond ``maxsize``.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar, cast

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

__all__ = ["SingleFlight", "single_flight"]


class _Call:
    __slots__ = ("done", "value", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class SingleFlight:
    """Thread-safe memo: ``get(key, compute)`` runs ``compute()`` at most once per key at a time."""

    def __init__(self, maxsize: int = 1024) -> None:
        self.maxsize = maxsize
        self.computed = 0  # number of computations run (for tests / metrics)
        self._lock = threading.Lock()
        self._values: OrderedDict[Hashable, Any] = OrderedDict()
        self._running: dict[Hashable, _Call] = {}

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return cast(T, self._values[key])
            running = self._running.get(key)
            owner = running is None
            if running is None:
                call = self._running[key] = _Call()
                self.computed += 1
            else:
                call = running
        if not owner:
            call.done.wait()
            if call.error is not None:
                raise call.error
            return cast(T, call.value)
        try:
            call.value = compute()
        except BaseException as e:  # handed to the waiters, then re-raised
            call.error = e
            raise
        else:
            with self._lock:
                self._values[key] = call.value
                if len(self._values) > self.maxsize:
                    self._values.popitem(last=False)
        finally:
            with self._lock:
                self._running.pop(key, None)
            call.done.set()
        return cast(T, call.value)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


class Memoised(Protocol[T_co]):
    """A function memoised by :func:`single_flight`; ``flight`` is its memo."""

    flight: SingleFlight

    def __call__(self, *args: Hashable) -> T_co: ...


def single_flight(maxsize: int = 1024) -> Callable[[Callable[..., T]], Memoised[T]]:
    """Decorator: memoise a function of hashable positional arguments with :class:`SingleFlight`
    (``fn.flight`` is the memo)."""

    def deco(fn: Callable[..., T]) -> Memoised[T]:
        flight = SingleFlight(maxsize)

        @functools.wraps(fn)
        def wrapper(*args: Hashable) -> T:
            return flight.get(args, lambda: fn(*args))

        memo = cast(Memoised[T], wrapper)
        memo.flight = flight
        return memo

    return deco
