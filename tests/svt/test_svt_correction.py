"""CorrectionTerm r_op (Eq. 8-9; SVT spec Sec. 2.3) and its numerical framework (Alg. 3/4)."""

import numpy as np
import pytest

from mechanisms.svt import SvtExp, gamma_cdf, log_success_probability, r_op, r_op_numerical


def _params(eps, monotone=False, c=50):
    m = SvtExp(eps, c, 1, monotone=monotone)
    return float(m.b), float(m.theta)


@pytest.mark.parametrize("k", [10, 200, 825])
def test_r_op_is_the_k_over_k_plus_1_quantile_and_the_argmax(k):
    b, th = _params(1.0)
    r = r_op(b, th, k)
    assert gamma_cdf(r, b, th) == pytest.approx(k / (k + 1), rel=1e-10)  # Thm. 8 argument
    # argmax of p(r) (Eq. 8): a dense grid never does better
    grid = np.linspace(r - 300, r + 300, 60001)
    lp = log_success_probability(grid, b, th, k)
    assert lp.max() <= log_success_probability(r, b, th, k) + 1e-12
    assert abs(grid[lp.argmax()] - r) < 0.02
    # and it beats the mean correction theta and no correction (Sec. 4.3.1)
    assert log_success_probability(r, b, th, k) > log_success_probability(th, b, th, k)
    assert log_success_probability(r, b, th, k) > log_success_probability(0.0, b, th, k)


@pytest.mark.parametrize("monotone", [False, True])
@pytest.mark.parametrize("k", [18, 200])
def test_scale_invariance(monotone, k):
    # alpha = 0: r_op(eps) = r_op(1)/eps (SVT spec Sec. 2.3), through SvtExp's own split
    r1 = r_op(*_params(1.0, monotone), k)
    for eps in (0.01, 0.1, 0.5, 2.0):
        assert r_op(*_params(eps, monotone), k) == pytest.approx(r1 / eps, rel=1e-8)
    # with alpha > 0 the invariance needs alpha scaled too
    r_a = r_op(*_params(1.0, monotone), k, 10.0)
    assert r_op(*_params(0.25, monotone), k, 40.0) == pytest.approx(4 * r_a, rel=1e-6)


def test_reference_values():
    # SVT spec Sec. 2.3 reference table (c = 50, eps = 1, alpha = 0)
    ref = {
        False: {10: 256.95, 18: 314.80, 33: 376.40, 200: 564.49, 825: 714.08},
        True: {10: 133.62, 18: 163.49, 33: 195.28, 200: 292.38, 825: 369.60},
    }
    for mono, row in ref.items():
        b, th = _params(1.0, mono)
        for k, v in row.items():
            assert r_op(b, th, k) == pytest.approx(v, abs=0.006)
    # alpha > 0 (non-monotone, k = 200)
    b, th = _params(1.0)
    for a, v in {10: 554.49, 50: 514.49, 100: 464.49, 500: 449.41}.items():
        assert r_op(b, th, 200, float(a)) == pytest.approx(v, abs=0.006)


def test_table5_mean_row_and_optimal_row():
    # SVT spec Sec. 5.4: Table 5's Mean row is theta = c/eps2 under the (2c)^{2/3} split (monotone
    # scale); the Optimal row is indicative only (+-25 %), k = 200 under the same convention.
    for eps, mean, opt in [
        (0.05, 1046.42, 7147.15),
        (0.1, 523.21, 2803.30),
        (1, 52.32, 280.78),
        (2, 26.16, 138.89),
    ]:
        m = SvtExp(eps, 50, 1, monotone=True, w=(2 * 50) ** (2 / 3))
        assert float(m.theta) == pytest.approx(mean, abs=0.01)
        assert r_op(float(m.b), float(m.theta), 200) == pytest.approx(opt, rel=0.25)


@pytest.mark.parametrize("alpha", [0.0, 100.0])
@pytest.mark.parametrize("eps", [0.03, 1.0])
def test_numerical_framework_matches_closed_form(alpha, eps):
    b, th = _params(eps)
    for k in (10, 200):
        u = max(th * np.log(1e12), b * np.log(0.5e12)) / 20000  # bucket width of Alg. 4
        got = r_op_numerical(b, th, k, alpha)
        assert abs(got - r_op(b, th, k, alpha)) <= 2 * u
    # it really depends on its inputs (a wrong theta gives a different answer)
    assert abs(r_op_numerical(b, 2 * th, 10) - r_op(b, th, 10)) > 100 * u


def test_cached():
    r_op.cache_clear()
    b, th = _params(0.7)
    r_op(b, th, 123)
    r_op(b, th, 123)
    assert r_op.cache_info().hits == 1


def test_bad_inputs():
    with pytest.raises(ValueError):
        r_op(1.0, 1.0, 0)
    with pytest.raises(ValueError):
        r_op(1.0, 1.0, 5, -1.0)
    with pytest.raises(ValueError):
        r_op(-1.0, 1.0, 5)
