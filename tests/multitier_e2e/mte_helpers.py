"""Shared helpers for tests/multitier_e2e (not a test module)."""

from __future__ import annotations

import psycopg

from proxy.pipeline.multitier import answer_at
from proxy.pipeline.rows import answer_rows
from proxy.stores.ladder_store import store_for

TIER_EPS = {"bronze": 0.1, "silver": 0.5, "gold": 2.0}


def ask(svc, role: str, sql: str):
    """(rows, notices) of one statement on a fresh connection of ``role``."""
    notices: list[str] = []
    with psycopg.connect(svc.dsn(role), autocommit=True, connect_timeout=10) as c:
        c.add_notice_handler(lambda d: notices.append(d.message_primary))
        rows = c.execute(sql).fetchall()
    return rows, notices


def ladder_row(svc, sql: str, data_version: int | None = None, name: str = "market"):
    plan = svc.gw.plan(sql, None)
    dv = svc.gw.data_version if data_version is None else data_version
    return plan, store_for(svc.gw.ledger).get(name, plan.fingerprint(), dv)


def expected_rows(svc, sql: str, level: float, tier_eps: float, data_version: int | None = None):
    """The rows a tier must get: the stored chain's ``level``, post-processed."""
    plan, row = ladder_row(svc, sql, data_version)
    assert row is not None, "no ladder stored for this query"
    return answer_rows(plan, answer_at(plan, row.body, level, tier_eps))


def same_rows(a, b) -> bool:
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        for x, y in zip(ra, rb):
            if isinstance(x, float) or isinstance(y, float):
                if abs(float(x) - float(y)) > 1e-9 * max(1.0, abs(float(y))):
                    return False
            elif x != y:
                return False
    return True
