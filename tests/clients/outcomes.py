"""What each client showed in this test run: the source of the compatibility table in
docs/clients.md.

A client test calls :func:`record` with the table's row (a name of :data:`CLIENTS`), the
service it talked to and what it just demonstrated; the items count only once the test has
passed (``conftest.pytest_runtest_makereport`` commits them), so a failing or skipped test
adds nothing. ``python -m tests.clients.report`` runs the client tests and writes the table
from these outcomes; ``test_compatibility_table.py`` checks the table against them.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import re
import shutil
import subprocess
import zipfile
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

#: the table's columns after client and version: (heading, item)
COLUMNS = (
    ("connect", "connect"),
    ("introspection", "introspection"),
    ("COPY … TO STDOUT", "COPY"),
    ("TLS", "TLS"),
)
AGGREGATE = "aggregate: "  # item prefix of the five typical aggregates (scenario.AGGREGATES)
#: an item recorded against no particular backend (a TLS test runs on one service only)
ANY = "any"


def _dist(*names: str):
    def version() -> str | None:
        try:
            return " / ".join(f"{n} {importlib.metadata.version(n)}" for n in names)
        except importlib.metadata.PackageNotFoundError:
            return None

    return version


def _psql() -> str | None:
    exe = shutil.which("psql")
    if exe is None:
        return None
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"(\d+(\.\d+)*)", out)
    return f"psql {m.group(1)}" if m else None


def _pgjdbc() -> str | None:
    jar = Path(os.environ.get("PGJDBC_JAR", "/usr/share/java/postgresql.jar"))
    if not jar.exists():
        return None
    with zipfile.ZipFile(jar) as z:
        manifest = z.read("META-INF/MANIFEST.MF").decode()
    m = re.search(r"^(?:Bundle-Version|Implementation-Version):\s*(\S+)", manifest, re.M)
    return f"pgjdbc {m.group(1)}" if m else "pgjdbc"


def _node_pg() -> str | None:
    return NODE_PG_VERSION[0]


#: the version of node-postgres the node tests loaded (set by test_node.py)
NODE_PG_VERSION: list[str | None] = [None]

#: the table's rows, in order: client -> how its version is read (None: not installed)
CLIENTS = {
    "psql": _psql,
    "psycopg 3": _dist("psycopg"),
    "psycopg2": _dist("psycopg2-binary"),
    "asyncpg": _dist("asyncpg"),
    "pg8000": _dist("pg8000"),
    "SQLAlchemy + psycopg2": _dist("SQLAlchemy", "psycopg2-binary"),
    "SQLAlchemy + psycopg 3": _dist("SQLAlchemy", "psycopg"),
    "SQLAlchemy + pg8000": _dist("SQLAlchemy", "pg8000"),
    "pandas.read_sql": _dist("pandas"),
    "pgjdbc": _pgjdbc,
    "node-postgres": _node_pg,
    "pgcli": _dist("pgcli", "pgspecial"),
    "ibis": _dist("ibis-framework"),
    "polars + connectorx": _dist("polars", "connectorx"),
    "polars + ADBC": _dist("polars", "adbc-driver-postgresql"),
}

#: the test modules that record each client (a client's row is checked only when all of them ran)
MODULES = {
    "psql": ("test_psql.py", "test_copy.py", "test_temporary_views.py"),
    "psycopg 3": ("test_psycopg.py", "test_copy.py", "test_temporary_views.py"),
    "psycopg2": ("test_psycopg2.py",),
    "asyncpg": ("test_asyncpg.py",),
    "pg8000": ("test_pg8000.py",),
    "SQLAlchemy + psycopg2": ("test_sqlalchemy.py",),
    "SQLAlchemy + psycopg 3": ("test_sqlalchemy.py",),
    "SQLAlchemy + pg8000": ("test_sqlalchemy.py",),
    "pandas.read_sql": ("test_sqlalchemy.py",),
    "pgjdbc": ("test_jdbc.py",),
    "node-postgres": ("test_node.py",),
    "pgcli": ("test_pgcli.py",),
    "ibis": ("test_ibis.py",),
    "polars + connectorx": ("test_dataframes.py",),
    "polars + ADBC": ("test_dataframes.py",),
}

# client -> backend -> items, committed from passed tests; and the current test's pending items
RECORDED: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
PENDING: list[tuple[str, str, str]] = []
# the statements clients sent (DuckDB service, plaintext): client -> [[sql, params, outcome]],
# and those of the current test (attributed to its client when it passes)
STATEMENTS: dict[str, list[list]] = defaultdict(list)
SENT: list[list] = []


def sent(sql: str, params: list, outcome: str) -> None:
    """A statement a client sent in the running test, and how dpgate answered it ("answered"
    or the SQLSTATE of its refusal)."""
    SENT.append([sql, [_plain(p) for p in params], outcome])


def _plain(v):
    """A bound parameter as JSON (dates and timestamps tagged with their type)."""
    if isinstance(v, dt.datetime):
        return {"timestamp": v.isoformat()}
    if isinstance(v, dt.date):
        return {"date": v.isoformat()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, Decimal):
        return float(v)
    return v


def unplain(v):
    """:func:`_plain`'s inverse."""
    if isinstance(v, dict):
        ((k, s),) = v.items()
        return dt.datetime.fromisoformat(s) if k == "timestamp" else dt.date.fromisoformat(s)
    if isinstance(v, list):
        return [unplain(x) for x in v]
    return v


def record(client: str, svc, *items: str) -> None:
    """Note that ``client`` showed ``items`` against ``svc`` (its backend: ``svc.kind``; a TLS
    service counts for no particular backend). Kept only if the running test passes."""
    if client not in CLIENTS:
        raise KeyError(f"{client!r} is not a row of the compatibility table (outcomes.CLIENTS)")
    backend = ANY if getattr(svc, "tls", False) else svc.kind
    PENDING.extend((client, backend, item) for item in items)


def commit(passed: bool) -> None:
    if passed:
        for client, backend, item in PENDING:
            if item not in RECORDED[client][backend]:
                RECORDED[client][backend].append(item)
        clients = {c for c, _, _ in PENDING}
        if len(clients) == 1:  # a test of one client: the statements are that client's
            (client,) = clients
            for s in SENT:
                if s not in STATEMENTS[client]:
                    STATEMENTS[client].append(s)
    PENDING.clear()
    SENT.clear()


def snapshot() -> dict:
    """The outcomes as plain data (JSON): client -> {"version", "backends": {backend: items}}."""
    return {
        c: {"version": CLIENTS[c](), "backends": {b: list(i) for b, i in RECORDED[c].items()}}
        for c in CLIENTS
        if c in RECORDED
    }


# which test items of this directory the session selected, deselected and ran (by module file)
SELECTED: dict[str, set[str]] = defaultdict(set)
DESELECTED: dict[str, set[str]] = defaultdict(set)
RAN: set[str] = set()


def complete(client: str) -> bool:
    """Whether every test of ``client``'s modules was selected and has run in this pytest run,
    so that its recorded outcomes are the whole of what its tests show."""
    return all(SELECTED.get(m) and not DESELECTED.get(m) and SELECTED[m] <= RAN for m in MODULES[client])
