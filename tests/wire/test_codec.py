import random
import struct

import pytest

from proxy.wire import messages as m
from proxy.wire.codec import FrontendParser, ProtocolViolation, parse_sasl_initial

from . import fe

NORMAL = [
    (fe.query("select 1"), m.Query("select 1")),
    (fe.parse("s1", "select $1", [23]), m.Parse("s1", "select $1", [23])),
    (fe.bind("p", "s", [b"1", None], [0, 1], [1]), m.Bind("p", "s", [0, 1], [b"1", None], [1])),
    (fe.describe("S", "s1"), m.Describe("S", "s1")),
    (fe.describe("P", ""), m.Describe("P", "")),
    (fe.execute("", 5), m.Execute("", 5)),
    (fe.close("P", "p"), m.Close("P", "p")),
    (fe.sync(), m.Sync()),
    (fe.flush(), m.Flush()),
    (fe.terminate(), m.Terminate()),
    (fe.msg(b"p", b"pw\0"), m.PasswordMessage(b"pw\0")),
    (fe.msg(b"F", b"xx"), m.Unsupported(b"F")),
]


def started():
    p = FrontendParser()
    p.feed(fe.startup(user="u", database="d"))
    assert p.next_event() == m.StartupMessage(196608, {"user": "u", "database": "d"})
    return p


def test_startup_phase_messages():
    p = FrontendParser()
    p.feed(fe.ssl_request() + struct.pack("!ii", 8, 80877104) + fe.cancel_request(7, 99))
    assert p.next_event() == m.SSLRequest()
    assert p.next_event() == m.GSSENCRequest()
    assert p.next_event() == m.CancelRequest(7, 99)
    assert p.next_event() is None and p.startup_phase


@pytest.mark.parametrize("raw,event", NORMAL)
def test_normal_messages(raw, event):
    p = started()
    p.feed(raw)
    assert p.next_event() == event
    assert p.next_event() is None


def test_byte_by_byte():
    p = FrontendParser()
    stream = fe.startup(user="u", application_name="x") + b"".join(r for r, _ in NORMAL)
    events = []
    for b in stream:
        p.feed(bytes([b]))
        while (ev := p.next_event()) is not None:
            events.append(ev)
    assert events[1:] == [e for _, e in NORMAL]


def test_sasl_initial():
    ev = parse_sasl_initial(m.PasswordMessage(b"SCRAM-SHA-256\0" + struct.pack("!i", 3) + b"abc"))
    assert ev == m.SASLInitialResponse("SCRAM-SHA-256", b"abc")
    with pytest.raises(ProtocolViolation):
        parse_sasl_initial(m.PasswordMessage(b"SCRAM-SHA-256\0" + struct.pack("!i", 9) + b"abc"))


def test_oversized_message():
    p = FrontendParser(max_message_size=100)
    p.feed(fe.startup(user="u"))
    p.next_event()
    p.feed(b"Q" + struct.pack("!i", 10_000))  # rejected from the header alone
    with pytest.raises(ProtocolViolation) as ei:
        p.next_event()
    assert ei.value.sqlstate == "54000"
    with pytest.raises(ProtocolViolation):  # parser stays dead
        p.next_event()


@pytest.mark.parametrize(
    "raw",
    [
        b"Z\0\0\0\x04",  # unknown type
        b"Q\0\0\0\x02",  # length < 4
        fe.msg(b"Q", b"no terminator"),
        fe.msg(b"S", b"extra"),  # trailing bytes
        fe.msg(b"D", b"Xname\0"),  # bad describe kind
        fe.msg(b"B", b"\0\0\0\x01\0\x01\0\x01\xff\xff\xff\xf0"),  # negative length
        fe.msg(b"Q", b"\xff\xfe\0"),  # invalid utf-8
    ],
)
def test_garbage_normal(raw):
    p = started()
    p.feed(raw)
    with pytest.raises(ProtocolViolation):
        p.next_event()


@pytest.mark.parametrize(
    "raw",
    [
        struct.pack("!i", 3) + b"x",
        struct.pack("!i", 1 << 30),
        struct.pack("!ii", 8, 12345),
        struct.pack("!ii", 8, 196608),  # no user
    ],
)
def test_garbage_startup(raw):
    p = FrontendParser()
    p.feed(raw)
    with pytest.raises(ProtocolViolation):
        p.next_event()


def test_fuzz_only_protocol_violation():
    rng = random.Random(1234)
    for i in range(3000):
        p = FrontendParser(max_message_size=4096)
        if i % 2:
            p.feed(fe.startup(user="u"))
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        if i % 3 == 0:  # plausible header with random body
            data = rng.choice(b"QPBDECSHXpF").to_bytes(1, "big") + struct.pack("!i", len(data) + 4) + data
        try:
            p.feed(data)
            while p.next_event() is not None:
                pass
        except ProtocolViolation:
            pass
        assert p.buffered <= 4096 + 64 + 100


def test_backend_encoding():
    assert m.ReadyForQuery("I").encode() == b"Z\0\0\0\x05I"
    assert m.AuthenticationOk().encode() == b"R\0\0\0\x08\0\0\0\0"
    assert m.BackendKeyData(1, 2).encode() == b"K\0\0\0\x0c\0\0\0\x01\0\0\0\x02"
    assert m.CommandComplete("SELECT 1").encode() == b"C\0\0\0\x0dSELECT 1\0"
    assert m.DataRow((b"1", None)).encode() == b"D\0\0\0\x0f\0\x02\0\0\0\x011\xff\xff\xff\xff"
    assert m.ParameterDescription((23, 25)).encode() == b"t\0\0\0\x0e\0\x02\0\0\0\x17\0\0\0\x19"
    assert m.ParameterStatus("a", "b").encode() == b"S\0\0\0\x08a\0b\0"
    rd = m.RowDescription((m.FieldDescription("x", 23, 4, 1),)).encode()
    assert rd == b"T\0\0\0\x1a\0\x01x\0" + struct.pack("!IhIhih", 0, 0, 23, 4, -1, 1)
    for cls, t in [
        (m.EmptyQueryResponse, b"I"),
        (m.ParseComplete, b"1"),
        (m.BindComplete, b"2"),
        (m.CloseComplete, b"3"),
        (m.NoData, b"n"),
        (m.PortalSuspended, b"s"),
    ]:
        assert cls().encode() == t + b"\0\0\0\x04"
    err = fe.split_backend(m.ErrorResponse("ERROR", "42P01", "msg", "det", "hint").encode())
    assert err[0][0] == b"E"
    assert fe.error_fields(err[0][1]) == {
        "S": "ERROR",
        "V": "ERROR",
        "C": "42P01",
        "M": "msg",
        "D": "det",
        "H": "hint",
    }
    notice = fe.split_backend(m.NoticeResponse(message="hi").encode())[0]
    assert notice[0] == b"N" and fe.error_fields(notice[1])["C"] == "00000"
    sasl = m.AuthenticationSASL().encode()
    assert sasl.endswith(b"SCRAM-SHA-256\0\0")
    assert m.AuthenticationSASLContinue(b"abc").encode()[5:] == b"\0\0\0\x0babc"
    assert m.AuthenticationSASLFinal(b"v=x").encode()[5:] == b"\0\0\0\x0cv=x"
