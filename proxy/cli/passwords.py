"""``dpgate hash-password [PASSWORD]``: a SCRAM-SHA-256 verifier for a role's ``scram`` in
the config (the password from the argument, standard input, or a prompt)."""

from __future__ import annotations

import argparse
import getpass
import sys

from ..wire.auth import make_verifier


def add_parser(sub: argparse._SubParsersAction) -> None:
    h = sub.add_parser("hash-password", help="print a SCRAM-SHA-256 verifier")
    h.add_argument("password", nargs="?")
    h.set_defaults(fn=cmd_hash_password)


def cmd_hash_password(args: argparse.Namespace) -> int:
    pw = args.password
    if pw is None:
        pw = sys.stdin.readline().rstrip("\n") if not sys.stdin.isatty() else getpass.getpass("password: ")
    if not pw:
        print("dpgate: empty password", file=sys.stderr)
        return 2
    print(make_verifier(pw))
    return 0
