"""The signal-to-noise rules of mechanisms/snr.py: each from its mechanism's public error law,
checked against that law (half-widths; a rank mechanism's own useful group size)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from mechanisms import GeometricCount, LaplaceSum
from mechanisms.extreme import ExtremeGrid, ShiftedRankExtreme
from mechanisms.mean import make_mean
from mechanisms.quantile import ExpMechQuantile, RecursiveQuantiles
from mechanisms.snr import (
    MEAN_RANGE_FRACTION,
    epsilon_for,
    judge,
    mean_useful_from,
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
