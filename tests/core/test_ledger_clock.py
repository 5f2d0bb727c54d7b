"""Periods come from one clock, the ledger's: on a shared Postgres ledger the server's
``clock_timestamp()`` read in each charge's transaction, so proxies whose clocks disagree
charge one role into one period; never before the latest period the ledger recorded (a
clock set back reopens nothing: tests/core/test_ledger_guard.py::
test_clock_going_back_keeps_the_latest_period); and ``dpgate.budget`` shows the period
the charge path enforces."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta

import psycopg
import pytest

from proxy.stores.ledger import BudgetExceeded, Ledger, period_key
from support.service import Service, make_config

DAY = 86_400


def test_proxies_with_skewed_clocks_on_one_postgres_ledger_share_one_period(postgres, tmp_path):
    schema, key = "clk_" + uuid.uuid4().hex[:8], tmp_path / "ledger.key"
    a = Ledger(None, dsn=postgres.dsn, schema=schema, key_file=key)
    b = Ledger(None, dsn=postgres.dsn, schema=schema, key_file=key)
    b.clock = lambda: time.time() + DAY  # B's host is a day ahead
    try:
        a.reserve(role="r", epsilon=2.0, budget=2.0, period="day")
        with pytest.raises(BudgetExceeded):  # B charges into the ledger's day too: no second budget
            b.reserve(role="r", epsilon=1.0, budget=2.0, period="day")
        assert a.spent("r", "day") == 2.0 and b.spent("r", "day") == 2.0  # B reads the ledger's day as well
        c = Ledger(None, dsn=postgres.dsn, schema=schema, key_file=key)
        c.clock = lambda: time.time() - DAY  # and a host a day behind: the same
        try:
            with pytest.raises(BudgetExceeded):
                c.reserve(role="r", epsilon=1.0, budget=2.0, period="day")
            assert c.spent("r", "day") == 2.0
        finally:
            c.close()
    finally:
        a.close()
        b.close()


def test_the_budget_view_shows_the_period_the_charge_path_enforces(tmp_path):
    """A ledger whose latest recorded period is ahead of this proxy's clock (another proxy
    on it charged tomorrow): the charge path charges into that period, and so does the view:
    spent, remaining and resets_at are that period's, not an empty today's."""
    state = tmp_path / "state"
    svc = Service(make_config(), state).start()
    try:
        ahead = Ledger(state / "ledger.sqlite3")  # another proxy on this ledger, its clock a day ahead
        ahead.clock = lambda: time.time() + DAY
        ahead.reserve(role="tiny", epsilon=2.5, budget=2.5, period="day")
        ahead.close()
        with psycopg.connect(svc.dsn("tiny"), autocommit=True) as c:
            with pytest.raises(psycopg.errors.lookup("53400")):  # the charge path: tomorrow, spent
                c.execute("SELECT COUNT(*) FROM people").fetchall()
            ((spent, remaining, resets),) = c.execute(
                "SELECT spent, remaining, resets_at FROM dpgate.budget"
            ).fetchall()
        tomorrow = datetime.strptime(period_key("day", time.time() + DAY), "%Y-%m-%d")
        assert (spent, remaining) == (2.5, 0.0)
        assert resets == (tomorrow + timedelta(days=1)).strftime("%Y-%m-%d 00:00:00+00")
        assert svc.gw.ledger.spent("tiny", "day") == 2.5
    finally:
        svc.close()
