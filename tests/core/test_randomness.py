"""Serving code draws from the CSPRNG: the gateway's default source is the system
one, and released noise differs between two fresh gateways on the same data."""
from __future__ import annotations

from mechanisms import SystemRandomSource
from proxy.release import noisy_answer
from rewriter import build_plan, parse


def test_gateway_uses_system_csprng(tmp_path):
    from proxy.gateway import Gateway
    from support.service import make_config
    from config import parse_config
    cfg = parse_config(make_config({"kind": "duckdb", "path": str(tmp_path / "d.duckdb")}))
    gw = Gateway(cfg, tmp_path / "state")
    assert isinstance(gw.source, SystemRandomSource)
    gw.ledger.close()


def test_noise_is_not_reproducible_without_a_seed():
    from support.service import make_config
    from config import parse_config
    cfg = parse_config(make_config())
    plan = build_plan(parse("SELECT race, COUNT(*), SUM(income) FROM pums GROUP BY race"), cfg)
    cells = [(r, 100, 1_000_000.0) for r in range(1, 7)]
    a = noisy_answer(plan, cells, 1.0, SystemRandomSource())
    b = noisy_answer(plan, cells, 1.0, SystemRandomSource())
    assert a["values"] != b["values"]      # 12 independent draws; equal with probability < 1e-9


def _plan():
    from support.service import make_config
    from config import parse_config
    cfg = parse_config(make_config())
    return build_plan(parse("SELECT sex, COUNT(*), AVG(income), SUM(age) FROM pums GROUP BY sex"), cfg)


def test_noise_drawn_ahead_equals_live_noise_for_the_same_randomness():
    """Pre-drawing (NoisePool, filled while the scan runs) consumes the source in
    the same order as drawing live, so with one seed both answers are identical:
    the pre-drawn path releases exactly the mechanisms' law."""
    from mechanisms import SeededSource
    from proxy.release import NoisePool
    plan = _plan()
    cells = [(0, 480, 21_000_000.0, 480, 19_000), (1, 520, 18_500_000.0, 520, 21_500)]
    pool = NoisePool(plan, 1.0, SeededSource(11))
    assert pool.worthwhile
    pool.fill()
    ahead = noisy_answer(plan, cells, 1.0, SeededSource(999), pool)
    live = noisy_answer(plan, cells, 1.0, SeededSource(11))
    assert ahead["values"] == live["values"]
    assert noisy_answer(plan, cells, 1.0, SeededSource(11), pool)["values"] == live["values"]  # pool empty: live


def test_a_noise_pool_is_used_once_and_never_refilled_after_use():
    from mechanisms import SeededSource
    from proxy.release import NoisePool
    plan = _plan()
    cells = [(0, 480, 21_000_000.0, 480, 19_000), (1, 520, 18_500_000.0, 520, 21_500)]
    pool = NoisePool(plan, 1.0, SeededSource(3))
    pool.fill()
    first = pool.take()
    assert len(first) == plan.n_cells and pool.take() == []
    pool.fill()                                   # too late: the statement has its answer
    assert pool.take() == []
    late = NoisePool(plan, 1.0, SeededSource(3))
    assert late.take() == [] and (late.fill() or late.take()) == []   # not filled in time: live
