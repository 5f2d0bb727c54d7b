"""Every release kind's charge is its mechanisms' privacy map, composed by the accountant: on a
pure tier in ε (and δ), on a zCDP tier in ρ — the discrete Gaussian's ρ = Δ₂²/(2σ²) (Canonne,
Kamath & Steinke 2020) for central COUNT/SUM, and ε²/2 for a pure ε-DP mechanism run at
ε = √(2ρ) (Bun & Steinke 2016 Prop 1.4). The expected maps are built here from the mechanisms'
own constructors, at the parameters the statement's plan implies."""

from __future__ import annotations

from fractions import Fraction

import psycopg
import pytest

from mechanisms import GeometricCount, LaplaceSum, SeededSource
from mechanisms.accounting import pure_epsilon, share_of, unit_epsilon
from mechanisms.discrete_gaussian import GaussianCount, GaussianSum
from mechanisms.gaussian_stats import GaussianMean
from support.service import Service, ask, make_config

RHO = 0.05
ZTIER = {
    "half": {
        "accounting": "zcdp",
        "rho": RHO,
        "budget": 10.0,
        "period": "day",
        "delta": 1e-7,
        "delta_budget": 1e-5,
    }
}
K = 100  # purchases: min(G = 10, cells) · R = 10 per cell over 10 stores


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    backend = {"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "demo.duckdb")}
    s = Service(
        make_config(backend, tiers=ZTIER), tmp_path_factory.mktemp("state"), source=SeededSource(7)
    ).start()
    yield s
    s.close()


def _pure_central():
    e = share_of(unit_epsilon(1.0, K), 2)  # ε/k, split over COUNT and SUM
    return (GeometricCount(e).privacy_map_exact(K) + LaplaceSum(e, 0, 500).privacy_map_exact(K), 0, "eps")


def _zcdp_central():
    r = Fraction(RHO) / 2
    csq = 10 * 10 * 10  # √10·10 squared
    rho = GaussianCount(r, csq).privacy_map_exact(1) + GaussianSum(
        r, 0, 500, contributions_sq=csq
    ).privacy_map_exact(1)
    return (rho, 0, "rho")


def _zcdp_avg():
    return (GaussianMean(Fraction(RHO), 0, 500, contributions_sq=1000).privacy_map_exact(1), 0, "rho")


def _pure_whole(delta=0):  # a pure ε-DP statement at the tier's ε (the sparse vector, MAX, selection)
    return lambda: (Fraction(1), delta, "eps")


def _zcdp_whole(delta=0):  # … at ε = √(2ρ), charged ε²/2
    return lambda: (Fraction(pure_epsilon(RHO)) ** 2 / 2, delta, "rho")


def _pure_checked(cells: int):
    """A MAX with no COUNT beside it: the rank mechanism at 19/20 of ε and the row check's
    geometric count at 1/20 over k = min(G = 10, cells)·R (proxy/pipeline/rowcheck.py)."""
    k = min(10, cells) * 10
    count = GeometricCount(unit_epsilon(Fraction(1, 20), k)).privacy_map_exact(k)
    return lambda: (Fraction(19, 20) + count, 0, "eps")


def _zcdp_checked(cells: int):
    """… on a zCDP tier: the count by the discrete Gaussian at ρ/20 (Δ₂² = min(G, cells)·R²),
    the rank mechanism at ε = √(2·19ρ/20), charged ε²/2."""
    count = GaussianCount(Fraction(RHO) / 20, min(10, cells) * 100).privacy_map_exact(1)
    return lambda: (Fraction(pure_epsilon(Fraction(RHO) * 19 / 20)) ** 2 / 2 + count, 0, "rho")


CASES = [
    (
        "central",
        "SELECT store, COUNT(*), SUM(amount) FROM purchases GROUP BY store",
        _pure_central,
        _zcdp_central,
    ),
    ("central AVG", "SELECT store, AVG(amount) FROM purchases GROUP BY store", _pure_whole(), _zcdp_avg),
    (
        "svt",
        "SELECT item FROM purchases GROUP BY item HAVING COUNT(*) > 500 LIMIT 10",
        _pure_whole(),
        _zcdp_whole(),
    ),
    (
        "partitions",
        "SELECT city, COUNT(*) FROM purchases GROUP BY city",
        _pure_whole(1e-7),
        _zcdp_whole(1e-7),
    ),
    ("extreme", "SELECT MAX(amount) FROM purchases WHERE store = 3", _pure_checked(1), _zcdp_checked(1)),
    (
        "extreme grouped",
        "SELECT store, median(amount) FROM purchases GROUP BY store",
        _pure_checked(10),
        _zcdp_checked(10),
    ),
    (
        "extreme with its count",
        "SELECT MAX(amount), COUNT(*) FROM purchases WHERE store = 3",
        _pure_whole(),
        _zcdp_whole(),
    ),
]


@pytest.mark.parametrize("what,sql,pure,zcdp", CASES, ids=[c[0] for c in CASES])
def test_each_kind_is_charged_its_privacy_map(svc, what, sql, pure, zcdp):
    for role, expect in (("other", pure), ("half", zcdp)):
        ask(svc, sql, role)
        rel = svc.gw.ledger.releases(role, limit=1)[0]
        assert rel["statement"] == sql
        amount, delta, unit = expect()
        assert rel["unit"] == unit, what
        assert rel["epsilon"] == pytest.approx(float(amount), abs=1e-9), (what, role)
        assert rel["delta"] == pytest.approx(delta), (what, role)


@pytest.mark.parametrize(
    "role,sql,eps",
    [
        ("bronze", "SELECT store, COUNT(*) FROM purchases GROUP BY store", 0.1),  # a ladder's level
        ("other", "SELECT COUNT(*) FROM accounts WHERE branch = 1", 1.0),  # per-record: E_q = ε × E
    ],
    ids=["ladder", "per_record"],
)
def test_pure_only_kinds_are_charged_their_tier_epsilon(svc, role, sql, eps):
    ask(svc, sql, role)
    rel = svc.gw.ledger.releases(role, limit=1)[0]
    assert (rel["statement"], rel["unit"], rel["epsilon"], rel["delta"]) == (
        sql,
        "eps",
        pytest.approx(eps),
        0.0,
    )


def test_row_check_off_is_charged_the_whole_statement(svc):
    """``SET dpgate.row_check = off``: no count, the rank mechanism at the whole ε (or ρ)."""
    sql = "SELECT MIN(amount) FROM purchases WHERE store = 4"
    for role, expect in (("other", _pure_whole()), ("half", _zcdp_whole())):
        with psycopg.connect(svc.dsn(role), autocommit=True) as c:
            c.execute("SET dpgate.row_check = off")
            c.execute(sql).fetchall()
        rel = svc.gw.ledger.releases(role, limit=1)[0]
        amount, _, unit = expect()
        assert rel["statement"] == sql and rel["unit"] == unit
        assert rel["epsilon"] == pytest.approx(float(amount), abs=1e-9)
