"""Sans-IO tests of the session state machine (no sockets)."""

import asyncio
import struct

import pytest

from proxy.wire.codec import ProtocolViolation
from proxy.wire.session import Session

from . import fe
from .toy import authenticator, factory


class Driver:
    def __init__(self, user="trusty", **params):
        self.s = Session(authenticator(), factory, (42, 4242), {"server_version": "16.0 (dpgate)"})
        out = self.run(fe.startup(user=user, database="db", **params))
        self.startup_types = fe.types_of(out)

    def run(self, data: bytes) -> bytes:
        async def go():
            self.s.receive_data(data)
            while (ev := self.s.next_event()) is not None:
                await self.s.handle(ev)

        try:
            asyncio.run(go())
        except ProtocolViolation as exc:
            self.s.violation(exc)
        return self.s.data_to_send()

    def types(self, data: bytes) -> str:
        return fe.types_of(self.run(data))

    def msgs(self, data: bytes):
        return fe.split_backend(self.run(data))


def test_trust_startup():
    d = Driver(application_name="myapp")
    assert d.startup_types == "R" + "S" * 3 + "KZ"
    d = Driver()
    msgs = fe.split_backend(Driver(application_name="myapp").s.data_to_send() or b"")
    assert msgs == []  # already drained


def test_startup_parameters():
    s = Session(authenticator(), factory, (1, 2), {"server_version": "16.0 (dpgate)"})
    s.receive_data(fe.startup(user="trusty", application_name="app"))
    asyncio.run(s.handle(s.next_event()))
    params = {
        b.split(b"\0")[0].decode(): b.split(b"\0")[1].decode()
        for t, b in fe.split_backend(s.data_to_send())
        if t == b"S"
    }
    assert params == {
        "server_version": "16.0 (dpgate)",
        "application_name": "app",
        "session_authorization": "trusty",
    }


def test_unknown_database_is_fatal():
    s = Session(authenticator(), factory, (1, 2), {})
    s.receive_data(fe.startup(user="trusty", database="nodb"))
    asyncio.run(s.handle(s.next_event()))
    ((t, body),) = fe.split_backend(s.data_to_send())
    assert t == b"E" and fe.error_fields(body)["C"] == "3D000" and s.closed


def test_simple_query_multi_statement_stops_at_error():
    d = Driver()
    assert d.types(fe.query("select 1; fail; select 1")) == "TDCEZ"
    assert d.types(fe.query("  -- nothing\n ")) == "IZ"
    assert d.types(fe.query("notice")) == "NTDCZ"


def test_extended_error_skips_until_sync():
    d = Driver()
    batch = fe.parse("", "fail") + fe.bind("", "") + fe.execute("") + fe.parse("", "select 1") + fe.sync()
    out = d.msgs(batch)
    assert [t for t, _ in out] == [b"1", b"2", b"E", b"Z"]  # later Parse skipped
    assert fe.error_fields(out[2][1])["C"] == "42P01"
    ok = fe.parse("", "select 1") + fe.bind("", "") + fe.describe("P", "") + fe.execute("") + fe.sync()
    assert d.types(ok) == "12TDCZ"


def test_internal_error_connection_survives():
    d = Driver()
    out = d.msgs(fe.query("boom"))
    assert fe.error_fields(out[0][1])["C"] == "XX000" and out[0][0] == b"E"
    assert d.types(fe.query("select 1")) == "TDCZ"


def test_transaction_states():
    d = Driver()
    assert d.msgs(fe.query("begin"))[-1] == (b"Z", b"T")
    assert d.msgs(fe.query("fail"))[-1] == (b"Z", b"E")
    out = d.msgs(fe.query("select 1"))
    assert fe.error_fields(out[0][1])["C"] == "25P02" and out[-1] == (b"Z", b"E")
    out = d.msgs(fe.parse("", "select 1") + fe.sync())
    assert fe.error_fields(out[0][1])["C"] == "25P02"
    assert d.msgs(fe.query("rollback"))[-1] == (b"Z", b"I")
    assert d.msgs(fe.parse("", "begin") + fe.bind("", "") + fe.execute("") + fe.sync())[-1] == (b"Z", b"T")
    assert d.msgs(fe.query("commit"))[-1] == (b"Z", b"I")


def test_describe_and_binary_params():
    d = Driver()
    out = d.msgs(fe.parse("s1", "select $1::int4, $2") + fe.describe("S", "s1") + fe.sync())
    assert [t for t, _ in out] == [b"1", b"t", b"T", b"Z"]
    assert out[1][1] == struct.pack("!hII", 2, 23, 25)
    out = d.msgs(fe.bind("p", "s1", [struct.pack("!i", 7), b"hi"], [1, 0], [1]) + fe.execute("p") + fe.sync())
    assert [t for t, _ in out] == [b"2", b"D", b"C", b"Z"]
    assert out[1][1] == struct.pack("!hi", 2, 4) + struct.pack("!i", 7) + struct.pack("!i", 2) + b"hi"
    # wrong number of params for a described statement
    out = d.msgs(fe.bind("", "s1", [b"1"]) + fe.sync())
    assert fe.error_fields(out[0][1])["C"] == "08P01"
    # duplicate named statement; unknown statement/portal
    assert fe.error_fields(d.msgs(fe.parse("s1", "select 1") + fe.sync())[0][1])["C"] == "42P05"
    assert fe.error_fields(d.msgs(fe.bind("", "nope") + fe.sync())[0][1])["C"] == "26000"
    assert fe.error_fields(d.msgs(fe.execute("nope") + fe.sync())[0][1])["C"] == "34000"
    assert d.types(fe.close("S", "s1") + fe.close("P", "zzz") + fe.sync()) == "33Z"


def test_portal_suspended_and_empty_query():
    d = Driver()
    batch = (
        fe.parse("", "rows 5") + fe.bind("", "") + fe.execute("", 2) + fe.execute("", 2) + fe.execute("", 2)
    )
    out = d.msgs(batch + fe.sync())
    assert "".join(t.decode() for t, _ in out) == "12DDsDDsDCZ"
    assert out[-2][1] == b"SELECT 1\0"
    assert (
        d.types(fe.parse("", "") + fe.bind("", "") + fe.describe("P", "") + fe.execute("") + fe.sync())
        == "12nIZ"
    )
    assert (
        d.types(
            fe.parse("", "set x = 1") + fe.bind("", "") + fe.describe("P", "") + fe.execute("") + fe.sync()
        )
        == "12nCSZ"
    )


def test_multiple_statements_in_parse_rejected():
    d = Driver()
    out = d.msgs(fe.parse("", "select 1; select 1") + fe.sync())
    assert fe.error_fields(out[0][1])["C"] == "42601"


def test_protocol_violation_closes():
    d = Driver()
    out = d.msgs(b"\x01\0\0\0\x04")
    assert out[0][0] == b"E" and fe.error_fields(out[0][1])["C"] == "08P01" and d.s.closed


def test_terminate():
    d = Driver()
    assert d.run(fe.terminate()) == b"" and d.s.closed


@pytest.mark.parametrize("user", ["alice", "nobody"])
def test_scram_wrong_password_via_session(user):
    from scramp import ScramClient

    s = Session(authenticator(), factory, (1, 2), {})
    c = ScramClient(["SCRAM-SHA-256"], "x", "wrong")

    def step(data):
        async def go():
            s.receive_data(data)
            while (ev := s.next_event()) is not None:
                await s.handle(ev)

        asyncio.run(go())
        return fe.split_backend(s.data_to_send())

    assert step(fe.startup(user=user))[0][1][:4] == struct.pack("!i", 10)
    first = c.get_client_first().encode()
    out = step(fe.msg(b"p", b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first))
    c.set_server_first(out[0][1][4:].decode())
    out = step(fe.msg(b"p", c.get_client_final().encode()))
    f = fe.error_fields(out[0][1])
    assert (f["C"], f["M"], f["S"]) == ("28P01", f'password authentication failed for user "{user}"', "FATAL")
    assert s.closed
