"""dpgate.budget and dpgate.releases: a role sees its own rows, an admin sees all;
metadata only (no released or true values)."""

from __future__ import annotations

import psycopg
import pytest


def _conn(service, role):
    return psycopg.connect(service.dsn(role), autocommit=True)


def test_budget_and_releases_views(duck_service):
    svc = duck_service
    with _conn(svc, "analyst") as c:
        c.execute("SELECT COUNT(*) FROM pums WHERE married = 1").fetchall()
        rows = c.execute("SELECT role, spent, remaining, budget, period FROM dpgate.budget").fetchall()
        assert rows == [("analyst", 1.0, 49.0, 50.0, "day")]
        rel = c.execute(
            "SELECT statement, epsilon, mechanism FROM dpgate.releases ORDER BY released_at"
        ).fetchall()
        assert rel[-1][0] == "SELECT COUNT(*) FROM pums WHERE married = 1" and rel[-1][1] == 1.0
        assert {r[0] for r in c.execute("SELECT DISTINCT role FROM dpgate.releases").fetchall()} == {
            "analyst"
        }
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT * FROM dpgate.budget, pums").fetchall()
    with _conn(svc, "admin") as c:
        roles = {r[0] for r in c.execute("SELECT role FROM dpgate.budget").fetchall()}
        assert roles == set(svc.cfg.roles) and {"analyst", "admin", "tiny", "other"} <= roles
        assert c.execute("SELECT COUNT(*) FROM dpgate.releases WHERE role = 'analyst'").fetchone()[0] >= 1
    assert svc.gw.ledger.spent("admin", "day") == 0  # reading the views costs nothing
