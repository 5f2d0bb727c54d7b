"""The heavy-statement lane's process, beside the workers of ``dpgate serve --workers N``
(what it runs and why: :mod:`proxy.pipeline.lane`).

The parent forks it as it forks a worker (restarted alike if it dies), with the same
config, state and backend opened read-only, and no listener: the workers reach it at an
abstract Unix socket address (no file; a random name made by the parent). A peer must run
as this user and be a child of the same parent (``SO_PEERCRED``), so no other process on
the machine can send it a statement as a role. It starts at the workers' priority (at
``SCHED_IDLE`` a saturated host would never give it the CPU to open its backend and ledger)
and lowers every thread it has once it is ready; threads started later inherit it.

**Starvation.** At ``SCHED_IDLE`` the lane runs only on a core no worker wants: while light
statements keep every core busy, a heavy one waits, possibly beyond the statement timeout (which charges a scan that
started). So the parent watches it (:class:`Starvation`): when the lane
has a statement running and got less than ``STARVED_CORES`` of CPU over ``WINDOW_S``, its
threads go to ``SCHED_OTHER`` (the workers' priority) until it has none running, then back
to ``SCHED_IDLE``. Raising a priority needs ``CAP_SYS_NICE`` (or an ``RLIMIT_NICE`` of 20):
without it the parent says so once, and the lane stays at ``SCHED_IDLE``.
"""

from __future__ import annotations

import asyncio
import errno
import mmap
import os
import secrets
import socket
import struct
import sys

from ..pipeline.lane import serve_link

__all__ = ["Lane", "Starvation", "lane_address", "lower_priority"]

WINDOW_S = 0.5  # the parent looks at the lane's CPU over this long
STARVED_CORES = 0.2  # … and lifts it when it got less while a statement ran

_UCRED = struct.Struct("3i")


def lane_address() -> str:
    """A fresh abstract Unix socket name (Linux: the leading NUL keeps it off the file system)."""
    return "\0dpgate-lane-" + secrets.token_hex(12)


def lower_priority(mode: str) -> None:
    """Every thread of this process, and so the threads they start later, at the lane's CPU
    priority: ``idle`` (``SCHED_IDLE``: runs only when no other thread is ready) or ``low``
    (nice 19). Lowering needs no privilege."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{os.getpid()}/task")]
    except OSError:  # not Linux: this thread only
        tids = [0]
    for tid in tids:
        try:
            if mode == "idle":
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            elif mode == "low":
                os.setpriority(os.PRIO_PROCESS, tid, 19)
        except (AttributeError, OSError):  # a thread that just ended; not Linux
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

    def __init__(self, gw, address: str, running=None) -> None:
        self.gw, self.address, self.running = gw, address, running
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
            await serve_link(self.gw, reader, writer, self._busy)
        finally:
            self.links.discard(task)

    def _busy(self, d: int) -> None:
        if self.running is not None:
            self.running[0] += d

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


def running_slot() -> memoryview:
    """One int in a shared anonymous mapping (made before the fork): the statements the
    lane is running, written by the lane, read by the parent."""
    return memoryview(mmap.mmap(-1, 4)).cast("i")


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _set_policy(pid: int, policy: int) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setscheduler(int(tid), policy, os.sched_param(0))
        except ProcessLookupError:  # a thread that just ended
            pass


class Starvation:
    """The parent's watch over a ``SCHED_IDLE`` lane (module docstring, *Starvation*):
    :meth:`tick` on every turn of the parent's loop."""

    def __init__(self, mode: str, running: memoryview) -> None:
        self.mode, self.running = mode, running
        self.raised = self.unable = False
        self.lifts = 0  # times the lane was lifted (tests, the log)
        self._last: tuple[int, float, int] | None = None

    def tick(self, pid: int | None, now: float) -> None:
        if self.mode != "idle" or pid is None or self.unable:
            return
        try:
            ticks = _cpu_ticks(pid)
        except (OSError, ValueError, IndexError):
            return
        if self._last is None or self._last[0] != pid:  # a new lane starts at SCHED_IDLE
            self._last, self.raised = (pid, now, ticks), False
            return
        if now - self._last[1] < WINDOW_S:
            return
        cores = (ticks - self._last[2]) / os.sysconf("SC_CLK_TCK") / (now - self._last[1])
        self._last = (pid, now, ticks)
        try:
            if not self.raised and self.running[0] > 0 and cores < STARVED_CORES:
                _set_policy(pid, os.SCHED_OTHER)
                self.raised, self.lifts = True, self.lifts + 1
            elif self.raised and self.running[0] == 0:
                _set_policy(pid, os.SCHED_IDLE)
                self.raised = False
        except PermissionError as e:
            if e.errno == errno.EPERM:
                self.unable = True
                print(
                    "dpgate: the heavy-statement lane cannot be given back the workers' priority when "
                    "it starves (that needs CAP_SYS_NICE); under a load that keeps every core busy its "
                    "statements wait",
                    file=sys.stderr,
                    flush=True,
                )
        except OSError:
            pass
