"""Interface between the wire layer and the query orchestrator."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Awaitable, Callable, Literal, Protocol


@dataclass(frozen=True)
class Column:
    """One output column."""
    name: str
    type_oid: int  # see proxy.wire.types


@dataclass
class Result:
    """Result of one statement."""
    command_tag: str  # e.g. "SELECT 3", "SET", "BEGIN", "SHOW"
    columns: list[Column] | None = None  # None -> no RowDescription (command without rows)
    rows: list[tuple] = field(default_factory=list)  # Python values; encoded per column type/format
    notices: list[str] = field(default_factory=list)  # NoticeResponse (NOTICE, 00000) before rows
    parameter_status: dict[str, str] = field(default_factory=dict)  # -> ParameterStatus


@dataclass(frozen=True)
class Description:
    param_type_oids: list[int]  # inferred parameter types ($1..$n)
    columns: list[Column] | None  # None -> NoData


class SqlError(Exception):
    """An error reported to the client as ErrorResponse."""

    def __init__(self, sqlstate: str, message: str, *, detail: str | None = None,
                 hint: str | None = None, severity: str = "ERROR"):
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
