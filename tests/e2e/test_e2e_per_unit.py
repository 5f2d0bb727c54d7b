"""Per-unit histograms through the wire (psycopg), on DuckDB and Postgres: the demo's
purchases is protected per customer (max_rows_per_unit = 10). "How many customers bought
more than N times" and "purchases per customer" are answered as a per-unit histogram at
the tier's ε with sensitivity 1 (one customer is one row of the per-customer relation);
every other GROUP BY on the customer is refused with 0A000 and charges nothing — never a
partition-selected list of customers (which released nothing and was counted as 0)."""

from __future__ import annotations

import math
import re

import psycopg
import pytest

from support.service import ask, backend_rows

EPS = 1.0  # the `other` role's tier (default)
CAP = 10  # purchases.max_rows_per_unit
PER = "(SELECT customer_id, COUNT(*) AS n FROM purchases GROUP BY customer_id) t"


def _bound(scale: float, p_fail: float = 1e-9) -> float:
    """|two-sided geometric noise| of scale b = Δ/ε exceeds t with probability ≤ 2·e^{-t/b}."""
    return scale * math.log(2 / p_fail)


def test_customers_with_more_than_ten_purchases(service):
    sql = f"SELECT COUNT(*) FROM {PER} WHERE n > 10"
    rows, notes = ask(service, sql, "other")
    ((truth,),) = backend_rows(service, sql)
    assert truth > 0 and abs(rows[0][0] - truth) <= _bound(1 / EPS)  # Δ = 1: one customer, one row
    assert "per-unit histogram" in notes[-1] and "ε charged 1" in notes[-1] and "δ" not in notes[-1]


def test_purchases_per_customer_is_a_histogram_over_public_buckets(service):
    sql = f"SELECT n, COUNT(*) AS custdist FROM {PER} GROUP BY n ORDER BY n"
    rows, notes = ask(service, sql, "other")
    assert [r[0] for r in rows] == list(range(CAP + 1))  # the public buckets 0..cap
    truth = dict(backend_rows(service, f"SELECT LEAST(n, {CAP}), COUNT(*) FROM {PER} GROUP BY 1"))
    for n, c in rows:
        assert abs(c - truth.get(n, 0)) <= _bound(1 / EPS)
    assert f"{CAP} meaning {CAP} or more" in notes[-1]


def test_tpch_q13_shape_orders_by_released_counts(service):
    sql = f"SELECT n AS c_count, COUNT(*) AS custdist FROM {PER} GROUP BY n ORDER BY custdist DESC, c_count DESC"
    rows, _ = ask(service, sql, "other")
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)
    assert len(rows) == CAP + 1


def test_a_repeat_with_other_names_is_free(service):
    ask(service, f"SELECT n, COUNT(*) FROM {PER} GROUP BY n", "half")
    _, notes = ask(service, f"SELECT n AS k, COUNT(*) AS c FROM {PER} GROUP BY 1 ORDER BY 2", "half")
    assert "ε charged 0 (repeat" in notes[-1]


def test_explain_states_the_histogram(service):
    rows, _ = ask(service, f"EXPLAIN SELECT n, COUNT(*) FROM {PER} GROUP BY n", "other")
    text = "\n".join(r[0] for r in rows)
    assert "per-unit histogram" in text and "partition selection" not in text


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT customer_id, COUNT(*) FROM purchases GROUP BY customer_id",
        "SELECT COUNT(*) FROM (SELECT customer_id, SUM(amount) AS s FROM purchases GROUP BY customer_id) t WHERE s > 100",
        f"SELECT CASE WHEN n > 50 THEN 'heavy' ELSE 'light' END AS k, COUNT(*) FROM {PER} GROUP BY 1",
    ],
)
def test_other_groupings_on_the_customer_are_refused_for_free(service, sql):
    before = backend_rows(service, "SELECT 1")  # the backend is up
    with psycopg.connect(service.dsn("tiny"), autocommit=True) as c:
        spent = c.execute("SELECT spent FROM dpgate.budget").fetchone()[0]
        with pytest.raises(psycopg.Error) as e:
            c.execute(sql)
        assert e.value.sqlstate == "0A000" and e.value.diag.message_hint
        assert c.execute("SELECT spent FROM dpgate.budget").fetchone()[0] == spent
    assert before


def test_tpch_q13_left_join_from_the_customers(service):
    """TPC-H Q13 as written over the demo's customers and orders: the LEFT JOIN from the
    table of the people on the unit keeps customers with no order (bucket 0)."""
    q13 = (
        "(SELECT c.customer_id, COUNT(o.order_id) AS c_count FROM customers c LEFT JOIN orders o "
        "ON c.customer_id = o.customer_id GROUP BY c.customer_id) c_orders"
    )
    sql = f"SELECT c_count, COUNT(*) AS custdist FROM {q13} GROUP BY c_count ORDER BY custdist DESC, c_count DESC"
    rows, notes = ask(service, sql, "other")
    assert sorted(r[0] for r in rows) == list(range(CAP + 1))  # orders.max_rows_per_unit = 10
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)
    truth = dict(backend_rows(service, f"SELECT LEAST(c_count, {CAP}), COUNT(*) FROM {q13} GROUP BY 1"))
    assert truth[0] > 0  # people with no order exist
    for n, c in rows:
        assert abs(c - truth.get(n, 0)) <= _bound(1 / EPS)
    assert "per-unit histogram" in notes[-1]


@pytest.mark.parametrize("threshold", [5, 3, 30])
def test_thresholds_as_parameters_and_literals(service, threshold):
    """The extended protocol's $1 and a literal (the plan template of an earlier threshold)
    both filter each customer's own count, exactly, before the noise."""
    truth = backend_rows(service, f"SELECT COUNT(*) FROM {PER} WHERE n > {threshold}")[0][0]
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        ((got,),) = c.execute(f"SELECT COUNT(*) FROM {PER} WHERE n > %s", [threshold]).fetchall()
    lit, _ = ask(service, f"SELECT COUNT(*) FROM {PER} WHERE n > {threshold}", "other")
    assert abs(got - truth) <= _bound(1 / EPS) and lit == [(got,)]  # one release: a repeat


def test_tpch_q13_with_its_further_on_condition(service):
    """Q13's ``AND o_comment NOT LIKE '%special%requests%'`` in the ON (here on priority):
    those orders are not joined, and their customers stay, in bucket 0 if none is left."""
    q13 = (
        "(SELECT c.customer_id, COUNT(o.order_id) AS c_count FROM customers c LEFT JOIN orders o "
        "ON c.customer_id = o.customer_id AND o.priority NOT LIKE '%ig%' GROUP BY c.customer_id) c_orders"
    )
    sql = f"SELECT c_count, COUNT(*) AS custdist FROM {q13} GROUP BY c_count ORDER BY custdist DESC, c_count DESC"
    rows, _ = ask(service, sql, "other")
    truth = dict(backend_rows(service, f"SELECT LEAST(c_count, {CAP}), COUNT(*) FROM {q13} GROUP BY 1"))
    assert sorted(r[0] for r in rows) == list(range(CAP + 1))
    for n, c in rows:
        assert abs(c - truth.get(n, 0)) <= _bound(1 / EPS)


def test_the_noise_is_that_of_sensitivity_one(service):
    """The stated 95% half-width of a per-unit count is that of a row-level count at the same ε
    (pums, Δ = 1: the two-sided geometric at ε), not k = 100 times it as a count of
    purchases per customer would be (10 groups × 10 rows)."""

    def half_width(sql):
        _, notes = ask(service, sql, "half")
        return float(re.search(r"±([0-9.]+)", notes[-1]).group(1))

    per_unit = half_width(f"SELECT COUNT(*) FROM {PER} WHERE n >= 4")
    assert per_unit == half_width("SELECT COUNT(*) FROM pums WHERE age > 40")
    assert half_width("SELECT COUNT(*) FROM purchases WHERE item <= 7") >= 10 * per_unit
