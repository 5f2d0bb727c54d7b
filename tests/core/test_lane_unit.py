"""The heavy-statement lane's pieces without processes (proxy/pipeline/lane.py; the processes:
tests/e2e/test_e2e_lane.py): which statements are heavy, the memory of heavy shapes, frames,
and errors carried back as the same exceptions (a refusal stays a refusal: the worker logs
it as one and charges nothing)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from proxy.pipeline.central import CENTRAL, SVT
from proxy.pipeline.extreme import EXTREME
from proxy.pipeline.kind import HEAVY_ROWS
from proxy.pipeline.lane import LaneClient, _reply, frame, heavy, read_frame
from proxy.pipeline.multitier import LADDER
from proxy.pipeline.per_record import PER_RECORD
from proxy.wire.api import SqlError
from rewriter.errors import Refusal


def _p(kind=CENTRAL, key="k", n_cells=1, selected=False):
    return SimpleNamespace(kind=kind, key=key, plan=SimpleNamespace(n_cells=n_cells, selected=selected))


def test_which_statements_are_heavy():
    assert not heavy(_p(n_cells=HEAVY_ROWS - 1)) and heavy(_p(n_cells=HEAVY_ROWS))
    assert all(heavy(_p(kind=k)) for k in (LADDER, PER_RECORD, EXTREME))  # heavy whatever their size
    assert not heavy(_p(kind=LADDER, key=None))  # releases nothing: answered in place
    assert not heavy(_p(n_cells=2**31, selected=True))  # partition selection: the data's keys
    assert not heavy(_p(kind=SVT, n_cells=10))
    assert PER_RECORD.plans_in_lane and not (CENTRAL.plans_in_lane or EXTREME.plans_in_lane)


def test_heavy_shapes_are_remembered_per_route_object_and_tier_kind():
    lane, a, b = LaneClient("\0x"), object(), object()
    lane.remember_heavy(a, False)
    assert lane.knows_heavy(a, False) and not lane.knows_heavy(a, True) and not lane.knows_heavy(b, False)
    for _ in range(1100):
        lane.remember_heavy(object(), False)
    assert not lane.knows_heavy(a, False) and len(lane._heavy) == 1024  # bounded, oldest first out


def test_frames_round_trip_and_end():
    async def go():
        r = asyncio.StreamReader()
        msg = {"id": 3, "data": b"\x00" * 100_000, "sql": "SELECT 1"}
        r.feed_data(frame(msg) + frame({"id": 4}))
        r.feed_data(frame({"id": 5})[:3])  # a frame cut short: the end
        r.feed_eof()
        return [await read_frame(r) for _ in range(3)]

    assert asyncio.run(go()) == [{"id": 3, "data": b"\x00" * 100_000, "sql": "SELECT 1"}, {"id": 4}, None]


def test_errors_come_back_as_the_same_exceptions():
    conn = SimpleNamespace(timing={})
    with pytest.raises(Refusal) as r:
        _reply(conn, {"error": ("refusal", {"sqlstate": "0A000", "message": "no", "hint": "write x"})})
    assert (r.value.sqlstate, r.value.message, r.value.hint) == ("0A000", "no", "write x")
    with pytest.raises(SqlError) as e:
        _reply(
            conn,
            {
                "error": (
                    "sql",
                    {
                        "sqlstate": "53400",
                        "message": "budget",
                        "detail": "d",
                        "hint": "h",
                        "severity": "ERROR",
                    },
                )
            },
        )
    assert (e.value.sqlstate, e.value.detail, e.value.hint) == ("53400", "d", "h")


class _Conn:
    """What :meth:`LaneClient.answer` reads of a worker's connection."""

    def __init__(self) -> None:
        self.role, self.session, self.timing = "analyst", SimpleNamespace(database="d", settings={}), {}
        self.cancel_signal = SimpleNamespace(subscribe=lambda f: lambda: None, is_set=lambda: False)


@pytest.mark.parametrize("takes", [False, True])
def test_a_lane_that_stops_before_it_took_a_statement_leaves_it_to_the_worker(tmp_path, takes):
    """A lane that stops after reading a statement it acknowledged fails it with 58000 (it may
    have run it); one that stops before it took it — a connection queued on a dying lane's
    socket is closed unread — ran nothing of it: ``answer`` returns None and the worker runs it."""
    address = str(tmp_path / "lane.sock")

    async def go():
        async def lane(reader, writer):
            msg = await read_frame(reader)
            if takes:
                writer.write(frame({"op": "taken", "id": msg["id"]}))
                await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(lane, address)
        try:
            return await LaneClient(address).answer(_Conn(), "SELECT 1", [])
        finally:
            server.close()

    if takes:
        with pytest.raises(SqlError) as e:
            asyncio.run(go())
        assert e.value.sqlstate == "58000"
    else:
        assert asyncio.run(go()) is None
