"""Interface between the wire layer and the query orchestrator."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, overload


@dataclass(frozen=True)
class Column:
    """One output column."""

    name: str
    type_oid: int  # see proxy.wire.types


class ColumnRows(Sequence[tuple[Any, ...]]):
    """Rows given by their columns (equal-length lists): a large result built column by
    column is encoded column by column (:func:`.rows.data_rows`) without its row tuples
    ever being made; any other use (an index, iteration) makes them once. Slices stay
    columns. Equal to any sequence of the same rows."""

    __slots__ = ("columns", "_rows")

    def __init__(self, columns: list[list[Any]]) -> None:
        if len({len(c) for c in columns}) > 1:
            raise ValueError("columns of different lengths")
        self.columns = columns
        self._rows: list[tuple[Any, ...]] | None = None

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def rows(self) -> list[tuple[Any, ...]]:
        if self._rows is None:
            self._rows = list(zip(*self.columns)) if self.columns else []
        return self._rows

    @overload
    def __getitem__(self, i: int) -> tuple[Any, ...]: ...
    @overload
    def __getitem__(self, i: slice) -> ColumnRows: ...
    def __getitem__(self, i: int | slice) -> tuple[Any, ...] | ColumnRows:
        if isinstance(i, slice):
            return ColumnRows([c[i] for c in self.columns])
        return self.rows()[i]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.rows())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, ColumnRows)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"ColumnRows({self.rows()!r})"


class EncodedRows(Sequence[tuple[Any, ...]]):
    """Rows already encoded as DataRow messages (``data``, framed) for the result formats
    ``formats``, where they were released (the heavy-statement lane: its process encodes
    them, so the serving process only writes the bytes). Any other use — other formats,
    an index, iteration — reads the values from ``values()``, called once."""

    __slots__ = ("data", "formats", "_count", "_values", "_rows")

    def __init__(
        self,
        data: bytes,
        formats: tuple[int, ...],
        count: int,
        values: Callable[[], Sequence[tuple[Any, ...]]],
    ) -> None:
        # the row count is ``len()``: ``count`` is Sequence.count(value)
        self.data, self.formats, self._count = data, tuple(formats), count
        self._values = values
        self._rows: Sequence[tuple[Any, ...]] | None = None

    def encoded_for(self, formats: Iterable[int]) -> bytes | None:
        """The DataRow bytes if they were encoded for ``formats``, else None."""
        return self.data if tuple(formats) == self.formats else None

    def rows(self) -> Sequence[tuple[Any, ...]]:
        if self._rows is None:
            self._rows = self._values()
            if len(self._rows) != self._count:
                raise ValueError("encoded rows and their values differ in number")
        return self._rows

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> tuple[Any, ...]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[Any, ...]]: ...
    def __getitem__(self, i: int | slice) -> tuple[Any, ...] | Sequence[tuple[Any, ...]]:
        return self.rows()[i]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.rows())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, ColumnRows, EncodedRows)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented


@dataclass(frozen=True)
class CopyFormat:
    """How a result is sent as ``COPY … TO STDOUT`` (CopyOutResponse, CopyData, CopyDone):
    ``kind`` text, csv or binary, and the text/CSV options (None: the format's default —
    tab / ``\\N`` for text, comma / empty string / ``"`` for CSV). ``force_quote``: the
    indexes of the columns whose non-NULL values are always quoted (CSV)."""

    kind: str = "text"
    header: bool = False
    delimiter: str | None = None
    null: str | None = None
    quote: str | None = None
    escape: str | None = None
    force_quote: frozenset[int] = frozenset()


@dataclass
class Result:
    """Result of one statement."""

    command_tag: str  # e.g. "SELECT 3", "SET", "BEGIN", "SHOW"
    columns: list[Column] | None = None  # None -> no RowDescription (command without rows)
    rows: Sequence[tuple[Any, ...]] = field(
        default_factory=list
    )  # Python values (or ColumnRows); encoded per column type/format
    notices: list[str] = field(default_factory=list)  # NoticeResponse (NOTICE, 00000) before rows
    parameter_status: dict[str, str] = field(default_factory=dict)  # -> ParameterStatus
    copy: CopyFormat | None = None  # the rows are sent as COPY … TO STDOUT (no RowDescription)


@dataclass(frozen=True)
class Description:
    param_type_oids: list[int]  # inferred parameter types ($1..$n)
    columns: list[Column] | None  # None -> NoData


class SqlError(Exception):
    """An error reported to the client as ErrorResponse."""

    def __init__(
        self,
        sqlstate: str,
        message: str,
        *,
        detail: str | None = None,
        hint: str | None = None,
        severity: str = "ERROR",
    ):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.detail = detail
        self.hint = hint
        self.severity = severity

    def __repr__(self) -> str:
        return f"SqlError({self.sqlstate!r}, {self.message!r})"


class Handler(Protocol):
    """One instance per connection, created after successful authentication."""

    def split(self, sql: str) -> list[str]: ...
    async def describe(self, sql: str, param_type_oids: list[int]) -> Description: ...
    async def execute(self, sql: str, params: list[object]) -> Result: ...
    def cancel(self) -> None: ...
    async def close(self) -> None: ...


class Authenticator(Protocol):
    def method(self, user: str) -> Literal["trust", "scram"]: ...
    def scram_verifier(self, user: str) -> str | None: ...


# (user, database, startup params) -> handler; may raise SqlError (-> ErrorResponse + close)
HandlerFactory = Callable[[str, str, dict[str, str]], Awaitable[Handler]]
