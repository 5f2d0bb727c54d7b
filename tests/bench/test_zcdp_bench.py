"""``python -m bench.zcdp`` (zCDP with the discrete Gaussian against pure ε, per person) on a tiny
TPC-H (SF 0.001) and the demo's purchases, with few draws.

* The guarantee: ρ_day converts to (ε_day, δ) by Canonne, Kamath & Steinke 2020 Cor. 13 (the
  accountant's) and is the largest that does (1% more does not); it is at least Bun & Steinke
  2016 Prop. 1.3's ρ (Cor. 13 is the tighter conversion). The day of 50 statements, charged by
  the accountant, fits both tiers' budgets and a 51st does not; both read (50, 1e-6).
* The releases: per row, c = min(G, cells) and k = c·R; the zCDP measurement's ρ times the
  statement's aggregates is the statement's ρ and its charge; COUNT/SUM on the zCDP tier are
  the discrete Gaussian; each side's measured noise RMSE matches its
  law's standard deviation within 5 standard errors of a mean of squares (sd of X² over N draws:
  sqrt(2/N) Var for the Gaussian, sqrt(5/N) Var for the Laplace, whose kurtosis is 6).
* One table and one HEADLINE line ending PASS or MISS.
tpchgen-cli is in the ``test`` extra; the test skips with one line if it is missing.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from bench import tpch, zcdp
from mechanisms.accounting import zcdp_delta, zcdp_epsilon

pytestmark = pytest.mark.skipif(
    tpch.tpchgen() is None, reason="tpchgen-cli not installed (pip install '.[test]')"
)

DRAWS = 40


@pytest.fixture(scope="module")
def bench():
    return zcdp.run(0.001, DRAWS)


def test_the_day_is_the_same_guarantee_on_both_sides():
    eps, delta = zcdp.DAY_EPSILON, zcdp.DELTA
    rho = zcdp.rho_for(eps, delta)
    assert zcdp_delta(rho, eps) <= delta < zcdp_delta(rho * 1.01, eps)
    bs = (math.sqrt(math.log(1 / delta) + eps) - math.sqrt(math.log(1 / delta))) ** 2
    assert bs + 2 * math.sqrt(bs * math.log(1 / delta)) == pytest.approx(eps)
    assert rho >= bs
    for e in (0.5, 1.0, 10.0):  # the Prop. 1.3 point always converts under Cor. 13
        r = (math.sqrt(math.log(1 / delta) + e) - math.sqrt(math.log(1 / delta))) ** 2
        assert zcdp_delta(r, e) <= delta * (1 + 1e-9)
    r = zcdp.statement_rho(rho)
    assert Fraction(r) * zcdp.STATEMENTS <= Fraction(rho) and zcdp_epsilon(r * zcdp.STATEMENTS, delta) <= eps


def test_rows_are_the_bounds_and_the_noise_laws(bench):
    rho_stmt = Fraction(bench["rho_stmt"])
    per_statement = {}
    for s, m in bench["rows"]:
        per_statement.setdefault(s.name, []).append(m)
        assert m["k"] == m["c"] * m["R"] and 1 <= m["c"] <= m["cells"]
        assert m["contributions_sq"] == m["c"] * m["R"] ** 2  # L2² = c R² (per cell), L1 = c R
        assert m["zcdp_mechanism"].startswith("discrete_gaussian_")
        n = m["cells"] * DRAWS
        # pure: discrete Laplace (kurtosis 6); zCDP: discrete Gaussian (kurtosis ~3)
        for side, kurt_excess in (("pure", 5), ("zcdp", 2)):
            got = m[f"{side}_rmse"] ** 2
            want = m[f"{side}_var"]
            assert abs(got - want) <= 5 * math.sqrt(kurt_excess / n) * want, (s.name, m["agg"], side)
    for ms in per_statement.values():
        total = sum(m["rho"] for m in ms)  # shares and σ² rounded toward less ρ: a hair below
        assert rho_stmt * (1 - Fraction(1, 10**9)) <= total <= rho_stmt
        assert ms[0]["cost"]["zcdp"].amount == total  # what the statement is charged: its maps


def test_the_day_fits_both_budgets_and_reads_the_same(bench):
    d = bench["day"]
    for tier in ("pure", "zcdp"):
        assert d[tier]["fit"] == zcdp.STATEMENTS and not d[tier]["more"]
    assert d["pure"]["epsilon"] == pytest.approx(zcdp.DAY_EPSILON)
    assert zcdp.DAY_EPSILON * 0.999 <= d["zcdp"]["epsilon"] <= zcdp.DAY_EPSILON


def test_table_and_headline(bench, capsys):
    zcdp.report(bench, 0.001)
    out = capsys.readouterr().out
    heads = [ln for ln in out.splitlines() if ln.startswith("HEADLINE:")]
    assert len(heads) == 1 and heads[0].rstrip().endswith(("PASS", "MISS"))
    assert "CKS 2020 Cor. 13" in out
    assert len([ln for ln in out.splitlines() if ln.startswith(("tpch ", "purchases "))]) == len(
        bench["rows"]
    )
