"""Ladder tiers on per-record tables: refused with 0A000 in every path — execute
(COUNT, SUM, MAX, MIN), Describe and EXPLAIN — before any backend work and without a charge.
Independent per-record releases to bronze, silver and gold would let a coalition learn Σε·E(r),
not the max ε their ladder's one chain promises."""

from __future__ import annotations

import psycopg
import pytest

from proxy.pipeline.orchestrator import Connection
from proxy.wire.api import SqlError

LADDER = ["bronze", "silver", "gold"]
STATEMENTS = [
    ("SELECT COUNT(*) FROM accounts", None),
    ("SELECT COUNT(*) FROM accounts WHERE kind = %s", ("savings",)),
    ("SELECT branch, SUM(balance) FROM accounts GROUP BY branch", None),
    ("SELECT MAX(balance) FROM accounts", None),
    ("SELECT MIN(balance) FROM accounts WHERE branch = %s", (2,)),
    ("select count(balance) from public.ACCOUNTS", None),
]


@pytest.fixture
def counted(duck_service):
    svc = duck_service
    calls = []
    real = svc.gw.backend.fetch

    async def fetch(sql, *a, **k):
        calls.append(sql)
        return await real(sql, *a, **k)

    svc.gw.backend.fetch = fetch
    yield svc, calls
    svc.gw.backend.fetch = real


def _releases(svc, role) -> int:
    led = svc.gw.ledger
    with led._rlock:
        return led._rdb.execute("SELECT COUNT(*) FROM releases WHERE role = ?", (role,)).fetchone()[0]


@pytest.mark.parametrize("role", LADDER)
def test_ladder_tiers_are_refused_in_every_path(counted, role):
    svc, calls = counted
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        for sql, params in STATEMENTS:
            for text in (sql, "EXPLAIN " + sql):
                for prepare in (False, True):
                    with pytest.raises(psycopg.Error) as e:
                        c.execute(text, params, prepare=prepare)
                    err = e.value
                    assert err.sqlstate == "0A000", (text, prepare, err.sqlstate, str(err))
                    assert "per-record table accounts is not available to data-market ladder tiers" in str(
                        err
                    )
                    assert "ladder market" in str(err) and "central table" in err.diag.message_hint
    conn = Connection(svc.gw, role, "demo", {})  # Describe alone (Parse + Describe)
    for sql in ("SELECT COUNT(*) FROM accounts WHERE branch = $1", "SELECT MAX(balance) FROM accounts"):
        with pytest.raises(SqlError) as e:
            svc._call(conn.describe(sql, []))
        assert e.value.sqlstate == "0A000"
    assert calls == [] and svc.gw.ledger.spent(role, "day") == 0 and _releases(svc, role) == 0


def test_roles_without_a_ladder_are_answered(counted):
    svc, calls = counted
    with psycopg.connect(svc.dsn("half"), autocommit=True) as c:  # ε 0.5, no ladder
        ((n,),) = c.execute("SELECT COUNT(*) FROM accounts WHERE kind = 'savings'").fetchall()
        ((m,),) = c.execute("SELECT MAX(balance) FROM accounts").fetchall()
        rows = c.execute("EXPLAIN SELECT COUNT(*) FROM accounts").fetchall()
    assert isinstance(n, int) and isinstance(m, int) and "prdp_count" in "\n".join(r[0] for r in rows)
    assert len(calls) == 3  # COUNT: one scan; MAX: two round trips
    assert svc.gw.ledger.spent("half", "day") == pytest.approx(1.0)
    d = svc._call(
        Connection(svc.gw, "half", "demo", {}).describe("SELECT COUNT(*) FROM accounts WHERE branch = $1", [])
    )
    assert d.param_type_oids == [20]


def test_ladder_refusal_holds_for_every_spelling(counted):
    svc, calls = counted
    with psycopg.connect(svc.dsn("bronze"), autocommit=True) as c:
        for sql in (
            'SELECT COUNT(*) AS "from pums" FROM accounts',
            "SELECT COUNT('from pums') FROM accounts",
            "SELECT COUNT(*) FROM ONLY accounts",
            'SELECT COUNT(*) FROM"accounts"',
            "SELECT COUNT(*) FROM accounts -- from pums",
        ):
            with pytest.raises(psycopg.errors.FeatureNotSupported):  # 0A000, from the parse
                c.execute(sql)
    assert calls == [] and svc.gw.ledger.spent("bronze", "day") == 0
