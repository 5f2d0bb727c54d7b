"""``python -m bench.user_level`` (the privacy-unit benchmark) on a tiny TPC-H (SF 0.001).

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

pytestmark = pytest.mark.skipif(
    tpch.tpchgen() is None, reason="tpchgen-cli not installed (pip install '.[test]')"
)


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
    assert 1 <= g <= 5 and r >= 1  # 95th percentiles of the data
    user_level.report(bench, 0.001)
    out = capsys.readouterr().out
    heads = [ln for ln in out.splitlines() if ln.startswith("HEADLINE:")]
    assert len(heads) == 1 and heads[0].rstrip().endswith(("PASS", "MISS"))
    assert "through dpgate's FK path" in out
    for q, dp, tm, _ in bench["rows"]:
        assert tm["raw"] > 0 and tm["dp"] > 0 and tm["ratio"] > 0
        if bench["sn_note"] is None:  # SmartNoise installed: its rewrite is timed where it has one
            assert ("sn" in tm) == (not q.sn_refuses), q.name
        for j in range(len(q.aggs)):
            errs = [dp["err"][(e, j)] for e in user_level.EPSILONS]
            assert errs[-1] < errs[0], (q.name, j, errs)


def test_relative_error_rule():
    truth = {("a",): 10.0, ("b",): -4.0, ("c",): 0.0}
    assert user_level.rel_error({("a",): 11.0, ("b",): -4.0, ("c",): 5.0}, truth) == pytest.approx(0.05)
    assert user_level.rel_error({("a",): 10.0}, truth) == pytest.approx(0.5)  # b missing: error 1


def test_no_worse_is_judged_beyond_chance():
    """Same-law errors pass (a coin flip on the medians would fail about half of them); errors
    clearly larger than the spread fail; the bound is the z formula (mean + 2·SE)."""
    rng = random.Random(7)
    fails = 0
    for _ in range(200):  # equal laws: P(fail) ≈ 2.3% (one-sided 2σ)
        a = [abs(rng.gauss(0, 1)) for _ in range(100)]
        b = [abs(rng.gauss(0, 1)) for _ in range(100)]
        fails += not user_level.no_worse(a, b)
    assert fails <= 15  # binomial(200, 0.023): mean 4.6, P(> 15) < 1e-4
    worse = [abs(rng.gauss(0, 2)) for _ in range(100)]  # twice the spread: 3.9σ beyond the bound
    assert not user_level.no_worse(worse, [abs(rng.gauss(0, 1)) for _ in range(100)])
    assert user_level.no_worse([1.0, 1.2, 0.8], [1.0, 1.2, 0.8])


def test_family_z_is_bonferroni():
    """m equal comparisons at z = Φ⁻¹(1 − 0.05/m) all pass with probability ≥ 95%: one at
    1.645, three at 2.128 (the normal quantiles, not values the code holds)."""
    assert user_level.family_z(1) == pytest.approx(1.6449, abs=1e-4)
    assert user_level.family_z(3) == pytest.approx(2.1280, abs=1e-4)
    rng = random.Random(11)
    runs_failed = 0
    for _ in range(300):  # 3 equal-law comparisons per run
        z = user_level.family_z(3)
        runs_failed += not all(
            user_level.no_worse(
                [abs(rng.gauss(0, 1)) for _ in range(60)], [abs(rng.gauss(0, 1)) for _ in range(60)], z
            )
            for _ in range(3)
        )
    assert runs_failed <= 30  # binomial(300, ≤ 0.05): mean ≤ 15, P(> 30) < 1e-4


def test_smartnoise_rewrite_on_duckdb_is_its_query():
    """The SmartNoise rewrite the bench times on DuckDB (``SmartNoise.scan_sql``) computes
    what SmartNoise computes: with max_ids (1,000) above every customer's rows (its reservoir keeps
    all), its exact sums and counts equal the analyst's own query on the same rows."""
    pytest.importorskip("snsql", reason="SmartNoise SQL is in the bench extra (pip install '.[bench]')")
    import tempfile
    from pathlib import Path

    import duckdb

    with tempfile.TemporaryDirectory() as tmp:
        tpch.load(tpch.generate(0.001, Path(tmp) / "p"), Path(tmp) / "t.duckdb")
        con = duckdb.connect(str(Path(tmp) / "t.duckdb"), read_only=True)
        sn = user_level.SmartNoise(con)
        q1 = next(q for q in user_level.QUERIES if q.name == "Q1")
        most = con.execute(
            f"SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM {tpch.LINEITEM_UNIT} GROUP BY o_custkey)"
        ).fetchone()[0]
        assert most < 1000
        got = {r[:2]: r[2:] for r in con.execute(sn.scan_sql(q1, 1000)).fetchall()}
        raw = con.execute(
            "SELECT l_returnflag, l_linestatus, SUM(l_quantity), COUNT(*) FROM lineitem GROUP BY 1, 2"
        ).fetchall()
        assert len(got) == len(raw) > 1
        for flag, status, total, n in raw:
            sums = got[(flag, status)]
            assert sums[0] == pytest.approx(float(total), rel=1e-12) and sums[-1] == n
        o1 = next(q for q in user_level.QUERIES if q.name == "O1")
        assert "ORDER BY __sn_r" in sn.scan_sql(o1, 26)  # its random order, drawn one level down
        assert sn.scan_sql(next(q for q in user_level.QUERIES if q.sn_refuses), 26) is None
