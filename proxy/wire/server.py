"""asyncio TCP server: one task per connection, each driving a :class:`Session`.

Before login a connection is *pending*. Pending connections count against limits of their
own, overall (``max_pending``) and per client address (``max_pending_per_address``); they
are checked at accept, before any task or buffer exists. Over a limit, the oldest pending
connection that has sat silent for ``pending_grace`` seconds is closed to make room (a
flood that has stopped never locks anyone out); if there is none, the new connection is
closed at once with FATAL 53300. Every pending connection is closed after ``auth_timeout``
(the login timeout). The server runs its own accept loop: accept errors (EMFILE, …) are
logged once per interval with a count, never one traceback per accept, and EMFILE backs
off briefly after shedding a stale pending connection. Accepted sockets get TCP keepalive.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import functools
import inspect
import itertools
import logging
import math
import secrets
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from . import messages as m
from .api import Authenticator, HandlerFactory
from .codec import DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_MAX_STATEMENT_SIZE, ProtocolViolation
from .session import READY, Session
from .throttle import FailedLogins

log = logging.getLogger(__name__)

SERVER_VERSION = "16.0 (dpgate)"
READ_SIZE = 65536
BACKLOG = 1024
KEEPALIVE = (60, 10, 6)  # idle s before the first probe, s between probes, probes: ~2 min to drop a dead peer
ACCEPT_BACKOFF = 0.1  # s to pause accepting after EMFILE/ENFILE/ENOBUFS/ENOMEM
REFUSE_POLITELY, REFUSE_WAIT = (
    32,
    0.25,
)  # refusals answered after reading the client's first packet; s each wait
LOG_INTERVAL = 10.0  # s between two log lines about refused connections or accept errors
_SSL_GSS_CODES = (m.SSL_REQUEST_CODE.to_bytes(4, "big"), m.GSSENC_REQUEST_CODE.to_bytes(4, "big"))
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def default_parameters(server_version: str = SERVER_VERSION) -> dict[str, str]:
    return {
        "server_version": server_version,
        "server_encoding": "UTF8",
        "client_encoding": "UTF8",
        "DateStyle": "ISO, MDY",
        "integer_datetimes": "on",
        "standard_conforming_strings": "on",
        "TimeZone": "UTC",
        "IntervalStyle": "postgres",
        "is_superuser": "off",
    }


class RateLimitedLog:
    """At most one warning per ``interval`` per key, carrying the count of events since the
    previous line (so a flood costs one line per interval, not one per event)."""

    def __init__(self, logger: logging.Logger, interval: float = LOG_INTERVAL):
        self.logger, self.interval = logger, interval
        self._count: dict[str, int] = {}
        self._last: dict[str, float] = {}

    def note(self, key: str, message: str) -> bool:
        """Count one event; log ``message`` with the count if the interval has passed."""
        now = time.monotonic()
        n = self._count[key] = self._count.get(key, 0) + 1
        if now - self._last.get(key, -self.interval) < self.interval:
            return False
        self._count[key], self._last[key] = 0, now
        self.logger.warning("%s (%d time%s since the last report)", message, n, "" if n == 1 else "s")
        return True


def set_keepalive(
    sock: socket.socket, idle: int = KEEPALIVE[0], interval: int = KEEPALIVE[1], count: int = KEEPALIVE[2]
) -> None:
    """SO_KEEPALIVE, and where the platform has them the probe timings (a dead peer is
    noticed after about idle + interval × count seconds instead of hours)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle_opt = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
    for opt, value in (
        (idle_opt, idle),
        (getattr(socket, "TCP_KEEPINTVL", None), interval),
        (getattr(socket, "TCP_KEEPCNT", None), count),
    ):
        if opt is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, opt, value)
            except OSError:
                pass


@dataclass(eq=False)
class _Pending:
    """A connection not yet logged in."""

    peer: str
    since: float
    task: asyncio.Task[None] | None = None  # its connection task, once running
    evicted: bool = False


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Until ``sock`` (a listening socket) has a connection queued."""
    fut = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(sock.fileno(), ready)
    try:
        await fut
    finally:
        loop.remove_reader(sock.fileno())


class Server:
    """PostgreSQL-protocol server. Use ``async with Server(...)`` or start()/stop().

    With ``port=0`` the OS picks a port; read it from :attr:`port` after start().
    """

    def __init__(
        self,
        handler_factory: HandlerFactory,
        *,
        authenticator: Authenticator,
        host: str = "127.0.0.1",
        port: int = 5432,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 100,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_statement_size: int | None = DEFAULT_MAX_STATEMENT_SIZE,
        idle_timeout: float | None = None,
        auth_timeout: float = 10.0,
        max_pending: int = 128,
        max_pending_per_address: int = 64,
        pending_grace: float = 2.0,
        server_version: str = SERVER_VERSION,
        max_auth_failures: int = 10,
        auth_failure_window: float = 60.0,
        require_tls: bool = False,
        listeners: list[socket.socket] | None = None,
        pid_slot: tuple[int, int] = (0, 1),
        cancel_elsewhere: Callable[[int, int], object] | None = None,
        accept_gate: Callable[[], Awaitable[object]] | None = None,
        failed_logins: FailedLogins | None = None,
    ):
        self.handler_factory, self.authenticator = handler_factory, authenticator
        self.host, self._port, self.ssl_context = host, port, ssl_context
        self.max_connections, self.max_message_size = max_connections, max_message_size
        self.max_statement_size = max_statement_size
        self.idle_timeout, self.auth_timeout = idle_timeout, auth_timeout
        self.parameters = default_parameters(server_version)
        self._listeners: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[Any]] = []
        self._closed: asyncio.Event | None = None
        self._sessions: dict[int, tuple[int, Session]] = {}  # pid -> (secret, session)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._idle: set[asyncio.Task[Any]] = set()  # connections waiting for the client's next bytes
        self._draining = False
        # Several worker processes on one port (proxy/cli/workers.py): this one hands out the
        # backend pids ≡ index (mod count); a CancelRequest for another worker's pid goes to
        # ``cancel_elsewhere(pid, secret)``; ``accept_gate()`` is awaited before each accept.
        self.pid_slot, self.cancel_elsewhere, self.accept_gate = pid_slot, cancel_elsewhere, accept_gate
        self._given = listeners
        index, count = pid_slot
        self._pids = itertools.count((secrets.randbelow(1 << 20) + 1000) * count + index, count)
        # Pending (not yet logged-in) connections, oldest first, and their count per address.
        self.max_pending, self.max_pending_per_address = max_pending, max_pending_per_address
        self.pending_grace = pending_grace
        self._pending: dict[_Pending, None] = {}
        self._pending_by_peer: collections.Counter[str] = collections.Counter()
        self._attaching: set[asyncio.Task[Any]] = set()
        self._refusing: set[asyncio.Task[Any]] = set()
        self.log_limited = RateLimitedLog(log)
        # Failed logins per address and per role (.throttle), shared with the owner page.
        self.failed_logins = (
            failed_logins
            if failed_logins is not None
            else FailedLogins(max_auth_failures, auth_failure_window)
        )
        self.require_tls = require_tls  # refuse plaintext logins from non-loopback peers

    @property
    def sockets(self) -> list[socket.socket]:
        return list(self._listeners)

    @property
    def port(self) -> int:
        return self._listeners[0].getsockname()[1] if self._listeners else self._port

    @property
    def connection_count(self) -> int:
        return len(self._sessions)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    async def start(self) -> Server:
        self._closed = asyncio.Event()
        self._listeners = list(self._given) if self._given else listen_sockets(self.host, self._port, BACKLOG)
        self._acceptors = [asyncio.create_task(self._accept_loop(s)) for s in self._listeners]
        return self

    async def serve_forever(self) -> None:
        assert self._closed is not None, "start() first"
        await self._closed.wait()

    async def _stop_listening(self) -> None:
        acceptors, self._acceptors = self._acceptors, []
        for task in acceptors:
            task.cancel()
        await asyncio.gather(*acceptors, return_exceptions=True)  # their selector entries go first
        listeners, self._listeners = self._listeners, []
        for sock in listeners:
            sock.close()

    async def shutdown(self, grace: float = 10.0) -> None:
        """Fast shutdown, as Postgres on SIGINT: stop listening; a session waiting for its
        client is ended now with FATAL 57P01, a session running a statement after that
        statement's reply (at most ``grace`` seconds, then it is cancelled like any
        cancelled statement)."""
        self._draining = True
        await self._stop_listening()
        for task in list(self._idle):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=max(grace, 0.0))
        await self.stop()

    async def stop(self) -> None:
        await self._stop_listening()
        others = list(self._attaching) + list(self._refusing) + list(self._tasks)
        for task in others:
            task.cancel()
        if others:
            await asyncio.gather(*others, return_exceptions=True)
        if self._closed is not None:
            self._closed.set()

    async def __aenter__(self) -> Server:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def max_auth_failures(self) -> int:
        """Failed logins per address within the window before an address is turned away."""
        return self.failed_logins.max_per_address

    @max_auth_failures.setter
    def max_auth_failures(self, n: int) -> None:
        self.failed_logins.max_per_address = n

    @property
    def auth_failure_window(self) -> float:
        return self.failed_logins.window

    @auth_failure_window.setter
    def auth_failure_window(self, seconds: float) -> None:
        self.failed_logins.window = seconds

    # ------------------------------------------------------------------ accepting
    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                if self.accept_gate is None:
                    conn, addr = await loop.sock_accept(sock)
                else:  # a connection is queued; the gate decides whether this process takes it
                    await _readable(loop, sock)
                    await self.accept_gate()
                    try:
                        conn, addr = sock.accept()
                    except BlockingIOError:  # another process on the port took it
                        continue
                    conn.setblocking(False)
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EINTR):
                    continue
                self.log_limited.note("accept", f"accept() failed: {exc}")
                if exc.errno in _OUT_OF_RESOURCES:
                    self._evict(None)  # one descriptor back from a stale pending connection
                await asyncio.sleep(ACCEPT_BACKOFF)
                continue
            self._admit(conn, addr)

    def _admit(self, conn: socket.socket, addr: Any) -> None:
        """Take an accepted socket within the pending limits, or close it at once."""
        peer = str(addr[0]) if isinstance(addr, tuple) else str(addr)
        if len(self._pending) >= self.max_pending and not self._evict(None):
            return self._refuse(conn, "too many connections (too many pending logins)", "pending")
        if self._pending_by_peer[peer] >= self.max_pending_per_address and not self._evict(peer):
            return self._refuse(
                conn,
                "too many connections (too many pending logins from this address)",
                "pending-per-address",
            )
        try:
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                set_keepalive(conn)
        except OSError:
            pass
        entry = _Pending(peer, time.monotonic())
        self._pending[entry] = None
        self._pending_by_peer[peer] += 1
        task = asyncio.get_running_loop().create_task(self._attach(conn, entry))
        self._attaching.add(task)
        task.add_done_callback(self._attaching.discard)

    async def _attach(self, conn: socket.socket, entry: _Pending) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=READ_SIZE, loop=loop)
        protocol = asyncio.StreamReaderProtocol(
            reader, functools.partial(self._client, pending=entry), loop=loop
        )
        try:
            await loop.connect_accepted_socket(lambda: protocol, conn)
        except (OSError, asyncio.CancelledError) as exc:  # (the client left at once; stop())
            self._logged_in(entry)
            conn.close()
            if isinstance(exc, OSError):
                self.log_limited.note("attach", f"accepted connection lost: {exc}")

    def _refuse(self, conn: socket.socket, message: str, key: str) -> None:
        """Turn away a connection over a pending limit with FATAL 53300: politely (a short
        task reads its SSL request and startup packet first, so that libpq shows the error)
        while fewer than ``REFUSE_POLITELY`` such tasks run, else at once."""
        self.log_limited.note(key, f"refused a connection: {message}")
        if len(self._refusing) < REFUSE_POLITELY:
            task = asyncio.get_running_loop().create_task(self._refuse_politely(conn, message))
            self._refusing.add(task)
            task.add_done_callback(self._refusing.discard)
            return
        for op in (
            lambda: conn.recv(READ_SIZE),  # what has arrived: a close with unread data is a reset
            lambda: conn.send(m.ErrorResponse("FATAL", "53300", message).encode()),
        ):
            try:
                op()
            except OSError:
                pass
        conn.close()

    async def _refuse_politely(self, conn: socket.socket, message: str) -> None:
        loop = asyncio.get_running_loop()

        async def recv(n: int) -> bytes:
            try:
                return await asyncio.wait_for(loop.sock_recv(conn, n), REFUSE_WAIT)
            except TimeoutError:
                return b""

        try:
            first = await recv(8)
            if first[:4] == b"\x00\x00\x00\x08" and first[4:8] in _SSL_GSS_CODES:
                await loop.sock_sendall(conn, b"N")  # no TLS for a refused connection
                await recv(READ_SIZE)  # its startup packet
            try:
                conn.recv(READ_SIZE)
            except BlockingIOError:
                pass
            await loop.sock_sendall(conn, m.ErrorResponse("FATAL", "53300", message).encode())
        except OSError:
            pass
        finally:
            conn.close()

    def _evict(self, peer: str | None) -> bool:
        """Close the oldest pending connection (of ``peer``, or any) that has waited silently
        for its client longer than ``pending_grace``; False if there is none."""
        cutoff = time.monotonic() - self.pending_grace
        for entry in self._pending:
            if entry.since > cutoff:
                return False  # oldest first: the rest are younger
            if (
                (peer is None or entry.peer == peer)
                and not entry.evicted
                and entry.task is not None
                and entry.task in self._idle
            ):
                entry.evicted = True
                self._logged_in(entry)
                entry.task.cancel()
                self.log_limited.note(
                    "evict",
                    "closed a pending connection that had not logged in "
                    f"within {self.pending_grace:g} s to make room",
                )
                return True
        return False

    def _logged_in(self, entry: _Pending) -> None:
        """The connection is no longer pending (logged in, closed or evicted)."""
        if entry in self._pending:
            del self._pending[entry]
            self._pending_by_peer[entry.peer] -= 1
            if self._pending_by_peer[entry.peer] <= 0:
                del self._pending_by_peer[entry.peer]

    # ------------------------------------------------------------------ connections
    def cancel(self, pid: int, secret: int) -> bool:
        index, count = self.pid_slot
        if count > 1 and pid % count != index and self.cancel_elsewhere is not None:
            self.cancel_elsewhere(pid, secret)  # another worker's session: it checks the secret
            return True
        entry = self._sessions.get(pid)
        if entry is None or not secrets.compare_digest(
            entry[0].to_bytes(4, "big"), secret.to_bytes(4, "big")
        ):
            return False
        handler = entry[1].handler
        if handler is not None:
            try:
                handler.cancel()
            except Exception:
                log.exception("handler.cancel failed")
        return True

    async def _read(self, reader: asyncio.StreamReader, session: Session, deadline: float) -> bytes:
        """Read some bytes; TimeoutError on idle timeout or (before login) auth timeout."""
        timeout = self.idle_timeout
        if session.state != READY:
            left = deadline - asyncio.get_running_loop().time()
            timeout = left if timeout is None else min(timeout, left)
        if timeout is None:
            return await reader.read(READ_SIZE)
        return await asyncio.wait_for(reader.read(READ_SIZE), max(timeout, 0))

    async def _client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, pending: _Pending | None = None
    ) -> None:
        task = asyncio.current_task()
        assert task is not None  # a connection runs as its own task
        self._tasks.add(task)
        if pending is not None:
            pending.task = task
        pid, secret = next(self._pids) & 0x7FFFFFFF, secrets.randbits(32)
        session = Session(
            self.authenticator,
            self.handler_factory,
            (pid, secret),
            self.parameters,
            self.max_message_size,
            self.max_statement_size,
        )
        tls = False
        peername = writer.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) else str(peername)
        deadline = asyncio.get_running_loop().time() + self.auth_timeout
        try:
            while not session.closed:
                try:
                    ev = session.next_event()
                except ProtocolViolation as exc:
                    session.violation(exc)
                    break
                if ev is None:
                    if self._draining:
                        break
                    self._idle.add(task)
                    try:
                        data = await self._read(reader, session, deadline)
                    except TimeoutError:
                        if session.state == READY:
                            session.fatal("57P05", "terminating connection due to idle-session timeout")
                        break
                    finally:
                        self._idle.discard(task)
                    if not data:
                        break
                    session.receive_data(data)
                    continue
                if isinstance(ev, m.SSLRequest):
                    if self.ssl_context is None or tls:
                        writer.write(b"N")
                        continue
                    writer.write(b"S")
                    if session.parser.buffered:
                        session.fatal("08P01", "received unencrypted data after SSL request")
                        break
                    left = deadline - asyncio.get_running_loop().time()
                    self._idle.add(task)  # a stalled handshake waits on its client too
                    try:
                        await writer.start_tls(self.ssl_context, ssl_handshake_timeout=max(left, 0.01))
                    finally:
                        self._idle.discard(task)
                    tls = True
                    continue
                if isinstance(ev, m.GSSENCRequest):
                    writer.write(b"N")
                    continue
                if isinstance(ev, m.CancelRequest):
                    self.cancel(ev.pid, ev.secret)
                    break
                if isinstance(ev, m.StartupMessage):
                    if len(self._sessions) >= self.max_connections:
                        session.fatal("53300", "too many connections")
                        break
                    if self.require_tls and not tls and not _loopback(peer):
                        session.fatal(
                            "28000",
                            "this server requires TLS (sslmode=require) for connections from other hosts",
                        )
                        break
                    if (wait := self.failed_logins.retry_after(peer, ev.params.get("user"))) > 0:
                        session.fatal(
                            "28000",
                            "too many failed authentication attempts from this "
                            f"address or for this role; try again in {math.ceil(wait)} s",
                        )
                        break
                    self._sessions[pid] = (secret, session)
                await session.handle(ev)
                if session.state == READY and pending is not None:
                    self._logged_in(pending)
                out = session.data_to_send()
                if out:
                    writer.write(out)
                    await writer.drain()
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
            log.debug("connection %s dropped: %s", pid, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection %s failed", pid)
        finally:
            if self._draining and not session.closed:
                session.fatal("57P01", "terminating connection due to administrator command")
            elif pending is not None and pending.evicted and not session.closed:
                session.fatal(
                    "53300",
                    f"too many connections: this one had not logged in within {self.pending_grace:g} s",
                )
            if pending is not None:
                self._logged_in(pending)
            self._sessions.pop(pid, None)
            if getattr(session, "auth_failed", False):
                self.failed_logins.failed(peer, session.user or None)
            await self._finish(session, writer)
            self._tasks.discard(task)

    async def _finish(self, session: Session, writer: asyncio.StreamWriter) -> None:
        try:
            out = session.data_to_send()
            if out and not writer.is_closing():
                writer.write(out)
                await asyncio.wait_for(writer.drain(), 5)
        except Exception:
            pass
        try:
            await session.close()
        finally:
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), 5)
            except Exception:
                pass


def listen_sockets(host: str | None, port: int, backlog: int = BACKLOG) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for every address of ``host`` (as
    ``asyncio.start_server`` would make them)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    try:
        for family, type_, proto, _, addr in dict.fromkeys(infos):
            sock = socket.socket(family, type_, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(addr)
            except OSError as exc:
                raise OSError(
                    exc.errno, f"error while attempting to bind on address {addr!r}: {exc.strerror}"
                ) from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def _loopback(peer: str) -> bool:
    return peer.startswith("127.") or peer in ("::1", "localhost") or peer.startswith("::ffff:127.")


async def serve(
    handler_factory: HandlerFactory,
    *,
    host: str,
    port: int,
    authenticator: Authenticator,
    ssl_context: ssl.SSLContext | None = None,
    max_connections: int = 100,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    idle_timeout: float | None = None,
    ready_callback: Callable[[Server], object] | None = None,
    **kw: Any,
) -> None:
    """Run a server until cancelled; ``ready_callback(server)`` is called once listening."""
    server = Server(
        handler_factory,
        authenticator=authenticator,
        host=host,
        port=port,
        ssl_context=ssl_context,
        max_connections=max_connections,
        max_message_size=max_message_size,
        idle_timeout=idle_timeout,
        **kw,
    )
    await server.start()
    try:
        if ready_callback is not None:
            r = ready_callback(server)
            if inspect.isawaitable(r):
                await r
        await server.serve_forever()
    finally:
        await server.stop()
