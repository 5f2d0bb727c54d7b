"""A zCDP tier end to end through the wire, on DuckDB and Postgres (Spark: test_spark_zcdp.py).

The `half` role's tier is ``accounting = "zcdp"``, ρ 0.05 per query, budget ρ 1 per day. Central
COUNT/SUM are noised by the discrete Gaussian at the L2 sensitivity of one customer's bounded
contribution (Canonne, Kamath & Steinke 2020): per cell √min(G, cells)·R, so σ² = min(G, cells)·R²/(2ρ).
The ledger is charged ρ; every kind's charge is its mechanisms' privacy map; the NOTICE, EXPLAIN
and dpgate.budget give ρ with its (ε, δ) reading at δ = 1e-6 (Canonne, Kamath & Steinke 2020 Cor 13);
pure tiers beside it are unchanged."""

from __future__ import annotations

import math
import uuid
from fractions import Fraction

import psycopg
import pytest

from config import parse_config
from mechanisms import SeededSource
from mechanisms.accounting import zcdp_epsilon
from mechanisms.discrete_gaussian import GaussianCount, GaussianSum
from mechanisms.gaussian_stats import GaussianMean, GaussianVariance
from proxy.admin.page import render_page
from proxy.admin.server import collect
from proxy.cli import main
from support.service import Service, ask, backend_rows, config_toml, make_config

RHO, BUDGET = 0.05, 1.0
ZTIER = {"half": {"accounting": "zcdp", "rho": RHO, "budget": BUDGET, "period": "day"}}


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def svc(request, tmp_path_factory):
    ledger = None
    if request.param == "postgres":  # the data and the ledger on Postgres (schema 3, amounts in ρ)
        pg = request.getfixturevalue("postgres")
        backend = {"kind": "postgres", "dsn": pg.dsn, "pool_size": 4}
        ledger = {"kind": "postgres", "dsn": pg.dsn, "schema": "zcdp_" + uuid.uuid4().hex[:8]}
    else:
        backend = {"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "demo.duckdb")}
    cfg = make_config(backend, tiers=ZTIER)
    if ledger is not None:
        cfg["ledger"] = ledger
    s = Service(cfg, tmp_path_factory.mktemp("state"), source=SeededSource(20261129)).start()
    yield s
    s.close()


def _gauss_bound(sigma2: float, n: int, p_fail: float = 1e-9) -> float:
    """|N_Z(0, σ²)| exceeds t in any of n cells with probability ≤ n·2·e^{−t²/(2σ²)} (the discrete
    Gaussian's tail is below the continuous one's sub-Gaussian bound, CKS 2020 Prop 23)."""
    return math.sqrt(2 * sigma2 * math.log(2 * n / p_fail))


def _spent(s, role="half") -> float:
    return s.gw.ledger.spent(role, "day", "rho")


def test_count_by_store_is_the_discrete_gaussian_at_the_unit_l2_sensitivity(svc):
    before = _spent(svc)
    rows, notes = ask(svc, "SELECT store, COUNT(*) AS n FROM purchases GROUP BY store", "half")
    assert _spent(svc) == pytest.approx(before + RHO)  # charged ρ, in ρ
    truth = dict(
        backend_rows(
            svc,
            "SELECT store, SUM(LEAST(n, 10)) FROM (SELECT store, customer_id, COUNT(*) AS n FROM purchases "
            "WHERE customer_id IS NOT NULL GROUP BY store, customer_id) t GROUP BY store",
        )
    )
    m, r = 10, 10  # min(G = 10, 10 stores) cells, R = 10 rows each
    sigma2 = m * r * r / (2 * RHO)  # Δ₂² / (2ρ), Δ₂ = √10·10 (not the L1 k = 100)
    assert [row[0] for row in rows] == list(range(1, 11))
    for store, n in rows:
        assert abs(n - int(truth[store])) <= _gauss_bound(sigma2, 10)
    hw = GaussianCount(Fraction(RHO), m * r * r).half_width()
    head = notes[-1]
    assert head.startswith(
        f"dpgate: ρ charged {RHO:g} (zCDP; alone (ε {zcdp_epsilon(RHO, 1e-6):.3g}, δ 1e-06)-DP)"
    )
    assert "discrete_gaussian_count" in head and f"n ±{hw:g}" in head.replace(",", "")
    assert "Δ₂ = √10·10" in head
    again, notes = ask(svc, "SELECT store, COUNT(*) AS n FROM purchases GROUP BY store", "half")
    assert again == rows and "ρ charged 0 (repeat" in notes[-1]
    assert _spent(svc) == pytest.approx(before + RHO)


def test_sum_and_count_share_rho_and_the_charge_is_the_privacy_map(svc):
    before = _spent(svc)
    sql = "SELECT store, SUM(amount), COUNT(*) FROM purchases WHERE item < 50 GROUP BY store"
    rows, notes = ask(svc, sql, "half")
    assert len(rows) == 10
    assert "discrete_gaussian_sum" in notes[-1] and "discrete_gaussian_count" in notes[-1]
    # the charge is the composition of the two releases' privacy maps, each at ρ/2 for one
    # customer's whole contribution (Δ₂² = 10·R² rows, each row's bound in grid units)
    csq = 10 * 10 * 10
    maps = GaussianSum(Fraction(RHO) / 2, 0, 500, contributions_sq=csq).privacy_map_exact(1) + GaussianCount(
        Fraction(RHO) / 2, csq
    ).privacy_map_exact(1)
    assert _spent(svc) - before == pytest.approx(float(maps), abs=1e-9)
    assert maps <= Fraction(RHO)


def test_avg_is_a_gaussian_sum_over_a_gaussian_count_charged_its_map(svc):
    before = _spent(svc)
    sql = (
        "SELECT store, AVG(amount), SUM(amount), COUNT(amount) FROM purchases WHERE item > 150 GROUP BY store"
    )
    rows, notes = ask(svc, sql, "half")
    assert "discrete_gaussian_mean" in notes[-1] and "hourglass" not in notes[-1]
    m = GaussianMean(Fraction(RHO), 0, 500, contributions_sq=10 * 10 * 10)
    assert _spent(svc) - before == pytest.approx(float(m.privacy_map_exact(1)), abs=1e-9)
    for _, avg, s, n in rows:  # one release: the AVG is the released SUM over the released COUNT
        assert 0 <= avg <= 500
        if n >= 1:
            assert avg == pytest.approx(min(max(s / n, 0), 500))


def test_variance_is_three_gaussian_moments_charged_their_map(svc):
    before = _spent(svc)
    rows, notes = ask(
        svc,
        "SELECT store, VAR_POP(amount), STDDEV_SAMP(amount) FROM purchases WHERE item > 190 GROUP BY store",
        "half",
    )
    assert len(rows) == 10 and all(0 <= v <= 250**2 and 0 <= s for _, v, s in rows)
    assert "discrete_gaussian_variance" in notes[-1]
    m = GaussianVariance(Fraction(RHO), 0, 500, func="var_pop", contributions_sq=10 * 10 * 10)
    assert _spent(svc) - before == pytest.approx(float(m.privacy_map_exact(1)), abs=1e-9)


def test_explain_names_the_accounting_and_charges_nothing(svc):
    before = _spent(svc)
    rows, _ = ask(svc, "EXPLAIN SELECT store, COUNT(*) FROM purchases WHERE item = 3 GROUP BY store", "half")
    text = "\n".join(r[0] for r in rows)
    assert "accounting zCDP, ρ 0.05 per query" in text and "δ 1e-06)-DP" in text
    assert "discrete_gaussian_count" in text and "Δ₂ = √10·10" in text
    rows, _ = ask(svc, "EXPLAIN SELECT store, COUNT(*) FROM purchases WHERE item = 3 GROUP BY store", "other")
    assert "accounting zCDP" not in "\n".join(r[0] for r in rows)  # a pure tier: as before
    rows, _ = ask(svc, "EXPLAIN SELECT MAX(amount) FROM purchases WHERE store = 4", "half")
    assert rows[0][0].startswith("dpgate: accounting zCDP: this release's mechanisms are pure ε-DP")
    with pytest.raises(psycopg.Error) as e:  # as its execution would be: refused
        ask(svc, "EXPLAIN SELECT COUNT(*) FROM accounts WHERE branch = 1", "half")
    assert e.value.sqlstate == "0A000"
    assert _spent(svc) == before


def test_pure_mechanisms_run_at_root_two_rho_and_are_charged_eps_squared_over_two(svc):
    before = _spent(svc)
    _, notes = ask(svc, "SELECT MAX(amount) FROM purchases WHERE store = 2", "half")  # extreme kind
    eps = svc.gw.tier_of("half").epsilon
    assert eps == pytest.approx(math.sqrt(2 * RHO))
    assert _spent(svc) - before == pytest.approx(eps * eps / 2, abs=1e-9)
    assert notes[-1].startswith("dpgate: ρ charged")


def test_the_views_show_rho_and_its_reading(svc):
    rows, _ = ask(
        svc,
        "SELECT tier, spent, budget, accounting, rho_per_query, spent_as_epsilon, spent_as_delta "
        "FROM dpgate.budget",
        "half",
    )
    ((tier, spent, budget, acc, rho, e, d),) = rows
    assert (tier, budget, acc, rho) == ("half", BUDGET, "zcdp", RHO)
    assert spent == pytest.approx(_spent(svc)) and e == pytest.approx(zcdp_epsilon(spent, 1e-6)) and d == 1e-6
    rel, _ = ask(svc, "SELECT epsilon, rho FROM dpgate.releases WHERE mechanism LIKE '%gaussian%'", "half")
    assert rel and all(e is None and r == pytest.approx(RHO) for e, r in rel)
    rows, _ = ask(svc, "SELECT accounting, rho_per_query, spent_as_epsilon FROM dpgate.budget", "other")
    assert rows[0][0] == "pure" and rows[0][1] is None


def test_what_cannot_be_accounted_in_rho_is_refused_and_the_budget_is_kept(svc):
    before = _spent(svc)
    with pytest.raises(psycopg.Error) as e:  # per-record DP (the accounts table's policy)
        ask(svc, "SELECT COUNT(*) FROM accounts WHERE branch = 1", "half")
    assert e.value.sqlstate == "0A000" and "zCDP" in str(e.value)
    with pytest.raises(psycopg.Error) as e:  # scalar subqueries: shares in pure ε
        ask(svc, "SELECT COUNT(*) FROM purchases WHERE amount > (SELECT AVG(amount) FROM purchases)", "half")
    assert e.value.sqlstate == "0A000"
    assert _spent(svc) == before


def test_the_budget_in_rho_runs_out(svc):
    n = 0
    with pytest.raises(psycopg.Error) as e:
        for item in range(100, 200):
            ask(svc, f"SELECT COUNT(*) FROM purchases WHERE item = {item}", "half")
            n += 1
    assert e.value.sqlstate == "53400" and "costs ρ 0.05" in str(e.value)
    assert _spent(svc) <= BUDGET + 1e-9 and _spent(svc) > BUDGET - RHO
    rows, notes = ask(svc, "SELECT COUNT(*) FROM purchases WHERE item = 100", "half")  # a repeat: free
    assert "repeat" in notes[-1]


def test_dpgate_budget_and_the_owner_page_show_rho_and_its_reading(svc, tmp_path, capsys):
    cfg = svc.gw.config
    spent = _spent(svc)
    reading = f"(ε {zcdp_epsilon(spent, 1e-6):.3g}, δ 1e-06)-DP"
    page = render_page(collect(cfg, svc.gw.ledger, "admin"))
    assert f"{spent:g} ρ, {reading}" in page.replace("&#x27;", "'")
    assert "half: ρ " in page  # the spend chart's legend in the role's unit
    path = tmp_path / "dpgate.toml"
    raw = make_config(None, tiers=ZTIER)  # (the command reads the ledger only)
    led = svc.gw.ledger
    if led.dsn is not None:
        raw["ledger"] = {"kind": "postgres", "dsn": led.dsn, "schema": led.schema}
    path.write_text(config_toml(raw))
    assert parse_config(raw).tiers["half"].accounting == "zcdp"
    assert main(["budget", "--config", str(path), "--state-dir", str(svc.state_dir), "--role", "half"]) == 0
    out = capsys.readouterr().out
    row = next(x for x in out.splitlines() if x.startswith("half "))
    assert row.split()[2] == f"{RHO:g}" and float(row.split()[3]) == pytest.approx(spent)
    assert f"zCDP: amounts in ρ; spent {reading}" in row
