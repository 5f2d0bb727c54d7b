"""Mechanism set-up is bounded -- AVG's count half-width in closed form (equal to
the exact convolution it replaces), every ε's set-up well under a second, tables computed
once for concurrent first requests (single flight) and at config load."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from config import parse_config
from mechanisms.mean import HourglassMean, make_mean
from mechanisms.mean import quantiles as Q
from mechanisms.once import SingleFlight


def _convolution_count_hw(m: HourglassMean, level: float) -> int:
    """The former exact computation: |K|'s quantile from the pmf of J convolved with DLap."""
    eps = m.noise.eps
    n = int(math.ceil(40 / eps)) + 2
    ks = np.arange(-n, n + 1)
    dl = math.tanh(eps / 2) * np.exp(-eps * np.abs(ks))
    pk = np.convolve(m.noise.step_pmf(ks), dl)
    return Q.integer_abs_quantile(np.arange(-2 * n, 2 * n + 1), pk, level), pk


@pytest.mark.parametrize("eps", [0.02, 0.05, 0.0731, 0.3, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("bounds", [(True, 0, 100), (False, -3.5, 1e4)])
def test_closed_form_equals_convolution(eps, bounds):
    m = HourglassMean(eps, bounds[1], bounds[2], bounds[0])
    for level in (0.5, 0.9, 0.95, 0.99):
        exact, pk = _convolution_count_hw(m, level)
        assert m.count_half_width(level) == exact
    n = (len(pk) - 1) // 2
    ks = np.arange(-n, n + 1)
    for h in (0, 1, 4, 17, 60):
        tail = float(pk[np.abs(ks) > h].sum())
        assert Q.hourglass_count_tail(h, m.noise.eps, m.noise.G, m.noise.grid) == pytest.approx(
            tail, rel=1e-9, abs=1e-13
        )


SETUP_EPS = (1e-6, 1e-4, 0.00137, 0.0499, 0.0501, 0.17, 2.9, 99.0)
SETUP_KINDS = ("hourglass", "laplace_transformed", "shifted_laplace")


def test_small_eps_setup():
    """The small-ε setup uses O(log) tail evaluations, not a convolution of 2 × 80k terms; the
    value keeps the 1/ε scaling of the exact law (4113 at ε 0.001). Every ε and kind sets up."""
    m = make_mean("hourglass", 0.001, 0, 100, integer=True).setup()
    assert m.count_half_width() == 4113
    for eps in SETUP_EPS:
        for kind in SETUP_KINDS:
            hw = make_mean(kind, eps, -2.5, 1234.5).setup().half_width(0.95, n_hat=1.0, avg_hat=-2.5)
            assert 0 < hw < math.inf, (kind, eps, hw)


@pytest.mark.perf
def test_small_eps_setup_under_a_second():
    """Speed goal: each setup, ε = 0.001 included, under a second."""
    t = time.perf_counter()
    make_mean("hourglass", 0.001, 0, 100, integer=True).setup()
    assert time.perf_counter() - t < 1.0
    for eps in SETUP_EPS:
        for kind in SETUP_KINDS:
            t = time.perf_counter()
            make_mean(kind, eps, -2.5, 1234.5).setup()
            assert time.perf_counter() - t < 1.0, (kind, eps)


def test_concurrent_first_requests_compute_once():
    """8 statements at a new ε ask for the tables at once: each table is computed once."""
    eps = 0.0617  # >= 0.05: the hourglass quantile table is computed
    before = (Q._hourglass_q.flight.computed, Q.hourglass_count_quantile.flight.computed)
    start = threading.Barrier(8)
    out, errors = [], []

    def statement():
        try:
            m = HourglassMean(eps, 0, 1000, True)  # a fresh instance per statement
            start.wait()
            out.append((m.half_width(0.95, n_hat=50, avg_hat=10.0), m.sum_half_width(), m.count_half_width()))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=statement) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and len(out) == 8 and len(set(out)) == 1
    assert Q._hourglass_q.flight.computed - before[0] == 2  # the AVG table and the SUM one
    assert Q.hourglass_count_quantile.flight.computed - before[1] == 1


def test_single_flight_waiters_share_one_result_and_errors_are_not_kept():
    sf, calls, gate = SingleFlight(maxsize=2), [], threading.Event()

    def slow():
        calls.append(1)
        gate.wait(5)
        return 42

    res = []
    ths = [threading.Thread(target=lambda: res.append(sf.get("k", slow))) for _ in range(8)]
    for th in ths:
        th.start()
    time.sleep(0.1)
    gate.set()
    for th in ths:
        th.join()
    assert res == [42] * 8 and len(calls) == 1 and sf.computed == 1

    def boom():
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        sf.get("e", boom)
    assert sf.get("e", lambda: 7) == 7  # the failure was not stored
    sf.get("a", lambda: 1), sf.get("b", lambda: 2)
    assert sf.get("k", lambda: 0) == 0  # least recently used key evicted


def test_service_start_precomputes_tier_tables():
    """proxy.pipeline.release.prepare_mechanisms (run by the Gateway at start) computes every tier's
    tables, so no statement computes them."""
    from proxy.pipeline.release import prepare_mechanisms

    data = {
        "server": {"auth": "trust"},
        "tiers": {"tiny": {"epsilon": 0.00123, "budget": 1}, "mid": {"epsilon": 0.0733, "budget": 1}},
        "roles": {"a": {"tier": "tiny"}},
        "tables": {"t": {"columns": {"x": {"type": "float", "lower": -7, "upper": 77}}}},
    }
    prepare_mechanisms(parse_config(data))
    before = (Q._hourglass_q.flight.computed, Q.hourglass_count_quantile.flight.computed)
    for eps in (0.00123, 0.0733):
        make_mean("hourglass", eps, -7.0, 77.0).setup()
    assert (Q._hourglass_q.flight.computed, Q.hourglass_count_quantile.flight.computed) == before


def test_release_path_shares_one_measurement_and_its_tables():
    """proxy.pipeline.release.measurement_for from 8 worker threads at a new ε: one measurement object,
    one computation of each table, and every AVG release gets the same half-widths."""
    from proxy.pipeline.release import _measurement, measurement_for
    from rewriter.plan import Aggregate

    agg = Aggregate("avg", "x", "int", 0.0, 500.0, (0, 1), "hourglass")
    eps = 0.0893
    before = (
        _measurement.flight.computed,
        Q._hourglass_q.flight.computed,
        Q.hourglass_count_quantile.flight.computed,
    )
    start, got = threading.Barrier(8), []

    def statement():
        start.wait()
        m = measurement_for(agg, eps)
        rel = m.apply((1234, 20), m.draw(None))
        got.append((id(m), rel.parts[1].half_width, rel.parts[0].half_width))

    threads = [threading.Thread(target=statement) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(got) == 8 and len(set(got)) == 1
    after = (
        _measurement.flight.computed,
        Q._hourglass_q.flight.computed,
        Q.hourglass_count_quantile.flight.computed,
    )
    assert [a - b for a, b in zip(after, before)] == [1, 2, 1]


def test_config_load_is_not_blocked_by_a_column_the_mechanism_rejects():
    data = {
        "server": {"auth": "trust"},
        "tiers": {"d": {"epsilon": 1, "budget": 1}},
        "roles": {"a": {"tier": "d"}},
        "tables": {
            "t": {
                "columns": {
                    "x": {"type": "float", "lower": -1e308, "upper": 1e308},
                    "y": {"type": "int", "lower": 0.5, "upper": 9.5},
                    "z": {"type": "int", "lower": 3, "upper": 3},
                }
            }
        },
    }
    assert parse_config(data).tables["t"].columns["x"].bounded
