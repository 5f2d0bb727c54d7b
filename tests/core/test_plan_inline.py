"""Where a fresh statement is planned: a statement whose shape already has a
plan template is filled on the event loop (no thread hand-off), and the filled plan is
the full plan; a shape without one, or templates held by a planner thread, still plan on
a worker thread."""

from __future__ import annotations

import asyncio

import pytest

from config import parse_config
from proxy import gateway as gateway_module
from proxy.gateway import Gateway
from rewriter import build_plan, parse, to_sql
from support.service import make_config

Q = "SELECT sex, COUNT(*), AVG(income) FROM pums WHERE age BETWEEN {} AND {} AND educ >= {} GROUP BY sex"


@pytest.fixture
def gw(tmp_path):
    g = Gateway(
        parse_config(make_config({"kind": "duckdb", "path": str(tmp_path / "d.duckdb")})), tmp_path / "state"
    )
    yield g
    asyncio.run(g.close())


def _counting_threads(monkeypatch) -> list:
    hops = []
    real = asyncio.to_thread

    async def to_thread(fn, *a, **kw):
        hops.append(fn.__name__)
        return await real(fn, *a, **kw)

    monkeypatch.setattr(gateway_module.asyncio, "to_thread", to_thread)
    return hops


@pytest.mark.parametrize("params", [False, True], ids=["literals", "parameters"])
def test_a_templated_shape_is_filled_on_the_loop(gw, monkeypatch, params):
    hops = _counting_threads(monkeypatch)

    async def plan(a, b, c):
        if params:
            return await gw.plan_async(Q.format("$1", "$2", "$3"), [a, b, c])
        return await gw.plan_async(Q.format(a, b, c), None)

    async def go():
        first = await plan(20, 60, 3)  # the shape's first statement: a thread
        assert hops == ["plan"]
        later = [await plan(21 + i, 61 + i, 4 + i) for i in range(5)]
        assert hops == ["plan"]  # the others: filled on the loop
        return [first, *later]

    plans = asyncio.run(go())
    for i, p in enumerate(plans):
        a, b, c = (20, 60, 3) if i == 0 else (20 + i, 60 + i, 3 + i)
        full = build_plan(parse(Q.format(a, b, c)), gw.config)
        assert p == full and p.canonical() == full.canonical()
        assert to_sql(p, "duckdb") == to_sql(full, "duckdb")


def test_templates_held_by_a_planner_thread_send_the_statement_to_a_thread(gw, monkeypatch):
    """The loop never waits for the templates' lock: while a planner thread holds it, a
    templated statement goes to a thread of its own."""
    hops = _counting_threads(monkeypatch)

    async def go():
        await gw.plan_async(Q.format(20, 60, 3), None)
        gw._template_lock.acquire()  # a planner thread is deriving a template
        try:
            task = asyncio.ensure_future(gw.plan_async(Q.format(23, 63, 6), None))
            await asyncio.sleep(0.05)
            assert hops == ["plan", "plan"] and not task.done()  # waiting on its thread, not the loop
        finally:
            gw._template_lock.release()
        return await task

    p = asyncio.run(go())
    assert p == build_plan(parse(Q.format(23, 63, 6)), gw.config)
