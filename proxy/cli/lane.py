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

__all__ = ["Lane", "lane_address", "lower_priority"]

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


class Lane:
    """The lane's server: the workers' links, each served by :func:`serve_link`."""

    def __init__(self, gw, address: str) -> None:
        self.gw, self.address = gw, address
        self.links: set[asyncio.Task] = set()
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._on_link, path=self.address)

    async def _on_link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not _peer_ok(writer.get_extra_info("socket")):
            writer.close()
            return
        task = asyncio.current_task()
        self.links.add(task)
        try:
            await serve_link(self.gw, reader, writer)
        finally:
            self.links.discard(task)

    async def stop(self, grace_s: float) -> None:
        """Accept no more links; wait up to ``grace_s`` for the workers' to end (they end as
        the workers stop, with their statements), then cancel what is left."""
        if self.server is not None:
            self.server.close()
        if self.links:
            _, left = await asyncio.wait(set(self.links), timeout=grace_s)
            for task in left:
                task.cancel()
            if left:
                await asyncio.gather(*left, return_exceptions=True)
