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
import importlib
import inspect
import sys
from collections.abc import Sequence

from .failures import failed, failures

#: each subcommand: (the module of this package that defines its arguments and runs it,
#: that module's registering function — ``(subparsers)``, or ``(subparsers, common)`` for
#: commands that take ``--config``/``--state-dir`` — and its one-line help). Only the module of the
#: command being run is imported, so ``dpgate --help`` and the light commands start at
#: once; ``tests/core/test_cli.py`` holds these help lines equal to the modules' own.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "serve": ("serve", "add_parser", "run the proxy"),
    "hash-password": ("passwords", "add_parser", "print a SCRAM-SHA-256 verifier"),
    "data-version": ("ledger_commands", "add_parsers", "show or advance the data version"),
    "budget": ("ledger_commands", "add_parsers", "budget per role"),
    "coalition": (
        "ledger_commands",
        "add_parsers",
        "multi-tier ladders: coalition loss (max ε) vs independent release (Σε)",
    ),
    "check-config": ("check", "add_parser", "validate a config file"),
    "ledger": (
        "ledger_commands",
        "add_parsers",
        "ledger integrity: check, or init --i-know (a new identity)",
    ),
    "ldp-load": (
        "ldp",
        "add_parsers",
        "perturb raw rows into a local table's reports (CSV or a backend table), or load reports "
        "made elsewhere",
    ),
    "ldp-perturb": ("ldp", "add_parsers", "producer side: raw CSV -> reports CSV (no server)"),
    "init": (
        "init",
        "add_parser",
        "propose a commented config TOML from a DuckDB file, Parquet/CSV files or a Postgres schema",
    ),
    "config-reference": ("reference", "add_parser", "every config key: type, default, description"),
}


def common(sp: argparse.ArgumentParser) -> None:
    """The options of every command that runs with a config."""
    sp.add_argument("--config", "-c", help="config TOML file (default: the demo)")
    sp.add_argument("--state-dir", help="state directory (ledger, demo database)")


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line. ``command``'s module registers its full arguments; every other
    subcommand is listed by name and help only (enough for ``dpgate --help``)."""
    p = argparse.ArgumentParser(prog="dpgate", description="A differentially private SQL gateway.")
    sub = p.add_subparsers(dest="cmd", required=True)
    module, how, _ = COMMANDS.get(command or "", (None, "", ""))
    for name, (mod, _, text) in COMMANDS.items():
        if mod != module:
            sub.add_parser(name, help=text)
    if module is not None:
        register = getattr(importlib.import_module(f"{__package__}.{module}"), how)
        takes_common = len(inspect.signature(register).parameters) == 2  # (sub, common) or (sub)
        register(sub, common) if takes_common else register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = parser(command).parse_args(argv)
    try:
        return int(args.fn(args))
    except Exception as e:
        if isinstance(e, failures()):
            return failed(e)
        raise


if __name__ == "__main__":
    sys.exit(main())
