"""The accountant: composition, group privacy, conversions and fits-the-budget, against the
formulas they cite."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from mechanisms.accounting import (
    Cost,
    compose,
    fits,
    from_ledger,
    gaussian_rho,
    gaussian_sigma2,
    ledger_units,
    pure_epsilon,
    shares,
    unit_epsilon,
    zcdp_delta,
    zcdp_epsilon,
)


def test_pure_composition_adds_epsilon_and_delta():
    c = compose([Cost.pure(0.25), Cost.pure(0.5, 1e-9), Cost.pure(Fraction(1, 4))])
    assert c.accounting == "pure"
    assert c.amount == Fraction(0.25) + Fraction(0.5) + Fraction(1, 4)
    assert c.delta == Fraction(1e-9)


def test_zcdp_composition_adds_rho_and_a_pure_part_enters_as_eps_squared_over_two():
    # Bun & Steinke 2016 Prop 1.4: ε-DP is ε²/2-zCDP; Lemma 1.7: ρ adds
    c = Cost.zcdp(Fraction(1, 10)) + Cost.pure(Fraction(1, 2))
    assert c == Cost.zcdp(Fraction(1, 10) + Fraction(1, 8))
    with pytest.raises(ValueError):
        Cost.zcdp(1).in_accounting("pure")


def test_group_privacy():
    assert Cost.pure(Fraction(1, 3)).group(6) == Cost.pure(2)
    assert Cost.zcdp(Fraction(1, 100)).group(10) == Cost.zcdp(1)  # k²ρ (Prop 1.9)
    g = Cost.pure(Fraction(1, 2), Fraction(1, 10**9)).group(3)
    assert g.amount == Fraction(3, 2)
    assert g.delta >= 3 * Fraction(math.exp(1.0)) * Fraction(1, 10**9)  # k e^{(k−1)ε} δ
    with pytest.raises(ValueError):
        Cost.zcdp(1, 1e-9).group(2)


@pytest.mark.parametrize("rho", [1e-4, 0.005, 0.05, 0.5, 2.0, 20.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-6, 1e-3])
def test_conversion_meets_delta_and_beats_bun_steinke(rho, delta):
    eps = zcdp_epsilon(rho, delta)
    assert zcdp_delta(rho, eps) <= delta * (1 + 1e-9)
    # a little below ε the bound no longer holds: the search returned the least ε
    assert zcdp_delta(rho, eps * (1 - 1e-6)) > delta
    assert eps <= rho + 2 * math.sqrt(rho * math.log(1 / delta))  # Prop 1.3 bounds it


def test_conversion_against_a_direct_grid_over_alpha():
    rho, eps = 0.5, 5.0
    grid = min(
        math.exp((a - 1) * (a * rho - eps)) / (a - 1) * (1 - 1 / a) ** a
        for a in (1 + i / 1000 for i in range(1, 20000))
    )
    assert zcdp_delta(rho, eps) == pytest.approx(grid, rel=1e-4)
    assert zcdp_delta(rho, eps) <= grid * (1 + 1e-12)


def test_to_dp_reading():
    assert Cost.pure(0.5, 1e-8).to_dp() == (0.5, 1e-8)
    e, d = Cost.zcdp(0.05, 1e-9).to_dp(1e-6)
    assert e == zcdp_epsilon(0.05, 1e-6) and d == pytest.approx(1e-6 + 1e-9)


def test_pure_epsilon_is_the_largest_float_within_rho():
    for rho in (Fraction(1, 2), Fraction(1, 200), 0.0137, 3.3):
        e = pure_epsilon(rho)
        assert Fraction(e) ** 2 / 2 <= Fraction(rho)
        assert Fraction(math.nextafter(e, math.inf)) ** 2 / 2 > Fraction(rho)


def test_unit_epsilon_never_exceeds_the_share():
    for eps, k in ((1.0, 3), (0.1, 7), (2.0, 100), (0.3, 1)):
        e = unit_epsilon(eps, k)
        assert Fraction(e) * k <= Fraction(eps)
        assert Fraction(math.nextafter(e, math.inf)) * k > Fraction(eps) or e == eps / k


def test_gaussian_privacy_map_round_trips():
    s2 = gaussian_sigma2(Fraction(1, 20), 10 * 3**2)  # Δ₂ = √10·3
    assert s2 == Fraction(90 * 20, 2)
    assert gaussian_rho(s2, 90) == Fraction(1, 20)


def test_shares_compose_to_the_total():
    for total in (Cost.pure(Fraction(1, 3)), Cost.zcdp(Fraction(1, 7), Fraction(1, 10**6))):
        assert compose(shares(total, 7)) == total


def test_fits_at_the_ledger_resolution():
    budget = Cost.zcdp(1)
    assert fits(Cost.zcdp(Fraction(9, 10)), Cost.zcdp(Fraction(1, 10)), budget)
    assert not fits(Cost.zcdp(Fraction(9, 10)), Cost.zcdp(Fraction(1, 10) + Fraction(1, 10**9)), budget)
    # a pure spend on a zCDP budget counts as ε²/2
    assert fits(Cost.pure(1), Cost.zcdp(Fraction(1, 2)), budget)
    assert not fits(Cost.pure(1), Cost.zcdp(Fraction(1, 2) + Fraction(1, 10**9)), budget)
    # δ is checked only when the cost has one
    b = Cost.pure(1, 1e-6)
    assert fits(Cost.pure(0, 1e-6), Cost.pure(0.5), b)
    assert not fits(Cost.pure(0, 1e-6), Cost.pure(0.5, 1e-9), b)


def test_ledger_units_round_trip():
    c = Cost.zcdp(Fraction(123456789, 10**9), Fraction(7, 10**15))
    assert ledger_units(c) == (123456789, 7)
    assert from_ledger("zcdp", *ledger_units(c)) == c
