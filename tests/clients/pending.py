"""Probes for fixes outside this directory that some clients need (see the reasons below).

Each probe asks the running service itself, so a test marked with :func:`expect_fix` runs
normally (and must pass) as soon as the fix lands; until then it is a strict xfail.
"""

from __future__ import annotations

import asyncio

import asyncpg
import psycopg
import pytest

CATALOG_PARAMS = (
    "needs proxy/pipeline/orchestrator.py Connection._describe to give a catalog statement's $n parameters "
    "types (Catalog.param_types(sql)): asyncpg and pg8000 Parse without types, Describe, then Bind "
    "and get 'the server expects 0 arguments' / 'bind message supplies 1 parameters'"
)
SESSION_STATEMENTS = (
    "needs proxy/pipeline/statements.py to answer SAVEPOINT / RELEASE / ROLLBACK TO with a quoted name "
    '(psycopg 3 transactions send SAVEPOINT "_pg3_1"), CLOSE ALL and UNLISTEN * (asyncpg\'s pool '
    "reset) locally"
)


def _catalog_params_described(svc) -> bool:
    async def probe():
        conn = await asyncpg.connect(svc.url())
        try:
            stmt = await conn.prepare("SELECT relname FROM pg_catalog.pg_class WHERE relname = $1")
            return len(stmt.get_parameters()) == 1
        finally:
            await conn.close()

    return asyncio.run(probe())


def _session_statements_answered(svc) -> bool:
    with psycopg.connect(svc.dsn(), autocommit=True) as conn:
        try:
            for stmt in (
                "BEGIN",
                'SAVEPOINT "_pg3_1"',
                'RELEASE SAVEPOINT "_pg3_1"',
                "COMMIT",
                "CLOSE ALL",
                "UNLISTEN *",
            ):
                conn.execute(stmt)
        except psycopg.Error:
            return False
    return True


PROBES = {CATALOG_PARAMS: _catalog_params_described, SESSION_STATEMENTS: _session_statements_answered}


def expect_fix(request, svc, reason: str) -> None:
    """Mark the running test as a strict xfail while the service lacks the fix in ``reason``."""
    cache = svc.__dict__.setdefault("probes", {})
    if reason not in cache:
        cache[reason] = PROBES[reason](svc)
    if not cache[reason]:
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=reason))
