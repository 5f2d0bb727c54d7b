"""Routing through the wire: a statement that reads the per-record table
``accounts`` is answered by per-record DP whatever other table its text mentions,
on Execute, Describe (extended protocol) and EXPLAIN."""

from __future__ import annotations

import psycopg
import pytest

from proxy.demo import accounts as demo_accounts

TRICKS = [
    'SELECT COUNT(*) AS "from pums" FROM accounts WHERE balance >= 421048',
    "SELECT COUNT('from pums') FROM accounts WHERE balance >= 421049",
    "SELECT COUNT(*) FROM ONLY accounts WHERE balance >= 421050",
    'SELECT COUNT(*) FROM"accounts"WHERE balance >= 421051',
    "SELECT COUNT(*) /* from pums */ FROM accounts WHERE balance >= 421052",
]


@pytest.fixture(scope="module")
def svc(duck_service):
    demo_accounts.load_duckdb(duck_service.gw.backend)
    return duck_service


def _run(svc, sql, *, prepare=False):
    notes = []
    with psycopg.connect(svc.dsn("analyst"), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        rows = c.execute(sql, prepare=prepare).fetchall()
    return rows, notes


@pytest.mark.parametrize("sql", TRICKS)
def test_spelling_tricks_land_on_per_record_dp(svc, sql):
    rows, notes = _run(svc, sql, prepare=True)  # Parse/Describe/Execute
    assert len(rows) == 1 and "mechanism: prdp_count" in notes[-1]


def test_explain_of_a_trick_explains_per_record(svc):
    rows, _ = _run(svc, "EXPLAIN " + TRICKS[0])
    assert any("prdp" in r[0] or "per-record" in r[0].lower() for r in rows)
