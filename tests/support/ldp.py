"""Helpers for the local-table ingestion tests: run a `dpgate ldp-*` command
in-process, and write a column dict as a CSV file."""

from __future__ import annotations

import argparse

from proxy.cli.ldp import add_parsers


def run_cli(*argv) -> int:
    """`dpgate <argv>` for the ldp-load / ldp-perturb commands; returns the exit code."""
    p = argparse.ArgumentParser(prog="dpgate")
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp):
        sp.add_argument("--config", "-c")
        sp.add_argument("--state-dir")

    add_parsers(sub, common)
    args = p.parse_args(list(argv))
    return args.fn(args)


def write_csv(path, data: dict, cols) -> None:
    """Columns ``cols`` of ``data`` (name -> sequence) as a CSV file with a header."""
    with open(path, "w", newline="") as f:
        f.write(",".join(cols) + "\n")
        f.write("\n".join(",".join(map(str, row)) for row in zip(*(data[c] for c in cols))) + "\n")
