"""asyncpg: extended protocol with binary formats and typed parameters."""
from __future__ import annotations

import asyncio

import asyncpg
import pytest


def run(coro):
    return asyncio.run(coro)


def test_asyncpg_binary_params(service):
    async def main():
        conn = await asyncpg.connect(service.url("analyst"))
        try:
            rows = await conn.fetch(
                "SELECT married, COUNT(*) AS n, AVG(income) AS avg_income FROM pums "
                "WHERE age >= $1 AND income < $2 GROUP BY married ORDER BY married", 25, 300000.0)
            stmt = await conn.prepare("SELECT COUNT(*) FROM pums WHERE educ = $1")
            one = await stmt.fetchval(9)
            with pytest.raises(asyncpg.PostgresError) as e:
                await conn.fetch("SELECT age FROM pums")
            return rows, one, e.value.sqlstate
        finally:
            await conn.close()

    rows, one, state = run(main())
    assert [r["married"] for r in rows] == [0, 1]
    assert all(isinstance(r["n"], int) and 0 <= r["avg_income"] <= 500000 for r in rows)
    assert isinstance(one, int)
    assert state == "42501"
