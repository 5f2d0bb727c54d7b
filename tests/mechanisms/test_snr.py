"""The signal-to-noise rules of mechanisms/snr.py: each from its mechanism's public error law,
checked against that law (half-widths; a rank mechanism's own useful group size)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from mechanisms import GeometricCount, LaplaceSum
from mechanisms.discrete_gaussian import GaussianCount, GaussianSum
from mechanisms.extreme import ExtremeGrid, ShiftedRankExtreme
from mechanisms.gaussian_stats import GaussianMean
from mechanisms.mean import make_mean
from mechanisms.per_record import ExtensionSum, FrameworkMax, FrameworkSum, PrDPCount, inverse_function
from mechanisms.quantile import ExpMechQuantile, RecursiveQuantiles
from mechanisms.snr import (
    MEAN_RANGE_FRACTION,
    epsilon_for,
    judge,
    mean_useful_from,
    rank_share_rule,
)


def test_additive_rule_counts_the_groups_whose_interval_holds_zero():
    m = GeometricCount(0.5)
    h = m.half_width()
    values = [h, -h, h + 1, 0, 10 * h]
    sig = judge(m, values, h, epsilon_scale=2.0)
    assert (sig.noisy, sig.groups) == (3, 5) and sig.useful_rows == h + 1
    # the stated ε (per query, 2× the mechanism's) is where the largest noisy |value| clears h
    e = sig.useful_epsilon / 2.0
    assert GeometricCount(e).half_width() < h <= GeometricCount(e / 1.002).half_width()
    assert not judge(m, [h + 1, -h - 1], h).noise


def test_epsilon_for_is_the_least_epsilon_below_the_target():
    m = LaplaceSum(0.1, 0, 500, integer=True)
    target = m.half_width() / 7.3
    e = epsilon_for(m, target, 0.1)
    assert LaplaceSum(e, 0, 500, integer=True).half_width() < target
    assert LaplaceSum(e / 1.002, 0, 500, integer=True).half_width() >= target
    assert epsilon_for(m, 0.0, 0.1) is None and epsilon_for(m, 2 * m.half_width(), 0.1) == 0.1


@pytest.mark.parametrize("kind", ["hourglass", "laplace_transformed", "shifted_laplace"])
def test_mean_useful_from_is_where_the_worst_half_width_falls_below_a_quarter(kind):
    m = make_mean(kind, 0.25, 0, 500, integer=True)
    n = mean_useful_from(m)
    target = 500 / MEAN_RANGE_FRACTION

    def worst(k):
        return max(m.half_width(0.95, n_hat=k, avg_hat=a) for a in (0.0, 500.0))

    assert worst(n) < target <= worst(n - 1)
    sig = judge(m, [1.0, 2.0], worst(n - 1))
    assert sig.noise and sig.useful_rows == n and "noisiest group" in sig.reason()
    assert not judge(m, [1.0], worst(n)).noise


def test_a_mechanism_with_its_own_law_is_judged_by_it():
    """MAX/MIN and a lone percentile: the group size from which the mechanism's own expected
    relative rank error is ≤ 10% (``useful_from``), against the groups' released counts."""
    grid = ExtremeGrid.for_column("int", 0, 100)
    q = Fraction(9, 10)
    tree = RecursiveQuantiles(1.0, grid, (Fraction(1, 2), q))
    for m, need in (
        (ExpMechQuantile(1.0, grid, q), ExpMechQuantile(1.0, grid, q).useful_from()),
        (ShiftedRankExtreme(1.0, grid, "max"), ShiftedRankExtreme(1.0, grid, "max").useful_from()),
        (tree, tree.useful_from(q)),
    ):
        sig = judge(m, [30, 31], 0.0, n_hats=[need - 1, need], q=q)
        assert (sig.noisy, sig.groups, sig.useful_rows) == (1, 2, need)
        assert sig.useful_epsilon == pytest.approx(1.0 * need / (need - 1))
        assert not judge(m, [30], 0.0, n_hats=[need], q=q).noise


def test_a_zcdp_count_is_judged_by_the_discrete_gaussian_in_rho():
    """The discrete Gaussian COUNT (Canonne, Kamath & Steinke 2020): useful from h + 1 rows, and
    at a group's size from the least ρ at which h falls below it, stated as ρ per query."""
    m = GaussianCount(0.05, contributions_sq=18)
    h = m.half_width()
    sig = judge(m, [h / 3, 10 * h], h, epsilon_scale=2.0)
    assert (sig.noisy, sig.groups, sig.useful_rows) == (1, 2, int(h) + 1)
    r = sig.useful_epsilon / 2.0  # per release
    assert GaussianCount(r, 18).half_width() < h / 3 <= GaussianCount(r / 1.002, 18).half_width()
    assert "at ρ ≥" in sig.useful() and "ε" not in sig.useful()
    s = GaussianSum(0.05, 0, 500, integer=True, contributions_sq=18)
    assert judge(s, [1.0], s.half_width()).noise and judge(s, (), 0.0).useful_rows is None


def test_a_zcdp_avg_is_useful_where_the_ratios_bound_falls_below_a_quarter():
    """The zCDP AVG is a Gaussian SUM over a Gaussian COUNT; its bound's half-width (worst over
    the bounds) falls with n: the smallest useful group is where it drops below (upper − lower)/4."""
    m = GaussianMean(0.025, 0, 500, integer=True, contributions_sq=18)
    n = mean_useful_from(m)
    target = 500 / MEAN_RANGE_FRACTION
    assert m.half_width(0.95, n_hat=n) < target <= m.half_width(0.95, n_hat=n - 1)
    assert judge(m, (), 0.0).useful_rows == n


def _levels():
    from mechanisms.per_record import Levels

    return Levels(1e-3, 1.0)


def test_a_per_record_count_is_judged_per_group_at_its_levels_noise():
    """Per-record COUNT (Chen et al. 2025 Alg. 1): each group against the noise of the levels
    it kept (its own bound at 1 − β); useful from the largest noisy group's bound + 1 rows."""
    m = PrDPCount(_levels(), beta=0.01)
    sig = judge(m, [3, 20, 500], [14.0, 29.0, 449.0])
    assert (sig.noisy, sig.groups, sig.useful_rows) == (2, 3, 30) and "99% half-width" in sig.reason()
    assert not judge(m, [15, 30], [14.0, 29.0]).noise
    assert (
        judge(ExtensionSum(inverse_function(1000.0), 0.01, levels=_levels()), [5], [6.0]).useful_rows is None
    )
    framework = judge(FrameworkSum(_levels(), 1000, beta=0.05), [-3.0, 80.0], [40.0, 40.0])
    assert (framework.noisy, framework.useful_rows) == (1, None) and "95% half-width" in framework.reason()


def test_a_per_record_max_is_judged_against_the_groups_released_count():
    """Per-record MAX: mostly noise when its rank margin (rows beyond the answer at 1 − β) is at
    least the group's released row count; no count released, no judgement."""
    m = FrameworkMax(_levels(), 1000, beta=0.01)
    sig = judge(m, [7, 9], [796.0, 796.0], n_hats=[11, 5000])
    assert (sig.noisy, sig.groups, sig.useful_rows) == (1, 2, 797)
    assert judge(m, [7], [796.0]) is None


def test_rank_share_rule_holds_the_groups_ends():
    """A percentile whose 95% rank error (a share of the group) reaches max(q, 1 − q): its rank
    interval holds the group's first or last row."""
    sig = rank_share_rule([0.89, 0.9, 0.2], 0.1)
    assert (sig.noisy, sig.groups) == (1, 3)
    assert rank_share_rule([0.49], 0.5).noisy == 0 and rank_share_rule([0.5], 0.5).noisy == 1
