"""Property: no mechanism charges a record more than its budget -- every level's noise
(1/scale per unit of sensitivity) is <= E(r) for every record r that can fall in the level
(spec 3.2, 4, 5, 7; paper Lemma 3.11).  Random privacy functions via hypothesis."""

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mechanisms.per_record import (
    ExtensionSum,
    FrameworkMax,
    FrameworkSum,
    Levels,
    PrDPCount,
    PrLDPCount,
    PrLDPFramework,
    inverse_function,
    log_function,
    sqrt_function,
)

MAKERS = {"inverse": inverse_function, "sqrt": sqrt_function, "log": log_function}


@st.composite
def privacy_functions(draw):
    kind = draw(st.sampled_from(sorted(MAKERS)))
    U = draw(st.integers(10, 10**15))
    alpha = 10 ** draw(st.floats(-2, 4))
    eps_max = 10 ** draw(st.floats(-1, 2.5))
    kw = {"base": draw(st.sampled_from([math.e, 2.0, 10.0]))} if kind == "log" else {}
    pf = MAKERS[kind](alpha, U, eps_max, **kw)
    if draw(st.booleans()):
        pf = pf.scaled(draw(st.floats(0.01, 1.0)))
    return pf


def _values(pf, ext, draw_vals):
    """Random integers plus every level-boundary integer V_i, V_i + 1 (where E crosses lo_i)."""
    extra = [v + d for v in ext.V for d in (-1, 0, 1)] + [0, pf.U, pf.U + 1, 3 * pf.U]
    return np.array(sorted(set(int(v) for v in list(draw_vals) + extra if abs(v) < 2**53)), dtype=float)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(pf=privacy_functions(), data=st.data())
def test_every_record_charged_at_most_its_budget(pf, data):
    lv = Levels.for_function(pf)
    ext = ExtensionSum(pf, levels=lv)
    v = _values(pf, ext, data.draw(st.lists(st.integers(-pf.U, 2 * pf.U), max_size=30)))
    e = pf(v)
    slack = 1 + 1e-12  # float division in record_epsilon; the exact maps are Fractions
    for name, got in [
        ("count", PrDPCount(lv).record_epsilon(e)),
        ("extension", ext.record_epsilon(v)),
        ("framework_sum", FrameworkSum(lv, pf.U).record_epsilon(e)),
        ("framework_max", FrameworkMax(lv, pf.U).record_epsilon(e)),
        ("prldp", PrLDPCount(lv).record_epsilon(e)),
        ("prldp_framework", PrLDPFramework(lv).record_epsilon(e)),
    ]:
        assert np.all(got <= e * slack), (name, v[got > e * slack], got[got > e * slack], e[got > e * slack])
    # the count's per-level loss is exactly lo_i, i.e. the budget is used up to a factor 2
    assert np.all(PrDPCount(lv).record_epsilon(e) * 2 * slack >= e)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(lo_exp=st.floats(-30, 0), ratio_exp=st.floats(0, 40), u=st.floats(0, 1))
def test_level_rounds_toward_lower_budget(lo_exp, ratio_exp, u):
    eps_min = 10**lo_exp
    eps_max = eps_min * 2**ratio_exp
    lv = Levels(eps_min, eps_max)
    e = np.array(
        [eps_min + u * (eps_max - eps_min)]
        + [x for h in lv.hi for x in (h, np.nextafter(h, 0), np.nextafter(h, np.inf))]
    )
    e = np.clip(e, eps_min, eps_max)
    lvl = lv.level(e)
    assert np.all(lv.lo[lvl - 1] <= e) and np.all(e <= lv.hi[lvl - 1])
    assert np.all(lv.lo[lvl - 1] * 2 >= e)  # at most a factor 2 of protection given away


def test_the_check_rejects_upward_rounding():
    """FLOOR(LOG2(e/eps_min)) + 1 (the tempting SQL) puts some just-below-boundary
    budgets one level too high: lo > e.  The property above would catch it."""
    lv = Levels(1e-8, 100.0)
    e = np.array([np.nextafter(h, 0) for h in lv.hi[:-1]])
    naive = np.minimum(np.floor(np.log2(e / lv.eps_min)).astype(int) + 1, lv.L)
    assert np.any(lv.lo[naive - 1] > e)
    assert np.all(lv.lo[lv.level(e) - 1] <= e)


def test_extension_scale_uses_the_domain_max_not_the_data():
    """b_i = V_i / lo_i with V_i = E^{-1}(lo_i) over the whole domain (spec 11.6);
    inverse E: b_i = alpha / lo_i^2 (App. A)."""
    pf = inverse_function(1e4, 10**12, 100.0)
    ext = ExtensionSum(pf)
    lo = ext.levels.lo
    b = np.array(ext.b)
    V = np.array(ext.V[1:], dtype=float)
    # V_i = floor(alpha/lo_i) up to the 1e-12 safety margin of max_value (integers)
    assert np.all(V > 1e4 / lo[1:] - 1) and np.all(V <= 1e4 / lo[1:] * (1 + 1e-12))
    np.testing.assert_allclose(b[1:], V / lo[1:], rtol=1e-15)
    assert b[0] == pf.U / pf.eps_min
    # a record with value V_i + 1 is in a lower level: E(V_i + 1) < lo_i
    assert np.all(pf(V + 1) < lo[1:]) and np.all(pf(V) >= lo[1:] * (1 - 1e-12))
