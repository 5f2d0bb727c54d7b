"""The proxy's side of a key read from public lookup tables (proxy.pipeline.lookup_domains):
the public query's rows restrict the plan; a query the backend cannot answer restricts
nothing (fail closed: every declared cell is released); an answer is asked once per data
version."""

from __future__ import annotations

import asyncio

import rewriter
from config import parse_config
from proxy.backends.base import BackendError
from proxy.pipeline.lookup_domains import LookupAnswers

CONFIG = {
    "tiers": {"default": {"epsilon": 1, "budget": 10}},
    "roles": {"analyst": {"tier": "default"}},
    "server": {"auth": "trust"},
    "tables": {
        "sales": {"columns": {"cust_nation": {"type": "int"}}},
        "nation": {
            "public": True,
            "key": "n_nationkey",
            "columns": {
                "n_nationkey": {"type": "int"},
                "n_name": {"type": "text", "domain": ["CHINA", "FRANCE", "JAPAN"]},
                "n_regionkey": {"type": "int"},
            },
        },
    },
}
SQL = (
    "SELECT n_name, COUNT(*) FROM sales, nation WHERE cust_nation = n_nationkey "
    "AND n_regionkey = 0 GROUP BY n_name"
)


class _Ledger:
    def __init__(self) -> None:
        self.version = 1

    def data_version(self) -> int:
        return self.version


class _Backend:
    dialect = "duckdb"

    def __init__(self, rows=None, fail: bool = False) -> None:
        self.rows, self.fail, self.asked = rows or [], fail, []

    async def fetch(self, sql, timeout_s=None, **_):
        self.asked.append(sql)
        if self.fail:
            raise BackendError("42P01", "relation nation does not exist")
        return self.rows


class _Gateway:
    statement_timeout = None

    def __init__(self, backend) -> None:
        self.backend, self.ledger = backend, _Ledger()

    async def ledger_read(self, fn, *args):
        return fn(*args)


def _plan():
    return rewriter.build_plan(rewriter.parse(SQL), parse_config(CONFIG))


def test_the_public_rows_restrict_the_keys_once_per_data_version():
    gw = _Gateway(_Backend([("CHINA",), ("JAPAN",)]))
    answers = LookupAnswers()
    plan = asyncio.run(answers.resolve(gw, _plan()))
    assert plan.group_by[0].domain == ("CHINA", "JAPAN") and plan.n_cells == 2
    asyncio.run(answers.resolve(gw, _plan()))
    assert len(gw.backend.asked) == 1  # kept
    gw.ledger.version = 2
    asyncio.run(answers.resolve(gw, _plan()))
    assert len(gw.backend.asked) == 2  # a new data version asks again


def test_a_query_the_backend_cannot_answer_restricts_nothing():
    gw = _Gateway(_Backend(fail=True))
    plan = asyncio.run(LookupAnswers().resolve(gw, _plan()))
    assert plan.group_by[0].domain == ("CHINA", "FRANCE", "JAPAN") and plan.lookups_done
