"""Serving code draws from the CSPRNG: the gateway's default source is the system
one, and released noise differs between two fresh gateways on the same data."""

from __future__ import annotations

from mechanisms import SystemRandomSource
from proxy.pipeline.release import noisy_answer
from rewriter import build_plan, parse


def test_gateway_uses_system_csprng(tmp_path):
    from config import parse_config
    from proxy.gateway import Gateway
    from support.service import make_config

    cfg = parse_config(make_config({"kind": "duckdb", "path": str(tmp_path / "d.duckdb")}))
    gw = Gateway(cfg, tmp_path / "state")
    assert isinstance(gw.source, SystemRandomSource)
    gw.ledger.close()


def test_noise_is_not_reproducible_without_a_seed():
    from config import parse_config
    from support.service import make_config

    cfg = parse_config(make_config())
    plan = build_plan(parse("SELECT race, COUNT(*), SUM(income) FROM pums GROUP BY race"), cfg)
    cells = [(r, 100, 1_000_000.0) for r in range(1, 7)]
    a = noisy_answer(plan, cells, 1.0, SystemRandomSource())
    b = noisy_answer(plan, cells, 1.0, SystemRandomSource())
    assert a["values"] != b["values"]  # 12 independent draws; equal with probability < 1e-9


def _plan():
    from config import parse_config
    from support.service import make_config

    cfg = parse_config(make_config())
    return build_plan(parse("SELECT sex, COUNT(*), AVG(income), SUM(age) FROM pums GROUP BY sex"), cfg)


def test_noise_drawn_ahead_equals_live_noise_for_the_same_randomness():
    """Pre-drawing (NoisePool, filled while the scan runs) consumes the source in
    the same order as drawing live, so with one seed both answers are identical:
    the pre-drawn path releases exactly the mechanisms' law."""
    from mechanisms import SeededSource
    from proxy.pipeline.noise import NoisePool

    plan = _plan()
    cells = [(0, 480, 21_000_000.0, 480, 19_000), (1, 520, 18_500_000.0, 520, 21_500)]
    pool = NoisePool(plan, 1.0, SeededSource(11))
    assert pool.worthwhile
    pool.start()
    ahead = noisy_answer(plan, cells, 1.0, SeededSource(999), pool)
    live = noisy_answer(plan, cells, 1.0, SeededSource(11))
    assert ahead["values"] == live["values"]
    assert (
        noisy_answer(plan, cells, 1.0, SeededSource(11), pool)["values"] == live["values"]
    )  # pool empty: live


def test_a_noise_pool_is_used_once_and_never_refilled_after_use():
    from mechanisms import SeededSource
    from proxy.pipeline.noise import NoisePool

    plan = _plan()
    pool = NoisePool(plan, 1.0, SeededSource(3))
    pool.start()
    first = pool.take()
    assert len(first) == plan.n_cells and pool.take() == []
    pool.start()  # too late: the statement has its answer
    assert pool.take() == []
    late = NoisePool(plan, 1.0, SeededSource(3))
    assert late.take() == [] and (late.start() or late.take()) == []  # not filled in time: live


def _count_plan():
    from config import parse_config
    from support.service import make_config

    cfg = parse_config(make_config())
    return build_plan(parse("SELECT sex, COUNT(*) FROM pums GROUP BY sex"), cfg)


def test_reservoir_noise_has_the_live_law():
    """One measurement: the reservoir consumes the source exactly as a live release
    would (draw per cell, in order), so with one seed the answers are identical."""
    from mechanisms import SeededSource
    from proxy.pipeline.noise import NoisePool, NoiseReservoir

    plan = _count_plan()
    cells = [(0, 480), (1, 520)]
    reservoir = NoiseReservoir(SeededSource(11))
    pool = NoisePool(plan, 1.0, SeededSource(999), reservoir)
    reservoir.refill(pool.ms, pool.cells)
    assert len(reservoir) == plan.n_cells
    pool.start()
    assert len(reservoir) == 0  # handed out, not copied
    ahead = noisy_answer(plan, cells, 1.0, SeededSource(5), pool)
    assert ahead["values"] == noisy_answer(plan, cells, 1.0, SeededSource(11))["values"]


def test_reservoir_draws_are_used_once_then_the_pool_draws_itself():
    from mechanisms import SeededSource
    from proxy.pipeline.noise import NoisePool, NoiseReservoir

    plan = _plan()
    reservoir = NoiseReservoir(SeededSource(1))
    first = NoisePool(plan, 1.0, SeededSource(2), reservoir)
    reservoir.refill(first.ms, 1)  # one cell's worth: the second cell draws live
    first.start()
    second = NoisePool(plan, 1.0, SeededSource(2), reservoir)
    second.start()
    a, b = first.take(), second.take()
    assert len(a) == len(b) == plan.n_cells
    assert a[0] != b[0]  # the reservoir's cell-0 draws went to `first` only
    assert a[1] == b[0]  # both drew live from SeededSource(2)


def test_reservoir_is_bounded():
    from mechanisms import GeometricCount, SeededSource
    from proxy.pipeline.noise import NoisePool, NoiseReservoir

    reservoir = NoiseReservoir(SeededSource(4))
    m = GeometricCount(1.0)
    reservoir.refill([m], 10**6)
    assert len(reservoir) == NoisePool.MAX_DRAWS
    for i in range(NoiseReservoir.MAX_MEASUREMENTS + 50):
        reservoir.refill([GeometricCount(1.0 + i / 1000)], 1)
    assert len(reservoir._draws) == NoiseReservoir.MAX_MEASUREMENTS
    assert reservoir.take(m, 1) == []  # least recently refilled: evicted


def test_server_refills_the_reservoir_after_a_reply(duck_service):
    """After a reply the server draws the next statement's noise (one draw per
    loop callback); the next statement of that shape takes it."""
    import time

    import psycopg

    from proxy.pipeline.noise import NoiseReservoir

    reservoir = duck_service.gw.reservoir
    taken, take = [], reservoir.take
    reservoir.take = lambda m, n: taken.append(len(got := take(m, n))) or got

    def settled(at_least: int) -> int:
        deadline = time.monotonic() + 10
        while len(reservoir) < at_least and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(reservoir)

    try:
        with psycopg.connect(duck_service.dsn("analyst"), autocommit=True) as conn:
            conn.execute("SELECT sex, COUNT(*) FROM pums WHERE age > 23 GROUP BY sex").fetchall()
            filled = settled(2 * NoiseReservoir.DEPTH)  # 2 cells x 1 measurement, after the reply
            taken.clear()
            conn.execute("SELECT sex, COUNT(*) FROM pums WHERE age > 24 GROUP BY sex").fetchall()
            again = settled(filled)
    finally:
        del reservoir.take
    assert filled == 2 * NoiseReservoir.DEPTH
    assert taken == [2]  # the second statement's noise came from it
    assert again == filled  # and it was drawn again for the next one


def test_reservoir_waits_while_a_scan_runs():
    """The top-up draws only while ``busy()`` is false, one draw per callback, and
    one top-up per shape runs at a time."""
    import asyncio

    from mechanisms import GeometricCount, SeededSource
    from proxy.pipeline.noise import NoiseReservoir

    async def main():
        loop = asyncio.get_running_loop()
        reservoir, m, scanning = NoiseReservoir(SeededSource(8)), GeometricCount(0.5), [True]
        reservoir.refill_soon(loop, [m], 3, busy=lambda: scanning[0])
        reservoir.refill_soon(loop, [m], 3)  # already topping up this shape: ignored
        await asyncio.sleep(0.05)
        during = len(reservoir)
        scanning[0] = False
        seen, deadline = set(), loop.time() + 5
        while len(reservoir) < 3 * NoiseReservoir.DEPTH and loop.time() < deadline:
            await asyncio.sleep(0)
            seen.add(len(reservoir))
        return during, len(reservoir), seen

    during, after, seen = asyncio.run(main())
    assert during == 0
    assert after == 3 * NoiseReservoir.DEPTH
    assert len(seen) > 2  # filled over several loop turns


def test_a_statements_scan_noise_is_chosen_by_its_size():
    """Per cell (from the reservoir, on the loop) for a small statement; per measurement on
    the noise thread, with the scan fetched as columns, for a large public domain."""
    from config import parse_config
    from mechanisms import SeededSource
    from proxy.pipeline.noise import BatchNoise, NoisePool, NoiseReservoir, scan_noise
    from support.service import make_config

    cfg = parse_config(make_config(purchases="rows"))
    small = build_plan(parse("SELECT sex, COUNT(*) FROM pums GROUP BY sex"), cfg)
    large = build_plan(parse("SELECT item, COUNT(*), AVG(amount) FROM purchases GROUP BY item"), cfg)
    reservoir = NoiseReservoir(SeededSource(1))
    pool = scan_noise(small, 1.0, SeededSource(2), reservoir)
    batch = scan_noise(large, 1.0, SeededSource(2), reservoir)
    assert isinstance(pool, NoisePool) and not pool.columnar and pool.reservoir is reservoir
    assert isinstance(batch, BatchNoise) and batch.columnar and batch.cells == large.n_cells
