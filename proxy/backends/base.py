"""Backend errors. Their messages never carry data values."""

from __future__ import annotations

import asyncio


class BackendError(Exception):
    """The backend failed; ``sqlstate`` goes to the client, nothing is charged."""

    def __init__(self, sqlstate: str, message: str, hint: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.hint = hint


class BackendRefused(BackendError):
    """The backend refused the statement before reading a row: it did not parse, named a
    relation, column or function the backend does not have (bind), or was denied permission
    (Postgres SQLSTATE class 42, DuckDB parser/binder/catalog/permission errors). Nothing
    was read, so nothing is charged: the pipeline refunds the statement's reservation."""


class BackendTimeout(BackendError):
    def __init__(self, timeout_s: float):
        super().__init__("57014", f"canceling statement due to statement timeout ({timeout_s:g} s)")


class CancelSignal(asyncio.Event):
    """A connection's cancel flag: an :class:`asyncio.Event` that also calls the
    callbacks registered with :meth:`subscribe` when set, so a backend can
    interrupt a running scan at once without a watcher task per statement."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list = []

    def set(self) -> None:
        super().set()
        for cb in list(self._callbacks):
            cb()

    def subscribe(self, cb):
        """Call ``cb()`` when set; returns the function that unsubscribes."""
        self._callbacks.append(cb)
        return lambda: self._callbacks.remove(cb) if cb in self._callbacks else None


class Columns:
    """A scan's result column by column (``fetch(…, columnar=True)`` on a backend whose
    ``columnar`` is True): ``arrays[i]`` holds column ``names[i]`` for every row, as a
    numpy array (a masked array where the column has NULLs). Only column types whose
    values ``tolist()`` gives exactly as a row fetch would are fetched so (integers up
    to BIGINT, DOUBLE, VARCHAR); other results come as rows. :meth:`rows` is the
    row form (the same tuples ``fetchall`` gives), for code that reads rows."""

    __slots__ = ("names", "arrays")

    def __init__(self, names: list[str], arrays: list) -> None:
        self.names, self.arrays = names, arrays

    def __len__(self) -> int:
        return len(self.arrays[0]) if self.arrays else 0

    def rows(self) -> list[tuple]:
        """The rows as a row fetch gives them (NULL as None)."""
        return list(zip(*(a.tolist() for a in self.arrays)))
