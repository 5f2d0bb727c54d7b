"""The shared scenario through node-postgres (npm "pg", its own JavaScript protocol code),
run by the machine's Node with tests/clients/node/scenario.js, on DuckDB and on Postgres,
and over TLS. ``pg`` is installed with npm into a temporary directory at test time (or taken from
``$DPGATE_NODE_MODULES``); when it cannot be, the tests skip with one line saying why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.service import PASSWORDS

from . import outcomes
from .scenario import MORE_SQL, PUMS_TYPES, check_report

SCRIPT = Path(__file__).parent / "node" / "scenario.js"
NODE, NPM = shutil.which("node"), shutil.which("npm")
OFFLINE = (
    "ENOTFOUND",
    "EAI_AGAIN",
    "ECONNREFUSED",
    "ETIMEDOUT",
    "ENETUNREACH",
    "ECONNRESET",
    "network",
    "getaddrinfo",
    "request to https://",
)

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None, reason="node and npm not installed (apt-get install -y nodejs npm)"
)


NPM_TIMEOUT_S = float(os.environ.get("DPGATE_NPM_TIMEOUT", "120"))


def _has_pg(path: Path) -> bool:
    r = subprocess.run(
        [NODE, "-e", "require('pg')"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "NODE_PATH": str(path)},
    )
    return r.returncode == 0


@pytest.fixture(scope="session")
def node_modules(tmp_path_factory) -> Path:
    """A node_modules with ``pg``: ``$DPGATE_NODE_MODULES`` if it has one, else ``npm install
    --no-save pg@8`` into a temporary directory. Skips (one line, never an error) when npm
    cannot install it: registry unreachable, timed out, or npm failing."""
    given = os.environ.get("DPGATE_NODE_MODULES")
    if given and _has_pg(Path(given)):
        return Path(given)
    root = tmp_path_factory.mktemp("node")
    (root / "package.json").write_text('{"name": "dpgate-client-tests", "private": true}\n')
    try:
        r = subprocess.run(
            [NPM, "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error", "pg@8"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(
            f"npm install pg@8 timed out after {NPM_TIMEOUT_S:g} s (registry unreachable?); "
            "set DPGATE_NODE_MODULES to a node_modules holding pg@8"
        )
    if r.returncode != 0 or not _has_pg(root / "node_modules"):
        first = next((x.strip() for x in r.stderr.splitlines() if x.strip()), f"exit {r.returncode}")
        offline = any(s in r.stderr for s in OFFLINE)
        pytest.skip(
            f"npm cannot install pg@8 ({'registry unreachable: ' if offline else ''}{first[:160]}); "
            "set DPGATE_NODE_MODULES to a node_modules holding pg@8"
        )
    return root / "node_modules"


def run(node_modules, svc, **extra) -> dict:
    config = {
        "host": "127.0.0.1",
        "port": svc.port,
        "user": "analyst",
        "password": PASSWORDS["analyst"],
        "database": "demo",
        "connectionTimeoutMillis": 10000,
        **extra,
    }
    r = subprocess.run(
        [NODE, str(SCRIPT), json.dumps(config), json.dumps(MORE_SQL)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NODE_PATH": str(node_modules)},
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    outcomes.NODE_PG_VERSION[0] = f"pg {out['pg_version']} (Node {_node_version()})"
    return out


def _node_version() -> str:
    return subprocess.run([NODE, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()


def check(svc, out: dict, client: str) -> list[str]:
    # Like Postgres, node-postgres returns int8 as a string and float8 as a number.
    assert out["column_type_oids"] == [20, 20, 701, 701]
    assert out["value_types"] == ["string", "string", "number", "number"]
    assert all(isinstance(v, str) and v.isdigit() for r in out["raw_rows"] for v in r[:2])
    out["rows"] = [(int(s), int(n), float(t), float(a)) for s, n, t, a in out["raw_rows"]]
    out["refused"] = (out["refused"]["sqlstate"], out["refused"]["message"])
    out["secret_error"] = (out["secret_error"]["sqlstate"], out["secret_error"]["message"])
    assert {c: t for c, t in out["columns"]} == PUMS_TYPES
    done = check_report(svc, client, {**out, "columns": [c for c, _ in out["columns"]]})
    assert out["pg_class"] == out["tables"]
    assert out["secret_columns"] == []
    assert out["param_count_named"] == [out["param_count"]] * 2
    assert any("ε charged" in n for n in out["notices"])
    return done


def test_node_postgres_scenario(node_modules, svc):
    out = run(node_modules, svc)
    assert out["ssl"] is False
    record = check(svc, out, "node-postgres")
    outcomes.record("node-postgres", svc, *record, "parameters ($1)", "named prepared statements")


def test_node_postgres_wrong_password(node_modules, svc):
    config = {
        "host": "127.0.0.1",
        "port": svc.port,
        "user": "analyst",
        "password": "nope",
        "database": "demo",
    }
    r = subprocess.run(
        [NODE, str(SCRIPT), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NODE_PATH": str(node_modules)},
    )
    assert r.returncode != 0 and 'password authentication failed for user "analyst"' in r.stderr


def test_node_postgres_tls(node_modules, tls_svc):
    out = run(node_modules, tls_svc, ssl={"rejectUnauthorized": False})
    assert out["ssl"] is True
    check(tls_svc, out, "node-postgres tls")
    outcomes.record("node-postgres", tls_svc, "TLS")
