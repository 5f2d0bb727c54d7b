"""The heavy-statement lane: a slow statement runs where it cannot delay another session's
repeat (nothing heavy on a worker's event loop).

With ``dpgate serve --workers N`` a statement whose release costs milliseconds of Python
(:func:`heavy`: a GROUP BY of ``HEAVY_ROWS`` cells or more, the data-market ladder's chain,
per-record and MAX/MIN releases) runs whole in one more process, the lane, at the lowest
CPU priority (``[server] heavy_lane``, ``SCHED_IDLE`` by default: ``proxy.cli.lane``). In
a worker, such a release held the GIL in turns with the event loop — the other sessions'
repeats waited for it at every GIL hand-off — and in another process at the same priority
it still took the cores they wait for; at ``SCHED_IDLE`` the kernel runs any ready worker
first (the figures are ``bench.workers``', in docs/performance.md).

The worker plans the statement (a refusal never leaves it), then sends the role, the text,
its parameters and the session's settings over a Unix socket (:class:`LaneClient`); the
lane answers it with ``Connection.answer`` on its own gateway — the same ledger (charges,
repeats and concurrent twins are the ledger's, as between workers) and the same backend,
read-only — and returns the result with its rows already encoded as DataRow messages for
the text format (:func:`serve_link`; :class:`~proxy.wire.api.EncodedRows`), so the worker
only writes bytes. A cancel is forwarded by id. The lane acknowledges each statement as it
takes it, before it runs anything of it. A lane that cannot be reached, or that stops before
it acknowledged a statement, took nothing: the worker runs the statement itself (a lane
killed while its listening socket still queues connections accepts one it never reads). One
that stops during a statement it took fails it with 58000 (what had started is charged, as
always).

Frames: a 4-byte big-endian length, then a pickle (both ends are this program's own
processes: the lane accepts a peer of its own user and parent only, ``proxy.cli.lane``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
import struct
from functools import partial

from rewriter.errors import Refusal
from rewriter.lru import LRU

from ..stores.errors import LedgerUnavailable
from ..wire.api import Column, ColumnRows, EncodedRows, Result, SqlError
from ..wire.rows import data_rows
from .kind import HEAVY_ROWS

__all__ = ["LaneClient", "heavy", "heavy_plan", "ledger_error", "serve_link"]

log = logging.getLogger("dpgate")

_LEN = struct.Struct("!I")


def heavy(p) -> bool:
    """Whether the prepared statement ``p`` runs in the lane: its kind is heavy whatever its
    size (``ReleaseKind.heavy``: the ladder's chain per cell, per-record's two scans and level
    search, MAX/MIN's candidate search), or its plan is large."""
    if p.key is None:  # releases nothing: answered in place
        return False
    return p.kind.heavy or heavy_plan(getattr(p, "plan", None))


def heavy_plan(plan) -> bool:
    """A central plan of ``HEAVY_ROWS`` public cells or more (keys chosen by partition
    selection are as many as the data has: such a plan stays in the worker)."""
    return not getattr(plan, "selected", False) and getattr(plan, "n_cells", 0) >= HEAVY_ROWS


def ledger_error(e: LedgerUnavailable) -> SqlError:
    """What the client gets when the ledger cannot be reached or written."""
    return SqlError(
        e.sqlstate, e.line or "the privacy ledger is unavailable: no answer was released; try again shortly"
    )


def frame(obj) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader):
    """The next message, or None at the end of the stream."""
    try:
        (n,) = _LEN.unpack(await reader.readexactly(_LEN.size))
        return pickle.loads(await reader.readexactly(n))
    except asyncio.IncompleteReadError:
        return None


class LaneLost(Exception):
    pass


class _Link:
    """One worker's connection to the lane and the statements waiting on it."""

    def __init__(self, reader, writer) -> None:
        self.writer = writer
        self.pending: dict[int, asyncio.Future] = {}
        self.taken: set[int] = set()  # statements the lane acknowledged (it may have run them)
        self.task = asyncio.ensure_future(self._read(reader))

    async def _read(self, reader) -> None:
        try:
            while (msg := await read_frame(reader)) is not None:
                if msg.get("op") == "taken":
                    if msg["id"] in self.pending:
                        self.taken.add(msg["id"])
                    continue
                fut = self.pending.pop(msg["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (OSError, pickle.UnpicklingError, struct.error) as e:
            log.warning("heavy-statement lane: %s", e)
        finally:
            self.writer.close()
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(LaneLost())
            self.pending.clear()

    @property
    def open(self) -> bool:
        return not self.task.done() and not self.writer.is_closing()

    def send(self, msg: dict) -> None:
        self.writer.write(frame(msg))


class LaneClient:
    """A worker's side of the lane at the Unix socket ``address`` (connected on first use,
    again after the lane was restarted)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._link: _Link | None = None
        self._ids = itertools.count(1)
        self._heavy: LRU = LRU(1024)  # routes by shape whose statements were heavy

    def knows_heavy(self, route, ladder: bool) -> bool:
        """Whether a statement of ``route``'s shape (the route object ``rewriter.route.Routes``
        keeps per shape: a statement that differs only in its numbers) was heavy before, for
        a ladder tier or not: then it goes to the lane unplanned (the plan would cost this
        worker's GIL milliseconds). Heaviness does not depend on the numbers (cells come from
        the public domain); a wrong guess only costs speed: the lane answers any statement."""
        return (id(route), ladder) in self._heavy

    def remember_heavy(self, route, ladder: bool) -> None:
        self._heavy.put((id(route), ladder), route)  # (held: its id is never reused meanwhile)

    async def _open(self) -> _Link | None:
        if self._link is not None and self._link.open:
            return self._link
        try:
            reader, writer = await asyncio.open_unix_connection(self.address)
        except OSError:
            return None
        if self._link is not None and self._link.open:  # another statement connected meanwhile
            writer.close()
            return self._link
        self._link = _Link(reader, writer)
        return self._link

    async def answer(self, conn, sql: str, params: list):
        """``(Result, decision, ε charged)`` from the lane, or None if it cannot be reached or
        stopped before it took the statement (the caller runs the statement itself)."""
        link = await self._open()
        if link is None:
            return None
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        link.pending[rid] = fut
        link.send(
            {
                "op": "answer",
                "id": rid,
                "role": conn.role,
                "database": conn.session.database,
                "settings": dict(conn.session.settings),
                "sql": sql,
                "args": list(params),
            }
        )
        unsubscribe = conn.cancel_signal.subscribe(partial(self._cancel, link, rid))
        if conn.cancel_signal.is_set():  # cancelled while it was planned here
            self._cancel(link, rid)
        try:
            msg = await fut
        except LaneLost:
            if rid not in link.taken:  # the lane never took it: nothing of it ran there
                return None
            raise SqlError(
                "58000",
                "the heavy-statement process stopped during this statement; if its scan "
                "had started it was charged",
                hint="Run it again.",
            ) from None
        except asyncio.CancelledError:
            self._cancel(link, rid)
            raise
        finally:
            unsubscribe()
            link.pending.pop(rid, None)
            link.taken.discard(rid)
        return _reply(conn, msg)

    async def close(self) -> None:
        """Close the link (the worker is stopping; its statements have ended)."""
        link, self._link = self._link, None
        if link is not None:
            link.writer.close()
            await asyncio.gather(link.task, return_exceptions=True)

    @staticmethod
    def _cancel(link: _Link, rid: int) -> None:
        if link.open:
            link.send({"op": "cancel", "id": rid})


def _reply(conn, msg: dict):
    err = msg.get("error")
    if err is not None:
        kind, f = err
        if kind == "refusal":
            raise Refusal(f["sqlstate"], f["message"], f["hint"])
        raise SqlError(
            f["sqlstate"], f["message"], detail=f["detail"], hint=f["hint"], severity=f["severity"]
        )
    conn.timing.update(msg["timing"])
    cols = None if msg["columns"] is None else [Column(n, t) for n, t in msg["columns"]]
    rows = EncodedRows(msg["data"], msg["formats"], msg["count"], partial(pickle.loads, msg["values"]))
    return (
        Result(msg["tag"], cols, rows, notices=msg["notices"], parameter_status=msg["parameter_status"]),
        msg["decision"],
        msg["eps"],
    )


# -- the lane's side --------------------------------------------------------------------


async def serve_link(gw, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, busy=None) -> None:
    """Answer one worker's statements until it disconnects (then its running statements
    are cancelled: a scan that had started is charged, as for a client that leaves).
    ``busy(+1 / -1)``, if given, is told as each statement starts and ends."""
    running: dict[int, list] = {}  # id -> [its connection once made, cancelled?]
    tasks: set[asyncio.Task] = set()
    try:
        while (msg := await read_frame(reader)) is not None:
            if msg["op"] == "cancel":
                slot = running.get(msg["id"])
                if slot is not None:
                    slot[1] = True  # (a cancel before its connection exists waits here)
                    if slot[0] is not None:
                        slot[0].cancel()
            elif msg["op"] == "answer":
                running[msg["id"]] = [None, False]
                writer.write(frame({"op": "taken", "id": msg["id"]}))  # before anything of it runs
                task = asyncio.ensure_future(_answer(gw, msg, running, writer, busy))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
    except (OSError, pickle.UnpicklingError, struct.error) as e:
        log.warning("heavy-statement lane: a worker's link failed: %s", e)
    finally:
        for slot in list(running.values()):
            slot[1] = True
            if slot[0] is not None:
                slot[0].cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        writer.close()


async def _answer(gw, msg: dict, running: dict, writer, busy) -> None:
    rid = msg["id"]
    if busy is not None:
        busy(1)
    try:
        try:
            await writer.drain()  # the acknowledgement is sent before the statement runs
        except OSError:  # the worker is gone: nothing of it runs
            return
        conn = await gw.handler_factory(msg["role"], msg["database"], {})
        conn.session.settings = dict(msg["settings"])
        slot = running[rid]
        slot[0] = conn
        if slot[1]:  # cancelled before it started: not run
            raise SqlError("57014", "canceling statement due to user request")
        result, decision, eps = await conn.answer(msg["sql"], msg["args"])
        reply = await asyncio.to_thread(_encoded, result)
        reply.update(
            decision=decision,
            eps=eps,
            timing={k: v for k, v in conn.timing.items() if k in ("backend_ms", "started")},
        )
    except Refusal as r:
        reply = {"error": ("refusal", {"sqlstate": r.sqlstate, "message": r.message, "hint": r.hint})}
    except (SqlError, LedgerUnavailable) as e:
        e = ledger_error(e) if isinstance(e, LedgerUnavailable) else e
        reply = {
            "error": (
                "sql",
                {
                    "sqlstate": e.sqlstate,
                    "message": e.message,
                    "detail": e.detail,
                    "hint": e.hint,
                    "severity": e.severity,
                },
            )
        }
    except Exception:  # reported, never raised here
        log.exception("heavy-statement lane: statement failed")
        reply = {
            "error": (
                "sql",
                {
                    "sqlstate": "XX000",
                    "message": "internal error",
                    "detail": None,
                    "hint": None,
                    "severity": "ERROR",
                },
            )
        }
    finally:
        running.pop(rid, None)
        if busy is not None:
            busy(-1)
    reply["id"] = rid
    if not writer.is_closing():
        writer.write(frame(reply))


def _encoded(result: Result) -> dict:
    """A result as the worker takes it: its rows as text-format DataRow messages and, for
    any other use, pickled (on a thread: the lane's loop serves the other workers too)."""
    cols, rows = result.columns, result.rows
    n = len(cols) if cols is not None else 0
    formats = (0,) * n
    data = data_rows([c.type_oid for c in cols], list(formats), rows) if cols is not None else b""
    values = rows if isinstance(rows, (list, ColumnRows)) else list(rows)
    return {
        "tag": result.command_tag,
        "columns": None if cols is None else [(c.name, c.type_oid) for c in cols],
        "data": data,
        "formats": formats,
        "count": len(rows),
        "values": pickle.dumps(values, pickle.HIGHEST_PROTOCOL),
        "notices": list(result.notices),
        "parameter_status": dict(result.parameter_status),
    }
