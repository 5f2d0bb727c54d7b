"""``dpgate serve --workers N``: N processes serve one port, so
fresh releases use every core.

Design: a **pre-forked shared listener**. A first child prepares everything that writes
(the demo data, the ledger and its identity, the DuckDB file's identity row, the report
tables of local tables; the config is checked against the backend) and exits; the parent,
which never opens the data or the ledger itself (:func:`in_child`), binds the listening
socket(s) and forks N workers. Every worker accepts on the inherited socket
with its own event loop, gateway, ledger connections and backend (an embedded DuckDB file
opened ``read_only``; a Postgres pool of ``pool_size`` per worker; a Spark session per
worker). The kernel's one accept queue is shared, so a worker that dies loses only the
connections it had accepted (with SO_REUSEPORT the connections queued on its socket die
with it), and the parent never touches a client byte (no hop, no stall at the parent).
Chosen over a parent that accepts and passes sockets on (``socket.send_fds``) because that
puts a second process and a syscall on every connection's path, and over SO_REUSEPORT for
the reason above; what those two would give, this design gets so:

* **Cancel.** Worker ``i`` of ``N`` hands out backend pids ``≡ i (mod N)`` (BackendKeyData).
  A CancelRequest arrives on a new connection, which any worker may accept; a worker that
  gets one for another worker's pid writes ``(pid, secret)`` (8 bytes: one atomic pipe
  write) into the owning worker's pipe, and the owner checks the secret and cancels as for
  its own session (:meth:`proxy.wire.server.Server.cancel`). A full pipe drops the request
  (a cancel is best effort, as in Postgres).
* **Balance.** Each worker publishes its connection count and whether it accepts in a shared
  anonymous mapping. A worker waits until a connection is queued, and then, if it has more
  than ``BALANCE_SLACK`` connections over the least loaded other worker, steps back so that
  one takes it: up to ``GATE_WAIT_S`` for a ready worker, and for one (re)starting (counted
  as having none) until ``START_WAIT_S`` after it was started — so the connections made
  while a worker starts wait for it instead of all landing on the others and staying there.
  Never longer: a stuck worker cannot starve the port. It then tries a non-blocking accept
  (another worker may have taken the connection meanwhile).

What the workers share is what several proxies on one ledger share (docs/operations.md, "Scaling out"):
the SQLite ledger in WAL mode, each write in ``BEGIN IMMEDIATE`` with a 30 s busy timeout,
so charges never overspend across processes and a repeat racing on two workers gets one
answer and one charge (the second record finds the first's release and is refunded). Twin
waiting inside one process is as before; across workers it is the ledger's.

The embedded DuckDB file has one writer or many readers: a config in which a role may
``INSERT`` into a local table needs a writer, so it runs one worker by default, and an
explicit ``--workers N`` (N > 1) for it is refused at start (exit 2, with what to do
instead: ``--workers 1``, the Postgres backend, or ``dpgate ldp-load`` while stopped).

Signals: the parent takes SIGTERM / SIGINT (workers ignore SIGINT, so a terminal's Ctrl-C
reaches them once, through the parent) and sends SIGTERM to every worker, which shuts down
as a single process does (sessions end with 57P01, a running statement gets
``shutdown_grace_s``); a second signal kills them at once. A worker that dies is restarted
(same index, so its pids still route). A child that is slow to start or keeps dying never
takes down workers that serve: past ``READY_TIMEOUT_S`` the service is announced without it,
and beyond ``MAX_RESTARTS`` deaths within ``RESTART_WINDOW_S`` it is restarted after a delay
that doubles up to ``MAX_BACKOFF_S``; only when no worker serves does the service stop (exit
1). Workers get SIGKILL if the parent dies (Linux ``PR_SET_PDEATHSIG``). The owner page
(``--admin-http``) runs in worker 0 only.

Limits: the failed-login limit per address is split between the workers (each allows
ceil(10 / N) per minute, so an address gets about as many tries as from one process);
``max_connections``, the pending-connection limits and ``max_statements_per_role`` hold
per worker (a role's connections may all land on one worker, which must still serve them).
"""

from __future__ import annotations

import asyncio
import ctypes
import mmap
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from pathlib import Path

import sqlglot

from config import Config, ConfigError
from rewriter.local import layout

from ..backends import kind_of, open_backend
from ..gateway import Gateway
from ..pipeline.lane import LaneClient
from ..pipeline.local import ensure_reports
from ..pipeline.release import prepare_mechanisms
from ..wire.server import Server, listen_sockets
from .affinity import hold
from .lane import Lane, Starvation, lane_address, lower_priority, running_slot

__all__ = [
    "default_workers",
    "make_server",
    "prepare_local_tables",
    "release_signals",
    "resolve_workers",
    "serve_workers",
    "stop_signals",
    "writer_roles",
]

BALANCE_SLACK = 1  # connections a worker may be ahead of the least loaded one and still accept
GATE_WAIT_S = 0.02  # at most this long a worker steps back for a ready one before accepting anyway
START_WAIT_S = 10.0  # … and for one (re)starting, at most this long after it was started
# (env DPGATE_START_WAIT_S)
MAX_RESTARTS, RESTART_WINDOW_S = 5, 60.0
MAX_BACKOFF_S = 30.0  # a child that keeps dying while others serve is restarted at most this far apart
READY_TIMEOUT_S = 120.0  # no worker ready by then: the service cannot start (env DPGATE_READY_TIMEOUT_S)
START_DELAY_ENV = "DPGATE_TEST_START_DELAY"  # test seam: "lane:S" or "worker<i>:S" starts that child S s late
COUNT_REFRESH_S = 0.05  # s between two updates of a worker's published connection count
_CANCEL = struct.Struct("!II")
_PR_SET_PDEATHSIG = 1


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def writer_roles(cfg: Config) -> list[str]:
    """Roles that may INSERT into a local table that takes one writer: an embedded DuckDB file
    (one writer process), or a Spark reports table (appends to one table share its
    ``_temporary`` directory, so a proxy sends them one at a time: ``pipeline.local``)."""
    if not kind_of(cfg).one_writer:
        return []
    return [f"{r} ({', '.join(spec.insert)})" for r, spec in cfg.roles.items() if spec.insert]


def resolve_workers(cfg: Config, args) -> int:
    """``--workers``, else ``[server] workers``, else the cores (1 for a config that needs a
    DuckDB writer); an explicit N > 1 for such a config is a ConfigError."""
    asked = getattr(args, "workers", None)
    asked = cfg.server.workers if asked is None else asked
    if asked is not None and asked < 1:
        raise ConfigError(f"--workers {asked}: give 1 or more")
    writers = writer_roles(cfg)
    if asked is None:
        return 1 if writers else default_workers()
    if asked > 1 and writers:
        raise ConfigError(
            f"--workers {asked}: the {cfg.backend.kind} backend's local tables take one writer, and INSERT into a local table is "
            f"granted to {'; '.join(writers)}. Run --workers 1, or use the Postgres backend, or drop the "
            "INSERT grants and load reports with `dpgate ldp-load` while the proxy is stopped"
        )
    return asked


def make_server(gw: Gateway, cfg: Config, host: str, port: int, **extra) -> Server:
    """The wire server with the config's limits (one process, or one worker's)."""
    lim = cfg.server.limits
    return Server(
        gw.handler_factory,
        authenticator=gw,
        host=host,
        port=port,
        ssl_context=gw.ssl_context(),
        max_connections=lim.max_connections,
        max_message_size=lim.max_message_size,
        idle_timeout=lim.idle_timeout_s or None,
        require_tls=cfg.server.tls.require,
        max_statement_size=lim.max_statement_size,
        auth_timeout=lim.login_timeout_s,
        max_pending=lim.max_pending_connections,
        max_pending_per_address=lim.max_pending_per_address,
        **extra,
    )


def stop_signals() -> asyncio.Event:
    """An event set by SIGTERM (service managers) or SIGINT (Ctrl-C); a signal the
    process was started with ignored (e.g. ``nohup``) stays ignored."""
    stop, loop = asyncio.Event(), asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(sig) is signal.SIG_IGN:
            continue
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not on this platform: Ctrl-C raises instead
            pass
    return stop


def release_signals() -> None:
    """Back to the default action: a second signal stops at once."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.remove_signal_handler(sig)
        except (NotImplementedError, RuntimeError):
            pass


async def prepare_local_tables(gw: Gateway) -> None:
    """Create the report table of every local table now (workers cannot: read-only file)."""
    cfg = gw.config
    for name, table in cfg.tables.items():
        if getattr(table, "local", None) is not None:
            await ensure_reports(gw, layout(name, table, cfg.tiers))


class Shared:
    """What the parent makes before forking: per worker a cancel pipe and a slot of
    connection counts in a shared anonymous mapping, and one readiness pipe."""

    def __init__(self, n: int, lane: str = "off"):
        self.n = n
        self.lane = lane  # [server] heavy_lane
        self.lane_address = lane_address() if lane != "off" else None
        self.lane_running = running_slot() if lane != "off" else None  # statements running in the lane
        self.pipes = [os.pipe() for _ in range(n)]
        for r, w in self.pipes:
            os.set_blocking(w, False)
            os.set_blocking(r, False)
        self._map = mmap.mmap(-1, 4 * n)  # MAP_SHARED: seen by every forked worker
        self.counts = memoryview(self._map).cast("i")
        self._up_map, self._born_map = mmap.mmap(-1, 4 * n), mmap.mmap(-1, 8 * n)
        self.up = memoryview(self._up_map).cast("i")  # 1: the worker accepts on the port
        self.born = memoryview(self._born_map).cast("d")  # when it was (re)started (CLOCK_MONOTONIC)
        self.start_wait = float(os.environ.get("DPGATE_START_WAIT_S", START_WAIT_S))
        self.ready_r, self.ready_w = os.pipe()
        self.notes_r, self.notes_w = os.pipe()  # lines the parent prints after its own
        os.set_blocking(self.notes_r, False)

    def note(self, line: str) -> None:
        """A line for the parent to print (one atomic pipe write)."""
        os.write(self.notes_w, (line + "\n").encode()[: select.PIPE_BUF])

    def print_notes(self) -> None:
        try:
            data = os.read(self.notes_r, 65536)
        except BlockingIOError:
            return
        if data:
            print(data.decode(errors="replace"), end="", flush=True)

    def forward_cancel(self, pid: int, secret: int) -> None:
        try:
            os.write(self.pipes[pid % self.n][1], _CANCEL.pack(pid, secret))
        except OSError:  # full (or gone): dropped, best effort
            pass

    def listen_cancels(self, index: int, server: Server) -> None:
        """Cancels forwarded to worker ``index`` are applied on its event loop."""
        fd = self.pipes[index][0]

        def readable() -> None:
            try:
                data = os.read(fd, _CANCEL.size * 512)
            except BlockingIOError:
                return
            for off in range(0, len(data) - _CANCEL.size + 1, _CANCEL.size):
                server.cancel(*_CANCEL.unpack_from(data, off))

        asyncio.get_running_loop().add_reader(fd, readable)

    def publish(self, index: int, server: Server) -> None:
        """Keep worker ``index``'s count fresh while it waits in accept (sessions end too)."""
        loop = asyncio.get_running_loop()

        def tick() -> None:
            self.counts[index] = server.connection_count + server.pending_count
            loop.call_later(COUNT_REFRESH_S, tick)

        tick()

    def spawned(self, index: int) -> None:
        """The parent (re)starts worker ``index``: not accepting yet, due within ``START_WAIT_S``."""
        if index < self.n:
            self.up[index], self.counts[index], self.born[index] = 0, 0, time.monotonic()

    def peers(self, index: int, now: float, since: float) -> list[tuple[int, float]]:
        """The other workers that take connections, each as (connections, until when this one,
        stepping back since ``since``, waits for it): a ready one for ``GATE_WAIT_S``; one
        starting, as having none, until ``START_WAIT_S`` after it was started."""
        out = []
        for j in range(self.n):
            if j == index:
                continue
            if self.up[j]:
                out.append((self.counts[j], since + GATE_WAIT_S))
            elif now - self.born[j] < self.start_wait:
                out.append((0, self.born[j] + self.start_wait))
        return out

    def gate(self, index: int, server: Server):
        """The accept gate of worker ``index`` (see the module docstring, *Balance*): awaited
        when a connection is queued, before this worker tries to take it."""

        async def accept_gate() -> None:
            since = time.monotonic()
            while True:
                mine = server.connection_count + server.pending_count
                self.counts[index] = mine
                now = time.monotonic()
                peers = self.peers(index, now, since)
                least = min((c for c, _ in peers), default=mine)
                if mine <= least + BALANCE_SLACK or now >= max(t for c, t in peers if c == least):
                    return
                await asyncio.sleep(0.002)

        return accept_gate


def _pdeathsig() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent's SIGTERM still stops them
        pass


async def _gateway(cfg: Config, state: Path, opened=None) -> Gateway:
    """A worker's (or the lane's) gateway, started, on the backend opened read-only;
    ``opened()`` runs once the backend is open, before the gateway starts its threads."""
    backend = open_backend(cfg, state, read_only=True)
    try:
        if opened is not None:
            opened()
        gw = Gateway(cfg, state, backend=backend)
    except BaseException:
        await backend.close()
        raise
    await gw.start()
    return gw


async def _worker(
    index: int, shared: Shared, listeners: list[socket.socket], cfg: Config, state: Path, args, start_admin
) -> None:
    # this worker's threads held to its cores once DuckDB's own have started (.affinity)
    gw = await _gateway(cfg, state, opened=lambda: hold(index, shared.n, cfg.server.cpu_affinity))
    if shared.lane_address is not None:
        gw.lane = LaneClient(shared.lane_address)
    server = make_server(
        gw,
        cfg,
        "",
        0,
        listeners=listeners,
        pid_slot=(index, shared.n),
        cancel_elsewhere=shared.forward_cancel,
    )
    server.accept_gate = shared.gate(index, server)
    # failed logins per address: the workers' shares add up to the one process's limit
    server.max_auth_failures = max(1, -(-server.max_auth_failures // shared.n))
    await server.start()
    shared.listen_cancels(index, server)
    shared.publish(index, server)
    shared.up[index] = 1
    admin = (
        await start_admin(gw, args.admin_http, shared.note, server.failed_logins)
        if args.admin_http and index == 0
        else None
    )
    os.write(shared.ready_w, bytes([index]))
    stop = stop_signals()
    try:
        await stop.wait()
        release_signals()
        shared.up[index] = 0
        await server.shutdown(cfg.server.limits.shutdown_grace_s)
    finally:
        if admin is not None:
            await admin.close()
        await server.stop()
        if gw.lane is not None:
            await gw.lane.close()
        await gw.close()


async def _lane(shared: Shared, cfg: Config, state: Path) -> None:
    """The heavy-statement lane (:mod:`.lane`): index ``shared.n``, no listener."""
    gw = await _gateway(cfg, state)
    lane = Lane(gw, shared.lane_address, shared.lane_running)
    await lane.start()
    lower_priority(shared.lane)  # started at the workers' priority; idle once it serves
    os.write(shared.ready_w, bytes([shared.n]))
    stop = stop_signals()
    try:
        await stop.wait()
        release_signals()
        await lane.stop(cfg.server.limits.shutdown_grace_s + 1)  # the workers' links end as they stop
    finally:
        await gw.close()


def _fork() -> int:
    sys.stdout.flush()  # nothing buffered is written twice (by parent and child)
    sys.stderr.flush()
    return os.fork()


def _spawn(index: int, shared: Shared, listeners, cfg, state, args, start_admin) -> int:
    shared.spawned(index)
    pid = _fork()
    if pid:
        return pid
    code = 1
    try:
        _pdeathsig()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches workers through the parent
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        _start_delay(_name(index, shared, short=True))
        if index == shared.n:  # the heavy-statement lane
            asyncio.run(_lane(shared, cfg, state))
        else:
            asyncio.run(_worker(index, shared, listeners, cfg, state, args, start_admin))
        code = 0
    except BaseException as e:  # the parent restarts it
        msg = getattr(e, "message", None) or "".join(traceback.format_exception_only(e)).strip()
        print(f"dpgate: {_name(index, shared)} failed: {msg}", file=sys.stderr, flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _name(index: int, shared: Shared, short: bool = False) -> str:
    if short:
        return "lane" if index == shared.n else f"worker{index}"
    return "the heavy-statement lane" if index == shared.n else f"worker {index}"


def _start_delay(name: str) -> None:
    """The test seam ``DPGATE_TEST_START_DELAY=<name>:<seconds>``: a child slow to start."""
    who, _, seconds = os.environ.get(START_DELAY_ENV, "").partition(":")
    if who == name:
        time.sleep(float(seconds))


def warm_up(cfg: Config) -> None:
    """What every worker would compute alike, once in the parent before the fork: the
    mechanisms' set-up tables and the backend's SQL dialect (pure Python, no thread)."""
    prepare_mechanisms(cfg)
    sqlglot.Dialect.get_or_raise(kind_of(cfg).sql.name)


def in_child(fn) -> int:
    """``fn()`` (an exit code) in a forked child; its exit code. The preparation runs so,
    so that the parent never holds a DuckDB instance, a SQLite handle or a thread when it
    forks the workers (a lock held across ``fork`` by a thread that the child does not
    have would hang the child, e.g. in a DuckDB destructor run by the garbage collector)."""
    pid = _fork()
    if pid == 0:
        code = 1
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            code = fn()
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    while True:
        try:
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        except InterruptedError:
            continue


def serve_workers(
    cfg: Config, args, n: int, host: str, port: int, prepare, announce, start_admin, state: Path
) -> int:
    """Run ``n`` workers on ``host:port`` until SIGTERM / SIGINT; the exit code.
    ``prepare()`` (everything that writes; an exit code) runs first, in a child
    (:func:`in_child`); ``announce(port, pids)`` prints the ready lines once every worker
    accepts (``pids``: the workers' process ids in worker order)."""
    watched = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)  # a signal during the preparation waits
    try:
        code = in_child(prepare)
        if code != 0:
            return code
        warm_up(cfg)
        listeners = listen_sockets(host, port)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)
        raise
    shared = Shared(n, cfg.server.heavy_lane)
    total = n + (shared.lane_address is not None)  # the workers, and the lane as index n
    pids: dict[int, int] = {}  # pid -> worker index
    for i in range(total):
        pids[_spawn(i, shared, listeners, cfg, state, args, start_admin)] = i
    ready, deaths, stopping, kill_at, code = set(), [], False, None, 0
    announced, later = False, []  # later: (monotonic time, index) of restarts put off
    started = time.monotonic()
    ready_timeout = float(os.environ.get("DPGATE_READY_TIMEOUT_S", READY_TIMEOUT_S))
    starving = Starvation(shared.lane, shared.lane_running) if shared.lane_address is not None else None

    def serving(but: int = -1) -> bool:  # a worker other than ``but`` is up and accepting
        return any(i < n and i != but and i in ready for i in pids.values())

    def announce_once() -> None:
        nonlocal announced
        if not announced and not stopping:
            announced = True
            announce(listeners[0].getsockname()[1], sorted((p for p in pids if pids[p] < n), key=pids.get))
            shared.print_notes()

    while pids or later:
        info = signal.sigtimedwait(watched, 0.05)
        if stopping:
            later.clear()
        if starving is not None and not stopping:
            starving.tick(next((p for p, i in pids.items() if i == n), None), time.monotonic())
        if select.select([shared.ready_r], [], [], 0)[0]:
            ready.update(os.read(shared.ready_r, 256))
            if len(ready) == total:
                announce_once()
        if not announced and not stopping and time.monotonic() - started > ready_timeout:
            # a child slow to start never takes down workers that serve: they go on without it
            slow = ", ".join(_name(i, shared) for i in sorted(set(pids.values()) - ready))
            if serving():
                print(
                    f"dpgate: {slow} not ready after {ready_timeout:g} s; serving meanwhile (heavy statements "
                    "run in the workers until the lane is up)",
                    file=sys.stderr,
                    flush=True,
                )
                announce_once()
            else:
                print(
                    f"dpgate: no worker started within {ready_timeout:g} s ({slow})",
                    file=sys.stderr,
                    flush=True,
                )
                stopping, kill_at, code = True, time.monotonic(), 1
        now = time.monotonic()
        for due in [x for x in later if x[0] <= now]:
            later.remove(due)
            if not stopping:
                pids[_spawn(due[1], shared, listeners, cfg, state, args, start_admin)] = due[1]
        while pids:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pids.clear()
                break
            if pid == 0:
                break
            i = pids.pop(pid, None)
            if i is None:
                continue
            ready.discard(i)
            if i < n:
                shared.counts[i] = shared.up[i] = 0
            elif shared.lane_running is not None:
                shared.lane_running[0] = 0  # the lane's statements died with it
            if stopping:
                continue
            now = time.monotonic()
            deaths = [t for t in deaths if now - t < RESTART_WINDOW_S] + [now]
            why = (
                f"signal {os.WTERMSIG(status)}"
                if os.WIFSIGNALED(status)
                else f"exit {os.WEXITSTATUS(status)}"
            )
            if len(deaths) > MAX_RESTARTS and serving(but=i):
                # the others serve: restart it later and later, never stop the service for it
                delay = min(MAX_BACKOFF_S, 2.0 ** (len(deaths) - MAX_RESTARTS))
                print(
                    f"dpgate: {_name(i, shared)} (pid {pid}) stopped ({why}); {len(deaths)} deaths within "
                    f"{RESTART_WINDOW_S:g} s: restarting it in {delay:g} s",
                    file=sys.stderr,
                    flush=True,
                )
                later.append((now + delay, i))
                continue
            if len(deaths) > MAX_RESTARTS:
                print(
                    f"dpgate: {_name(i, shared)} stopped ({why}); {len(deaths)} worker deaths within "
                    f"{RESTART_WINDOW_S:g} s and no worker serving: stopping",
                    file=sys.stderr,
                    flush=True,
                )
                stopping, kill_at, code = True, now + cfg.server.limits.shutdown_grace_s + 5, 1
                _signal_all(pids, signal.SIGTERM)
                continue
            print(
                f"dpgate: {_name(i, shared)} (pid {pid}) stopped ({why}); restarting it",
                file=sys.stderr,
                flush=True,
            )
            pids[_spawn(i, shared, listeners, cfg, state, args, start_admin)] = i
        if announced:
            shared.print_notes()
        if info is not None and info.si_signo in (signal.SIGTERM, signal.SIGINT):
            if not stopping:
                sessions = sum(shared.counts[j] for j in range(n))
                print(
                    f"dpgate: shutting down ({sessions} session(s) in {n} workers; a running statement gets "
                    f"up to {cfg.server.limits.shutdown_grace_s:g} s)",
                    flush=True,
                )
                stopping, kill_at = True, time.monotonic() + cfg.server.limits.shutdown_grace_s + 5
                for s in listeners:
                    s.close()
                _signal_all(pids, signal.SIGTERM)
            else:  # a second signal: at once
                kill_at = time.monotonic()
        if stopping and kill_at is not None and time.monotonic() >= kill_at:
            _signal_all(pids, signal.SIGKILL)
            kill_at = None
    for s in listeners:
        s.close()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)
    if code == 0:
        print("dpgate: stopped", flush=True)
    return code


def _signal_all(pids: dict[int, int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
