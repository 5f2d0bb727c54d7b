"""The commands that read or write the ledger: ``data-version``, ``budget``,
``coalition`` and ``ledger check`` / ``ledger init --i-know``."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from collections.abc import Callable
from types import SimpleNamespace

from ..stores import ledger_guard
from ..stores.ledger import open_ledger
from ..stores.state_dir import secure_state_dir
from .service import resolve


def add_parsers(sub: argparse._SubParsersAction, common: Callable[[argparse.ArgumentParser], None]) -> None:
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
    lg = sub.add_parser("ledger", help="ledger integrity: check, or init --i-know (a new identity)")
    lg.add_argument("action", choices=["check", "init"])
    lg.add_argument("--i-know", action="store_true", help="init: yes, start afresh")
    common(lg)
    lg.set_defaults(fn=cmd_ledger)


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
        zcdp = tier.accounting == "zcdp"
        spent, dspent = ledger.spent_both(role, tier.period, "rho" if zcdp else "eps")
        spent = min(spent, tier.budget)  # (spent in the other unit this period: nothing is left)
        print(
            f"{role:<10} {spec.tier:<10} {tier.amount:>8g} {spent:>8g} {tier.budget - spent:>10g} "
            f"{tier.budget:>8g} {dspent:>9g} {tier.delta_budget - dspent:>9g} {tier.delta_budget:>9g}  "
            f"{tier.period}"
            + (f"  zCDP: amounts in ρ; spent {_reading(spent, tier.conversion_delta)}" if zcdp else "")
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


def _reading(rho: float, delta: float) -> str:
    """ρ read as (ε, δ)-DP (:func:`mechanisms.accounting.dp_reading`)."""
    from mechanisms.accounting import dp_reading  # deferred: the mechanisms package loads numpy

    return dp_reading(rho, delta)


def _eps_delta(charges: list[dict]) -> str:
    """ "ε x" (and ", δ y" when some δ was charged) summed over ``charges``."""
    e, d = math.fsum(c["epsilon"] for c in charges), math.fsum(c["delta"] for c in charges)
    return f"ε {e:g}" + (f", δ {d:g}" if d else "")


def cmd_coalition(args) -> int:
    """``dpgate coalition [--config FILE] [--state-dir DIR]``: the coalition view on the command line."""
    from ..pipeline.local_subset import subset_coalition_rows  # deferred: the ladders' mechanisms
    from ..pipeline.multitier import coalition_rows  # deferred: the ladders' mechanisms

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


def cmd_ledger(args) -> int:
    """``dpgate ledger check`` / ``dpgate ledger init --i-know`` (proxy.ledger_guard)."""
    from ..backends import kind_of, open_backend  # deferred: the engines, for the ledger's marker

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
