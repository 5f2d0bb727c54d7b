"""The psql samples in README.md and docs/, produced by running them.

    python -m tests.docs.samples            # rewrite every marked block from a fresh run
    python -m tests.docs.samples --check    # list the blocks that differ (exit 1), change nothing

A sample is a fenced block preceded by a marker line::

    <!-- sample: NAME [role=ROLE] [seed=N] [session=S] -->
    ```
    demo=> SELECT sex, COUNT(*) FROM pums GROUP BY sex;
    ```

The statements are the block's ``demo=>`` lines (``demo->`` lines continue one); everything
else in the block is output and is written by the run. A line ``$ psql "postgresql://ROLE:…"``
is kept as written and makes ROLE the connection's role for the statements after it
(default: the marker's ``role``, else ``analyst``).

Each block runs on its own — blocks of one document with the same ``session`` share one
service, in order, so the later ones see what the earlier ones spent and released — against the
demo (config/demo.toml, its full-size tables) on a copy of one freshly created state directory
(nothing spent). A run is reproducible: the noise comes from ``mechanisms.SeededSource(seed)``
(default 1; ``dpgate serve`` always draws from the OS CSPRNG), the ledger's MAC key, which also
keys the privacy unit's bounding hash, is fixed, and DuckDB runs one thread, so a scan returns
its groups in one order. Every statement is sent by the real ``psql`` on PATH over the wire,
one connection each, its NOTICE/ERROR/HINT lines (psql's stderr) before its rows (its stdout),
as an interactive psql shows them; trailing spaces are dropped. psql's own formatting is part of
a sample: they are written with Debian 12's psql 15, the one .ci/run installs.
``tests/docs/test_samples.py`` fails when a block is not what a run prints.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPT, CONTINUATION = "demo=> ", "demo-> "
MARKER = re.compile(r"^<!-- sample: (?P<name>[\w.-]+)(?P<opts>(?: +\w+=[\w.-]+)*) -->$")
ROLE_LINE = re.compile(r'^\$ psql "postgresql://(?P<role>\w+):')
PEOPLE_ROWS, TRIPS_ROWS = 1_000_000, 200_000  # the demo's own sizes (proxy/demo)


def documents(root: Path = ROOT) -> list[Path]:
    """README.md and every page of docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


@dataclass
class Block:
    path: Path
    name: str
    first: int  # index of the first line inside the fence
    end: int  # index of the closing fence
    options: dict = field(default_factory=dict)
    body: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.first + 1} ({self.name})"


def blocks(path: Path, lines: list[str]) -> list[Block]:
    """The marked blocks of one document."""
    out = []
    for i, line in enumerate(lines):
        m = MARKER.match(line.strip())
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise ValueError(f"{path}:{i + 1}: a sample marker must be followed by a ``` fence")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{path}:{i + 2}: the sample's fence is not closed")
        opts = dict(o.split("=", 1) for o in m["opts"].split())
        unknown = set(opts) - {"role", "seed", "session"}
        if unknown:
            raise ValueError(f"{path}:{i + 1}: unknown sample option(s) {sorted(unknown)}")
        out.append(Block(path, m["name"], i + 2, end, opts, lines[i + 2 : end]))
    return out


def steps(body: list[str], role: str) -> list[tuple[str, str]]:
    """The block's input: ("role", line) for a role line kept as written, ("sql", statement) with
    its lines joined by newlines, in order."""
    out: list[tuple[str, str]] = []
    for line in body:
        if ROLE_LINE.match(line):
            out.append(("role", line))
        elif line.startswith(PROMPT):
            out.append(("sql", line[len(PROMPT) :]))
        elif line.startswith(CONTINUATION):
            if not out or out[-1][0] != "sql":
                raise ValueError(f"a {CONTINUATION!r} line continues no statement: {line!r}")
            out[-1] = ("sql", out[-1][1] + "\n" + line[len(CONTINUATION) :])
    if not any(kind == "sql" for kind, _ in out):
        raise ValueError("a sample needs at least one statement (a 'demo=> ' line)")
    return out


class Demo:
    """The demo's state directory, created once; each block serves a copy of it."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.pristine = work / "pristine"
        self._n = 0
        # The ledger's MAC key also keys the privacy unit's bounding hash (which rows of a
        # person are kept): a fixed key here, so that the kept rows are the same in every run.
        self.pristine.mkdir(mode=0o700)
        key = self.pristine / "ledger.key"
        key.write_text(hashlib.sha256(b"dpgate docs samples").hexdigest() + "\n")
        key.chmod(0o600)
        self._start(self.pristine, seed=0).close()

    def _start(self, state: Path, seed: int):
        from mechanisms import SeededSource
        from tests.support.service import Service, make_config

        cfg = make_config(extra_roles=False)
        # one DuckDB thread: a scan returns its groups in one order, and partition selection
        # reads its draws in the order of the groups
        cfg["backend"]["threads"] = 1
        return Service(
            cfg, state, people_rows=PEOPLE_ROWS, trips_rows=TRIPS_ROWS, source=SeededSource(seed)
        ).start()

    def serve(self, seed: int):
        """A service on a copy of the demo's state: its tables and a ledger with nothing spent."""
        self._n += 1
        state = self.work / f"block{self._n}"
        shutil.copytree(self.pristine, state)  # the tables and the ledger bound to them, unused
        return self._start(state, seed)


def _settle(svc, timeout: float = 10.0) -> None:
    """Wait until the service is idle: no scan running and the noise drawn ahead after the last
    reply all drawn, so the next statement's draws come from the seeded stream in one order."""
    gw = svc.gw
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reservoir = getattr(gw, "reservoir", None)
        filling = getattr(reservoir, "_filling", ())
        if not filling and getattr(gw.backend, "scans", 0) == 0:
            return
        time.sleep(0.01)


def psql(url: str, sql: str) -> list[str]:
    """One statement through psql, as an interactive session prints it: the server's messages
    (stderr) first, then the result (stdout); trailing spaces removed."""
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "LANG": "C.UTF-8", "PGCLIENTENCODING": "UTF8"}
    r = subprocess.run(
        ["psql", "-X", "-P", "pager=off", "-d", url, "-c", sql],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    err = r.stderr.splitlines()
    if r.returncode not in (0, 1) or any(x.startswith("psql:") for x in err):
        raise RuntimeError(f"psql failed on {sql!r}: {r.stderr.strip()}")
    return [x.rstrip() for x in err + r.stdout.splitlines()]


def run(block: Block, svc) -> list[str]:
    """The block's lines as a run on ``svc`` prints them."""
    role = block.options.get("role", "analyst")
    out: list[str] = []
    for kind, text in steps(block.body, role):
        if kind == "role":
            role = ROLE_LINE.match(text)["role"]
            out.append(text)
            continue
        first, *rest = text.split("\n")
        out += [PROMPT + first, *(CONTINUATION + x for x in rest)]
        _settle(svc)
        out += psql(svc.url(role), text)
    while out and not out[-1]:
        out.pop()
    return out


def document(path: Path, demo: Demo) -> tuple[list[str], list[Block], list[list[str]]]:
    """Run one document's blocks in order: (its lines, its blocks, each block's new body). A block
    runs on its own service, or on the one its ``session`` shares with the blocks before it."""
    lines = path.read_text().split("\n")
    found = blocks(path, lines)
    sessions: dict[str, object] = {}
    bodies = []
    try:
        for b in found:
            name = b.options.get("session")
            svc = sessions.get(name) if name else None
            if svc is None:
                svc = demo.serve(int(b.options.get("seed", 1)))
                sessions[name or f"#{b.first}"] = svc
            bodies.append(run(b, svc))
            if not name:
                sessions.pop(f"#{b.first}").close()
    finally:
        for svc in sessions.values():
            svc.close()
    return lines, found, bodies


def regenerate(paths: list[Path], *, write: bool, demo: Demo | None = None) -> list[str]:
    """Run every marked block of ``paths``; write the documents back (``write``) and return the
    blocks whose text was not what the run printed. ``demo``: a :class:`Demo` to reuse (default:
    one created here and removed after)."""
    if demo is None:
        with tempfile.TemporaryDirectory(prefix="dpgate-samples-") as tmp:
            return regenerate(paths, write=write, demo=Demo(Path(tmp)))
    stale: list[str] = []
    for path in paths:
        lines, found, bodies = document(path, demo)
        changed = [(b, new) for b, new in zip(found, bodies) if new != b.body]
        stale += [b.where for b, _ in changed]
        for b, new in reversed(changed):  # from the end: earlier indexes stay valid
            lines[b.first : b.end] = new
        if write and changed:
            path.write_text("\n".join(lines))
    return sorted(stale)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.docs.samples", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    ap.add_argument("files", nargs="*", type=Path, help="documents (default: README.md and docs/*.md)")
    args = ap.parse_args(argv)
    paths = [p.resolve() for p in args.files] or documents()
    stale = regenerate(paths, write=not args.check)
    for s in stale:
        print(("stale: " if args.check else "rewritten: ") + s)
    if args.check and stale:
        print(f"regenerate: {' '.join(map(shlex.quote, ['python', '-m', 'tests.docs.samples']))}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
