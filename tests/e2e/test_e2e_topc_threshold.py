"""A non-finite top-c threshold through the wire is 22023 (not XX000), whether it arrives by
SET (charging nothing and leaving the setting unset) or is found in the session at use."""

from __future__ import annotations

import psycopg
import pytest

from proxy.pipeline.orchestrator import Connection
from proxy.pipeline.selection_path import choose
from proxy.wire.api import SqlError

TOPC = "SELECT race FROM pums GROUP BY race ORDER BY COUNT(*) DESC LIMIT 2"


@pytest.mark.parametrize("value", ["nan", "-inf", "inf"])
def test_non_finite_threshold_refused_at_set(duck_service, value):
    before = duck_service.gw.ledger.spent("other", "day")
    with psycopg.connect(duck_service.dsn("other"), autocommit=True) as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"SET dpgate.topc_threshold = '{value}'")
        assert e.value.sqlstate == "22023"
        assert duck_service.gw.ledger.spent("other", "day") == before
        notes: list[str] = []
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        rows = c.execute(TOPC).fetchall()  # still unset: a sort of the released cells
        assert len(rows) == 2 and "sparse vector" not in notes[0]


@pytest.mark.parametrize("raw", ["nan", "-Infinity", "inf"])
def test_non_finite_threshold_refused_at_use(duck_service, raw):
    conn = Connection(duck_service.gw, "other", "demo", {})
    conn.session.settings["dpgate.topc_threshold"] = raw  # however it got there
    plan = duck_service.gw.plan(TOPC, None)
    with pytest.raises(SqlError) as e:
        choose(plan, duck_service.gw.tier_of("other"), conn.session.settings)
    assert e.value.sqlstate == "22023"
