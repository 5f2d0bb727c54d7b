"""64 concurrent connections across several roles, 10,000 mixed statements (fresh,
repeated, refused, failing): the ledger total equals the sum of charged releases
exactly, no role exceeds its budget, and a repeated query never gets two answers."""

from __future__ import annotations

import asyncio
import random

import asyncpg
import pytest

from support.service import Service, make_config

ROLES = ["analyst", "other", "tiny"]
N_CONN, N_STATEMENTS = 64, 10_000


@pytest.fixture
def svc(tmp_path):
    from mechanisms import SeededSource

    cfg = make_config(
        {"kind": "duckdb", "path": str(tmp_path / "d.duckdb")},
        tiers={
            "default": {"epsilon": 1.0, "budget": 40.0, "period": "day"},
            "tiny": {"epsilon": 1.0, "budget": 7.0, "period": "day"},
        },
        limits={"max_statements_per_role": 64, "max_connections": 100},
    )
    s = Service(cfg, tmp_path / "state", people_rows=1000, source=SeededSource(99)).start()
    yield s
    s.close()


def _statement(r: random.Random) -> str:
    kind = r.random()
    if kind < 0.55:  # fresh-or-repeated: 60 distinct measurements shared by everyone
        a = r.randrange(60)
        return f"SELECT sex, COUNT(*), AVG(age) FROM pums WHERE age > {18 + a} GROUP BY sex"
    if kind < 0.75:
        return "SELECT * FROM pums"  # refused 42501
    if kind < 0.85:
        return "SELECT COUNT(*) FROM nosuch"  # refused 42P01
    if kind < 0.95:
        return "SELECT 1"  # local
    return "SELECT COUNT(*) FROM pums WHERE age > 'x'"  # refused 22023


def test_64_connections_10000_statements(svc):
    answers: dict[tuple[str, str], list] = {}
    outcomes: dict[str, int] = {}

    async def worker(i: int, n: int):
        r = random.Random(i)
        role = ROLES[i % len(ROLES)]
        conn = await asyncpg.connect(svc.url(role))
        try:
            for _ in range(n):
                sql = _statement(r)
                try:
                    rows = [tuple(x) for x in await conn.fetch(sql)]
                    outcomes["ok"] = outcomes.get("ok", 0) + 1
                    prev = answers.setdefault((role, sql), rows)
                    assert prev == rows, f"two different answers to {sql!r} for {role}"
                except asyncpg.PostgresError as e:
                    outcomes[e.sqlstate] = outcomes.get(e.sqlstate, 0) + 1
        finally:
            await conn.close()

    async def main():
        per = N_STATEMENTS // N_CONN
        extra = N_STATEMENTS - per * N_CONN
        await asyncio.gather(*(worker(i, per + (1 if i < extra else 0)) for i in range(N_CONN)))

    asyncio.run(main())
    assert sum(outcomes.values()) == N_STATEMENTS
    assert set(outcomes) <= {"ok", "42501", "42P01", "22023", "53400"}, outcomes
    led = svc.gw.ledger
    assert led.integrity_check()  # Σ spend == Σ ε of stored releases, exactly (nano-ε integers)
    for role in ROLES:
        tier = svc.gw.tier_of(role)
        spent = led.spent(role, tier.period)
        assert spent <= tier.budget
        assert spent == pytest.approx(len(led.releases(role, limit=100_000)) * tier.epsilon)
    assert led.spent("tiny", "day") == 7.0 and outcomes.get("53400", 0) > 0


def test_twins_near_the_budget_wait_and_get_the_release_free(tmp_path):
    """16 connections of a role with 1 ε left send the same statement at once: one
    is released and charged, the other 15 wait for it and get it free."""
    from mechanisms import SeededSource

    cfg = make_config(
        {"kind": "duckdb", "path": str(tmp_path / "d.duckdb")},
        tiers={"tiny": {"epsilon": 1.0, "budget": 1.0, "period": "day"}},
        limits={"max_statements_per_role": 64, "max_connections": 100},
    )
    s = Service(cfg, tmp_path / "state", people_rows=1000, source=SeededSource(7)).start()
    sql = "SELECT sex, COUNT(*) FROM pums WHERE age > 40 GROUP BY sex"

    async def one():
        c = await asyncpg.connect(s.url("tiny"))
        try:
            return [tuple(r) for r in await c.fetch(sql)]
        finally:
            await c.close()

    async def run():
        return await asyncio.gather(*(one() for _ in range(16)), return_exceptions=True)

    try:
        answers = s._call(run())
        assert all(not isinstance(a, BaseException) for a in answers), answers
        assert len({tuple(a) for a in answers}) == 1  # one release, served 16 times
        assert s.gw.ledger.spent("tiny", "day") == 1.0
    finally:
        s.close()
