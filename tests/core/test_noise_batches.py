"""Noise drawn ahead in batches (issue 21, proxy/pipeline/release.py ``draws_at_once``):
from ``BATCH_DRAWS_MIN`` draws of one measurement on, the reservoir and a statement's
pool take them from ONE ``Measurement.draw_many`` call — the law of as many ``draw``
calls (the batch samplers are checked against the exact laws in tests/mechanisms) —
split into exactly the values ``draw`` gives, each handed out once."""
from __future__ import annotations

import pytest

from config import parse_config
from mechanisms import GeometricCount, SeededSource
from mechanisms.mean import make_mean
from proxy.pipeline.release import (BATCH_DRAWS_MIN, NoisePool, NoiseReservoir, draws_at_once,
                                    noisy_answer)
from rewriter import build_plan, parse
from support.service import make_config

HOURGLASS = make_mean("hourglass", 0.5, 0.0, 500_000.0)


@pytest.mark.parametrize("m", [GeometricCount(0.5), HOURGLASS], ids=["geometric", "hourglass"])
def test_a_batch_splits_into_the_draws_of_draw_many(m):
    n = BATCH_DRAWS_MIN + 3
    got = draws_at_once(m, n, SeededSource(7))
    raw = m.draw_many(n, SeededSource(7))
    want = raw.tolist() if hasattr(raw, "tolist") else list(zip(*(a.tolist() for a in raw)))
    assert got == want and len(got) == n
    single = m.draw(SeededSource(1))            # the same shape as one draw: int, or (I, K) of ints
    assert all(type(d) is type(single) for d in got)
    if isinstance(single, tuple):
        assert all(len(d) == len(single) and all(type(x) is int for x in d) for d in got)
    assert draws_at_once(m, BATCH_DRAWS_MIN - 1, SeededSource(7)) is None      # small: one by one


def test_the_reservoir_tops_up_in_one_batch_per_measurement():
    m = HOURGLASS
    reservoir = NoiseReservoir(SeededSource(3))
    steps = list(reservoir._steps([m], 2 * BATCH_DRAWS_MIN))
    assert len(steps) == 1 and len(reservoir) == 2 * BATCH_DRAWS_MIN
    assert reservoir.take(m, 2 * BATCH_DRAWS_MIN) == draws_at_once(m, 2 * BATCH_DRAWS_MIN, SeededSource(3))
    assert reservoir.take(m, 1) == []           # each draw handed out once


def test_a_release_from_batched_draws_applies_each_draw_to_its_cell():
    """The pool's batch draws go to the cells in domain order, as one-by-one draws do:
    the answer is ``apply(cell value, draw c)`` per cell."""
    cfg = parse_config(make_config())
    plan = build_plan(parse("SELECT educ, COUNT(*) FROM pums WHERE age BETWEEN 20 AND 40 GROUP BY educ"), cfg)
    assert plan.n_cells == 16 >= BATCH_DRAWS_MIN
    cells = [(v, 10 * i) for i, (v,) in enumerate(plan.cells)]
    pool = NoisePool(plan, 1.0, SeededSource(5))
    assert pool.worthwhile
    pool.fill()
    m = pool.ms[0]
    want = [v + z for (_, v), z in zip(cells, draws_at_once(m, plan.n_cells, SeededSource(5)))]
    got = noisy_answer(plan, cells, 1.0, SeededSource(99), pool)["values"]
    assert [row[0] for row in got] == want
