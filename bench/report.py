"""docs/performance.md, written from the benches' own output.

    python -m bench.report [--quick] [BENCH ...]   # run the benches, keep each result, write the page
    python -m bench.report --render                # write the page from the results kept

Each bench runs as ``python -m bench.<name> [--quick]`` in a subprocess; its result — the
command, its output (one table and a closing ``HEADLINE:`` line against its goal), exit status,
wall and CPU time (the bench and the processes it waited for), the date and the machine — is
kept in ``bench/results/<name>.json``, one file per bench, replaced by its next run. The page
holds one section per kept result: what the bench measures (the first paragraph of its
docstring), how and where it ran, and its output as printed. Nothing else is on the page, so
it is never older than the runs it shows. Without names, every bench in :data:`BENCHES` runs.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "performance.md"

# The benches the page shows, in its order: (module, extra arguments for a full run).
BENCHES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ()),
    ("rewrite", ()),
    ("cells", ()),
    ("repeats", ()),
    ("workers", ()),
    ("scale", ()),
    ("soak", ("--minutes", "3", "--kill-every", "45")),
    ("avg", ()),
    ("sql_coverage", ()),
    ("user_level", ()),
    ("tpch", ()),
    ("auto_bounds", ()),
    ("per_record", ()),
    ("multitier", ()),
    ("metric_ldp", ()),
    ("svt", ()),
    ("quantiles_joint", ()),
    ("extreme", ()),
    ("zcdp", ()),
    ("dashboard", ()),
)
QUICK_GOAL_S = 50  # every --quick run, on a machine that runs nothing else


def machine() -> str:
    """One line: CPU model, cores, memory, OS, Python, DuckDB."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        kb = int(
            next(
                x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")
            ).split()[1]
        )
        mem = f", {kb / 2**20:.0f} GB"
    except (OSError, StopIteration, ValueError):
        mem = ""
    try:
        import duckdb

        duck = f", DuckDB {duckdb.__version__}"
    except ImportError:
        duck = ""
    return f"{model}, {cores} cores{mem}; {platform.system()} {platform.release()}; Python {platform.python_version()}{duck}"


def run(name: str, extra: tuple[str, ...], quick: bool) -> dict:
    """Run one bench; its result as kept in bench/results/<name>.json."""
    argv = [sys.executable, "-m", f"bench.{name}", *(["--quick"] if quick else extra)]
    load = [round(x, 1) for x in os.getloadavg()]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    headline = next((x for x in reversed(p.stdout.splitlines()) if x.startswith("HEADLINE:")), "")
    return {
        "bench": name,
        "command": " ".join(["python", "-m", f"bench.{name}", *argv[3:]]),
        "quick": quick,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "load": load,  # the machine's load average (1, 5, 15 min) as the bench started
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "returncode": p.returncode,
        "headline": headline,
        "output": p.stdout.rstrip("\n"),
        "stderr_tail": p.stderr.strip().splitlines()[-5:] if p.returncode else [],
    }


def description(name: str) -> str:
    """What the bench measures: the first paragraph of its docstring, and the next one too when the
    first is a title (its usage lines left out)."""
    doc = (importlib.import_module(f"bench.{name}").__doc__ or "").strip()
    paras = []
    for para in doc.split("\n\n"):
        text = " ".join(x.strip() for x in para.splitlines() if not x.strip().startswith("python -m"))
        if text:
            paras.append(text)
        if len(paras) == 2 or sum(map(len, paras)) >= 200:
            break
    return "\n\n".join(paras)


def render(results: dict[str, dict]) -> str:
    """The page: a summary with each bench's HEADLINE, then one section per bench."""
    order = [n for n, _ in BENCHES if n in results] + sorted(set(results) - {n for n, _ in BENCHES})
    out = [
        "# Performance",
        "",
        "<!-- generated by `python -m bench.report`: edit the benches, not this page -->",
        "",
        "What a query costs and how accurate the mechanisms are, as the benches in `bench/` measure it.",
        "Each bench prints one table and a closing `HEADLINE` line against its goal; this page shows",
        "the last kept run of each (`bench/results/<bench>.json`), written by `python -m bench.report`",
        f"(`--quick`: the short runs, each under {QUICK_GOAL_S} s on a machine that runs nothing else;",
        "`python -m bench.report <bench>` runs one bench again). Speed is asserted by the benches, never",
        "in the default test run. How the service keeps a query cheap: [speed.md](speed.md).",
        "",
        "| bench | run | time (CPU) | HEADLINE |",
        "|---|---|---|---|",
    ]
    for n in order:
        r = results[n]
        head = (
            r["headline"].removeprefix("HEADLINE:").strip() or f"(no HEADLINE: exit status {r['returncode']})"
        )
        run = "quick" if r["quick"] else "full"
        took = f"{r['wall_s']:g} s ({r['cpu_s']:g} s)"
        out.append(f"| [`bench.{n}`](#bench{n}) | {run} | {took} | {_cell(head)} |")
    for n in order:
        r = results[n]
        out += [
            "",
            f"## bench.{n}",
            "",
            description(n),
            "",
            f"`{r['command']}` — {r['date']}; {r['machine']}; load average {r['load'][0]:g} at the start;"
            f" {r['wall_s']:g} s"
            f" (CPU {r['cpu_s']:g} s){_status(r['returncode'])}.",
            "",
            "```",
            r["output"].strip("\n") or "(no output)",
            *r["stderr_tail"],
            "```",
        ]
    return "\n".join(out) + "\n"


def _status(code: int) -> str:
    return "" if code == 0 else f"; exit status {code}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def load() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    ap.add_argument(
        "benches", nargs="*", help=f"which to run (default: all of {', '.join(n for n, _ in BENCHES)})"
    )
    ap.add_argument("--quick", action="store_true", help="the benches' --quick runs")
    ap.add_argument("--render", action="store_true", help="run nothing: write the page from the kept results")
    args = ap.parse_args(argv)
    known = dict(BENCHES)
    unknown = [b for b in args.benches if b not in known]
    if unknown:
        ap.error(f"unknown bench(es) {unknown}; known: {', '.join(known)}")
    failed = []
    if not args.render:
        RESULTS.mkdir(exist_ok=True)
        for name in args.benches or list(known):
            print(f"bench.{name} …", file=sys.stderr, flush=True)
            r = run(name, known[name], args.quick)
            (RESULTS / f"{name}.json").write_text(json.dumps(r, indent=1, ensure_ascii=False) + "\n")
            over = args.quick and r["wall_s"] > QUICK_GOAL_S
            print(
                f"  {r['wall_s']:g} s (CPU {r['cpu_s']:g} s), exit {r['returncode']}"
                + (
                    f"; over the quick goal of {QUICK_GOAL_S} s (load average {r['load'][0]:g})"
                    if over
                    else ""
                ),
                file=sys.stderr,
            )
            if r["returncode"]:
                failed.append(name)
    PAGE.write_text(render(load()))
    print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
