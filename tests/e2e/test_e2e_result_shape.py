"""The result is the SQL's result over the released cells, through the wire on DuckDB and
Postgres: output names follow Postgres' rules, a predicate on a group key restricts the
keys returned, HAVING holds on every returned row's released value, ORDER BY an aggregate
by expression, alias or position is one thing, and released values are consistent (a COUNT
is never negative, …) unless the table says ``consistent = false``."""
from __future__ import annotations

import psycopg

from support.service import ask


def _named(svc, sql, role="other"):
    """(column names, rows, NOTICE texts) of one statement."""
    notes: list[str] = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        cur = c.execute(sql)
        return [d.name for d in cur.description], cur.fetchall(), notes


# -- output names ------------------------------------------------------------------------

def test_derived_table_column_keeps_its_name(service):
    names, rows, _ = _named(service, "SELECT s, COUNT(*) FROM (SELECT store AS s, customer_id FROM purchases) x "
                                     "GROUP BY s")
    assert names == ["s", "count"] and [r[0] for r in rows] == list(range(1, 11))


def test_views_name_columns_as_postgres_does(service):
    ask(service, "SELECT COUNT(*) FROM pums WHERE sex = 1", role="other")
    names, rows, _ = _named(service, "SELECT mechanism, COUNT(*), SUM(epsilon), MAX(epsilon) AS top "
                                     "FROM dpgate.releases GROUP BY mechanism")
    assert names == ["mechanism", "count", "sum", "top"] and rows


# -- a predicate on a group key restricts the keys -----------------------------------------

def test_in_on_a_group_key_returns_only_those_keys(service):
    _, rows, _ = _named(service, "SELECT region, COUNT(*) FROM people WHERE region IN ('north','south') "
                                 "GROUP BY region")
    assert [r[0] for r in rows] == ["north", "south"]


def test_key_predicates_like_between_not(service):
    _, rows, _ = _named(service, "SELECT region, sex, COUNT(*) FROM people WHERE region LIKE '%th' AND sex = 1 "
                                 "AND age > 30 GROUP BY region, sex")
    assert [r[:2] for r in rows] == [("north", 1), ("south", 1)]
    _, rows, _ = _named(service, "SELECT item, COUNT(*) FROM purchases WHERE item BETWEEN 3 AND 5 GROUP BY item")
    assert [r[0] for r in rows] == [3, 4, 5]
    _, rows, _ = _named(service, "SELECT region, COUNT(*) FROM people WHERE region NOT IN ('north','south') "
                                 "GROUP BY region")
    assert [r[0] for r in rows] == ["central", "east", "west"]


def test_key_predicate_through_a_lookup_join(service):
    """The TPC-H Q12 shape (``l_shipmode IN ('MAIL','SHIP')`` over lineitem ⋈ orders): a key
    of the looked-up table, restricted by IN."""
    _, rows, _ = _named(service, "SELECT o.priority, COUNT(*) FROM order_items l JOIN orders o "
                                 "ON l.order_id = o.order_id WHERE o.priority IN ('high','low') GROUP BY o.priority")
    assert [r[0] for r in rows] == ["high", "low"]


def test_key_predicate_is_not_a_template_slot(service):
    """Statements differing only in the integer a group key is compared with are different cells
    (a value outside the domain first: no cell, and no template that would keep none)."""
    for v in (5, 0, 1):
        _, rows, _ = _named(service, f"SELECT sex, COUNT(*) FROM people WHERE sex = {v} AND age > 20 GROUP BY sex")
        assert [r[0] for r in rows] == ([v] if v in (0, 1) else [])
