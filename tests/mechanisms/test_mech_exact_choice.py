"""The exact exponential-mechanism choice behind the shifted-rank MAX / MIN
(mechanisms/exact_choice.py): weights far below float64's 1e-16 are drawn with their exact
probability (the float log-sum-exp CDF never drew them: (ε, ~1e-16)-DP)."""

from __future__ import annotations

import decimal
import math
import time
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2

import mechanisms.exact_choice as ec
from mechanisms import SeededSource
from mechanisms.exact_choice import exp_weighted_index
from mechanisms.extreme import ExtremeGrid, ShiftedRankExtreme
from mechanisms.rng import RandomSource


class ScriptedSource(RandomSource):
    """Uniform bits chosen by the test: U = 0.<bits> read 128 bits at a time."""

    def __init__(self, u: int, nbits: int) -> None:
        self.u, self.left = u, nbits

    def getrandbits(self, k: int) -> int:
        self.left -= k
        return (self.u >> self.left) & ((1 << k) - 1) if self.left >= 0 else 0

    def randbelow(self, n: int) -> int:
        return 0


def _boundary(w0: Fraction, tiny_exp: int, nbits: int) -> int:
    """floor(2^nbits · w0 / (w0 + e^-tiny_exp)) in 120-digit arithmetic."""
    ctx = decimal.Context(prec=120)
    d0 = decimal.Decimal(w0.numerator) / decimal.Decimal(w0.denominator)
    b = ctx.divide(d0, ctx.add(d0, ctx.exp(decimal.Decimal(-tiny_exp))))
    return int(ctx.multiply(b, decimal.Decimal(1 << nbits)).to_integral_value(decimal.ROUND_FLOOR))


def test_tiny_weight_has_its_exact_cdf_interval():
    """Weights (1, e^-60): outcome 1 has probability e^-60/(1 + e^-60) ≈ 8.8e-27. With U fixed
    by the bits, the draw is 1 exactly when U lies above the boundary 1/(1 + e^-60): checked
    2^-254 either side of it (the float CDF answered 0 for every U)."""
    B = _boundary(Fraction(1), 60, 256)
    for u, want in ((B - 2, 0), (B + 2, 1), ((1 << 256) - 1, 1), (0, 0)):
        assert exp_weighted_index([1, 1], [0, 60], Fraction(1), ScriptedSource(u, 256)) == want
    # beyond the e^-130 cut (the tail block is expanded when U reaches it): weight e^-300
    assert exp_weighted_index([1, 1], [0, 300], Fraction(1), ScriptedSource((1 << 768) - 1, 768)) == 1
    assert exp_weighted_index([1, 1], [0, 300], Fraction(1), ScriptedSource(1 << 767, 768)) == 0


def test_tiny_grid_interval_is_reachable_in_shifted_rank_max():
    """MAX on an 11-point grid, 60 rows at 5, ε = 2: the interval [0, 4] has score
    |60 − k0| = 54 against 6 for [5, 10], relative weight (5/6)e^-48 ≈ 1.2e-21. A uniform
    at the top of [0, 1) must land in it."""
    grid = ExtremeGrid(0.0, 10.0, 1.0, 10, True)
    m = ShiftedRankExtreme(2.0, grid, "max", 0.05)
    assert m.k0 == 6
    assert m.release([(5, 60)], ScriptedSource((1 << 512) - 1, 512)) == 0  # y in [0, 4]: its start
    assert m.release([(5, 60)], ScriptedSource(0, 512)) == 5


@pytest.mark.parametrize("force_decimal", [False, True])
def test_law_by_chi_square(force_decimal, monkeypatch):
    """Both passes draw from the exact law (the Decimal one forced by disabling the float pass)."""
    if force_decimal:
        monkeypatch.setattr(ec, "_float_pass", lambda *a: None)
    counts, powers, g = [3, 1, 5, 2, 7], [4, 6, 5, 9, 4], Fraction(1, 2)
    w = np.array([c * math.exp(-0.5 * p) for c, p in zip(counts, powers)])
    p = w / w.sum()
    src, n = SeededSource(77 + force_decimal), 4000 if force_decimal else 20_000
    got = np.bincount([exp_weighted_index(counts, powers, g, src) for _ in range(n)], minlength=len(p))
    stat = ((got - n * p) ** 2 / (n * p)).sum()
    assert stat < chi2.ppf(0.9999, len(p) - 1)


def test_inputs():
    with pytest.raises(ValueError):
        exp_weighted_index([1, 0], [0, 1], Fraction(1), SeededSource(1))
    with pytest.raises(ValueError):
        exp_weighted_index([1, 1], [0, -1], Fraction(1), SeededSource(1))
    assert exp_weighted_index([5], [3], Fraction(1), SeededSource(1)) == 0


def _large_choices():
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 100, 200_000)
    powers = np.abs(np.arange(200_000) - 100_000)
    for g in (Fraction(1, 2000), Fraction(1, 2), Fraction(20)):
        i = exp_weighted_index(counts, powers, g, SeededSource(2))
        assert abs(i - 100_000) <= 200_000 * (g < 1)


def test_a_large_choice():
    """200,000 weights: at γ = 20 the choice is the peak (its neighbours weigh ≤ e^-20 as much)."""
    _large_choices()


@pytest.mark.perf
def test_a_large_choice_is_fast():
    """Speed goal: three choices over 200,000 weights in under 2 s."""
    t = time.perf_counter()
    _large_choices()
    assert time.perf_counter() - t < 2.0


def test_float_pass_agrees_with_decimal_pass_near_boundaries():
    """The float pass decides only what the exact CDF decides: for uniforms placed at each
    cumulative boundary and ±1e-15 around it, its answer (when it gives one) equals the
    Decimal pass's at 120 digits with 128 further bits."""
    rng = np.random.default_rng(5)
    checked = 0
    for trial in range(30):
        n = int(rng.integers(2, 40))
        counts = rng.integers(1, 1000, n)
        powers = rng.integers(0, 400, n)
        g = Fraction(int(rng.integers(1, 2000)), 1000)
        r = powers - powers.min()
        order = np.argsort(r, kind="stable")
        w = counts[order] * np.exp(-float(g) * r[order])
        cdf = np.cumsum(w) / w.sum()
        for q in cdf[:-1]:
            for x in (q - 1e-15, q, q + 1e-15, q - 1e-9, q + 1e-9):
                if not 0 <= x < 1:
                    continue
                u = int(x * 2.0**53) << 75
                rs, cs = r[order], counts[order]
                j = ec._float_pass(rs, cs, 0, g, u, 128)
                if j is None:
                    continue
                low = int(rng.integers(0, 2**62)) << 66
                assert ec._decimal_pass(rs, cs, len(rs), g, 120, (u << 128) | low, 256) == j
                checked += 1
    assert checked > 300
