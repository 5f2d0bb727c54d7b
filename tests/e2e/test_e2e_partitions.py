"""GROUP BY a column without a public domain: partition selection through the
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
nothing (the SVT really filters), and the NOTICE/EXPLAIN state the split of ε.
MAX / MIN / median over such keys (one histogram scan carrying each key's distinct units):
the released keys pass the same selection (never invented, at least the floor, every key with
π(n) = 1 released), each value satisfies its rank guarantee against the bounded rows (the
exponential mechanism's utility theorem at β = 1e-9 per key), the NOTICE states ε and δ and
the split, the δ account is charged once, a repeat is free, a tier with δ = 0 and a ladder
tier are refused, EXPLAIN states the split."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from fractions import Fraction

import psycopg
import pytest

from mechanisms.partition_selection import TruncatedGeometricSelection
from proxy.pipeline.partitions import scan_floor
from support.service import Service, ask, backend_rows, make_config

TIERS = {
    "default": {"epsilon": 1.0, "budget": 50.0, "delta": 1e-6, "delta_budget": 3e-6},
    "nodelta": {"epsilon": 1.0, "budget": 50.0},
    "maxes": {"epsilon": 1.0, "budget": 50.0, "delta": 1e-6, "delta_budget": 1e-5},
}


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def svc(request, tmp_path_factory):
    if request.param == "postgres":
        backend = {"kind": "postgres", "dsn": request.getfixturevalue("postgres").dsn, "pool_size": 4}
    else:
        backend = {"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "demo.duckdb")}
    data = make_config(backend, tiers=TIERS)
    data["roles"]["other"]["tier"] = "nodelta"
    data["roles"]["half"]["tier"] = "default"  # its own ε and δ budget: the HAVING tests
    data["roles"]["tiny"]["tier"] = "maxes"  # its own: MAX/MIN/median over selected keys
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
    floor_ = scan_floor(TruncatedGeometricSelection(1.0, 5e-7, k=1), Fraction(5e-7))  # city: per_unit, L0 = 1
    released = [r[0] for r in rows]
    assert released == sorted(released) and set(released) <= set(truth)  # never invented
    assert all(truth[c] >= floor_ for c in released)
    assert {c for c, n in truth.items() if n >= 100} <= set(released)  # π(n) = 1 well below 100 at ε = 1
    assert len(released) < len(truth)  # the long tail is not shown
    assert "partition selection" in notes[-1] and "δ charged 1e-06" in notes[-1]


def test_values_of_the_released_keys_are_noised_bounded_counts(svc):
    rows, notes = _run(svc, "SELECT city, COUNT(*) FROM purchases GROUP BY city")
    bounded = dict(
        _raw(
            svc,
            "SELECT city, SUM(LEAST(n, 10)) FROM (SELECT city, customer_id, COUNT(*) AS n "
            "FROM purchases GROUP BY city, customer_id) t GROUP BY city",
        )
    )
    k = 1 * 10  # L0 = 1 (city is per_unit) × R: measures at (ε/2)/k
    scale = k / 0.5
    for city, n in rows:  # |geometric| > t w.p. ≤ 2e^{-t/b}: 1e-9 per key
        assert abs(n - int(bounded[city])) <= scale * math.log(2e9)
    again, notes2 = _run(svc, "SELECT city, COUNT(*) FROM purchases GROUP BY city")
    assert again == rows and "ε charged 0" in notes2[-1]  # a repeat: no ε, no δ


def test_delta_budget_is_charged_and_refuses_when_spent(svc):
    # 3e-6 per day at 1e-6 each: the two statements above spent 2e-6; one more fits
    _run(svc, "SELECT city, SUM(amount) FROM purchases WHERE store = 1 GROUP BY city")
    with pytest.raises(psycopg.errors.ConfigurationLimitExceeded) as e:
        _run(svc, "SELECT city, SUM(amount) FROM purchases WHERE store = 2 GROUP BY city")
    assert "δ budget exceeded" in str(e.value)
    rows, notes = _run(svc, "SELECT store, COUNT(*) FROM purchases GROUP BY store")  # ε still fine
    assert len(rows) == 10
    # dpgate.budget shows δ as the charge path counts it, in columns of its own
    ((spent, left, budget, eps),) = _run(
        svc, "SELECT delta_spent, delta_remaining, delta_budget, spent FROM dpgate.budget"
    )[0]
    assert (spent, left, budget) == (pytest.approx(3e-6), pytest.approx(0.0), 3e-6)
    assert spent == pytest.approx(svc.gw.ledger.spent_delta("analyst", "day")) and eps == 4.0
    assert svc.gw.ledger.unreleased("analyst") == []  # every selection was answered


def test_a_tier_without_delta_is_refused(svc):
    with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
        _run(svc, "SELECT city, COUNT(*) FROM purchases GROUP BY city", role="other")
    assert "needs a δ" in str(e.value) and e.value.diag.message_hint


def test_explain_shows_the_selection(svc):
    rows, _ = _run(svc, "EXPLAIN SELECT city, COUNT(*) FROM purchases GROUP BY city")
    text = "\n".join(r[0] for r in rows)
    assert "truncated geometric" in text and "dropped in the scan" in text and "no public domain" in text


def test_having_over_selected_keys_is_svt_over_the_released_keys(svc):
    rows, notes = _run(
        svc, "SELECT city, COUNT(*) FROM purchases GROUP BY city HAVING COUNT(*) > 2000", role="half"
    )
    truth = dict(_raw(svc, "SELECT city, COUNT(DISTINCT customer_id) FROM purchases GROUP BY city"))
    floor_ = scan_floor(TruncatedGeometricSelection(0.5, 5e-7, k=1), Fraction(5e-7))
    released = [r[0] for r in rows]
    assert released == sorted(released) and set(released) <= set(truth)  # never invented
    assert all(truth[c] >= floor_ for c in released)  # passed the selection first
    assert {"c1", "c2"} <= set(released)  # ~19,000 and ~11,000 bounded purchases against 2000
    assert (
        "partition selection" in notes[-1] and "sparse vector" in notes[-1] and "δ charged 1e-06" in notes[-1]
    )
    assert "ε charged 1;" in notes[-1] and "SVT over the released keys" in notes[-1]


def test_having_above_every_count_releases_nothing(svc):
    rows, notes = _run(
        svc, "SELECT city, COUNT(*) FROM purchases GROUP BY city HAVING COUNT(*) > 10000000", role="half"
    )
    assert rows == [] and "sparse vector: 0 of" in notes[-1]


def test_explain_having_states_the_split(svc):
    rows, _ = _run(
        svc, "EXPLAIN SELECT city, COUNT(*) FROM purchases GROUP BY city HAVING COUNT(*) > 2000", role="half"
    )
    text = "\n".join(r[0] for r in rows)
    assert "truncated geometric" in text and "sparse vector" in text and "SVT over the released keys" in text


# -- MAX / MIN / median over partition-selected keys -----------------------------------------

STEP, U, R = 0.005, 100_000, 10  # amount's grid on [0, 500]; purchases' max_rows_per_unit
BETA = 1e-9  # per key: the rank bounds below fail w.p. ≤ 1e-9 each


def _idx(a) -> int:
    return min(max(math.floor(float(a) / STEP), 0), U)


def _cells(svc, keys: str) -> dict:
    """Per released-key candidate: {unit: grid indices of its rows} (unbounded)."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for *k, u, a in _raw(
        svc,
        f"SELECT {keys}, customer_id, amount FROM purchases "
        "WHERE customer_id IS NOT NULL AND amount IS NOT NULL",
    ):
        out[tuple(k)][u].append(_idx(a))
    return out


def _kept_between(rows_of_units: dict, pred) -> tuple[int, int]:
    """Bounds on the number of *kept* rows (each unit keeps R of its rows in the cell, which ones
    by the keyed hash) satisfying ``pred``: at least a − (n − R)⁺, at most min(a, R) per unit."""
    lo = hi = 0
    for idxs in rows_of_units.values():
        a, n = sum(1 for i in idxs if pred(i)), len(idxs)
        lo += max(0, a - max(0, n - R))
        hi += min(a, R)
    return lo, hi


def _slack(eps_value: float, ties: int) -> float:
    """The exponential mechanism's utility theorem (McSherry–Talwar): the score exceeds its
    optimum (≤ the tie block) by more than (2/ε)·ln((U+1)/β) with probability ≤ β."""
    return ties + 2 / eps_value * math.log((U + 1) / BETA)


def _selected_ok(svc, released: list, keys: str, k: int) -> dict:
    """The released keys passed the selection: never invented, at least the floor, all with π = 1."""
    cells = _cells(svc, keys)
    sel = TruncatedGeometricSelection(0.5, 5e-7, k=k)
    floor_ = scan_floor(sel, Fraction(5e-7) / k)
    assert len(set(released)) == len(released) and set(released) <= set(cells)  # never invented
    assert all(len(cells[c]) >= floor_ for c in released)
    sure = {c for c, us in cells.items() if len(us) >= sel.n_one}
    assert sure and sure <= set(released)  # π(n) = 1: always kept
    return cells


def test_max_over_selected_keys(svc):
    before = svc.gw.ledger.spent_delta("tiny", "day")
    rows, notes = _run(svc, "SELECT city, MAX(amount) AS top FROM purchases GROUP BY city", role="tiny")
    cells = _selected_ok(svc, [(r[0],) for r in rows], "city", 1)
    k0 = int(notes[-1].split("k0 = ")[1].split(")")[0])
    for city, top in rows:  # rows above the answer: ≤ k0 + slack (kept rows)
        units, i = cells[(city,)], round(top / STEP)
        ties = max(Counter(j for idxs in units.values() for j in idxs).values())
        lo, _ = _kept_between(units, lambda j: j > i)
        assert lo <= k0 + _slack(
            0.475 / R, ties
        )  # values at (0.95·ε/2)/k, k = 1 key × R rows (the row check: 1/20)
    assert "ε charged 1;" in notes[-1] and "δ charged 1e-06" in notes[-1] and "values at ε 0.475" in notes[-1]
    assert "partition selection" in notes[-1] and "capped_rank_max" in notes[-1]
    assert svc.gw.ledger.spent_delta("tiny", "day") == pytest.approx(before + 1e-6)  # δ, its own column
    again, notes2 = _run(svc, "SELECT city, MAX(amount) AS top FROM purchases GROUP BY city", role="tiny")
    assert again == rows and "ε charged 0" in notes2[-1] and "δ charged 0;" in notes2[-1]  # a repeat: free
    assert "δ charged 1e-06" not in notes2[-1]
    assert svc.gw.ledger.spent_delta("tiny", "day") == pytest.approx(before + 1e-6)  # δ charged once


def test_median_over_selected_keys(svc):
    rows, notes = _run(svc, "SELECT city, median(amount) FROM purchases GROUP BY city", role="tiny")
    cells = _selected_ok(svc, [(r[0],) for r in rows], "city", 1)
    for city, med in rows:  # |c(y) − n/2| ≤ slack, c(y) = kept rows at or below y
        units, i = cells[(city,)], round(med / STEP)
        n = sum(min(len(idxs), R) for idxs in units.values())  # every unit keeps min(n, R): G = 1 = its city
        ties = max(Counter(j for idxs in units.values() for j in idxs).values())
        lo, hi = _kept_between(units, lambda j: j <= i)
        b = _slack(0.475 / R, ties)  # 19/20 of ε/2: the row check has 1/20
        assert lo - b <= n / 2 <= hi + b
    assert (
        "protected_quantile" in notes[-1]
        and "δ charged 1e-06" in notes[-1]
        and "values at ε 0.475" in notes[-1]
    )


def test_min_over_two_keys(svc):
    rows, notes = _run(
        svc, "SELECT city, store, MIN(amount) FROM purchases GROUP BY city, store", role="tiny"
    )
    cells = _selected_ok(svc, [(r[0], r[1]) for r in rows], "city, store", 10)  # L0 = 10: ε/20 per key
    k0 = int(notes[-1].split("k0 = ")[1].split(")")[0])
    for city, store, low in rows:
        units, i = cells[(city, store)], round(low / STEP)
        ties = max(Counter(j for idxs in units.values() for j in idxs).values())
        lo, _ = _kept_between(units, lambda j: j < i)
        assert lo <= k0 + _slack(0.5 / (10 * R), ties)  # k = G·R = 100
    assert (
        "10 groups per unit" in notes[-1] and "capped_rank_min" in notes[-1] and "ε charged 1;" in notes[-1]
    )


def test_extreme_over_selected_keys_refused_where_not_sound(svc):
    with pytest.raises(psycopg.errors.FeatureNotSupported) as e:  # δ = 0: nothing charged
        _run(svc, "SELECT city, MAX(amount) FROM purchases GROUP BY city", role="other")
    assert "needs a δ" in str(e.value) and e.value.diag.message_hint
    with pytest.raises(psycopg.errors.FeatureNotSupported):  # a ladder tier: its chain only
        _run(svc, "SELECT city, MAX(amount) FROM purchases GROUP BY city", role="bronze")
    with pytest.raises(psycopg.errors.FeatureNotSupported):  # COUNT beside MAX over selected keys
        _run(svc, "SELECT city, MAX(amount), COUNT(*) FROM purchases GROUP BY city", role="tiny")


def test_explain_extreme_over_selected_keys_states_the_split(svc):
    rows, _ = _run(
        svc,
        "EXPLAIN SELECT city, percentile_cont(0.9) WITHIN GROUP (ORDER BY amount) FROM purchases "
        "GROUP BY city",
        role="tiny",
    )
    text = "\n".join(r[0] for r in rows)
    assert "truncated geometric" in text and "dropped in the scan" in text and "other half of ε" in text
    assert "distinct units for the selection" in text and '"units" >= ' in text


def test_extreme_over_selected_keys_extended_protocol(svc):
    """Describe before Bind, a $1 in WHERE, binary results; EXPLAIN for a tier with δ = 0 says why."""
    with psycopg.connect(svc.dsn("tiny"), autocommit=True) as c:
        cur = c.cursor(binary=True)
        rows = cur.execute(
            "SELECT city, percentile_disc(0.9) WITHIN GROUP (ORDER BY amount) AS p90 FROM purchases "
            "WHERE store = %s GROUP BY city",
            (3,),
            prepare=True,
        ).fetchall()
        assert [d.name for d in cur.description] == ["city", "p90"]
    truth = dict(
        _raw(svc, "SELECT city, COUNT(DISTINCT customer_id) FROM purchases WHERE store = 3 GROUP BY city")
    )
    assert rows and {r[0] for r in rows} <= set(truth) and all(0 <= r[1] <= 500 for r in rows)
    lines, _ = _run(svc, "EXPLAIN SELECT city, MAX(amount) FROM purchases GROUP BY city", role="other")
    assert "refused for this role" in lines[0][0] and "delta = 0" in lines[0][0]
