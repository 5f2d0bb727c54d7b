"""Several MAX/MIN/percentiles over keys without a public domain (GROUP BY city): the keys
are chosen once by partition selection from the first column's histogram (its distinct units
per key, the scan floor), at half of ε and δ; the values of every released key are drawn at
the other half, split into equal shares among the extremes (sequential composition). The
other histograms are read for the chosen keys only (no floor: a key's rows there never decide
whether it is shown)."""

from __future__ import annotations

import asyncio
import tomllib
from fractions import Fraction
from types import SimpleNamespace

import pytest

from config import parse_config
from mechanisms import SeededSource
from proxy.demo import demo_config_path
from proxy.pipeline.extreme import EXTREME, JointState
from proxy.pipeline.kind import Statement
from rewriter.errors import Refusal
from rewriter.route import Route
from rewriter.unit import factor


def _demo(delta: float):
    raw = tomllib.loads(demo_config_path().read_text())
    raw["server"] = {"auth": "trust"}
    for r in raw["roles"].values():
        r.pop("scram", None)
    raw["tiers"]["default"].update(delta=delta, delta_budget=max(delta, 1e-9) * 10)
    raw["tables"]["purchases"]["columns"]["store"].update(lower=1, upper=10)  # a second bounded column
    cfg = parse_config(raw)
    return SimpleNamespace(
        gw=SimpleNamespace(
            config=cfg, tier_of=lambda role: cfg.tiers[cfg.roles[role].tier], source=SeededSource(3)
        ),
        role="analyst",
    )


def _plan(conn, sql):
    return asyncio.run(EXTREME.plan(conn, Statement(sql, Route("dp", "purchases", planner="extreme")), []))


SQL = "SELECT city, MAX(amount) AS hi, MIN(store) AS lo FROM purchases GROUP BY city"


def test_epsilon_and_delta_add_up_to_the_tier():
    conn = _demo(1e-6)
    tier = conn.gw.tier_of("analyst")
    p = _plan(conn, SQL)
    js = p.state
    assert isinstance(js, JointState) and js.sel is not None
    sel, k = js.sel.sel, factor(p.plan.plan)
    values = sum(Fraction(m.epsilon) * k for m in js.mechs if m is not None)
    counts = len(js.check.columns) * js.check.m.privacy_map_exact(k)  # the row check's, 1/20 of ε
    assert float(Fraction(sel.eps) + values + counts) == pytest.approx(tier.epsilon)  # keys, values, counts
    assert float(Fraction(sel.eps)) == pytest.approx(js.check.rest / 2)  # half the rest to the keys
    assert js.shares == 2 and js.share == pytest.approx(js.check.rest / 4)
    assert p.epsilon == tier.epsilon and p.delta == tier.delta and f"delta={tier.delta!r}" in p.key


def test_measure_selects_by_the_first_histogram_and_reads_the_others_for_the_kept_keys():
    conn = _demo(1e-6)
    p = _plan(conn, SQL)
    big = p.state.sel.sel.n_one
    rows = [  # (part, city, v, n, units): part 0 carries the units (first column's histogram)
        (0, "a", 10, 5, big),
        (0, "b", None, 2, big),  # b: no value in the kept rows, selected by its units
        (0, "c", 7, 1, 1),  # c: π(1) ≈ δ/2: never kept
        (1, "a", 3, 5, None),
        (1, "c", 4, 1, None),
        (1, "z", 2, 9, None),  # a key the first histogram dropped: never shown
    ]
    ans = EXTREME.measure(conn, p, rows)
    assert ans["keys"] == [["a"], ["b"]] and ans["partitions"]["kept"] == 2
    assert EXTREME.mechanism(ans) == "capped_rank_max,capped_rank_min, partition_selection"
    text = EXTREME.notice_body(p, ans)
    assert (
        "2 key(s) released" in text and "values at ε 0.475" in text and "ε split into 2 equal shares" in text
    )


def test_beside_count_refused():
    with pytest.raises(Refusal) as e:
        _plan(_demo(1e-6), "SELECT city, MAX(amount), COUNT(*) FROM purchases GROUP BY city")
    assert e.value.sqlstate == "0A000" and "partition selection" in e.value.message and e.value.hint
