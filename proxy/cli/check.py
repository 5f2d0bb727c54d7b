"""``dpgate check-config FILE [--backend]``: a config file validated as ``serve`` would
run it, and with ``--backend`` against the backend's relations, columns, types and the
scan role's privileges."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from config import Config, ConfigError

from ..stores.state_dir import default_state_dir
from .service import load_config_for_check


def add_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("check-config", help="validate a config file")
    c.add_argument("file")
    c.add_argument("--backend", action="store_true", help="also check tables and columns against the backend")
    c.add_argument("--state-dir", help="state directory (a relative DuckDB path is in it)")
    c.set_defaults(fn=cmd_check)


def cmd_check(args) -> int:
    cfg = load_config_for_check(args.file)
    if any(t.mode == "local" for t in cfg.tables.values()):
        from ..pipeline.local import local_guarantees  # deferred: the LDP layouts, for local tables only

        try:
            local_guarantees(cfg)
        except ValueError as e:
            raise ConfigError(f"{args.file}: {e}") from None
    if (auto := _auto_bounds(cfg)) is not None:
        line, fits = auto
        print(f"dpgate: {line}", file=sys.stdout if fits else sys.stderr)
        if not fits:
            return 2
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


def _auto_bounds(cfg: Config) -> tuple[str, bool] | None:
    """What the bounds written "auto" will cost the owner's [auto_bounds] budget at each data
    version (one ε-DP choice per field and side), and whether they all fit (None: none)."""
    n = sum(
        sum(getattr(t, f) == "auto" for f in ("max_rows_per_unit", "max_groups_per_unit"))
        + sum((c.lower == "auto") + (c.upper == "auto") for c in t.columns.values())
        for t in cfg.tables.values()
    )
    if not n:
        return None
    ab = cfg.auto_bounds
    fit = round(ab.budget * 1e9) // round(ab.epsilon * 1e9)  # the ledger's nano-ε integers
    line = (
        f'{n} bound(s) written "auto": chosen at start, ε {ab.epsilon:g} each, {n * ab.epsilon:g} of the '
        f"[auto_bounds] budget {ab.budget:g} per data version"
    )
    if fit >= n:
        return line, True
    return (
        line + f"; only {fit} fit: statements needing the others are refused (55000) — raise "
        f"[auto_bounds] budget to {n * ab.epsilon:g} or write those bounds",
        False,
    )


async def _check_backend(cfg: Config, args) -> list[str]:
    """``check-config --backend``: every declared table and column against the backend."""
    from ..backends import open_backend  # deferred: the engines, with --backend only
    from .privileges import least_privilege  # deferred: with --backend only
    from .schema_check import check_backend_schema  # deferred: with --backend only

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
