"""``dpgate serve``: the proxy on its port (one process, or ``--workers N``), the demo
data on first start, the config checked against the backend before the port opens, the
ready lines (a psql line per role) and the optional owner page."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

from config import Config, ConfigError

from .. import demo
from ..admin import AdminHttp
from ..backends import BackendError, DuckDBBackend, PostgresBackend, for_backend
from ..demo import trips as demo_trips
from ..gateway import Gateway
from ..pipeline.local import local_guarantees
from ..stores.errors import LedgerUnavailable
from .failures import failed
from .privileges import least_privilege
from .schema_check import check_backend_schema
from .service import resolve
from .workers import (
    make_server,
    prepare_local_tables,
    release_signals,
    resolve_workers,
    serve_workers,
    stop_signals,
    writer_roles,
)


def add_parser(sub: argparse._SubParsersAction, common: Callable[[argparse.ArgumentParser], None]) -> None:
    s = sub.add_parser("serve", help="run the proxy")
    common(s)
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--verbose", "-v", action="store_true", help="log every statement")
    s.add_argument(
        "--workers",
        "-w",
        type=int,
        metavar="N",
        help="processes serving the port (default: [server] workers, else the number of cores; "
        "1 for an embedded DuckDB file a role may INSERT into)",
    )
    s.add_argument(
        "--admin-http",
        metavar="HOST:PORT",
        help="serve the read-only owner page here (admin roles' passwords; off by default)",
    )
    s.set_defaults(fn=cmd_serve)


#: how the demo data is written, per backend class that takes it: (tables, trips), each
#: ``(backend, cfg) -> awaitable`` (an embedded engine's loaders run on a thread)
DEMO_LOADERS: dict[
    type, tuple[Callable[[Any, Any], Awaitable[object]], Callable[[Any, Any], Awaitable[object]]]
] = {
    DuckDBBackend: (
        lambda b, cfg: asyncio.to_thread(demo.load_duckdb, b),
        lambda b, cfg: asyncio.to_thread(demo_trips.load_duckdb, b, cfg),
    ),
    PostgresBackend: (lambda b, cfg: demo.load_postgres(b), demo_trips.load_postgres),
}


async def _progress(what: str, work, every_s: float = 2.0) -> None:
    """Run ``work`` (a first demo start can take a while), saying what it does and how long."""
    t0 = time.perf_counter()
    task = asyncio.ensure_future(work)
    shown = False
    while True:
        done, _ = await asyncio.wait({task}, timeout=every_s)
        if done:
            break
        shown = True
        print(f"dpgate: demo data: {what} … {time.perf_counter() - t0:.0f} s", flush=True)
    task.result()
    if shown:
        print(f"dpgate: demo data: {what}: done in {time.perf_counter() - t0:.1f} s", flush=True)


async def _prepare(cfg: Config, state: Path, args) -> Gateway:
    """The gateway, the demo data (first start) and the config checked against the backend."""
    gw = Gateway(cfg, state)
    await gw.start()
    try:
        await _load_and_check(gw, cfg, args)
    except BaseException:
        await gw.close()
        raise
    return gw


async def _load_and_check(gw: Gateway, cfg: Config, args) -> None:
    """The demo data (first start) and the config checked against the backend; a refusal
    raises :class:`ConfigError` (the caller closes the gateway)."""
    if cfg.demo:
        print("dpgate: demo data: checking (the first start creates it, a few seconds) …", flush=True)
        loaders = for_backend(DEMO_LOADERS, gw.backend)
        if loaders is None:
            raise ConfigError(f"demo = true: the demo data is not loaded into a {gw.backend.kind} backend")
        tables, trips = loaders
        try:
            await _progress(
                "tables (pums, people, purchases, stores, customers, orders, order_items, accounts)",
                tables(gw.backend, cfg),
            )
            await _progress(
                "trips (200,000 rows perturbed into metric-LDP reports)",  # the bulk LDP path
                trips(gw.backend, cfg),
            )
        except (psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.InsufficientPrivilege) as e:
            # the scan role cannot write, as it should: the demo needs write_dsn
            raise ConfigError(
                f"{args.config or 'demo config'}: demo = true creates the demo tables through "
                f"[backend] write_dsn (default: dsn), and that role may not: "
                f"{str(e).strip().splitlines()[0]}. Set write_dsn to a role that may create "
                "tables (docs/least-privilege.md)"
            ) from None
    file = args.config or "demo config"
    problems = await check_backend_schema(cfg, gw.backend, file)
    warnings, refused = await least_privilege(cfg, gw.backend, file)
    problems += refused
    if problems:  # config meets the backend at start, not at query time
        more = f" (and {len(problems) - 1} more: dpgate check-config --backend)" if len(problems) > 1 else ""
        raise ConfigError(problems[0] + more)
    for line in warnings:
        print(f"dpgate: {line}", file=sys.stderr, flush=True)
    for line in local_guarantees(cfg):
        print(line, flush=True)


def _announce(
    cfg: Config, state: Path, passwords: dict[str, str], host: str, port: int, pids: Sequence[int] = ()
) -> None:
    """The ready lines: where it listens (with ``--workers N``: the workers' process ids,
    in worker order), and a psql line per role."""
    procs = f", {len(pids)} workers: pids {', '.join(map(str, pids))}" if len(pids) > 1 else ""
    print(
        f"dpgate: listening on {host}:{port} (backend {cfg.backend.kind}, state {state}{procs})", flush=True
    )
    for role in cfg.roles:
        if role in passwords:
            url = f"postgresql://{role}:{quote(passwords[role], safe='')}@{host}:{port}/{cfg.server.database}"
        else:
            url = f"postgresql://{role}@{host}:{port}/{cfg.server.database}"
        tier = cfg.tiers[cfg.roles[role].tier]
        writes = cfg.roles[role].insert  # local tables this role may INSERT into
        grant = f", INSERT into {', '.join(writes)}" if writes else ""
        print(
            f'  {role:<8} (ε {tier.epsilon:g}/query, budget {tier.budget:g}/{tier.period}{grant}):  psql "{url}"',
            flush=True,
        )


async def _serve(cfg: Config, state: Path, passwords: dict[str, str], args) -> None:
    """One process (``--workers 1``). With the demo, the port is bound and announced at once
    and connections wait (queued, not refused) until the demo data is loaded and checked;
    otherwise the config is checked against the backend before anything listens."""
    lim = cfg.server.limits
    host = args.host or cfg.server.host
    port = cfg.server.port if args.port is None else args.port
    gw = Gateway(cfg, state)
    await gw.start()
    ready = asyncio.Event()
    server = None
    try:
        if cfg.demo:
            server = make_server(gw, cfg, host, port, accept_gate=ready.wait)
            await server.start()
            _announce(cfg, state, passwords, host, server.port)
            print("dpgate: connections wait until the demo data is ready …", flush=True)
        await _load_and_check(gw, cfg, args)
        if gw.backend.read_only_after_start and not writer_roles(cfg):  # nothing written at run time:
            await prepare_local_tables(gw)  # the file is read-only from here
            gw.backend.reopen_read_only()
    except BaseException:
        if server is not None:
            await server.stop()
        await gw.close()
        raise
    if server is None:
        server = make_server(gw, cfg, host, port)
        await server.start()
        _announce(cfg, state, passwords, host, server.port)
    else:
        print("dpgate: ready", flush=True)
    ready.set()
    admin = (
        await _start_admin(gw, args.admin_http, failed_logins=server.failed_logins)
        if args.admin_http
        else None
    )
    stop = stop_signals()
    try:
        await stop.wait()
        release_signals()  # a second Ctrl-C / SIGTERM stops at once
        print(
            f"dpgate: shutting down ({server.connection_count} session(s); a running statement gets up to "
            f"{lim.shutdown_grace_s:g} s)",
            flush=True,
        )
        await server.shutdown(lim.shutdown_grace_s)
    finally:
        if admin is not None:
            await admin.close()
        await server.stop()
        await gw.close()
    print("dpgate: stopped", flush=True)


async def _prepare_for_workers(cfg: Config, state: Path, args) -> None:
    """``--workers N``: everything that writes, done once before the workers start."""
    gw = await _prepare(cfg, state, args)
    try:
        await prepare_local_tables(gw)
    finally:
        await gw.close()


def _serve_workers(cfg: Config, state: Path, passwords: dict[str, str], args, n: int) -> int:
    host = args.host or cfg.server.host
    port = cfg.server.port if args.port is None else args.port

    def prepare() -> int:
        try:
            asyncio.run(_prepare_for_workers(cfg, state, args))
        except (LedgerUnavailable, ConfigError, BackendError) as e:
            return failed(e)
        except KeyboardInterrupt:
            return 130
        return 0

    return serve_workers(
        cfg,
        args,
        n,
        host,
        port,
        prepare,
        lambda p, pids: _announce(cfg, state, passwords, host, p, pids),
        _start_admin,
        state,
    )


async def _start_admin(gw: Gateway, where: str, say=print, failed_logins=None) -> AdminHttp:
    """``--admin-http HOST:PORT``: the owner page, admin roles only; ``say``
    prints the line saying where (a worker hands it to the parent, which prints it after
    its listening line); ``failed_logins``: the wire server's limiter, which the page shares."""
    host, _, port = where.rpartition(":")
    try:
        admin = await AdminHttp(gw, host or "127.0.0.1", int(port), failed_logins=failed_logins).start()
    except ValueError:
        raise ConfigError(f"--admin-http {where}: give HOST:PORT, e.g. 127.0.0.1:8080") from None
    admins = [r for r, spec in gw.config.roles.items() if spec.admin and spec.scram]
    how = (f"sign in as {', '.join(admins)}" if admins else "no admin role has a verifier") + (
        " or with the DPGATE_ADMIN_TOKEN bearer token" if admin.token else ""
    )
    say(f"dpgate: owner page on http://{admin.host}:{admin.port}/ ({how})")
    return admin


def cmd_serve(args) -> int:
    cfg, state, pw = resolve(args)
    try:
        local_guarantees(cfg)  # an invalid local-table layout is a config error
    except ValueError as e:
        raise ConfigError(f"{args.config or 'demo config'}: {e}") from None
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if args.verbose:
        logging.getLogger("dpgate.statements").setLevel(logging.INFO)
    workers = resolve_workers(cfg, args)
    try:
        if workers > 1:
            return _serve_workers(cfg, state, pw, args, workers)
        asyncio.run(_serve(cfg, state, pw, args))
    except KeyboardInterrupt:
        pass
    except OSError as e:
        print(f"dpgate: cannot listen: {e}", file=sys.stderr)
        return 1
    return 0
