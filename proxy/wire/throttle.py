"""Failed sign-ins, counted per client address and per role over a sliding window.

One instance per process serves every door a password opens: the wire's logins
(:class:`proxy.wire.server.Server`) and the owner page's HTTP basic sign-in
(:mod:`proxy.admin.server`), so wrong passwords on either count for both. A sign-in is
refused without checking its password while its address has ``max_per_address`` failures
within ``window`` seconds (one client guessing), or its role has ``max_per_role`` (a guess
spread over many addresses); it is allowed again when the oldest of them leaves the window.
The per-role count is the price of stopping a spread guess: failures from anywhere can
hold a role's password sign-in off for one window. Keys are bounded (the oldest idle ones
are forgotten), so names never seen before cannot grow the table without limit.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable

__all__ = ["FailedLogins"]

MAX_KEYS = 10_000


class FailedLogins:
    """Failures per address and per role within ``window`` seconds (thread-safe: the owner
    page checks passwords on a worker thread)."""

    def __init__(
        self,
        max_per_address: int = 10,
        window: float = 60.0,
        max_per_role: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_per_address, self.window = max_per_address, window
        self._max_per_role = max_per_role
        self.clock = clock
        self._lock = threading.Lock()
        self._by: dict[tuple[str, str], collections.deque[float]] = {}

    @property
    def max_per_role(self) -> int:
        """Default: three addresses' worth of failures."""
        return self._max_per_role if self._max_per_role is not None else 3 * self.max_per_address

    def _recent(self, key: tuple[str, str], now: float) -> collections.deque[float] | None:
        q = self._by.get(key)
        if q is not None:
            while q and q[0] <= now - self.window:
                q.popleft()
            if not q:
                del self._by[key]
                return None
        return q

    def retry_after(self, address: str, role: str | None = None) -> float:
        """0 when a sign-in from ``address`` as ``role`` may be tried; else the seconds until
        it may (the oldest counted failure leaves the window)."""
        now = self.clock()
        wait = 0.0
        with self._lock:
            checks: list[tuple[tuple[str, str], int]] = [(("address", address), self.max_per_address)]
            if role is not None:
                checks.append((("role", role), self.max_per_role))
            for key, limit in checks:
                q = self._recent(key, now)
                if q is not None and len(q) >= limit:
                    wait = max(wait, q[-limit] + self.window - now)
        return wait

    def retry_after_s(self, address: str, role: str | None = None) -> int:
        """:meth:`retry_after` in whole seconds, rounded up (an HTTP ``Retry-After``)."""
        return math.ceil(self.retry_after(address, role))

    def failed(self, address: str, role: str | None = None) -> None:
        """Count one failed sign-in (``role``: the name given, None when there was none)."""
        now = self.clock()
        with self._lock:
            if len(self._by) >= MAX_KEYS:
                for key in [k for k, q in self._by.items() if not q or q[-1] <= now - self.window]:
                    del self._by[key]
                while len(self._by) >= MAX_KEYS:  # still full: forget the oldest
                    del self._by[min(self._by, key=lambda k: self._by[k][-1])]
            self._by.setdefault(("address", address), collections.deque()).append(now)
            if role is not None:
                self._by.setdefault(("role", role), collections.deque()).append(now)

    def clear(self) -> None:
        with self._lock:
            self._by.clear()
