"""The refusal corpus through the wire (simple protocol): every statement gets its
SQLSTATE, charges nothing, and no backend query runs."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg

CORPUS = Path(__file__).parent.parent / "rewriter" / "refusals.txt"


# Columns that exist only in the rewriter tests' config, not in the demo's `pums`.
_TEST_ONLY = re.compile(r"\b(name|big|state|flag)\b")
# Answered by dpgate itself (session statements, the emulated catalog) — never the backend.
_LOCAL = re.compile(r"^SELECT 1$|pg_catalog|information_schema", re.I)


def _cases():
    for line in CORPUS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            state, sql = (s.strip() for s in line.split("|", 1))
            if _TEST_ONLY.search(sql):
                continue
            yield state, sql


def test_corpus_through_the_wire(duck_service):
    svc = duck_service
    calls = []
    real = svc.gw.backend.fetch

    async def counting(sql, *a, **k):
        calls.append(sql)
        return await real(sql, *a, **k)

    svc.gw.backend.fetch = counting
    mismatches = []
    try:
        with psycopg.connect(svc.dsn("other"), autocommit=True) as conn:
            for state, sql in _cases():
                try:
                    conn.execute(sql, prepare=False)
                    if not _LOCAL.search(sql):
                        mismatches.append((sql, "no error"))
                except psycopg.Error as e:
                    if e.sqlstate != state:
                        mismatches.append((sql, e.sqlstate, state))
    finally:
        svc.gw.backend.fetch = real
    assert not mismatches, "\n".join(map(repr, mismatches))
    assert calls == []
    assert svc.gw.ledger.spent("other", "day") == 0
