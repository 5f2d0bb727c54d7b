"""The heavy-statement lane's process, beside the workers of ``dpgate serve --workers N``
(what it runs and why: :mod:`proxy.pipeline.lane`).

The parent forks it as it forks a worker (restarted alike if it dies), with the same
config, state and backend opened read-only, and no listener: the workers reach it at an
abstract Unix socket address (no file; a random name made by the parent). A peer must run
as this user and be a child of the same parent (``SO_PEERCRED``), so no other process on
the machine can send it a statement as a role. Its priority is lowered before any thread
exists, so DuckDB's threads and the pools' inherit it.
"""
from __future__ import annotations

import asyncio
import os
import secrets
import socket
import struct

from ..pipeline.lane import serve_link

__all__ = ["lane_address", "lower_priority", "start_lane"]

_UCRED = struct.Struct("3i")


def lane_address() -> str:
    """A fresh abstract Unix socket name (Linux: the leading NUL keeps it off the file system)."""
    return "\0dpgate-lane-" + secrets.token_hex(12)


def lower_priority(mode: str) -> None:
    """This thread, and the threads it starts later, at the lane's CPU priority: ``idle``
    (``SCHED_IDLE``: runs only when no other thread is ready) or ``low`` (nice 19)."""
    try:
        if mode == "idle":
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        elif mode == "low":
            os.nice(19)
    except (AttributeError, OSError):          # not Linux: the lane still runs apart from the workers
        pass


def _peer_ok(sock: socket.socket) -> bool:
    """The peer runs as this user and is a child of this process's parent (a worker)."""
    try:
        pid, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError, struct.error):
        return False
    return uid == os.getuid() and ppid == os.getppid()


async def start_lane(gw, address: str) -> asyncio.AbstractServer:
    """Serve the workers' heavy statements with ``gw`` at ``address``."""
    async def on_link(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not _peer_ok(writer.get_extra_info("socket")):
            writer.close()
            return
        await serve_link(gw, reader, writer)
    return await asyncio.start_unix_server(on_link, path=address)
