"""asyncio TCP server: one task per connection, each driving a :class:`Session`."""
from __future__ import annotations

import asyncio
import collections
import time
import inspect
import itertools
import logging
import secrets
import ssl

from . import messages as m
from .api import Authenticator, HandlerFactory
from .codec import DEFAULT_MAX_MESSAGE_SIZE, ProtocolViolation
from .session import READY, Session

log = logging.getLogger(__name__)

SERVER_VERSION = "16.0 (dpgate)"
READ_SIZE = 65536


def default_parameters(server_version: str = SERVER_VERSION) -> dict[str, str]:
    return {"server_version": server_version, "server_encoding": "UTF8",
            "client_encoding": "UTF8", "DateStyle": "ISO, MDY", "integer_datetimes": "on",
            "standard_conforming_strings": "on", "TimeZone": "UTC", "IntervalStyle": "postgres",
            "is_superuser": "off"}


class Server:
    """PostgreSQL-protocol server. Use ``async with Server(...)`` or start()/stop().

    With ``port=0`` the OS picks a port; read it from :attr:`port` after start().
    """

    def __init__(self, handler_factory: HandlerFactory, *, authenticator: Authenticator,
                 host: str = "127.0.0.1", port: int = 5432, ssl_context: ssl.SSLContext | None = None,
                 max_connections: int = 100, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 idle_timeout: float | None = None, auth_timeout: float = 60.0,
                 server_version: str = SERVER_VERSION, max_auth_failures: int = 10,
                 auth_failure_window: float = 60.0, require_tls: bool = False):
        self.handler_factory, self.authenticator = handler_factory, authenticator
        self.host, self._port, self.ssl_context = host, port, ssl_context
        self.max_connections, self.max_message_size = max_connections, max_message_size
        self.idle_timeout, self.auth_timeout = idle_timeout, auth_timeout
        self.parameters = default_parameters(server_version)
        self._server: asyncio.base_events.Server | None = None
        self._sessions: dict[int, tuple[int, Session]] = {}  # pid -> (secret, session)
        self._tasks: set[asyncio.Task] = set()
        self._idle: set[asyncio.Task] = set()     # connections waiting for the client's next bytes
        self._draining = False
        self._pids = itertools.count(secrets.randbelow(1 << 20) + 1000)
        # Auth-failure rate limiting: at most `max_auth_failures` per peer address per window.
        self.max_auth_failures, self.auth_failure_window = max_auth_failures, auth_failure_window
        self._failures: dict[str, collections.deque] = {}
        self.require_tls = require_tls      # refuse plaintext logins from non-loopback peers

    @property
    def sockets(self):
        return self._server.sockets if self._server else ()

    @property
    def port(self) -> int:
        return self.sockets[0].getsockname()[1] if self.sockets else self._port

    @property
    def connection_count(self) -> int:
        return len(self._sessions)

    async def start(self) -> "Server":
        self._server = await asyncio.start_server(self._client, self.host, self._port)
        return self

    async def serve_forever(self) -> None:
        await self._server.serve_forever()

    async def shutdown(self, grace: float = 10.0) -> None:
        """Fast shutdown, as Postgres on SIGINT: stop listening; a session waiting for its
        client is ended now with FATAL 57P01, a session running a statement after that
        statement's reply (at most ``grace`` seconds, then it is cancelled like any
        cancelled statement)."""
        self._draining = True
        if self._server is not None:
            self._server.close()
        for task in list(self._idle):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=max(grace, 0.0))
        await self.stop()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> "Server":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def _throttled(self, peer: str) -> bool:
        """True if ``peer`` failed authentication too often within the window."""
        q = self._failures.get(peer)
        if not q:
            return False
        cutoff = time.monotonic() - self.auth_failure_window
        while q and q[0] < cutoff:
            q.popleft()
        return len(q) >= self.max_auth_failures

    # ------------------------------------------------------------------ connections
    def cancel(self, pid: int, secret: int) -> bool:
        entry = self._sessions.get(pid)
        if entry is None or not secrets.compare_digest(entry[0].to_bytes(4, "big"), secret.to_bytes(4, "big")):
            return False
        handler = entry[1].handler
        if handler is not None:
            try:
                handler.cancel()
            except Exception:  # noqa: BLE001
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

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        pid, secret = next(self._pids) & 0x7FFFFFFF, secrets.randbits(32)
        session = Session(self.authenticator, self.handler_factory, (pid, secret),
                          self.parameters, self.max_message_size)
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
                    except asyncio.TimeoutError:
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
                    await writer.start_tls(self.ssl_context)
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
                        session.fatal("28000", "this server requires TLS (sslmode=require) for "
                                      "connections from other hosts")
                        break
                    if self._throttled(peer):
                        session.fatal("28000", "too many failed authentication attempts from this "
                                      f"address; try again in {self.auth_failure_window:g} s")
                        break
                    self._sessions[pid] = (secret, session)
                await session.handle(ev)
                out = session.data_to_send()
                if out:
                    writer.write(out)
                    await writer.drain()
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
            log.debug("connection %s dropped: %s", pid, exc)
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001
            log.exception("connection %s failed", pid)
        finally:
            if self._draining and not session.closed:
                session.fatal("57P01", "terminating connection due to administrator command")
            self._sessions.pop(pid, None)
            if getattr(session, "auth_failed", False):
                self._failures.setdefault(peer, collections.deque()).append(time.monotonic())
            await self._finish(session, writer)
            self._tasks.discard(task)

    async def _finish(self, session: Session, writer: asyncio.StreamWriter) -> None:
        try:
            out = session.data_to_send()
            if out and not writer.is_closing():
                writer.write(out)
                await asyncio.wait_for(writer.drain(), 5)
        except Exception:  # noqa: BLE001
            pass
        try:
            await session.close()
        finally:
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), 5)
            except Exception:  # noqa: BLE001
                pass


def _loopback(peer: str) -> bool:
    return peer.startswith("127.") or peer in ("::1", "localhost") or peer.startswith("::ffff:127.")


async def serve(handler_factory: HandlerFactory, *, host: str, port: int, authenticator: Authenticator,
                ssl_context: ssl.SSLContext | None = None, max_connections: int = 100,
                max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, idle_timeout: float | None = None,
                ready_callback=None, **kw) -> None:
    """Run a server until cancelled; ``ready_callback(server)`` is called once listening."""
    server = Server(handler_factory, authenticator=authenticator, host=host, port=port,
                    ssl_context=ssl_context, max_connections=max_connections,
                    max_message_size=max_message_size, idle_timeout=idle_timeout, **kw)
    await server.start()
    try:
        if ready_callback is not None:
            r = ready_callback(server)
            if inspect.isawaitable(r):
                await r
        await server.serve_forever()
    finally:
        await server.stop()
