"""Load from ``pgbench`` (PostgreSQL's own C client) for ``bench.workers``.

A Python client spends about as much CPU per statement as the proxy does to serve a
repeat, so on a 2-core machine its load is a large share of what is measured. pgbench
drives the same statements from one C thread at a few per cent of a core: the rates are
then the proxy's, and the clients' CPU is printed beside them.

Scripts (``pgbench -n -f``; each client keeps its own counter ``n`` across transactions,
``-D n=0``, so every fresh statement of a run is distinct across clients):

* **fresh**: ``bench.workers.FRESH`` with ``(lo, hi, e)`` from the statement's index ``i = n ×
  clients + client_id`` (``e = 1 + i div 5151``, ``lo = r mod 101``, ``hi = lo + r div 101`` with
  ``r = i mod 5151``): a release never made before, each a scan, a mechanism and a durable charge;
* **repeat**: one of ``bench.workers.HOT`` at random (released before the clock starts).

``-M simple`` sends the statement text (psql's way); ``-M extended`` sends ``:lo`` etc. as
``$1..$3`` parameters, untyped, with Parse / Bind / Describe / Execute on every statement
(node-postgres's and psycopg's way with parameters).
"""

from __future__ import annotations

import re
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

FRESH_SCRIPT = r"""\set i :n * {clients} + :client_id
\set n :n + 1
\set e 1 + :i / 5151
\set r :i % 5151
\set lo :r % 101
\set hi :lo + :r / 101
SELECT sex, COUNT(*), AVG(income) FROM pums WHERE age BETWEEN :lo AND :hi AND educ >= :e GROUP BY sex;
"""
REPEAT_SCRIPT = r"""\set k random(0, 39)
\set hi :k + 30
SELECT sex, COUNT(*), AVG(income) FROM pums WHERE age BETWEEN :k AND :hi AND educ >= 20 GROUP BY sex;
"""


def available() -> str | None:
    """The pgbench program, or None."""
    return shutil.which("pgbench")


def run(port: int, clients: int, seconds: float, kind: str, mode: str = "simple", offset: int = 0) -> dict:
    """``clients`` pgbench connections (role ``bench``) for ``seconds``: statements per second,
    failed statements, statements done and pgbench's own CPU seconds. ``offset``: where each
    client's counter starts (a second run of one server must not repeat the first's statements:
    the first run's count of statements is past every client's counter)."""
    with tempfile.TemporaryDirectory(prefix="dpgate-pgbench-") as tmp:
        script = Path(tmp) / f"{kind}.sql"
        script.write_text((FRESH_SCRIPT if kind == "fresh" else REPEAT_SCRIPT).format(clients=clients))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(
            [
                available(),
                "-n",
                "-f",
                str(script),
                "-c",
                str(clients),
                "-j",
                "1",
                "-T",
                f"{seconds:g}",
                "-D",
                f"n={offset}",
                "-M",
                mode,
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "bench",
                "demo",
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = re.search(r"number of transactions actually processed: (\d+)", out.stdout)
    failed = re.search(r"number of failed transactions: (\d+)", out.stdout)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out.stdout)
    if done is None or tps is None:
        errors = [line for line in out.stderr.splitlines() if "error" in line.lower()][:3]
        raise RuntimeError(f"pgbench failed ({out.returncode}): " + " / ".join(errors or [out.stdout[-300:]]))
    aborted = int("aborted" in out.stderr)
    return {
        "rate": float(tps.group(1)),
        "done": int(done.group(1)),
        "errors": (int(failed.group(1)) if failed else 0) + aborted,
        "client_cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
    }
