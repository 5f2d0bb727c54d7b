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
                "WHERE age >= $1 AND income < $2 GROUP BY married ORDER BY married",
                25,
                300000.0,
            )
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


def test_extended_protocol_plans_a_parameterless_statement_once(duck_service, monkeypatch):
    """Parse/Describe/Bind/Execute of a fresh statement without $n parses its text once
    (Describe plans, Execute reuses the plan) and never re-derives parameter types.
    Counted at sqlglot's own parser, whoever calls it; deriving the statement's plan
    template parses two probe texts with other literals, each once."""
    from sqlglot import parser as sqlglot_parser

    parsed, typed = [], []
    real_parse = sqlglot_parser.Parser.parse

    def counting_parse(self, raw_tokens, sql=None):
        parsed.append(sql)
        return real_parse(self, raw_tokens, sql)

    monkeypatch.setattr(sqlglot_parser.Parser, "parse", counting_parse)
    import proxy.pipeline.central as central

    real_types = central.param_types
    monkeypatch.setattr(central, "param_types", lambda *a, **k: typed.append(1) or real_types(*a, **k))

    async def main():
        conn = await asyncpg.connect(duck_service.url("analyst"))
        try:
            return await conn.fetch("SELECT race, COUNT(*) FROM pums WHERE age > 71 GROUP BY race")
        finally:
            await conn.close()

    rows = run(main())
    sql = "SELECT race, COUNT(*) FROM pums WHERE age > 71 GROUP BY race"
    probes = [t for t in parsed if t != sql and t and "GROUP BY race" in t]
    assert len(rows) == 6 and parsed.count(sql) == 1 and typed == []
    assert len(probes) == len(set(probes)) <= 2, parsed
