"""``python -m bench.user_level`` (issue 20's benchmark) on a tiny TPC-H (SF 0.001).

* The oracle: with bounds that bind nothing (G = every cell, R = 100,000 rows, per cell
  or in total), the bounded scan's exact measures — lineitem's customer found through
  dpgate's FK path — equal the analyst's own query on DuckDB, so the bench's bias column
  is 0 (up to float summation order, 1e-9 relative) for every measure; k = R in total,
  min(G, cells)·R per cell.
* The table: every measure has a dpgate error at every ε, the error falls as ε grows
  (ε = 0.1 vs 10: the noise scale falls 100×), and one HEADLINE line with PASS or MISS.
* The relative-error rule (cells with a nonzero TRUE answer; a missing cell counts as 1).
tpchgen-cli is in the ``test`` extra; the test skips with one line if it is missing.
"""
from __future__ import annotations

import random

import pytest

from bench import tpch, user_level

pytestmark = pytest.mark.skipif(tpch.tpchgen() is None, reason="tpchgen-cli not installed (pip install '.[test]')")


@pytest.fixture(scope="module")
def bench():
    return user_level.run(0.001, runs=2, sn_runs=2, pairs=1, draws=3)


@pytest.mark.parametrize("scope", ["total", "cell"])
def test_bounds_that_bind_nothing_have_no_bias(scope):
    free = {"lineitem": (6, 100_000), "orders": (5, 100_000)}
    res = user_level.run(0.001, runs=1, sn_runs=1, pairs=1, draws=1, bounds=free, scope=scope)
    for q, dp, _, _ in res["rows"]:
        cells = (6 if q.table == "lineitem" else 5) if q.group else 1
        assert dp["k"] == (100_000 if scope == "total" else cells * 100_000)
        for j, a in enumerate(q.aggs):
            assert dp["bias"][j] <= 1e-9, (q.name, a, dp["bias"][j])


def test_table_and_headline(bench, capsys):
    g, r = bench["bounds"]["orders"]
    assert 1 <= g <= 5 and r >= 1                     # 95th percentiles of the data
    user_level.report(bench, 0.001)
    out = capsys.readouterr().out
    heads = [ln for ln in out.splitlines() if ln.startswith("HEADLINE:")]
    assert len(heads) == 1 and heads[0].rstrip().endswith(("PASS", "MISS"))
    assert "through dpgate's FK path" in out
    for q, dp, (raw_ms, dp_ms, ratio), _ in bench["rows"]:
        assert raw_ms > 0 and dp_ms > 0 and ratio > 0
        for j in range(len(q.aggs)):
            errs = [dp["err"][(e, j)] for e in user_level.EPSILONS]
            assert errs[-1] < errs[0], (q.name, j, errs)


def test_relative_error_rule():
    truth = {("a",): 10.0, ("b",): -4.0, ("c",): 0.0}
    assert user_level.rel_error({("a",): 11.0, ("b",): -4.0, ("c",): 5.0}, truth) == pytest.approx(0.05)
    assert user_level.rel_error({("a",): 10.0}, truth) == pytest.approx(0.5)      # b missing: error 1


def test_no_worse_is_judged_beyond_chance():
    """Same-law errors pass (a coin flip on the medians would fail about half of them); errors
    clearly larger than the spread fail; the bound is the z formula (mean + 2·SE)."""
    rng = random.Random(7)
    fails = 0
    for _ in range(200):                                   # equal laws: P(fail) ≈ 2.3% (one-sided 2σ)
        a = [abs(rng.gauss(0, 1)) for _ in range(100)]
        b = [abs(rng.gauss(0, 1)) for _ in range(100)]
        fails += not user_level.no_worse(a, b)
    assert fails <= 15                                     # binomial(200, 0.023): mean 4.6, P(> 15) < 1e-4
    worse = [abs(rng.gauss(0, 2)) for _ in range(100)]     # twice the spread: 3.9σ beyond the bound
    assert not user_level.no_worse(worse, [abs(rng.gauss(0, 1)) for _ in range(100)])
    assert user_level.no_worse([1.0, 1.2, 0.8], [1.0, 1.2, 0.8])
