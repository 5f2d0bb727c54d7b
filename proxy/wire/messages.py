"""Protocol v3 messages.

Frontend messages are plain event dataclasses produced by :mod:`proxy.wire.codec`.
Backend messages are dataclasses whose ``encode()`` returns the wire bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypeAlias

PROTOCOL_3_0 = 196608
SSL_REQUEST_CODE = 80877103
GSSENC_REQUEST_CODE = 80877104
CANCEL_REQUEST_CODE = 80877102


# --------------------------------------------------------------------------- frontend


@dataclass(frozen=True)
class StartupMessage:
    protocol: int
    params: dict[str, str]


@dataclass(frozen=True)
class SSLRequest:
    """SSLRequest message (no fields)."""


@dataclass(frozen=True)
class GSSENCRequest:
    """GSSENCRequest message (no fields)."""


@dataclass(frozen=True)
class CancelRequest:
    pid: int
    secret: int


@dataclass(frozen=True)
class Query:
    sql: str


@dataclass(frozen=True)
class Parse:
    name: str
    sql: str
    param_type_oids: list[int]


@dataclass(frozen=True)
class StatementTooLong:
    """A Query (``Q``) or Parse (``P``) message longer than the statement-size limit; the
    codec has read and dropped its body without buffering it."""

    type: bytes
    size: int  # body length in bytes
    limit: int


@dataclass(frozen=True)
class Bind:
    portal: str
    statement: str
    param_formats: list[int]
    params: list[bytes | None]
    result_formats: list[int]


@dataclass(frozen=True)
class Describe:
    kind: str  # 'S' statement or 'P' portal
    name: str


@dataclass(frozen=True)
class Execute:
    portal: str
    max_rows: int  # 0 = no limit


@dataclass(frozen=True)
class Sync:
    """Sync message (no fields)."""


@dataclass(frozen=True)
class Flush:
    """Flush message (no fields)."""


@dataclass(frozen=True)
class Close:
    kind: str  # 'S' or 'P'
    name: str


@dataclass(frozen=True)
class Terminate:
    """Terminate message (no fields)."""


@dataclass(frozen=True)
class PasswordMessage:
    """Raw 'p' message; its meaning depends on the authentication stage."""

    data: bytes


@dataclass(frozen=True)
class SASLInitialResponse:
    mechanism: str
    data: bytes | None


@dataclass(frozen=True)
class SASLResponse:
    data: bytes


@dataclass(frozen=True)
class Unsupported:
    """A well-formed message the gateway does not implement (FunctionCall, COPY...)."""

    type: bytes


# A message FrontendParser returns (SASL responses arrive as PasswordMessage, read in context).
FrontendMessage: TypeAlias = (
    StartupMessage
    | SSLRequest
    | GSSENCRequest
    | CancelRequest
    | Query
    | Parse
    | StatementTooLong
    | Bind
    | Describe
    | Execute
    | Sync
    | Flush
    | Close
    | Terminate
    | PasswordMessage
    | Unsupported
)


# --------------------------------------------------------------------------- backend


def cstr(s: str) -> bytes:
    return s.encode("utf-8") + b"\x00"


def frame(type_: bytes, payload: bytes = b"") -> bytes:
    return type_ + struct.pack("!I", len(payload) + 4) + payload


class _Backend:
    TYPE = b""

    def payload(self) -> bytes:
        return b""

    def encode(self) -> bytes:
        return frame(self.TYPE, self.payload())


@dataclass(frozen=True)
class AuthenticationOk(_Backend):
    TYPE = b"R"

    def payload(self) -> bytes:
        return struct.pack("!I", 0)


@dataclass(frozen=True)
class AuthenticationSASL(_Backend):
    mechanisms: tuple[str, ...] = ("SCRAM-SHA-256",)
    TYPE = b"R"

    def payload(self) -> bytes:
        return struct.pack("!I", 10) + b"".join(cstr(m) for m in self.mechanisms) + b"\x00"


@dataclass(frozen=True)
class AuthenticationSASLContinue(_Backend):
    data: bytes
    TYPE, CODE = b"R", 11

    def payload(self) -> bytes:
        return struct.pack("!I", self.CODE) + self.data


@dataclass(frozen=True)
class AuthenticationSASLFinal(AuthenticationSASLContinue):
    CODE = 12


@dataclass(frozen=True)
class ParameterStatus(_Backend):
    name: str
    value: str
    TYPE = b"S"

    def payload(self) -> bytes:
        return cstr(self.name) + cstr(self.value)


@dataclass(frozen=True)
class BackendKeyData(_Backend):
    pid: int
    secret: int
    TYPE = b"K"

    def payload(self) -> bytes:
        return struct.pack("!II", self.pid, self.secret)


@dataclass(frozen=True)
class NegotiateProtocolVersion(_Backend):
    newest_minor: int
    unrecognized: tuple[str, ...] = ()
    TYPE = b"v"

    def payload(self) -> bytes:
        return struct.pack("!II", self.newest_minor, len(self.unrecognized)) + b"".join(
            cstr(o) for o in self.unrecognized
        )


@dataclass(frozen=True)
class ReadyForQuery(_Backend):
    status: str  # 'I', 'T' or 'E'
    TYPE = b"Z"

    def payload(self) -> bytes:
        return self.status.encode("ascii")


@dataclass(frozen=True)
class FieldDescription:
    name: str
    type_oid: int
    type_size: int = -1
    format: int = 0
    type_modifier: int = -1
    table_oid: int = 0
    column_attr: int = 0


@dataclass(frozen=True)
class RowDescription(_Backend):
    fields: tuple[FieldDescription, ...]
    TYPE = b"T"

    def payload(self) -> bytes:
        out = [struct.pack("!H", len(self.fields))]
        for f in self.fields:
            out.append(
                cstr(f.name)
                + struct.pack(
                    "!IhIhih", f.table_oid, f.column_attr, f.type_oid, f.type_size, f.type_modifier, f.format
                )
            )
        return b"".join(out)


@dataclass(frozen=True)
class DataRow(_Backend):
    values: tuple[bytes | None, ...]
    TYPE = b"D"

    def payload(self) -> bytes:
        out = [struct.pack("!H", len(self.values))]
        for v in self.values:
            out.append(b"\xff\xff\xff\xff" if v is None else struct.pack("!I", len(v)) + v)
        return b"".join(out)


@dataclass(frozen=True)
class CommandComplete(_Backend):
    tag: str
    TYPE = b"C"

    def payload(self) -> bytes:
        return cstr(self.tag)


@dataclass(frozen=True)
class ErrorResponse(_Backend):
    """Error ('E') or, with TYPE overridden, notice ('N'); fields keyed by one-letter codes."""

    severity: str
    sqlstate: str
    message: str
    detail: str | None = None
    hint: str | None = None
    TYPE = b"E"

    def payload(self) -> bytes:
        fields = [
            ("S", self.severity),
            ("V", self.severity),
            ("C", self.sqlstate),
            ("M", self.message),
            ("D", self.detail),
            ("H", self.hint),
        ]
        return b"".join(k.encode() + cstr(v) for k, v in fields if v is not None) + b"\x00"


@dataclass(frozen=True)
class NoticeResponse(ErrorResponse):
    severity: str = "NOTICE"
    sqlstate: str = "00000"
    message: str = ""
    TYPE = b"N"


@dataclass(frozen=True)
class ParameterDescription(_Backend):
    type_oids: tuple[int, ...]
    TYPE = b"t"

    def payload(self) -> bytes:
        return struct.pack(f"!H{len(self.type_oids)}I", len(self.type_oids), *self.type_oids)


def _simple(type_: bytes, name: str) -> type:
    return dataclass(frozen=True)(type(name, (_Backend,), {"TYPE": type_, "__doc__": name}))


EmptyQueryResponse = _simple(b"I", "EmptyQueryResponse")
ParseComplete = _simple(b"1", "ParseComplete")
BindComplete = _simple(b"2", "BindComplete")
CloseComplete = _simple(b"3", "CloseComplete")
NoData = _simple(b"n", "NoData")
PortalSuspended = _simple(b"s", "PortalSuspended")
