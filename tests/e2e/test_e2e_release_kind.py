"""The release kind is chosen in one place (``orchestrator.choose``) from the route — its table,
and which planner its parse names — and a central statement's plan as cells; execute, EXPLAIN
and Describe ask the same function, and each kind's prepared state is a typed object of its
own (no dict of loose keys)."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.pipeline.central import CENTRAL, DOMAIN, EMPTY, SVT, CentralState
from proxy.pipeline.extreme import EXTREME, ExtremeState
from proxy.pipeline.kind import Statement
from proxy.pipeline.local import LOCAL
from proxy.pipeline.multitier import LADDER
from proxy.pipeline.orchestrator import Connection, choose
from proxy.pipeline.partitions import PARTITIONS, SelectionPlan
from proxy.pipeline.per_record import PER_RECORD, PerRecordState
from proxy.pipeline.public import PUBLIC
from proxy.wire.api import SqlError

HAVING_SVT = (
    "SELECT educ, COUNT(*) AS n, SUM(age), SUM(income), COUNT(married), COUNT(DISTINCT race) "
    "FROM pums GROUP BY educ HAVING COUNT(*) >= 100 LIMIT 1"
)  # five aggregates share ε: the sparse vector has the lower error (tests/e2e/test_e2e_svt.py)

CASES = [
    ("analyst", "SELECT sex, COUNT(*) FROM pums GROUP BY sex", CENTRAL, CentralState),
    ("analyst", "SELECT educ FROM pums GROUP BY educ HAVING COUNT(*) > 120 LIMIT 3", CENTRAL, CentralState),
    ("analyst", HAVING_SVT, SVT, CentralState),
    ("analyst", "SELECT sex, COUNT(*) FROM pums GROUP BY sex LIMIT 0", EMPTY, type(None)),
    ("analyst", "SELECT DISTINCT sex FROM pums", DOMAIN, type(None)),
    ("analyst", "SELECT MAX(age) FROM pums", EXTREME, ExtremeState),
    ("analyst", "SELECT sex, median(income) FROM pums GROUP BY sex", EXTREME, ExtremeState),
    ("analyst", "SELECT city, COUNT(*) FROM purchases GROUP BY city", PARTITIONS, SelectionPlan),
    ("silver", "SELECT sex, COUNT(*) FROM pums GROUP BY sex", LADDER, type(None)),
    ("analyst", "SELECT kind, COUNT(*) FROM accounts GROUP BY kind", PER_RECORD, PerRecordState),
    ("analyst", "SELECT area, COUNT(*) FROM stores GROUP BY area", PUBLIC, type(None)),
    ("analyst", "SELECT vendor, COUNT(*) FROM trips GROUP BY vendor", LOCAL, type(None)),
]


@pytest.mark.parametrize("role,sql,kind,state", CASES, ids=[f"{c[2].name}:{c[1][:40]}" for c in CASES])
def test_one_choice_for_execute_explain_and_describe(duck_service, role, sql, kind, state):
    gw = duck_service.gw
    conn = Connection(gw, role, "demo", {})
    route = gw.route(sql)
    p = duck_service._call(conn.prepare(Statement(sql, route), []))
    assert p.kind is kind
    assert isinstance(p.state, state) and (p.state is None or dataclasses.is_dataclass(p.state))
    explained, _, _ = duck_service._call(conn._kind(Statement(sql, route), []))
    assert explained is kind  # EXPLAIN asks the same question, with the same plan
    unplanned = choose(route, gw.config.tables.get(route.table), gw.tier_of(role))
    # Describe and the lane ask before any plan: the planner's kind (CENTRAL stands for the
    # kinds chosen from a central plan)
    assert unplanned is (kind if kind in (EXTREME, PER_RECORD, PUBLIC, LOCAL) else CENTRAL)
    res = duck_service._call(conn.execute("EXPLAIN " + sql, []))
    assert res.rows and res.command_tag == "EXPLAIN"


def test_a_max_over_released_rows_is_the_cells_release(duck_service):
    """A MAX in the outer query over an aggregating derived table is post-processing of the
    inner release: the route names the cells' planner, and the statement is answered so."""
    sql = "SELECT MAX(n) FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) AS s"
    route = duck_service.gw.route(sql)
    assert route.planner == "central"
    conn = Connection(duck_service.gw, "analyst", "demo", {})
    res = duck_service._call(conn.execute(sql, []))
    assert len(res.rows) == 1 and "geometric" in res.notices[0]


def test_a_ladder_tier_is_refused_partition_selection_by_its_kind(duck_service):
    conn = Connection(duck_service.gw, "silver", "demo", {})
    sql = "SELECT city, COUNT(*) FROM purchases GROUP BY city"
    with pytest.raises(SqlError) as e:
        duck_service._call(conn.prepare(Statement(sql, duck_service.gw.route(sql)), []))
    assert e.value.sqlstate == "0A000" and "ladder" in e.value.message
