import math
from fractions import Fraction

import pytest

from mechanisms import (
    GeometricCount,
    LaplaceSum,
    SeededSource,
    Sequential,
    SplitAverage,
    compose,
    parallel_epsilon,
    split,
)


@pytest.mark.parametrize("eps", [0.1, 0.3, 1.0, 2.5])
def test_split_average_privacy_map_is_sum_of_halves(eps):
    m = SplitAverage(eps, 0.0, 1.0)
    assert m.epsilon == eps
    assert m.sum_measurement.epsilon == m.count_measurement.epsilon == eps / 2
    assert m.privacy_map_exact(1) == Fraction(eps)
    assert m.privacy_map(3) == pytest.approx(3 * eps)


@pytest.mark.parametrize("integer,bounds", [(False, (-2.0, 5.0)), (True, (10, 20))])
def test_split_average_output_always_in_bounds(integer, bounds):
    lo, hi = bounds
    m = SplitAverage(0.2, lo, hi, integer)
    src = SeededSource(17)
    for true_sum, n in [(0, 0), (hi, 1), (lo * 3, 3), (hi * 1000, 1000), (lo, 1)]:
        for _ in range(500):
            r = m.release((true_sum, n), src)
            assert lo <= r.value <= hi
            assert 0 < r.half_width <= hi - lo
            assert r.epsilon == 0.2 and r.mechanism == "split_average"


def test_split_average_denominator_policy_for_nonpositive_noisy_count():
    m = SplitAverage(0.5, -1.0, 1.0)
    src = SeededSource(5)
    seen = 0
    for _ in range(2000):
        r = m.release((0.0, 0), src)
        rs, rc = r.parts
        if rc.value <= 0:  # n_hat = max(noisy count, 1) = 1
            seen += 1
            assert r.value == min(max(rs.value / 1, -1.0), 1.0)
        else:
            assert r.value == min(max(rs.value / rc.value, -1.0), 1.0)
    assert seen > 100  # P(noisy count <= 0 | n = 0) = P(Z <= 0) = 1/(1+p) > 1/2


def test_split_average_half_width_uses_released_values_only():
    m = SplitAverage(1.0, 0.0, 10.0)
    r1 = m.release((5000.0, 1000), SeededSource(8))
    r2 = m.release((5000.0 + 3.0, 1000), SeededSource(8))  # different truth, same seed
    for r in (r1, r2):
        rs, rc = r.parts
        assert r.half_width == m.half_width(0.95, n_hat=max(rc.value, 1), avg_hat=r.value)
    # delta method from released values: 1.96 sqrt(Var_S + avg^2 Var_N) / n_hat
    rs, rc = r1.parts
    var = m.sum_measurement.noise_variance + r1.value**2 * m.count_measurement.noise_variance
    assert r1.half_width == pytest.approx(1.959963985 * math.sqrt(var) / rc.value)
    assert m.half_width() == 10.0  # no released values: data-independent cap


def test_split_average_approximate_coverage_large_n():
    # Delta-method interval is approximate; at n = 1000 its coverage should be ~0.95.
    m, n, avg, draws = SplitAverage(1.0, 0.0, 1.0), 1000, 0.3, 4000
    src = SeededSource(123)
    cover = 0
    for _ in range(draws):
        r = m.release((avg * n, n), src)
        cover += abs(r.value - avg) <= r.half_width
    # 0.95 - 5 binomial SE (sqrt(.95 * .05 / 4000) ~= 0.0034) ~= 0.933
    assert cover / draws >= 0.95 - 5 * math.sqrt(0.95 * 0.05 / draws)


def test_compose_sums_and_releases_in_order():
    ms = [GeometricCount(0.1), LaplaceSum(0.2, 0, 5, integer=True), SplitAverage(0.3, 0.0, 1.0)]
    c = compose(ms)
    assert isinstance(c, Sequential)
    assert c.privacy_map_exact(1) == Fraction(0.1) + Fraction(0.2) + Fraction(0.3)
    assert c.epsilon == pytest.approx(0.6) and c.privacy_map(2) == pytest.approx(1.2)
    out = c.release([10, 20, (5.0, 10)], SeededSource(0))
    assert [r.mechanism for r in out] == [m.name for m in ms]
    with pytest.raises(ValueError):
        c.release([1, 2], SeededSource(0))


def test_parallel_epsilon_is_max():
    ms = [GeometricCount(0.1), GeometricCount(0.4), GeometricCount(0.2)]
    assert parallel_epsilon(ms) == 0.4 and parallel_epsilon(ms, 2) == 0.8
    assert parallel_epsilon([]) == 0.0


@pytest.mark.parametrize("eps,k", [(0.1, 3), (1.0, 7), (0.3, 10), (2.0, 1), (1e-3, 13)])
def test_split_never_exceeds_budget(eps, k):
    parts = split(eps, k)
    assert len(parts) == k and len(set(parts)) == 1
    assert sum(Fraction(p) for p in parts) <= Fraction(eps)
    assert parts[0] == pytest.approx(eps / k, rel=1e-15)
    assert compose(GeometricCount(p) for p in parts).privacy_map_exact(1) <= Fraction(eps)
    assert split(Fraction(1, 3), 2) == [Fraction(1, 6)] * 2
    with pytest.raises(ValueError):
        split(eps, 0)
