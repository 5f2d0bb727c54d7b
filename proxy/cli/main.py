"""The ``dpgate`` command line.

dpgate serve [--config FILE]       run the proxy (no config: the demo)
             [--workers N]         N processes on one port (default: the cores)
             [--admin-http HOST:PORT]  also the read-only owner page (admin roles)
dpgate hash-password [PASSWORD]    print a SCRAM-SHA-256 verifier for a config
dpgate data-version [--advance]    show / advance the data version (new releases)
dpgate budget [--role R]           spent and remaining budget per role
dpgate coalition                   per multi-tier query: coalition loss (max ε) vs Σε
dpgate check-config [--backend] FILE  validate a config file (--backend: against the
                                   backend: each source run with LIMIT 0, columns, types)
dpgate ledger check                the ledger's integrity and identity (exit 0 / 1, one line)
dpgate ledger init --i-know        a new ledger identity (after a lost ledger: start afresh)
dpgate ldp-load --table T FILE.csv perturb raw rows into a local table's reports
                                   (or --from-table SRC, or --reports FILE.csv as-is)
dpgate ldp-perturb --table T RAW.csv  producer side: raw CSV -> reports CSV (no server)
dpgate config-reference [--markdown]  every config key: type, default, description
dpgate init DATA.duckdb | FILES.parquet/csv | --dsn DSN   a commented config from the data
             [--privacy-unit TABLE[.COLUMN]]   the table of the people: units, references,
                                   public lookup tables, DP bounds and contribution limits
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import math
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import psycopg

from config import Config, ConfigError

from .. import demo
from ..admin import AdminHttp
from ..backends import BackendError, DuckDBBackend, PostgresBackend, for_backend, kind_of, open_backend
from ..demo import trips as demo_trips
from ..gateway import Gateway, default_state_dir, secure_state_dir
from ..pipeline.local import local_guarantees
from ..pipeline.local_subset import subset_coalition_rows
from ..pipeline.multitier import coalition_rows
from ..stores import ledger_guard
from ..stores.errors import LedgerUnavailable
from ..stores.ledger import open_ledger
from ..wire.auth import make_verifier
from .init import add_parser as add_init_parser
from .ldp import add_parsers
from .privileges import least_privilege
from .reference import add_parser as add_reference_parser
from .schema_check import check_backend_schema
from .service import load_config_for_check, resolve
from .workers import (
    make_server,
    prepare_local_tables,
    release_signals,
    resolve_workers,
    serve_workers,
    stop_signals,
    writer_roles,
)

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
    if cfg.demo:
        print("dpgate: demo data: checking (the first start creates it, a few seconds) …", flush=True)
        loaders = for_backend(DEMO_LOADERS, gw.backend)
        if loaders is None:
            await gw.close()
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
            await gw.close()  # the scan role cannot write, as it should: the demo needs write_dsn
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
        await gw.close()
        more = f" (and {len(problems) - 1} more: dpgate check-config --backend)" if len(problems) > 1 else ""
        raise ConfigError(problems[0] + more)
    for line in warnings:
        print(f"dpgate: {line}", file=sys.stderr, flush=True)
    for line in local_guarantees(cfg):
        print(line, flush=True)
    return gw


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
    """One process (``--workers 1``)."""
    gw = await _prepare(cfg, state, args)
    if gw.backend.read_only_after_start and not writer_roles(cfg):  # nothing written at run time:
        await prepare_local_tables(gw)  # the file is read-only from here
        gw.backend.reopen_read_only()
    lim = cfg.server.limits
    host = args.host or cfg.server.host
    port = cfg.server.port if args.port is None else args.port
    server = make_server(gw, cfg, host, port)
    await server.start()
    _announce(cfg, state, passwords, host, server.port)
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
            return _failed(e)
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


def cmd_hash_password(args) -> int:
    pw = args.password
    if pw is None:
        pw = sys.stdin.readline().rstrip("\n") if not sys.stdin.isatty() else getpass.getpass("password: ")
    if not pw:
        print("dpgate: empty password", file=sys.stderr)
        return 2
    print(make_verifier(pw))
    return 0


def cmd_data_version(args) -> int:
    cfg, state, _ = resolve(args)
    ledger = open_ledger(cfg, state)
    if args.advance:
        print(f"data version advanced to {ledger.advance_data_version()}: new queries draw new releases")
    else:
        print(f"data version {ledger.data_version()}")
    return 0


def cmd_budget(args) -> int:
    cfg, state, _ = resolve(args)
    ledger = open_ledger(cfg, state)
    print(
        f"{'role':<10} {'tier':<10} {'ε/query':>8} {'spent':>8} {'remaining':>10} {'budget':>8} "
        f"{'δ spent':>9} {'δ left':>9} {'δ budget':>9}  period"
    )
    for role, spec in cfg.roles.items():
        if args.role and role != args.role:
            continue
        tier = cfg.tiers[spec.tier]
        spent, dspent = ledger.spent_both(role, tier.period)
        print(
            f"{role:<10} {spec.tier:<10} {tier.epsilon:>8g} {spent:>8g} {tier.budget - spent:>10g} "
            f"{tier.budget:>8g} {dspent:>9g} {tier.delta_budget - dspent:>9g} {tier.delta_budget:>9g}  "
            f"{tier.period}"
        )
    held = [r for r in ledger.open_reservations() if not args.role or r["role"] == args.role]
    if held:
        print(
            f"{len(held)} charge(s), {_eps_delta(held)} in all, were made for answers "
            "never recorded (the proxy stopped mid-query); they stay spent."
        )
    spent = ledger.unreleased(args.role or None)
    if spent:
        print(
            f"{len(spent)} statement(s), {_eps_delta(spent)} in all, were charged with no "
            "answer (timed out, cancelled or failed after their scan started)."
        )
    return 0


def _eps_delta(charges: list[dict]) -> str:
    """ "ε x" (and ", δ y" when some δ was charged) summed over ``charges``."""
    e, d = math.fsum(c["epsilon"] for c in charges), math.fsum(c["delta"] for c in charges)
    return f"ε {e:g}" + (f", δ {d:g}" if d else "")


def cmd_coalition(args) -> int:
    """``dpgate coalition [--config FILE] [--state-dir DIR]``: the coalition view on the command line."""
    cfg, state, _ = resolve(args)
    ledger = open_ledger(cfg, state)
    try:
        _, rows = coalition_rows(SimpleNamespace(config=cfg, ledger=ledger), None)
        print(f"{'ladder':<8} {'dv':>3} {'coalition ε':>11} {'Σε':>7}  {'tiers released':<32} statement")
        for lad, stmt, dv, _lv, tiers, _roles, _n, loss, indep, _saved, _ts in rows:
            print(f"{lad:<8} {dv:>3} {loss:>11g} {indep:>7g}  {tiers or '(none yet)':<32} {stmt}")
        total_loss = math.fsum(r[7] for r in rows)
        total_indep = math.fsum(r[8] for r in rows)
        print(
            f"total: coalition loss {total_loss:g} (Σ over queries of max ε); "
            f"independent release would have cost {total_indep:g}"
        )
        local = subset_coalition_rows(SimpleNamespace(config=cfg, ledger=ledger))
        if local:  # a per-row loss (local DP), not summed with the per-query ones
            print("\nlocal tables (each row perturbed once at ingestion for the whole ladder):")
            print(f"{'ladder':<8} {'coalition ε':>11} {'Σε':>7}  {'tiers':<32} column")
            for lad, what, _dv, _lv, tiers, _roles, _n, loss, indep, _saved, _ts in local:
                col = what.split(":")[0].removeprefix("LDP ")
                print(f"{lad:<8} {loss:>11g} {indep:>7g}  {tiers:<32} {col} (per row)")
    finally:
        ledger.close()
    return 0


def cmd_check(args) -> int:
    cfg = load_config_for_check(args.file)
    try:
        local_guarantees(cfg)
    except ValueError as e:
        raise ConfigError(f"{args.file}: {e}") from None
    if args.backend:
        problems = asyncio.run(_check_backend(cfg, args))
        for line in problems:
            print(f"dpgate: {line}", file=sys.stderr)
        if problems:
            if cfg.demo:
                print("dpgate: (the demo's tables are created by its first `dpgate serve`)", file=sys.stderr)
            return 2
    print(
        f"{args.file}: ok ({len(cfg.tables)} tables, {len(cfg.roles)} roles, {len(cfg.tiers)} tiers"
        + (", matches the backend's schema)" if args.backend else ")")
    )
    return 0


async def _check_backend(cfg: Config, args) -> list[str]:
    """``check-config --backend``: every declared table and column against the backend."""
    backend = open_backend(cfg, Path(args.state_dir or cfg.server.state_dir or default_state_dir()))
    await backend.connect()
    try:
        problems = await check_backend_schema(cfg, backend, args.file)
        warnings, refused = await least_privilege(cfg, backend, args.file)
        for line in warnings:
            print(f"dpgate: {line}", file=sys.stderr)
        return problems + refused
    finally:
        await backend.close()


def cmd_ledger(args) -> int:
    """``dpgate ledger check`` / ``dpgate ledger init --i-know`` (proxy.ledger_guard)."""
    cfg, state, _ = resolve(args)
    if args.action == "check":
        ok, lines = ledger_guard.check(cfg, state, kind_of(cfg).marker_reader(cfg, state))
        for line in lines:  # one line per problem
            print(f"dpgate: {line}", file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    if not args.i_know:
        print(
            "dpgate: `dpgate ledger init` writes a NEW ledger identity: the budget spent so far in a lost "
            "ledger is forgotten; stop the proxy, then run it with --i-know",
            file=sys.stderr,
        )
        return 2
    secure_state_dir(state)
    ledger = open_ledger(cfg, state)
    # a backend whose data is in the state dir keeps the ledger's identity beside it
    backend = open_backend(cfg, state) if kind_of(cfg).data_file(cfg, state) is not None else None
    try:
        ident = ledger_guard.init_identity(ledger, state, backend)
    finally:
        ledger.close()
        if backend is not None:
            asyncio.run(backend.close())
    print(f"dpgate: new ledger identity {ident['id']} for {ledger_guard.where(ledger)} (logged)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dpgate", description="A differentially private SQL gateway.")
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp):
        sp.add_argument("--config", "-c", help="config TOML file (default: the demo)")
        sp.add_argument("--state-dir", help="state directory (ledger, demo database)")

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
    h = sub.add_parser("hash-password", help="print a SCRAM-SHA-256 verifier")
    h.add_argument("password", nargs="?")
    h.set_defaults(fn=cmd_hash_password)
    d = sub.add_parser("data-version", help="show or advance the data version")
    common(d)
    d.add_argument("--advance", action="store_true")
    d.set_defaults(fn=cmd_data_version)
    b = sub.add_parser("budget", help="budget per role")
    common(b)
    b.add_argument("--role")
    b.set_defaults(fn=cmd_budget)
    co = sub.add_parser(
        "coalition", help="multi-tier ladders: coalition loss (max ε) vs independent release (Σε)"
    )
    common(co)
    co.set_defaults(fn=cmd_coalition)
    c = sub.add_parser("check-config", help="validate a config file")
    c.add_argument("file")
    c.add_argument("--backend", action="store_true", help="also check tables and columns against the backend")
    c.add_argument("--state-dir", help="state directory (a relative DuckDB path is in it)")
    c.set_defaults(fn=cmd_check)
    lg = sub.add_parser("ledger", help="ledger integrity: check, or init --i-know (a new identity)")
    lg.add_argument("action", choices=["check", "init"])
    lg.add_argument("--i-know", action="store_true", help="init: yes, start afresh")
    common(lg)
    lg.set_defaults(fn=cmd_ledger)
    add_parsers(sub, common)  # ldp-load, ldp-perturb (metric-LDP local tables, Xiang et al. 2020)
    add_init_parser(sub)  # init: a config proposed from the data
    add_reference_parser(sub)  # config-reference: every key, from the models
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except (LedgerUnavailable, ConfigError, BackendError) as e:
        return _failed(e)


def _failed(e: Exception) -> int:
    """One line on stderr and the exit code: LedgerUnavailable (LedgerLost, LedgerDamaged: serve refuses to start: what
    happened, how to recover) 1, ConfigError 2, BackendError (e.g. the DuckDB file is held
    by another process) 1, LedgerUnavailable (the ledger cannot be reached or written) 1."""
    print(
        f"dpgate: {e.message if isinstance(e, BackendError) else getattr(e, 'line', None) or e}",
        file=sys.stderr,
    )
    return 2 if isinstance(e, ConfigError) else 1


if __name__ == "__main__":
    sys.exit(main())
