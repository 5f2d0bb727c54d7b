"""Limits before login and on statement size: pending connections, login
timeout, accept-error logging, TCP keepalive, max_statement_size."""

import asyncio
import logging
import os
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

from proxy.wire import server as server_mod
from proxy.wire.codec import FrontendParser
from proxy.wire.server import RateLimitedLog, Server

from . import fe
from .test_server import login, read_until, run
from .toy import authenticator, factory

ROOT = Path(__file__).resolve().parents[2]


async def select_1(r, w):
    w.write(fe.query("select 1"))
    return [t for t, _ in await read_until(r, "Z")]


async def closed_with(r, timeout):
    """The server's last words on a connection before EOF: the error code, or None."""
    data = await asyncio.wait_for(r.read(), timeout)
    if not data:
        return None
    ((t, b),) = fe.split_backend(data)
    assert t == b"E"
    return fe.error_fields(b)["C"]


# ---------------------------------------------------------------------- pending connections
def test_silent_flood_from_one_address_locks_no_one_out():
    """600 silent connections from 127.0.0.1: all but ``max_pending_per_address`` are closed
    at once with 53300; a client from another address logs in and runs SELECT 1 within a
    second; once the silent ones are older than the grace, a client from the flooding
    address gets in too (it displaces the oldest); the rest are closed at the login timeout."""

    async def body(srv):
        start = time.monotonic()
        flood = [await asyncio.open_connection("127.0.0.1", srv.port) for _ in range(600)]
        await asyncio.sleep(0.2)
        assert srv.pending_count == 16

        t0 = time.monotonic()
        r, w = await asyncio.open_connection("127.0.0.1", srv.port, local_addr=("127.0.0.2", 0))
        w.write(fe.startup(user="trusty", database="db"))
        await read_until(r, "Z")
        assert await select_1(r, w) == [b"T", b"D", b"C", b"Z"]
        assert time.monotonic() - t0 < 1

        refused = await asyncio.gather(*(closed_with(fr, 1) for fr, _ in flood[16:]))
        assert refused == ["53300"] * (600 - 16)

        srv.pending_grace = 0.2  # (set only now: a slow machine's flood must not displace itself)
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        r2, w2 = await login(srv.port)  # from 127.0.0.1, the flooding address
        assert await select_1(r2, w2) == [b"T", b"D", b"C", b"Z"]
        assert time.monotonic() - t0 < 1
        assert await closed_with(flood[0][0], 1) == "53300"  # the oldest silent one made room

        left = await asyncio.gather(*(closed_with(fr, 8) for fr, _ in flood[1:16]))
        assert left == [None] * 15  # closed, without a message ...
        assert 4 <= time.monotonic() - start < 8  # ... by the login timeout
        assert srv.pending_count == 0 and srv.connection_count == 2
        assert await select_1(r, w) == [b"T", b"D", b"C", b"Z"]  # logged-in sessions untouched
        for _, fw in flood:
            fw.close()

    run(body, max_pending=64, max_pending_per_address=16, pending_grace=60, auth_timeout=4)


def test_global_pending_limit_refuses_new_connections_at_once():
    async def body(srv):
        flood = [
            await asyncio.open_connection("127.0.0.1", srv.port, local_addr=(f"127.0.0.{3 + i % 3}", 0))
            for i in range(30)
        ]
        await asyncio.sleep(0.1)
        assert srv.pending_count == 8
        t0 = time.monotonic()
        r, w = await asyncio.open_connection("127.0.0.1", srv.port, local_addr=("127.0.0.9", 0))
        assert await closed_with(r, 1) == "53300" and time.monotonic() - t0 < 0.5
        codes = await asyncio.gather(*(closed_with(fr, 1) for fr, _ in flood[8:]))
        assert codes == ["53300"] * 22
        for _, fw in flood:
            fw.close()

    run(body, max_pending=8, max_pending_per_address=100, pending_grace=60)


def test_psycopg_sees_too_many_connections(make_server):
    """A real client turned away by a pending limit reads FATAL 53300."""
    server = make_server(max_pending_per_address=1, pending_grace=60)
    silent = socket.create_connection(("127.0.0.1", server.port))
    try:
        time.sleep(0.1)
        with pytest.raises(psycopg.OperationalError, match="too many connections"):
            psycopg.connect(server.dsn(user="trusty", password=None))
    finally:
        silent.close()
    time.sleep(0.1)
    with psycopg.connect(server.dsn(user="trusty", password=None)) as conn:
        assert conn.execute("select 1").fetchone() == (1,)


def test_stalled_tls_handshake_is_displaced_and_timed_out(tmp_path):
    """A client that asks for TLS and then says nothing is pending like any silent one."""
    from .certs import server_context

    async def body(srv):
        stalled = []
        for _ in range(2):
            r, w = await asyncio.open_connection("127.0.0.1", srv.port)
            w.write(fe.ssl_request())
            assert await r.readexactly(1) == b"S"  # ... and no ClientHello follows
            stalled.append((r, w))
        await asyncio.sleep(0.4)
        r, w = await login(srv.port)  # displaces the oldest
        assert await select_1(r, w) == [b"T", b"D", b"C", b"Z"]
        assert await asyncio.wait_for(stalled[0][0].read(), 1) == b""
        t0 = time.monotonic()
        assert await asyncio.wait_for(stalled[1][0].read(), 3) == b""  # the login timeout
        assert time.monotonic() - t0 < 1.5 and srv.pending_count == 0
        w.close()

    run(
        body,
        ssl_context=server_context(tmp_path),
        max_pending_per_address=2,
        pending_grace=0.3,
        auth_timeout=1.2,
    )


def test_login_timeout_closes_a_silent_connection():
    async def body(srv):
        t0 = time.monotonic()
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        assert await closed_with(r, 3) is None
        assert 0.4 <= time.monotonic() - t0 < 1.5
        assert srv.pending_count == 0

    run(body, auth_timeout=0.5)


def test_defaults_agree_with_the_config_model():
    """The wire server's defaults are the configuration's (tests build servers without it)."""
    from config.models import Limits

    lim, srv = Limits(), Server(factory, authenticator=authenticator())
    assert srv.auth_timeout == lim.login_timeout_s == 10 and lim.idle_timeout_s == 3600
    assert (srv.max_pending, srv.max_pending_per_address) == (
        lim.max_pending_connections,
        lim.max_pending_per_address,
    )
    assert srv.max_statement_size == lim.max_statement_size == 256 << 10
    with pytest.raises(ValueError, match="max_statement_size must not exceed max_message_size"):
        Limits(max_message_size=100_000, max_statement_size=200_000)


# ---------------------------------------------------------------------- keepalive
def _server_socket_timers(port: int) -> list[int]:
    """The kernel's timer kind ('tr' in /proc/net/tcp: 2 = keepalive) of every established
    socket whose local port is ``port``."""
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[1].split(":")[1], 16) == port and f[3] == "01":
            out.append(int(f[5].split(":")[0], 16))
    return out


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_accepted_sockets_have_keepalive():
    async def body(srv):
        r, w = await login(srv.port)
        await asyncio.sleep(0.2)  # the login's bytes acknowledged: only keepalive is left
        assert _server_socket_timers(srv.port) == [2]
        w.close()

    run(body)


def test_set_keepalive_timings():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as a:
        server_mod.set_keepalive(a)
        assert a.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert a.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == server_mod.KEEPALIVE[0]
            assert a.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == server_mod.KEEPALIVE[1]
            assert a.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == server_mod.KEEPALIVE[2]


# ---------------------------------------------------------------------- accept errors
def test_rate_limited_log_counts_between_lines(monkeypatch, caplog):
    now = [100.0]
    monkeypatch.setattr(server_mod.time, "monotonic", lambda: now[0])
    rl = RateLimitedLog(logging.getLogger("test.ratelimit"), interval=10)
    with caplog.at_level(logging.WARNING, "test.ratelimit"):
        logged = []
        for i in range(1000):  # 1000 events over 25 s
            now[0] = 100.0 + i * 0.025
            logged.append(rl.note("accept", "accept() failed: [Errno 24] Too many open files"))
    lines = [r.getMessage() for r in caplog.records]
    assert sum(logged) == len(lines) == 3  # at 0 s, 10 s, 20 s
    assert lines[0].endswith("(1 time since the last report)")
    assert lines[1].endswith("(400 times since the last report)")
    assert lines[2].endswith("(400 times since the last report)")


_EMFILE_SERVER = textwrap.dedent("""
    import asyncio, logging, resource, sys
    from proxy.wire.server import Server
    from tests.wire.toy import authenticator, factory
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    async def main():
        srv = Server(factory, authenticator=authenticator(), port=0, max_pending=10000,
                     max_pending_per_address=10000, pending_grace=60, auth_timeout=60)
        srv.log_limited.interval = 1.0
        await srv.start()
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
        print(srv.port, flush=True)
        await asyncio.sleep(float(sys.argv[1]))
        print(srv.pending_count, flush=True)
    asyncio.run(main())
""")


def test_accept_errors_are_logged_once_per_interval():
    """A server out of descriptors (RLIMIT_NOFILE 40, 200 silent clients) logs one line per
    interval with a count, no traceback, and keeps running."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", _EMFILE_SERVER, "3.5"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(proc.stdout.readline())
        socks = []
        for _ in range(200):
            try:
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=1))
            except OSError:
                break
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        for s in socks:
            s.close()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if "accept() failed" in ln]
    assert 2 <= len(lines) <= 5, err  # ~3.5 s at one line per second
    assert all("Too many open files" in ln for ln in lines)
    assert any("times since the last report" in ln for ln in lines[1:])
    assert 0 < int(out.split()[-1]) < 40  # it held what its descriptors allowed


# ---------------------------------------------------------------------- statement size
def test_codec_drops_a_too_long_statement_without_buffering_it():
    from proxy.wire import messages as m

    p = FrontendParser(max_message_size=1 << 20, max_statement_size=1000)
    p.startup_phase = False
    data = fe.query("select '" + "x" * 500_000 + "'") + fe.query("select 1")
    events = []
    for i in range(0, len(data), 4096):
        p.feed(data[i : i + 4096])
        assert p.buffered <= 4096  # the dropped statement is never held
        while (ev := p.next_event()) is not None:
            events.append(ev)
    assert events == [m.StatementTooLong(b"Q", 500_010, 1000), m.Query("select 1")]


def test_codec_parse_too_long_and_huge_length_field():
    from proxy.wire import messages as m
    from proxy.wire.codec import ProtocolViolation

    p = FrontendParser(max_message_size=1 << 20, max_statement_size=1000)
    p.startup_phase = False
    msg = fe.parse("s1", "select " + "1+" * 1000 + "1")
    p.feed(msg + fe.sync())
    assert p.next_event() == m.StatementTooLong(b"P", len(msg) - 5, 1000)
    assert p.next_event() == m.Sync()
    p.feed(b"Q" + struct.pack("!i", 1 << 30))  # a 1 GB length field
    with pytest.raises(ProtocolViolation) as ei:
        p.next_event()
    assert ei.value.sqlstate == "54000" and p.buffered == 0  # nothing allocated for it


def test_one_megabyte_statement_refused_54000_session_usable():
    async def body(srv):
        r, w = await login(srv.port)
        big = "select '" + "x" * 1_000_000 + "'"
        w.write(fe.query(big))
        msgs = await read_until(r, "Z")
        assert [t for t, _ in msgs] == [b"E", b"Z"]
        f = fe.error_fields(msgs[0][1])
        assert f["C"] == "54000" and f["S"] == "ERROR"
        assert f["M"] == f"statement too long: {len(big) + 1} bytes, limit {256 << 10}"
        assert await select_1(r, w) == [b"T", b"D", b"C", b"Z"]
        # extended protocol: the error, the rest skipped to Sync, then usable
        w.write(fe.parse("", big) + fe.bind("", "") + fe.execute("") + fe.sync())
        msgs = await read_until(r, "Z")
        assert [t for t, _ in msgs] == [b"E", b"Z"] and fe.error_fields(msgs[0][1])["C"] == "54000"
        w.write(fe.parse("", "select 1") + fe.bind("", "") + fe.execute("") + fe.sync())
        assert [t for t, _ in await read_until(r, "Z")] == [b"1", b"2", b"D", b"C", b"Z"]
        w.close()

    run(body)


def test_psycopg_one_megabyte_statement(make_server):
    server = make_server()
    with psycopg.connect(server.dsn(user="trusty", password=None), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="statement too long"):
            conn.execute("select '" + "x" * 1_000_000 + "'")
        assert conn.execute("select 1").fetchone() == (1,)
