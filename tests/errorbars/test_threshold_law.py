"""The unit-count test of ``min_units_per_group`` has the law it states: a cell with exactly T
units passes with probability P(Z ≥ 0) = 1/(1 + p), p = exp(−ε_t/s), Z ~ DLap(s/ε_t) the
geometric noise at the test's share ε_t = ε/(g + 1) over s = min(G, cells) (here: no unit, s = 1);
a cell far below never passes, far above always does."""

from __future__ import annotations

import math
from types import SimpleNamespace

from mechanisms import SeededSource
from proxy.pipeline.thresholds import THRESHOLD
from rewriter.plan import Aggregate, GroupKey, Measure, Output, Plan

N = 10_000
T = 30


def _plan(cells: int) -> Plan:
    return Plan(
        "t",
        "t",
        None,
        (GroupKey("g", "int", tuple(range(cells))),),
        (Measure("count_rows"),),
        (Aggregate("count", None, None, None, None, (0,)),),
        (Output("g", "group", 0, "int"), Output("n", "aggregate", 0, "int")),
    )


def test_pass_rate_at_the_threshold():
    tier = SimpleNamespace(epsilon=1.0, accounting="pure", ladder=None)
    gw = SimpleNamespace(
        tier_of=lambda role: tier,
        config=SimpleNamespace(tables={"t": SimpleNamespace(min_units_per_group=T)}),
        source=SeededSource(3),
    )
    conn = SimpleNamespace(gw=gw, role="r")
    plan = _plan(N + 2)
    p = THRESHOLD.prepare(conn, plan)
    rows = [(k, T, T) for k in range(N)] + [(N, 0, 0), (N + 1, 10 * T, 10 * T)]  # (key, COUNT(*), units)
    answer = THRESHOLD.measure(conn, p, rows)
    kept = {k[0] for k in answer["keys"]}
    assert N + 1 in kept and N not in kept
    rate = len(kept - {N + 1}) / N
    p_ = math.exp(-0.5)  # ε_t = 1/2 (one aggregate + the test), s = 1
    want = 1 / (1 + p_)
    assert abs(rate - want) <= 4.5 * math.sqrt(want * (1 - want) / N), (rate, want)
    assert answer["min_units"]["epsilon"] == 0.5
