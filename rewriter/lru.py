"""A bounded least-recently-used cache, the one every cache of dpgate's is.

It lives in ``rewriter`` because both the rewriter (route and plan-template caches) and the
service (``proxy``: plan, description and noise caches, backend statement caches) use it, and
the layers allow only that direction: ``rewriter`` may not import ``proxy`` (import-linter,
``pyproject.toml``), while ``proxy`` imports ``rewriter``. It imports nothing but the standard
library. (``mechanisms`` may import neither, so :mod:`mechanisms.once` keeps its own memo.)

Every instance holds a lock, so one cache may be read and written from the event loop and worker
threads at once (planner threads, scan threads): each operation is atomic. An uncontended lock
costs well under a microsecond, less than any lookup it guards is worth; a compound step
(a miss, then a computation, then :meth:`put`) is not atomic, so two threads may both compute a
missing value — the later :meth:`put` wins, which is right for a cache of values that are equal
by construction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar, overload

__all__ = ["LRU"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")


class LRU(Generic[K, V]):
    """At most ``maxsize`` entries; reading or writing an entry makes it the most recently used,
    and a write beyond ``maxsize`` drops the least recently used ones (returned by :meth:`put`,
    for a cache whose entries hold something to release)."""

    __slots__ = ("maxsize", "_map", "_lock")

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError("an LRU cache holds at least one entry")
        self.maxsize = maxsize
        self._map: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: object = None) -> object:
        """The value kept for ``key`` (now the most recently used), or ``default``."""
        with self._lock:
            try:
                self._map.move_to_end(key)
            except KeyError:
                return default
            return self._map[key]

    def put(self, key: K, value: V) -> list[tuple[K, V]]:
        """Keep ``value`` for ``key`` as the most recently used; the entries dropped to stay
        within ``maxsize``, least recently used first."""
        with self._lock:
            self._map[key] = value
            self._map.move_to_end(key)
            dropped = []
            while len(self._map) > self.maxsize:
                dropped.append(self._map.popitem(last=False))
            return dropped

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is kept (without making it recently used)."""
        with self._lock:
            return key in self._map

    def __len__(self) -> int:
        with self._lock:  # (a put holds one entry too many until it drops the oldest)
            return len(self._map)

    def values(self) -> list[V]:
        """The kept values, least recently used first (a copy)."""
        with self._lock:
            return list(self._map.values())

    def clear(self) -> None:
        with self._lock:
            self._map.clear()
