"""The backend seam: :class:`Backend`, what the pipeline, the start and the commands call on
a backend, and the errors a backend raises (their messages never carry data values).

A backend runs the rewriter's one-scan SQL and returns plain rows. It implements
:class:`Backend` (subclassing it gives the defaults of what it does not have); its SQL is
its :class:`rewriter.dialects.SQLDialect`, registered under the same name; both are made
known by one :func:`proxy.backends.register` line."""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rewriter.dialects import SQLDialect


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


class Backend(Protocol):
    """A backend: ``fetch`` runs one statement with a timeout and a cancel; ``writer`` takes
    dpgate's own writes; the rest is what the start and the commands ask of it. A class that
    subclasses it gets the defaults below (a remote backend holds no file, no marker)."""

    kind: ClassVar[str]
    """``[backend] kind``, and the name of its SQL dialect (sqlglot's name for it)."""
    sql: ClassVar[SQLDialect]
    """Its SQL dialect (:mod:`rewriter.dialects`): what the emitter asks of it."""
    columnar: ClassVar[bool] = False
    """``fetch(…, columnar=True)`` may return :class:`Columns`."""
    one_writer: ClassVar[bool] = False
    """Run-time writes (a role's INSERT into a local table) must come from one process (an
    embedded file has one writer; appends to one Spark table share its ``_temporary``
    directory): ``serve --workers N`` refuses roles that write (``cli.workers.writer_roles``)."""
    serial_writes: ClassVar[bool] = False
    """A proxy sends its writes to one table one at a time (concurrent appends to one Spark
    table share its ``_temporary`` directory)."""
    read_only_after_start: ClassVar[bool] = False
    """Once the start's writes are made (demo data, the ledger marker, local tables' report
    tables) :meth:`reopen_read_only` makes a statement that would write fail at the engine,
    unless a role writes at run time (an embedded file: one process opens it read-write)."""
    scans: int = 0
    """Statements in flight in this process whose Python work slows the scan (an embedded
    engine shares the cores; 0 for a remote one)."""

    @classmethod
    @abstractmethod
    def from_config(cls, cfg: Any, state_dir: Path, *, read_only: bool = False) -> Backend:
        """The backend ``cfg.backend`` describes (not yet connected); ``read_only``: an
        embedded file opened for reading only (``serve --workers N``)."""
        ...

    @classmethod
    def data_file(cls, cfg: Any, state_dir: Path) -> Path | None:
        """The data file the backend keeps (made 0600 when the start creates it), or None."""
        return None

    @classmethod
    def marker_reader(cls, cfg: Any, state_dir: Path) -> Any:
        """A read-only view of :meth:`ledger_marker` that does not take the data from a
        running proxy (``dpgate ledger check``; ``ledger_marker`` and ``close``), or None."""
        return None

    @property
    def dialect(self) -> str:
        """The name of its SQL dialect (what ``rewriter.to_sql`` and sqlglot take)."""
        return self.sql.name

    @property
    def writer(self) -> Backend:
        """Where dpgate's own writes (demo tables, local tables' reports) go."""
        return self

    async def connect(self) -> None:
        """Open connections (a wrong address fails at start, not at the first statement)."""
        return None

    @abstractmethod
    async def fetch(
        self,
        sql: str,
        timeout_s: float | None = None,
        cancel: asyncio.Event | None = None,
        then: Callable[[Any], Any] | None = None,
        timing: dict | None = None,
        during: Callable[[], None] | None = None,
        columnar: bool = False,
    ) -> Any:
        """Rows of ``sql`` (a ``rewriter.params.ParamSQL`` carries values the backend binds);
        ``then(rows)``, if given, runs on a worker thread after the scan (outside the timeout)
        and its result is returned. The timeout and a set ``cancel`` stop the scan (57014).
        ``timing`` gets ``started = True`` as the statement is sent (from then on it is
        charged) and ``backend_ms``; ``during()`` runs on the event loop while it is in flight.
        A write (``writer.fetch``) returns what the statement returns (no rows: ``[]``)."""
        ...

    @abstractmethod
    async def close(self) -> None: ...

    def frozen(self, source: str, rows_at_most: int | None = None) -> bool:
        """Whether the declared relation ``source`` cannot change while this backend is open (and
        has at most ``rows_at_most`` rows, if given), so a relation made from it stays true for as
        long as the backend keeps it: then a scan may read one (``rewriter.params.ParamSQL.needs``:
        the privacy unit's heavy units), made by the backend before the scan's text runs. Default:
        no (a server others may write to)."""
        return False

    def holds(self, sql: str) -> bool:
        """Whether ``sql`` — one row, one boolean: a premise about relations that are
        :meth:`frozen` (the privacy unit's lookup, ``rewriter.unit.lookup_premise``) — is true;
        asked once while they cannot change. Default: no (nothing is frozen)."""
        return False

    def keeps_cells(self, rows_at_most: int) -> bool:
        """Whether the backend keeps one more relation of a statement's heavy (unit, cell) rows
        (``rewriter.unit.KEPT_CELLS``, a total-mode statement's running sums): those it keeps
        hold fewer than ``rows_at_most`` rows together. Default: no (nothing is frozen)."""
        return False

    def decimals(self, source: str) -> dict[str, tuple[int, int]]:
        """The columns of the declared relation ``source`` stored as ``DECIMAL(w, s)``, column →
        (w, s), where the backend sums them faster in that type than in double precision and the
        relation is :meth:`frozen` (``rewriter.fixed_point``). Default: none."""
        return {}

    def reopen_read_only(self) -> None:
        """See ``read_only_after_start``. Default: nothing (its scan sessions are read-only
        at the database already, or cannot be)."""
        return None

    def discard(self) -> None:
        """Free what it holds before :meth:`connect` (an embedded file's lock), at once: a
        start that fails after opening it. Default: nothing is held."""
        return None

    @abstractmethod
    async def describe(self, source: str) -> dict[str, str] | None:
        """Column name (lower case) -> backend type of ``source`` as a scan reads it (None: no
        such relation): ``dpgate check-config --backend``."""
        ...

    async def privilege_problems(self, config: Any) -> list[str]:
        """One line per way the backend's role could change data or reach the server (empty:
        least privilege), for the start's report (:mod:`proxy.cli.privileges`). Default: that
        it cannot be checked (so ``require_least_privilege`` refuses to start)."""
        return [f"dpgate cannot read what the {self.kind} backend's role may write (docs/least-privilege.md)"]

    # -- the ledger's identity marker (proxy.stores.ledger_guard) ---------------------
    def ledger_marker(self) -> tuple[bool, dict | None]:
        """(whether the backend keeps the ledger's identity beside the data, that identity
        or None). A backend whose data lives in the state dir (an embedded file) keeps it, so
        a ledger replaced under a kept data file is noticed. Default: it does not."""
        return False, None

    def write_ledger_marker(self, ident: dict) -> None:
        return None
