"""A large release's rows kept encoded for the statement that asks for it again.

A repeat is answered from the stored release at no privacy cost, but turning a stored
10,000-cell answer into rows means decoding it, evaluating the statement's
post-processing (consistent values, HAVING, ORDER BY, LIMIT) and encoding every value
as DataRow bytes — per value work that, done again for every repeat, makes a dashboard
that refreshes one tile cost more than the engine that computed it. The rows of a
repeat are a function of the stored answer and of the statement's plan only, so the
first time a large release's rows are built (fresh, or the first repeat after a start)
they are also encoded here, in the thread that built them, for the text result format
(what psql, psycopg, JDBC and ODBC ask for), and kept: a later repeat of the same
statement writes the kept bytes (:class:`~proxy.wire.api.EncodedRows`; a client asking
for other formats gets the values, encoded as usual).

What is kept is post-processing of released values only (the same bytes the first reply
sent). An entry is found by the statement's plan (the same object the plan cache gives
every execution of the statement's text: held weakly, so a plan dropped from that cache
drops its entries' use) and the release it was built from (role, release key, data
version, the release's creation time): a release stored again, or another data version,
is another entry. Entries are bounded by their total bytes and evicted least recently
used first.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence

from ..wire.api import Column, EncodedRows
from ..wire.rows import data_rows

__all__ = ["ENCODE_FROM", "MAX_BYTES", "Kept", "RepeatRows"]

ENCODE_FROM = 256
"""A release's rows are kept encoded from this many rows: below it, building them again is
cheaper than a lookup is worth."""

MAX_BYTES = 64 * 1024 * 1024
"""The most DataRow bytes kept over all entries."""


class Kept:
    """One statement's rows over one release, encoded for the text format."""

    __slots__ = ("data", "formats", "count", "body")

    def __init__(self, data: bytes, formats: tuple[int, ...], count: int, body: str) -> None:
        self.data, self.formats, self.count, self.body = data, formats, count, body

    def rows(self, values: Callable[[], Sequence[tuple]]) -> EncodedRows:
        """The kept bytes as a result's rows; ``values`` makes the rows again for a client
        that asks for other formats."""
        return EncodedRows(self.data, self.formats, self.count, values)


class RepeatRows:
    """The encoded rows of large releases by (plan, release): thread-safe (rows are built on
    worker threads, looked up on the event loop)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._map: OrderedDict[tuple, tuple[weakref.ref, Kept]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, plan: object, release: tuple) -> Kept | None:
        """The kept rows of ``plan``'s statement over ``release``, or None."""
        key = (id(plan), *release)
        with self._lock:
            entry = self._map.get(key)
            if entry is None:
                return None
            ref, kept = entry
            if ref() is not plan:  # another plan now has that id: the entry is stale
                self._drop(key)
                return None
            self._map.move_to_end(key)
            return kept

    def keep(
        self, plan: object, release: tuple, columns: list[Column], rows: Sequence[tuple], body: str
    ) -> Kept | None:
        """Encode ``rows`` for the text format and keep them (with the NOTICE ``body``) when
        they are many enough (:data:`ENCODE_FROM`) and fit; the kept entry, or None."""
        if len(rows) < ENCODE_FROM or not columns:
            return None
        try:
            ref = weakref.ref(plan)
        except TypeError:  # a plan that cannot be held weakly is not kept
            return None
        formats = (0,) * len(columns)
        data = data_rows([c.type_oid for c in columns], list(formats), rows)
        if len(data) > self.max_bytes // 4:  # one entry may not push out most of the others
            return None
        kept, key = Kept(data, formats, len(rows), body), (id(plan), *release)
        with self._lock:
            if key in self._map:
                self._drop(key)
            self._map[key] = (ref, kept)
            self._bytes += len(data)
            while self._bytes > self.max_bytes and self._map:
                self._drop(next(iter(self._map)))
        return kept

    def clear(self) -> None:
        """Forget every entry (the next repeat builds its rows again)."""
        with self._lock:
            self._map.clear()
            self._bytes = 0

    def _drop(self, key: tuple) -> None:
        _, kept = self._map.pop(key)
        self._bytes -= len(kept.data)

    def __len__(self) -> int:
        return len(self._map)
