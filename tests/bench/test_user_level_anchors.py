"""``bench.user_level_anchors`` (Tumult Analytics, OpenDP, PipelineDP and Qrlew beside dpgate)
on a tiny TPC-H (SF 0.001).

* The statements as each anchor receives them, from the parse: COUNT(*) one statistic, AVG two
  (its share of ε), a SUM of a product bounded by the extreme products of its factors' bounds,
  the rows after the WHERE exported once.
* The oracle, per installed anchor: with a bound that binds nothing (R = the most rows any
  customer has) and ε = 10^5, each tool's release is TRUE up to its noise, whose scale is at
  most R·U / (ε·share) ≤ 150 · 105,000 / 25,000 = 630 (Laplace; Qrlew's Gaussian at δ = 1e-6
  is within a few times that), below 0.1% of every nonzero true SUM and ≤ 0.01 on a COUNT, so
  every measure's relative error is ≤ 1%. A tool missing from this venv skips with one line.
* The HEADLINE's rule: dpgate passes against the best pure-ε anchor only when its mean error
  is not worse beyond chance (``no_worse_welch``: Welch's bound, 5% family-wise), and an anchor
  whose releases are infinite (a noisy count at 0 under a mean) is never the best.
"""

from __future__ import annotations

import importlib.util
import math

import duckdb
import pytest

from bench import tpch, user_level
from bench import user_level_anchors as anchors

pytestmark = pytest.mark.skipif(
    tpch.tpchgen() is None, reason="tpchgen-cli not installed (pip install '.[test]')"
)
EPS = 1e5
PACKAGES = {"OpenDP": "opendp", "PipelineDP": "pipeline_dp", "Qrlew": "pyqrlew"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("anchors")
    tpch.load(tpch.generate(0.001, tmp / "parquet"), tmp / "tpch.duckdb")
    con = duckdb.connect(str(tmp / "tpch.duckdb"), read_only=True)
    most = {  # R = the most rows any customer has: binds nothing; G = every cell
        t: (
            user_level.domain_cells(t),
            con.execute(
                f"SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM {src} GROUP BY {user_level.UNIT})"
            ).fetchone()[0],
        )
        for t, src in user_level.UNIT_ROWS.items()
    }
    truths = {q.name: user_level.truth(con, q) for q in user_level.QUERIES}
    yield con, most, truths, tmp
    con.close()


def test_statements_from_the_parse(tiny):
    con, most, _, tmp = tiny
    specs = anchors.make_specs(
        con, user_level.QUERIES, user_level.COLUMNS, user_level.SN_SCANS, most, tmp / "s"
    )
    q1, q6 = specs["Q1"], specs["Q6"]
    assert [a.func for a in q1.aggs] == ["sum", "avg", "count"]
    assert q1.shares(1.0) == [0.25, 0.5, 0.25]  # AVG = SUM + COUNT: two of the four statistics
    assert len(q1.cells()) == 6 and specs["O2"].cells() == [()]
    (prod,) = q6.aggs
    assert prod.cols == ("l_extendedprice", "l_discount") and (prod.lower, prod.upper) == (0.0, 105000 * 0.1)
    where = user_level.Q6_WHERE.format(d="DATE ")
    (n,) = con.execute(f"SELECT COUNT(*) FROM {tpch.LINEITEM_UNIT} AS t WHERE {where}").fetchone()
    assert con.execute(f"SELECT COUNT(*) FROM read_parquet('{q6.rows}')").fetchone()[0] == n
    assert q6.r == most["lineitem"][1] and q6.sql.count("'1994-01-01'") == 1 and "DATE" not in q6.sql


def installed(tool: str) -> bool:
    if tool == "Tumult":
        return anchors.tumult_python() is not None
    return importlib.util.find_spec(PACKAGES[tool]) is not None


@pytest.mark.parametrize("tool", ["OpenDP", "PipelineDP", "Qrlew", "Tumult"])
def test_anchor_releases_true_answers_when_nothing_binds(tiny, tool):
    if not installed(tool):
        pytest.skip(f"{tool} is not installed in this venv (the bench venv has it)")
    con, most, truths, tmp = tiny
    # Tumult's releases are Spark jobs of 5–25 s here: one statement of two cells' kinds
    queries = (
        [q for q in user_level.QUERIES if q.name in ("O1", "O2")] if tool == "Tumult" else user_level.QUERIES
    )
    res = anchors.run(
        con,
        queries,
        user_level.COLUMNS,
        user_level.SN_SCANS,
        most,
        truths,
        (EPS,),
        2,
        tmp / tool,
        tools=(tool,),
    )
    assert res.versions[tool], res.notes[tool]
    for q in queries:
        for j, a in enumerate(q.aggs):
            errs = res.errs[tool][(q.name, EPS, j)]
            if isinstance(errs, str):  # a refusal: only Qrlew refuses, and says why
                assert tool == "Qrlew" and errs.startswith("refused"), (q.name, a, errs)
                continue
            assert max(errs) <= 0.01, (tool, q.name, a, errs)


EXP_300 = [-0.3 * math.log(1 - (i + 0.5) / 200) for i in range(200)]  # quantiles of an exponential, mean 0.3


def rows_with(dp_errs: list[float]):
    q = user_level.QUERIES[3]  # O1 COUNT(*)
    dp = {"err": {(e, 0): dp_errs[0] for e in user_level.EPSILONS}, "errs": {(1.0, 0): dp_errs}}
    return [(q, dp, {}, {})]


def headline(capsys, res, rows) -> str:
    anchors.report(res, rows, user_level.EPSILONS)
    return next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("HEADLINE (anchors):"))


@pytest.mark.parametrize(
    "mine, theirs, verdict",
    [
        ([0.10, 0.11, 0.09, 0.10] * 5, [0.10, 0.12, 0.08, 0.10], "PASS"),  # equal errors: no worse
        ([0.30, 0.31, 0.29, 0.30] * 5, [0.10, 0.12, 0.08, 0.10], "MISS"),  # 3× worse: beyond chance
        ([0.30, 0.31, 0.29, 0.30] * 5, [float("inf"), 0.1], "PASS"),  # an infinite release is never the best
        # equal exponential errors (|Laplace|, mean 0.3) whose 20 anchor releases came out low and
        # tight (mean 0.2, 1.5 standard errors low, with sd 0.06, as a skewed sample's do together):
        # not beyond chance (the anchor's own sd alone would call it a MISS)
        (EXP_300, [0.2 + 0.06 * z for z in (-1.5, -1, -0.5, 0, 0.5, 1, 1.5, 0.2, -0.2, 0)] * 2, "PASS"),
    ],
)
def test_headline_rule(capsys, mine, theirs, verdict):
    res = anchors.Result(
        versions={"OpenDP": "x"}, errs={"OpenDP": {("O1", e, 0): theirs for e in user_level.EPSILONS}}
    )
    res.runs, res.seconds = {"OpenDP": anchors.MIN_JUDGED}, {"OpenDP": 0.0}
    line = headline(capsys, res, rows_with(mine))
    assert line.endswith(verdict) and f"on {int(verdict == 'PASS')} of 1 measures" in line, line
