"""The compatibility table of docs/clients.md, written from a run of the client tests.

``python -m tests.clients.report`` runs ``pytest tests/clients`` with
``DPGATE_CLIENT_OUTCOMES`` naming a JSON file; the client tests record what each client
showed (:mod:`tests.clients.outcomes`) and the run writes them there at its end. The table
is then rendered from that file and written between the markers in docs/clients.md.
``--from FILE`` renders an existing outcomes file without running the tests. The same run
writes the statements each client sent (tests/clients/corpus.json, replayed per client by
``python -m bench.sql_coverage``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .outcomes import AGGREGATE, ANY, CLIENTS, COLUMNS
from .scenario import AGGREGATES

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "clients.md"
CORPUS = ROOT / "tests" / "clients" / "corpus.json"
BEGIN = "<!-- clients-table: begin (python -m tests.clients.report writes this table) -->"
END = "<!-- clients-table: end -->"
HEADINGS = [
    "client",
    "version tested",
    *(h for h, _ in COLUMNS[:2]),
    "typical aggregates",
    *(h for h, _ in COLUMNS[2:]),
]
HEADINGS.append("also shown by the tests")


def _cell(backends: dict[str, list[str]], item: str) -> str:
    """✓ when every backend the client ran on showed ``item`` (a backend-free item: once);
    else the backends that did, or — when none did."""
    if item in backends.get(ANY, []):
        return "✓"
    ran = [b for b in sorted(backends) if b != ANY]
    have = [b for b in ran if item in backends[b]]
    if not have:
        return "—"
    return "✓" if have == ran else "✓ (" + ", ".join(have) + ")"


def _aggregates(backends: dict[str, list[str]]) -> str:
    ran = [b for b in sorted(backends) if b != ANY]
    done = [a for a in AGGREGATES if ran and all(AGGREGATE + a in backends[b] for b in ran)]
    text = f"{len(done)}/{len(AGGREGATES)}"
    missing = [a for a in AGGREGATES if a not in done]
    return text + (f" (not: {', '.join(missing)})" if missing else "")


def _extras(backends: dict[str, list[str]]) -> str:
    known = {i for _, i in COLUMNS}
    seen: list[str] = []
    for items in backends.values():
        for i in items:
            if i not in known and not i.startswith(AGGREGATE) and i not in seen:
                seen.append(i)
    return "; ".join(sorted(seen, key=str.lower)) or "—"


def row(client: str, outcome: dict) -> list[str]:
    b = outcome["backends"]
    ran = ", ".join(x for x in sorted(b) if x != ANY)
    cells = [
        client,
        outcome["version"] or "not installed",
        *(_cell(b, i) for _, i in COLUMNS[:2]),
        _aggregates(b),
        *(_cell(b, i) for _, i in COLUMNS[2:]),
        _extras(b),
    ]
    cells[0] = f"{client} ({ran})" if ran else client
    return cells


def render(snapshot: dict) -> str:
    lines = ["| " + " | ".join(HEADINGS) + " |", "|" + "---|" * len(HEADINGS)]
    for client in CLIENTS:
        if client in snapshot:
            lines.append(
                "| " + " | ".join(c.replace("|", "\\|") for c in row(client, snapshot[client])) + " |"
            )
    return "\n".join(lines)


def table_rows(text: str) -> dict[str, list[str]]:
    """The rows of the table between the markers in ``text``: client name -> cells."""
    start, end = text.index(BEGIN), text.index(END)
    out = {}
    for line in text[start:end].splitlines():
        if line.startswith("| ") and not line.startswith("| client |"):
            cells = [c.strip() for c in line.strip("| ").split(" | ")]
            out[cells[0].split(" (")[0]] = cells
    return out


def write(snapshot: dict, doc: Path = DOC) -> None:
    text = doc.read_text()
    start, end = text.index(BEGIN), text.index(END)
    doc.write_text(text[: start + len(BEGIN)] + "\n" + render(snapshot) + "\n" + text[end:])


def run_tests(out: Path, pytest_args: list[str]) -> int:
    env = {**os.environ, "DPGATE_CLIENT_OUTCOMES": str(out), "DPGATE_CLIENT_CORPUS": str(CORPUS)}
    cmd = [sys.executable, "-m", "pytest", "tests/clients", "-p", "no:cacheprovider", *pytest_args]
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="source", type=Path, help="an outcomes JSON file instead of a test run")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    args = ap.parse_args(argv)
    if args.source is None:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "outcomes.json"
            rc = run_tests(path, args.pytest_args)
            if rc != 0 or not path.exists():
                print(f"the client tests failed (exit {rc}); docs/clients.md not written", file=sys.stderr)
                return rc or 1
            snapshot = json.loads(path.read_text())
    else:
        snapshot = json.loads(args.source.read_text())
    write(snapshot)
    print(render(snapshot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
