"""GROUP BY a column without a public domain (issue 20): partition selection through the
wire, on DuckDB and Postgres. The demo's ``purchases.city`` has no declared domain (399
cities, most with a handful of customers); the table is protected per customer.

Checked: only cities the data has are released (never invented), each released city has
at least the scan floor of distinct customers, the big cities are all released, the
values are the bounded counts within their noise bound, the NOTICE states ε and δ, a
repeat is free (no ε, no δ), the δ budget is charged and refuses when spent (nothing
charged), a tier with delta = 0 is refused, and EXPLAIN shows the selection.
HAVING over such keys: the sparse vector technique runs over the keys partition selection
released — the passing keys are a subset of them (so never invented), the biggest cities
(bounded counts ~10× the threshold) pass, a threshold above every city's count releases
nothing (the SVT really filters), and the NOTICE/EXPLAIN state the split of ε."""
from __future__ import annotations

import math
from fractions import Fraction

import psycopg
import pytest

from mechanisms.partition_selection import TruncatedGeometricSelection
from proxy.pipeline.partitions import scan_floor
from support.service import Service, ask, backend_rows, make_config

TIERS = {"default": {"epsilon": 1.0, "budget": 50.0, "delta": 1e-6, "delta_budget": 3e-6},
         "nodelta": {"epsilon": 1.0, "budget": 50.0}}


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def svc(request, tmp_path_factory):
    if request.param == "postgres":
        backend = {"kind": "postgres", "dsn": request.getfixturevalue("postgres").dsn, "pool_size": 4}
    else:
        backend = {"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "demo.duckdb")}
    data = make_config(backend, tiers=TIERS)
    data["roles"]["other"]["tier"] = "nodelta"
    data["roles"]["half"]["tier"] = "default"            # its own ε and δ budget: the HAVING tests
    from mechanisms import SeededSource
    s = Service(data, tmp_path_factory.mktemp("state"), source=SeededSource(20)).start()
    yield s
    s.close()


def _run(svc, sql, role="analyst"):
    return ask(svc, sql, role)


_raw = backend_rows


def test_cities_are_selected_never_invented(svc):
    rows, notes = _run(svc, "SELECT city, COUNT(DISTINCT customer_id) AS people FROM purchases GROUP BY city")
    truth = dict(_raw(svc, "SELECT city, COUNT(DISTINCT customer_id) FROM purchases GROUP BY city"))
    floor_ = scan_floor(TruncatedGeometricSelection(1.0, 5e-7, k=1), Fraction(5e-7))   # city: per_unit, L0 = 1
    released = [r[0] for r in rows]
    assert released == sorted(released) and set(released) <= set(truth)          # never invented
    assert all(truth[c] >= floor_ for c in released)
    assert {c for c, n in truth.items() if n >= 100} <= set(released)              # π(n) = 1 well below 100 at ε = 1
    assert len(released) < len(truth)                                               # the long tail is not shown
    assert "partition selection" in notes[-1] and "δ charged 1e-06" in notes[-1]


def test_values_of_the_released_keys_are_noised_bounded_counts(svc):
    rows, notes = _run(svc, "SELECT city, COUNT(*) FROM purchases GROUP BY city")
    bounded = dict(_raw(svc, "SELECT city, SUM(LEAST(n, 10)) FROM (SELECT city, customer_id, COUNT(*) AS n "
                             "FROM purchases GROUP BY city, customer_id) t GROUP BY city"))
    k = 1 * 10                                             # L0 = 1 (city is per_unit) × R: measures at (ε/2)/k
    scale = k / 0.5
    for city, n in rows:                                   # |geometric| > t w.p. ≤ 2e^{-t/b}: 1e-9 per key
        assert abs(n - int(bounded[city])) <= scale * math.log(2e9)
    again, notes2 = _run(svc, "SELECT city, COUNT(*) FROM purchases GROUP BY city")
    assert again == rows and "ε charged 0" in notes2[-1]   # a repeat: no ε, no δ


def test_delta_budget_is_charged_and_refuses_when_spent(svc):
    # 3e-6 per day at 1e-6 each: the two statements above spent 2e-6; one more fits
    _run(svc, "SELECT city, SUM(amount) FROM purchases WHERE store = 1 GROUP BY city")
    with pytest.raises(psycopg.errors.ConfigurationLimitExceeded) as e:
        _run(svc, "SELECT city, SUM(amount) FROM purchases WHERE store = 2 GROUP BY city")
    assert "δ budget exceeded" in str(e.value)
    rows, notes = _run(svc, "SELECT store, COUNT(*) FROM purchases GROUP BY store")   # ε still fine
    assert len(rows) == 10


def test_a_tier_without_delta_is_refused(svc):
    with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
        _run(svc, "SELECT city, COUNT(*) FROM purchases GROUP BY city", role="other")
    assert "needs a δ" in str(e.value) and e.value.diag.message_hint


def test_explain_shows_the_selection(svc):
    rows, _ = _run(svc, "EXPLAIN SELECT city, COUNT(*) FROM purchases GROUP BY city")
    text = "\n".join(r[0] for r in rows)
    assert "truncated geometric" in text and "dropped in the scan" in text and "no public domain" in text


def test_having_over_selected_keys_is_svt_over_the_released_keys(svc):
    rows, notes = _run(svc, "SELECT city, COUNT(*) FROM purchases GROUP BY city HAVING COUNT(*) > 2000", role="half")
    truth = dict(_raw(svc, "SELECT city, COUNT(DISTINCT customer_id) FROM purchases GROUP BY city"))
    floor_ = scan_floor(TruncatedGeometricSelection(0.5, 5e-7, k=1), Fraction(5e-7))
    released = [r[0] for r in rows]
    assert released == sorted(released) and set(released) <= set(truth)           # never invented
    assert all(truth[c] >= floor_ for c in released)                                # passed the selection first
    assert {"c1", "c2"} <= set(released)          # ~19,000 and ~11,000 bounded purchases against 2000
    assert "partition selection" in notes[-1] and "sparse vector" in notes[-1] and "δ charged 1e-06" in notes[-1]
    assert "ε charged 1;" in notes[-1] and "SVT over the released keys" in notes[-1]


def test_having_above_every_count_releases_nothing(svc):
    rows, notes = _run(svc, "SELECT city, COUNT(*) FROM purchases GROUP BY city HAVING COUNT(*) > 10000000", role="half")
    assert rows == [] and "sparse vector: 0 of" in notes[-1]


def test_explain_having_states_the_split(svc):
    rows, _ = _run(svc, "EXPLAIN SELECT city, COUNT(*) FROM purchases GROUP BY city HAVING COUNT(*) > 2000", role="half")
    text = "\n".join(r[0] for r in rows)
    assert "truncated geometric" in text and "sparse vector" in text and "SVT over the released keys" in text
