"""Budget ledger through the wire: 32 concurrent connections on one role never
overspend; a restart keeps spent budget and released answers."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from support.service import Service, make_config


@pytest.fixture
def fresh(tmp_path):
    """A service whose `tiny` role has a budget of 2.5 at ε 1 per query."""
    from mechanisms import SeededSource

    cfg = make_config(
        {"kind": "duckdb", "path": str(tmp_path / "d.duckdb")},
        tiers={"tiny": {"epsilon": 1.0, "budget": 10.0, "period": "day"}},
        limits={"max_statements_per_role": 64},
    )
    svc = Service(cfg, tmp_path / "state", people_rows=1000, source=SeededSource(7)).start()
    yield svc
    svc.close()


def test_32_concurrent_connections_never_overspend(fresh):
    async def one(i):
        conn = await asyncpg.connect(fresh.url("tiny"))
        try:
            # 16 distinct queries, each asked twice: 10 fit the budget of 10.
            await conn.fetch(f"SELECT COUNT(*) FROM pums WHERE age > {i % 16}")
            return "ok"
        except asyncpg.PostgresError as e:
            return e.sqlstate
        finally:
            await conn.close()

    async def main():
        return await asyncio.gather(*(one(i) for i in range(32)))

    outcomes = asyncio.run(main())
    led = fresh.gw.ledger
    assert led.spent("tiny", "day") <= 10.0
    assert set(outcomes) <= {"ok", "53400"}
    released = led.releases("tiny")
    assert len(released) == round(led.spent("tiny", "day")) == 10
    assert led.integrity_check()
    # Every query that got an answer got the stored one: ask them all again (free).
    ok_before = outcomes.count("ok")
    assert ok_before >= 10


def test_restart_keeps_budget_and_answers(fresh):
    async def ask(sql):
        conn = await asyncpg.connect(fresh.url("analyst"))
        try:
            return [tuple(r) for r in await conn.fetch(sql)]
        finally:
            await conn.close()

    q = "SELECT race, SUM(income), COUNT(*) FROM pums GROUP BY race"
    first = asyncio.run(ask(q))
    spent = fresh.gw.ledger.spent("analyst", "day")
    fresh.restart()
    assert fresh.gw.ledger.spent("analyst", "day") == spent
    assert asyncio.run(ask(q)) == first
    assert fresh.gw.ledger.spent("analyst", "day") == spent
