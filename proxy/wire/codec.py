"""Sans-IO frontend message parser: feed bytes, pull events.

Two phases: the *startup* phase (length-prefixed packets without a type byte:
StartupMessage, SSLRequest, GSSENCRequest, CancelRequest) and the *normal* phase
(type byte + length). The parser switches to the normal phase after a StartupMessage.
Malformed input, and any message longer than ``max_message_size``, raises
:class:`ProtocolViolation` (the connection is closed). A Query or Parse message longer
than ``max_statement_size`` (but within ``max_message_size``) is read and dropped as it
arrives, never buffered, and reported as one :class:`~proxy.wire.messages.StatementTooLong`
event: the session refuses it (54000) and stays usable. The length field is checked
before anything is buffered, so the parser never holds more than one message of at most
``max_message_size`` bytes plus one read, whatever length a client claims.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from . import messages as m

DEFAULT_MAX_MESSAGE_SIZE = 1 << 20  # 1 MiB: longer messages close the connection
DEFAULT_MAX_STATEMENT_SIZE = 256 << 10  # 256 KiB: longer Query/Parse messages are refused
MAX_STARTUP_PACKET = 10000  # same limit as PostgreSQL

PROTOCOL_VIOLATION = "08P01"
PROGRAM_LIMIT_EXCEEDED = "54000"


class ProtocolViolation(Exception):
    """Unrecoverable framing/format error; the connection must be closed."""

    def __init__(self, message: str, sqlstate: str = PROTOCOL_VIOLATION):
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate


class _Reader:
    """Cursor over one message body; every read is bounds-checked."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolViolation("insufficient data left in message")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        v: int = struct.unpack("!h", self.take(2))[0]
        return v

    def int32(self) -> int:
        v: int = struct.unpack("!i", self.take(4))[0]
        return v

    def byte(self) -> str:
        return self.take(1).decode("latin-1")

    def cstr(self) -> str:
        end = self.data.find(b"\x00", self.pos)
        if end < 0:
            raise ProtocolViolation("invalid string in message")
        raw = self.data[self.pos : end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolViolation('invalid byte sequence for encoding "UTF8"') from None

    def count(self) -> int:
        n = self.int16()
        if n < 0:
            raise ProtocolViolation("invalid count in message")
        return n

    def rest(self) -> bytes:
        return self.take(len(self.data) - self.pos)

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolViolation("invalid message format")


class FrontendParser:
    """Incremental parser for frontend (client -> server) messages."""

    def __init__(
        self,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_statement_size: int | None = DEFAULT_MAX_STATEMENT_SIZE,
    ):
        self.max_message_size = max_message_size
        self.max_statement_size = max_statement_size
        self.startup_phase = True
        self._buf = bytearray()
        self._dead = False
        self._discard = 0  # bytes of a too-long statement still to drop
        self._too_long: m.StatementTooLong | None = None  # its event, once dropped

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet consumed (used to detect SSL buffer stuffing)."""
        return len(self._buf)

    def next_event(self) -> m.FrontendMessage | None:
        """Return the next complete event, or None if more data is needed."""
        if self._dead:
            raise ProtocolViolation("connection is in a failed state")
        try:
            return self._startup() if self.startup_phase else self._normal()
        except ProtocolViolation:
            self._dead = True
            self._buf.clear()
            raise

    # ----------------------------------------------------------------- startup phase
    def _startup(self) -> m.FrontendMessage | None:
        if len(self._buf) < 4:
            return None
        (length,) = struct.unpack_from("!i", self._buf)
        if length < 8 or length > MAX_STARTUP_PACKET:
            raise ProtocolViolation("invalid length of startup packet")
        if len(self._buf) < length:
            return None
        body = bytes(self._buf[4:length])
        del self._buf[:length]
        r = _Reader(body)
        code = r.int32()
        if code == m.SSL_REQUEST_CODE:
            r.end()
            return m.SSLRequest()
        if code == m.GSSENC_REQUEST_CODE:
            r.end()
            return m.GSSENCRequest()
        if code == m.CANCEL_REQUEST_CODE:
            pid, secret = struct.unpack("!II", r.take(8))
            r.end()
            return m.CancelRequest(pid, secret)
        if code >> 16 != 3:
            raise ProtocolViolation(
                f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: server supports 3.0 to 3.0",
                "0A000",
            )
        params: dict[str, str] = {}
        while True:
            key = r.cstr()
            if not key:
                break
            params[key] = r.cstr()
        r.end()
        if "user" not in params or not params["user"]:
            raise ProtocolViolation("no PostgreSQL user name specified in startup packet", "28000")
        self.startup_phase = False
        return m.StartupMessage(code, params)

    # ----------------------------------------------------------------- normal phase
    def _normal(self) -> m.FrontendMessage | None:
        if self._discard:
            n = min(self._discard, len(self._buf))
            del self._buf[:n]
            self._discard -= n
            if self._discard:
                return None
            dropped, self._too_long = self._too_long, None
            return dropped
        if len(self._buf) < 5:
            return None
        type_ = bytes(self._buf[:1])
        (length,) = struct.unpack_from("!i", self._buf, 1)
        if type_ not in _PARSERS:
            raise ProtocolViolation(f"invalid frontend message type {self._buf[0]}")
        if length < 4:
            raise ProtocolViolation("invalid message length")
        if length - 4 > self.max_message_size:
            raise ProtocolViolation(
                f"invalid message length: message of {length - 4} bytes "
                f"exceeds the limit of {self.max_message_size}",
                PROGRAM_LIMIT_EXCEEDED,
            )
        if (
            type_ in (b"Q", b"P")
            and self.max_statement_size is not None
            and length - 4 > self.max_statement_size
        ):
            self._discard = length + 1
            self._too_long = m.StatementTooLong(type_, length - 4, self.max_statement_size)
            return self._normal()
        if len(self._buf) < length + 1:
            return None
        body = bytes(self._buf[5 : length + 1])
        del self._buf[: length + 1]
        r = _Reader(body)
        event = _PARSERS[type_](r)
        r.end()
        return event


def _query(r: _Reader) -> m.Query:
    return m.Query(r.cstr())


def _parse(r: _Reader) -> m.Parse:
    name, sql = r.cstr(), r.cstr()
    return m.Parse(name, sql, [r.int32() & 0xFFFFFFFF for _ in range(r.count())])


def _bind(r: _Reader) -> m.Bind:
    portal, stmt = r.cstr(), r.cstr()
    fmts = [r.int16() for _ in range(r.count())]
    params: list[bytes | None] = []
    for _ in range(r.count()):
        n = r.int32()
        if n < -1:
            raise ProtocolViolation("invalid parameter length")
        params.append(None if n == -1 else r.take(n))
    rfmts = [r.int16() for _ in range(r.count())]
    if any(f not in (0, 1) for f in fmts + rfmts):
        raise ProtocolViolation("unsupported format code")
    return m.Bind(portal, stmt, fmts, params, rfmts)


def _kind(r: _Reader) -> str:
    kind = r.byte()
    if kind not in ("S", "P"):
        raise ProtocolViolation(f"invalid DESCRIBE/CLOSE message subtype {ord(kind)}")
    return kind


def _describe(r: _Reader) -> m.Describe:
    kind = _kind(r)
    return m.Describe(kind, r.cstr())


def _close(r: _Reader) -> m.Close:
    kind = _kind(r)
    return m.Close(kind, r.cstr())


def _execute(r: _Reader) -> m.Execute:
    portal = r.cstr()
    return m.Execute(portal, max(r.int32(), 0))


def _unsupported(type_: bytes) -> Callable[[_Reader], m.Unsupported]:
    def parse(r: _Reader) -> m.Unsupported:
        r.rest()
        return m.Unsupported(type_)

    return parse


_PARSERS: dict[bytes, Callable[[_Reader], m.FrontendMessage]] = {
    b"Q": _query,
    b"P": _parse,
    b"B": _bind,
    b"D": _describe,
    b"E": _execute,
    b"C": _close,
    b"S": lambda r: m.Sync(),
    b"H": lambda r: m.Flush(),
    b"X": lambda r: m.Terminate(),
    b"p": lambda r: m.PasswordMessage(r.rest()),
    b"F": _unsupported(b"F"),
    b"d": _unsupported(b"d"),
    b"c": _unsupported(b"c"),
    b"f": _unsupported(b"f"),
}


def parse_sasl_initial(msg: m.PasswordMessage) -> m.SASLInitialResponse:
    """Interpret a 'p' message as SASLInitialResponse."""
    r = _Reader(msg.data)
    mech = r.cstr()
    n = r.int32()
    data = None if n == -1 else r.take(n)
    r.end()
    return m.SASLInitialResponse(mech, data)


def parse_sasl_response(msg: m.PasswordMessage) -> m.SASLResponse:
    return m.SASLResponse(msg.data)
