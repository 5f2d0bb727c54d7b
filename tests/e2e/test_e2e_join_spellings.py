"""Join order, comma joins and aliases do not change whether a statement is answered,
through the wire on DuckDB and Postgres: ``orders ⋈ order_items`` spelled from either side,
or as ``FROM a, b WHERE a.k = b.k``, is one relation — one plan, one release — so the
first spelling is charged and every other is a free repeat with the same rows."""

from __future__ import annotations

import psycopg
import pytest

from support.service import ask

SPELLINGS = [
    "SELECT o.priority, COUNT(*) FROM order_items i JOIN orders o ON i.order_id = o.order_id "
    "GROUP BY o.priority ORDER BY 1",
    "SELECT o.priority, COUNT(*) FROM orders o JOIN order_items i ON o.order_id = i.order_id "
    "GROUP BY o.priority ORDER BY 1",
    "SELECT o.priority, COUNT(*) FROM orders o, order_items i WHERE i.order_id = o.order_id "
    "GROUP BY o.priority ORDER BY 1",
    "SELECT x.priority, COUNT(*) FROM order_items y, orders x WHERE x.order_id = y.order_id "
    "GROUP BY x.priority ORDER BY 1",
]


def test_every_spelling_is_answered_with_one_release(service):
    first, notes = ask(service, SPELLINGS[0], "other")
    assert [r[0] for r in first] == ["high", "low", "medium"] and "ε charged 1" in notes[-1]
    for sql in SPELLINGS[1:]:
        rows, notes = ask(service, sql, "other")
        assert rows == first, sql
        assert "ε charged 0 (repeat" in notes[-1], sql


def test_a_three_table_comma_join_in_any_order(service):
    a, _ = ask(
        service,
        "SELECT c.segment, COUNT(*) FROM customers c, orders o, order_items i "
        "WHERE o.customer_id = c.customer_id AND i.order_id = o.order_id GROUP BY c.segment",
        "half",
    )
    b, notes = ask(
        service,
        "SELECT c.segment, COUNT(*) FROM order_items i JOIN orders o ON i.order_id = o.order_id "
        "JOIN customers c ON o.customer_id = c.customer_id GROUP BY c.segment",
        "half",
    )
    assert sorted(a) == sorted(b) and "ε charged 0 (repeat" in notes[-1]


def test_a_cross_product_is_still_refused_for_free(service):
    with psycopg.connect(service.dsn("tiny"), autocommit=True) as c:
        spent = c.execute("SELECT spent FROM dpgate.budget").fetchone()[0]
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT COUNT(*) FROM orders o, order_items i")
        assert e.value.sqlstate == "42501"
        assert c.execute("SELECT spent FROM dpgate.budget").fetchone()[0] == spent
