"""Property-based and byte-level fuzzing of every frontend message type against the
sans-IO session (after a trust login): no exception escapes, no hang, buffers stay
bounded, and a malformed stream ends in an ErrorResponse with a protocol SQLSTATE and
a closed session. CI runs a fast subset; DPGATE_FUZZ_EXAMPLES=100000 is the nightly size."""

import asyncio
import os
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.wire.codec import ProtocolViolation
from proxy.wire.session import Session

from . import fe
from .toy import authenticator, factory

EXAMPLES = int(os.environ.get("DPGATE_FUZZ_EXAMPLES", "400"))
MAX = 8192
TYPES = b"QPBDECSHXpFdcf"  # every frontend type byte, plus COPY ones

cstr = st.binary(max_size=40).map(lambda b: b.replace(b"\0", b"") + b"\0")
i16 = st.integers(-3, 5).map(lambda n: struct.pack("!h", n))
i32 = st.integers(-5, 70000).map(lambda n: struct.pack("!i", n))
body = st.lists(st.one_of(cstr, i16, i32, st.binary(max_size=24)), max_size=8).map(b"".join)


@st.composite
def message(draw):
    t = draw(st.sampled_from(list(TYPES))).to_bytes(1, "big")
    b = draw(body)
    length = len(b) + 4
    if draw(st.integers(0, 9)) == 0:  # a lying length field
        length = draw(st.integers(-10, MAX * 4))
    return t + struct.pack("!i", length) + b


def _drive(chunks: list[bytes]) -> tuple[Session, bytes]:
    s = Session(authenticator(), factory, (7, 77), {"server_version": "16.0"}, MAX)

    async def go():
        s.receive_data(fe.startup(user="trusty", database="db"))
        for chunk in chunks:
            if s.closed:
                break
            s.receive_data(chunk)
            while not s.closed:
                try:
                    ev = s.next_event()
                except ProtocolViolation as exc:
                    s.violation(exc)
                    break
                if ev is None:
                    break
                await asyncio.wait_for(s.handle(ev), 5)  # never hangs
            assert s.parser.buffered <= MAX + 1024  # bounded memory

    asyncio.run(go())
    return s, s.data_to_send()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(message(), min_size=1, max_size=6))
def test_random_message_sequences(msgs):
    s, out = _drive(msgs)
    # a Terminate (whatever bytes follow it) closes without an error, as in Postgres
    terminated = any(m.startswith(b"X\x00\x00\x00\x04") for m in msgs)
    if s.closed and not terminated:  # a violation closes with an ErrorResponse
        errors = [b for t, b in fe.split_backend(out) if t == b"E"]
        assert errors, "closed without an ErrorResponse"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(min_size=1, max_size=300), st.integers(1, 17))
def test_random_bytes_in_random_chunks(data, step):
    chunks = [data[i : i + step] for i in range(0, len(data), step)]
    _drive(chunks)


def test_oversized_message_closes_with_54000():
    s, out = _drive([b"Q" + struct.pack("!i", MAX * 10) + b"x" * 10])
    assert s.closed
    ((t, b),) = [m for m in fe.split_backend(out) if m[0] == b"E"]
    assert b"C54000" in b
