"""The privacy unit through the wire, on DuckDB and Postgres: the demo's
``purchases`` is protected per customer (``max_groups_per_unit = 10``,
``max_rows_per_unit = 10``). A count is of the bounded rows (each customer's first 10 per
cell), noised at ε/k; the NOTICE and EXPLAIN say which unit applies and what the bounds
cost; COUNT(DISTINCT customer_id) counts people at ε/min(G, cells); MAX works on the kept
rows; ladder tiers are refused; a table without a unit says "privacy unit: row"."""

from __future__ import annotations

import math
import os
import shutil
import subprocess

import psycopg
import pytest

from support.service import ask, backend_rows

EPS = 1.0  # the `other` role's tier (default)


def _run(svc, sql, role="other"):
    return ask(svc, sql, role)


_raw = backend_rows


def _geometric_bound(scale: float, p_fail: float = 1e-9) -> float:
    """|two-sided geometric noise| of scale b = k/ε exceeds t with probability ≤ 2·e^{-t/b}."""
    return scale * math.log(2 / p_fail)


def test_count_is_per_customer_bounded_and_noised_at_eps_over_k(service):
    ((n,),) = _run(service, "SELECT COUNT(*) FROM purchases")[0]
    rows, notes = _run(service, "SELECT COUNT(*) FROM purchases")
    assert rows == [(n,)]  # a repeat: the same answer
    bounded = _raw(
        service,
        "SELECT SUM(LEAST(n, 10)) FROM (SELECT customer_id, COUNT(*) AS n FROM purchases "
        "WHERE customer_id IS NOT NULL GROUP BY customer_id) t",
    )[0][0]
    raw = _raw(service, "SELECT COUNT(*) FROM purchases")[0][0]
    k = 10  # one cell × 10 rows
    assert abs(n - bounded) <= _geometric_bound(k / EPS)
    assert raw - bounded > 10_000  # the bound binds: heavy customers are cut
    assert "privacy unit: customer_id" in notes[-1] and "ε/10" in notes[-1]


def test_distinct_customers_per_store_costs_one_per_cell(service):
    rows, notes = _run(
        service, "SELECT store, COUNT(DISTINCT customer_id) AS people FROM purchases GROUP BY store"
    )
    truth = dict(_raw(service, "SELECT store, COUNT(DISTINCT customer_id) FROM purchases GROUP BY store"))
    assert [r[0] for r in rows] == list(range(1, 11))
    k = 10  # min(G = 10, 10 stores), one per cell
    for store, people in rows:
        assert abs(people - truth[store]) <= _geometric_bound(k / EPS)
    assert "ε/10" in notes[-1]


def test_group_by_splits_eps_over_groups_and_rows(service):
    rows, notes = _run(
        service,
        "SELECT store, SUM(amount) AS total, AVG(amount) AS mean FROM purchases "
        "WHERE item <= 20 GROUP BY store",
    )
    assert len(rows) == 10 and "ε/100" in notes[-1]  # min(10, 10) × 10
    assert all(0 <= r[2] <= 500 for r in rows if r[2] is not None)


def test_explain_states_the_unit_the_bounds_and_the_bias(service):
    rows, _ = _run(service, "EXPLAIN SELECT store, COUNT(*) FROM purchases GROUP BY store")
    text = "\n".join(r[0] for r in rows)
    assert "privacy unit: customer_id" in text and "under-counted" in text and "/ 100" in text
    assert "LEAST(" in text.upper() and '"__dpgate_u"' in text and "'__dpgate_salt__'" not in text


def test_max_on_the_kept_rows(service):
    rows, notes = _run(service, "SELECT MAX(amount) FROM purchases")
    assert 0 <= rows[0][0] <= 500 and "privacy unit: customer_id" in notes[-1]


def test_ladder_tiers_answer_per_customer(service):
    """The data-market chain's levels run at ε_level/k (group privacy), so each tier's
    level holds per customer; bronze (ε 0.1) is noisier than gold (ε 2)."""
    ((bronze,),) = _run(service, "SELECT COUNT(*) FROM purchases WHERE item <= 100", role="bronze")[0]
    rows, notes = _run(service, "SELECT COUNT(*) FROM purchases WHERE item <= 100", role="gold")
    assert "privacy unit: customer_id" in notes[-1] and "ladder market" in notes[-1]
    bounded = _raw(
        service,
        "SELECT SUM(LEAST(n, 10)) FROM (SELECT customer_id, COUNT(*) AS n FROM purchases "
        "WHERE item <= 100 GROUP BY customer_id) t",
    )[0][0]
    assert abs(rows[0][0] - bounded) <= _geometric_bound(10 / 2.0)
    assert abs(bronze - bounded) <= _geometric_bound(10 / 0.1)


def test_a_table_without_a_unit_says_row(service):
    _, notes = _run(service, "SELECT COUNT(*) FROM pums")
    assert "privacy unit: row" in notes[-1]


PSQL = shutil.which("psql")


@pytest.mark.skipif(PSQL is None, reason="psql not installed (.ci/run installs it)")
def test_a_join_to_a_lookup_table_from_psql(service):
    """A join to a lookup table works from psql."""
    env = {**os.environ, "PGCONNECT_TIMEOUT": "10", "PGSSLMODE": "disable"}
    sql = (
        "SELECT s.area, COUNT(*) AS purchases FROM purchases p JOIN stores s ON p.store = s.store_id "
        "GROUP BY s.area ORDER BY s.area"
    )
    r = subprocess.run(
        [PSQL, service.url("analyst"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert [line.split("|")[0] for line in r.stdout.split()] == ["center", "north", "south"]
    assert "privacy unit: customer_id" in r.stderr
    r = subprocess.run(
        [PSQL, service.url("analyst"), "-X", "-A", "-t", "-c", "SELECT * FROM stores ORDER BY 1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode == 0 and r.stdout.split()[0] == "1|north|2000" and "public table" in r.stderr


def test_join_and_public_table_over_the_extended_protocol(service):
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        rows = c.execute(
            "SELECT o.priority, SUM(i.quantity) FROM order_items i JOIN orders o "
            "ON i.order_id = o.order_id WHERE i.item <= %s GROUP BY o.priority",
            [25],
        ).fetchall()
        assert sorted(r[0] for r in rows) == ["high", "low", "medium"]
        pub = c.execute(
            "SELECT store_id, area FROM stores WHERE opened >= %s ORDER BY store_id", [2010], binary=True
        ).fetchall()
        assert pub == _raw(
            service, "SELECT store_id, area FROM stores WHERE opened >= 2010 ORDER BY store_id"
        )


def test_a_chain_of_lookups_through_the_wire(service):
    """order_items ⋈ orders ⋈ customers: along the reference that defines the unit, then
    on the unit; the released segments are the domain's, and the exact bounded count the
    scan measured is within the noise bound of the release (k = min(G, cells) × R)."""
    sql = (
        "SELECT c.segment, COUNT(*) FROM order_items i JOIN orders o ON i.order_id = o.order_id "
        "JOIN customers c ON o.customer_id = c.customer_id GROUP BY c.segment"
    )
    rows, notes = _run(service, sql)
    assert sorted(r[0] for r in rows) == ["business", "consumer"]
    assert "privacy unit: orders.customer_id" in notes[-1] and "ε charged 1" in notes[-1]
    truth = dict(_raw(service, sql))
    k = 2 * 20  # order_items: G = 3 ≥ 2 cells, R = 20
    for seg, n in rows:  # bounded ≤ raw; the noise bound at ε/k
        assert n <= truth[seg] + _geometric_bound(k / EPS)
