"""Raw-socket tests of the asyncio server."""

import asyncio
import struct
import time

import psycopg
import pytest

from proxy.wire.server import Server

from . import fe
from .toy import authenticator, factory


async def read_until(reader, types: str, timeout=5.0):
    """Read backend messages until one whose type is in ``types`` (or EOF)."""
    msgs = []
    while True:
        head = await asyncio.wait_for(reader.readexactly(5), timeout)
        body = await reader.readexactly(struct.unpack("!i", head[1:])[0] - 4)
        msgs.append((head[:1], body))
        if head[:1].decode() in types:
            return msgs


async def login(port, user="trusty", key=False):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(fe.startup(user=user, database="db"))
    msgs = await read_until(r, "Z")
    if key:
        return r, w, struct.unpack("!II", dict(msgs)[b"K"])
    return r, w


def run(coro_fn, **kw):
    async def main():
        async with Server(factory, authenticator=authenticator(), port=0, **kw) as srv:
            await coro_fn(srv)

    asyncio.run(main())


def test_oversized_message_closes_with_54000():
    async def body(srv):
        r, w = await login(srv.port)
        w.write(b"Q" + struct.pack("!i", 10_000_000))
        ((t, b),) = await read_until(r, "E")
        assert fe.error_fields(b)["C"] == "54000"
        assert await r.read() == b""  # closed
        r2, w2 = await login(srv.port)  # server still fine
        w2.close()

    run(body, max_message_size=4096)


def test_garbage_closes_with_08P01():
    async def body(srv):
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        w.write(b"\x00\x00\x00\x09garbage!!")
        ((t, b),) = await read_until(r, "E")
        assert fe.error_fields(b)["C"] == "0A000"  # "unsupported frontend protocol"
        assert await r.read() == b""
        r, w = await login(srv.port)
        w.write(b"\x07\x00\x00\x00\x04")
        ((t, b),) = await read_until(r, "E")
        assert fe.error_fields(b)["C"] == "08P01" and await r.read() == b""

    run(body)


def test_slow_connection_does_not_block_others():
    async def body(srv):
        r1, w1, (pid, secret) = await login(srv.port, key=True)
        w1.write(fe.query("sleep"))
        await asyncio.sleep(0.1)
        r2, w2 = await login(srv.port)
        t0 = time.monotonic()
        w2.write(fe.query("select 1"))
        assert [t for t, _ in await read_until(r2, "Z")] == [b"T", b"D", b"C", b"Z"]
        assert time.monotonic() - t0 < 1
        assert srv.connection_count == 2
        cr, cw = await asyncio.open_connection("127.0.0.1", srv.port)
        cw.write(fe.cancel_request(pid, secret ^ 1))  # wrong secret: ignored
        assert await cr.read() == b""
        with pytest.raises(asyncio.TimeoutError):  # the sleeper is still sleeping
            await asyncio.wait_for(r1.read(1), 0.2)
        assert srv.connection_count == 2
        cr, cw = await asyncio.open_connection("127.0.0.1", srv.port)
        cw.write(fe.cancel_request(pid, secret))
        assert await cr.read() == b""
        msgs = await read_until(r1, "Z")
        assert fe.error_fields(msgs[0][1])["C"] == "57014"
        w1.write(fe.terminate())
        assert await r1.read() == b""

    run(body)


def test_cancel_with_wrong_secret_is_ignored():
    async def body(srv):
        assert srv.cancel(123456, 1) is False

    run(body)


def test_idle_and_auth_timeouts():
    async def body(srv):
        r, w = await login(srv.port)
        ((t, b),) = await read_until(r, "E")
        assert fe.error_fields(b)["C"] == "57P05"
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        w.write(fe.startup(user="alice"))  # never answers the SASL challenge
        await read_until(r, "R")
        assert await asyncio.wait_for(r.read(), 3) == b""

    run(body, idle_timeout=0.2, auth_timeout=0.3)


def test_ssl_buffer_stuffing_rejected(tmp_path):
    from .certs import server_context

    async def body(srv):
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        w.write(fe.ssl_request() + fe.startup(user="trusty"))
        assert await r.readexactly(1) == b"S"
        ((t, b),) = await read_until(r, "E")
        assert fe.error_fields(b)["C"] == "08P01"

    run(body, ssl_context=server_context(tmp_path))


def test_gssenc_refused_then_startup(make_server):
    server = make_server()

    async def body():
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.write(struct.pack("!ii", 8, 80877104))
        assert await r.readexactly(1) == b"N"
        w.write(fe.startup(user="trusty"))
        assert (await read_until(r, "Z"))[-1] == (b"Z", b"I")
        w.close()

    asyncio.run(body())
    with psycopg.connect(server.dsn(user="trusty", password=None, gssencmode="prefer")) as conn:
        assert conn.execute("select 1").fetchone() == (1,)


def test_shutdown_ends_idle_sessions_and_lets_a_running_statement_finish():
    """Fast shutdown: the listener closes, an idle session gets FATAL 57P01 at once, a
    session running a statement gets its whole reply first, then FATAL 57P01."""

    async def body(srv):
        r1, w1 = await login(srv.port)  # idle
        r2, w2 = await login(srv.port)
        w2.write(fe.query("nap 0.4"))  # running when the shutdown starts
        await asyncio.sleep(0.1)
        t0 = time.monotonic()
        down = asyncio.create_task(srv.shutdown(grace=5))
        ((t, b),) = await read_until(r1, "E", timeout=1)
        f = fe.error_fields(b)
        assert (f["S"], f["C"]) == ("FATAL", "57P01") and "administrator command" in f["M"]
        assert await r1.read() == b""
        assert time.monotonic() - t0 < 0.3  # the idle one did not wait for the nap
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", srv.port)  # no new sessions
        msgs = await read_until(r2, "Z")
        assert [t for t, _ in msgs] == [b"T", b"D", b"C", b"Z"]  # the statement's whole reply
        ((t, b),) = await read_until(r2, "E")
        assert fe.error_fields(b)["C"] == "57P01" and await r2.read() == b""
        await down
        assert srv.connection_count == 0 and time.monotonic() - t0 < 2

    run(body)


def test_shutdown_grace_bounds_a_long_statement():
    """A statement still running when the grace period ends is cancelled; its session
    ends with FATAL 57P01 (the toy's `sleep` would run 10 s)."""

    async def body(srv):
        r, w = await login(srv.port)
        w.write(fe.query("sleep"))
        await asyncio.sleep(0.1)
        t0 = time.monotonic()
        await srv.shutdown(grace=0.3)
        assert 0.3 <= time.monotonic() - t0 < 2
        msgs = await read_until(r, "E", timeout=2)
        assert [t for t, _ in msgs] == [b"E"]  # no row of the cancelled statement
        f = fe.error_fields(msgs[0][1])
        assert (f["S"], f["C"]) == ("FATAL", "57P01")
        assert await r.read() == b""

    run(body)
