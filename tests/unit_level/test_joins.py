"""Lookup joins and public tables, on DuckDB and Postgres, over the demo's
second schema (proxy/demo/shop.py) and purchases ⋈ stores.

* Exact before noise: with bounds that bind nothing, the rewrite's cells equal the
  backend's own answer to the analyst's join (the analyst's SQL runs as written).
* A key that is not unique in the data never duplicates a base row (the lookup reads one
  row per key).
* Chains of lookups (order_items ⋈ orders ⋈ customers; purchases ⋈ stores ⋈ customers)
  are oracle-checked the same way.
* Every join that could repeat a person's rows, or join people to other people, is
  refused with a hint; a public table is answered as-is, declared columns only.
"""

from __future__ import annotations

import copy
import tomllib

import pytest
import sqlglot

import rewriter
from config import parse_config
from proxy.demo import demo_config_path, purchases_select, shop
from rewriter.errors import Refusal
from rewriter.public import plan_public
from rewriter.route import route

from .engines import engine

LOOSE = {"max_groups_per_unit": 1000, "max_rows_per_unit": 100_000}

JOINS = [
    "SELECT s.area, COUNT(*), SUM(p.amount) FROM purchases p JOIN stores s ON p.store = s.store_id GROUP BY s.area",
    "SELECT area, COUNT(*) FROM stores JOIN purchases ON purchases.store = stores.store_id GROUP BY area",
    "SELECT COUNT(*), AVG(p.amount) FROM purchases p LEFT JOIN stores s ON p.store = s.store_id WHERE s.opened > 2010",
    "SELECT c.segment, COUNT(*), SUM(o.total) FROM orders o JOIN customers c ON o.customer_id = c.customer_id "
    "GROUP BY c.segment",
    "SELECT o.priority, SUM(i.quantity), COUNT(*) FROM order_items i JOIN orders o ON i.order_id = o.order_id "
    "GROUP BY o.priority",
    "SELECT COUNT(*), SUM(price) FROM order_items WHERE item <= 10",
    "SELECT c.region, COUNT(DISTINCT o.customer_id) FROM orders o JOIN customers c ON o.customer_id = c.customer_id "
    "GROUP BY c.region",
    # chains of lookups: along the reference then on the unit; a public lookup then a same-person table
    "SELECT c.segment, COUNT(*), SUM(i.quantity) FROM order_items i JOIN orders o ON i.order_id = o.order_id "
    "JOIN customers c ON o.customer_id = c.customer_id GROUP BY c.segment",
    "SELECT c.region, o.priority, AVG(i.price) FROM order_items i JOIN orders o ON i.order_id = o.order_id "
    "LEFT JOIN customers c ON o.customer_id = c.customer_id GROUP BY c.region, o.priority",
    "SELECT s.area, c.segment, COUNT(*), SUM(p.amount) FROM purchases p JOIN stores s ON p.store = s.store_id "
    "JOIN customers c ON p.customer_id = c.customer_id GROUP BY s.area, c.segment",
    # the same joins in another order, or as comma joins with the equalities in WHERE
    "SELECT o.priority, SUM(i.quantity), COUNT(*) FROM orders o JOIN order_items i ON o.order_id = i.order_id "
    "GROUP BY o.priority",
    "SELECT o.priority, SUM(i.quantity), COUNT(*) FROM order_items i, orders o WHERE i.order_id = o.order_id "
    "AND i.item <= 25 GROUP BY o.priority",
    "SELECT c.segment, COUNT(*), SUM(i.quantity) FROM customers c, orders o, order_items i "
    "WHERE o.customer_id = c.customer_id AND i.order_id = o.order_id GROUP BY c.segment",
    "SELECT area, COUNT(*) FROM stores, purchases WHERE store = store_id GROUP BY area",
    # a public table under two aliases: the second copy's columns read by their qualifier
    "SELECT s.area, COUNT(*), AVG(p.amount) FROM purchases p JOIN stores s ON p.store = s.store_id "
    "JOIN stores t ON p.store = t.store_id WHERE t.opened > 2001 GROUP BY s.area",
]

# Spellings of one join: each plans exactly as the first (same relation, same release key).
SAME = [
    (
        "SELECT o.priority, COUNT(*) FROM order_items i JOIN orders o ON i.order_id = o.order_id GROUP BY o.priority",
        "SELECT o.priority, COUNT(*) FROM orders o JOIN order_items i ON o.order_id = i.order_id GROUP BY o.priority",
        "SELECT o.priority, COUNT(*) FROM orders o INNER JOIN order_items i ON i.order_id = o.order_id GROUP BY o.priority",
        "SELECT o.priority, COUNT(*) FROM order_items i, orders o WHERE i.order_id = o.order_id GROUP BY o.priority",
        "SELECT o.priority, COUNT(*) FROM orders o, order_items i WHERE o.order_id = i.order_id GROUP BY o.priority",
        "SELECT x.priority, COUNT(*) FROM orders x, order_items y WHERE y.order_id = x.order_id GROUP BY x.priority",
    ),
    (
        "SELECT c.segment, COUNT(*) FROM order_items i JOIN orders o ON i.order_id = o.order_id "
        "JOIN customers c ON o.customer_id = c.customer_id WHERE o.priority = 'high' GROUP BY c.segment",
        "SELECT c.segment, COUNT(*) FROM customers c JOIN orders o ON o.customer_id = c.customer_id "
        "JOIN order_items i ON i.order_id = o.order_id WHERE o.priority = 'high' GROUP BY c.segment",
        "SELECT c.segment, COUNT(*) FROM customers c, orders o, order_items i WHERE o.customer_id = c.customer_id "
        "AND o.priority = 'high' AND i.order_id = o.order_id GROUP BY c.segment",
    ),
    (
        "SELECT s.area, COUNT(*) FROM purchases p JOIN stores s ON p.store = s.store_id GROUP BY s.area",
        "SELECT s.area, COUNT(*) FROM stores s JOIN purchases p ON p.store = s.store_id GROUP BY s.area",
        "SELECT s.area, COUNT(*) FROM stores s, purchases p WHERE p.store = s.store_id GROUP BY s.area",
        "SELECT area, COUNT(*) FROM purchases, stores WHERE store = store_id GROUP BY area",
    ),
]

REFUSED = [
    ("SELECT COUNT(*) FROM orders o, order_items i", "equality"),  # a cross product
    ("SELECT COUNT(*) FROM orders o, order_items i WHERE o.order_id < i.order_id", "equality"),
    ("SELECT COUNT(*) FROM orders o, customers c WHERE o.order_id = c.customer_id", "unit"),  # off the unit
    ("SELECT COUNT(*) FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id", "key"),
    ("SELECT COUNT(*) FROM purchases p JOIN stores s ON p.item = s.opened", "key"),
    ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.order_id = c.customer_id", "unit"),  # off the unit
    ("SELECT COUNT(*) FROM purchases p RIGHT JOIN stores s ON p.store = s.store_id", "JOIN"),
    ("SELECT COUNT(*) FROM purchases p JOIN stores s ON p.store < s.store_id", "equality"),
    ("SELECT COUNT(*) FROM purchases p JOIN stores s USING (store)", None),
    ("SELECT COUNT(*) FROM stores s LEFT JOIN purchases p ON p.store = s.store_id", "public"),
    (
        "SELECT COUNT(*) FROM order_items i JOIN orders o ON i.order_id = o.order_id JOIN customers c "
        "ON i.order_id = c.customer_id",
        "unit",
    ),  # a chain off the unit
    (
        "SELECT COUNT(*) FROM purchases p JOIN stores s ON p.store = s.store_id JOIN orders o "
        "ON p.customer_id = o.order_id",
        "unit",
    ),  # a people table not by its unit
    (
        "SELECT COUNT(*) FROM purchases p JOIN stores s ON p.store = s.store_id RIGHT JOIN customers c "
        "ON p.customer_id = c.customer_id",
        "JOIN",
    ),
    ("SELECT s.amount FROM purchases p JOIN stores s ON p.store = s.store_id GROUP BY s.amount", "amount"),
]


def _config(loose: bool):
    raw = tomllib.loads(demo_config_path().read_text())
    raw["server"] = {"auth": "trust"}
    for r in raw["roles"].values():
        r.pop("scram", None)
    if loose:
        for t in raw["tables"].values():
            if "privacy_unit" in t:
                t.update(LOOSE)
    return parse_config(copy.deepcopy(raw))


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def db(request):
    with engine(request, "joins_t") as e:
        e.run("CREATE TABLE purchases AS " + purchases_select(e.series(30000)))
        for sql in shop.statements(e.series):
            e.run(sql)
        yield e.dialect, e.run


def _num(v):
    return None if v is None else round(float(v), 6)


@pytest.mark.parametrize("sql", JOINS)
def test_join_scan_equals_the_analysts_own_query(db, sql):
    dialect, run = db
    plan = rewriter.build_plan(rewriter.parse(sql), _config(loose=True))
    got = rewriter.complete(plan, run(rewriter.to_sql(plan, dialect, "ab")))
    k = len(plan.group_by)
    shown = [o.name for o in plan.outputs if o.source == "group"]  # SELECT order of the keys
    pos = [shown.index(g.column) for g in plan.group_by]  # -> the plan's key order
    want = {tuple(r[p] for p in pos): [_num(v) for v in r[k:]] for r in run(sql)}
    assert want and all(tuple(row[:k]) in want for row in got if row[k] != 0)
    for row in got:
        m = row[k:]
        exact = []
        for a in plan.aggregates:  # the aggregates, from the scan's exact measures
            if a.func == "avg":
                exact.append(_num(m[a.measures[0]] / m[a.measures[1]]) if m[a.measures[1]] else None)
            else:
                exact.append(_num(m[a.measures[0]]))
        w = want.get(tuple(row[:k]))
        if w is not None:
            assert exact == [
                0.0 if v is None and a.func != "avg" else v for v, a in zip(w, plan.aggregates)
            ], (sql, row, w)


def test_a_repeated_key_never_duplicates_a_base_row(db):
    dialect, run = db
    plan = rewriter.build_plan(
        rewriter.parse("SELECT COUNT(*) FROM purchases p JOIN stores s ON p.store = s.store_id"),
        _config(loose=True),
    )
    ((before,),) = run(rewriter.to_sql(plan, dialect, "ab"))
    run("INSERT INTO stores VALUES (1, 'north', 2001)")  # store 1 now twice in the lookup table
    try:
        ((after,),) = run(rewriter.to_sql(plan, dialect, "ab"))
        assert after == before
    finally:
        run("DELETE FROM stores WHERE store_id = 1 AND opened = 2001")


@pytest.mark.parametrize("sql,word", REFUSED)
def test_joins_that_could_repeat_or_mix_people_are_refused(sql, word):
    with pytest.raises(Refusal) as e:
        rewriter.build_plan(rewriter.parse(sql), _config(loose=False))
    assert word is None or word in e.value.message
    assert e.value.hint or e.value.sqlstate.startswith("42")


@pytest.mark.parametrize("spellings", SAME)
def test_join_order_comma_joins_and_aliases_plan_the_same(spellings):
    cfg = _config(loose=False)
    plans = [rewriter.build_plan(rewriter.parse(sql), cfg) for sql in spellings]
    assert len({p.canonical() for p in plans}) == 1
    assert {route(sql, cfg.tables).table for sql in spellings} == {plans[0].table}  # the router agrees
    assert len({rewriter.to_sql(p, "duckdb", "ab") for p in plans}) == 1


def test_the_join_is_part_of_the_release_key():
    cfg = _config(loose=False)
    a = rewriter.build_plan(
        rewriter.parse("SELECT COUNT(*) FROM purchases p JOIN stores s ON p.store = s.store_id"), cfg
    )
    b = rewriter.build_plan(
        rewriter.parse("SELECT COUNT(*) FROM purchases p LEFT JOIN stores s ON p.store = s.store_id"), cfg
    )
    c = rewriter.build_plan(rewriter.parse("SELECT COUNT(*) FROM purchases"), cfg)
    assert len({a.canonical(), b.canonical(), c.canonical()}) == 3


def test_public_table_reads_declared_columns_only(db):
    dialect, run = db
    cfg = _config(loose=False)
    q = plan_public(rewriter.parse("SELECT * FROM stores WHERE opened > 2010 ORDER BY store_id LIMIT 2"), cfg)
    assert run(q.sql(dialect)) == run(
        "SELECT store_id, area, opened FROM stores WHERE opened > 2010 ORDER BY store_id LIMIT 2"
    )
    q = plan_public(rewriter.parse("SELECT area, COUNT(*) FROM stores GROUP BY area ORDER BY 1"), cfg)
    assert [tuple(r) for r in run(q.sql(dialect))] == [("center", 3), ("north", 4), ("south", 3)]
    for bad in (
        "SELECT pg_read_file('/etc/passwd') FROM stores",
        "SELECT * FROM stores, purchases",
        "SELECT secret FROM stores",
        "SELECT * FROM stores WHERE store_id IN (SELECT store FROM purchases)",
    ):
        with pytest.raises(Refusal):
            plan_public(rewriter.parse(bad), cfg)


def test_an_undeclared_column_refusal_lists_declared_columns_only():
    """The relation a join reads carries the unit under an internal name; a refusal that
    lists the declared columns never shows it."""
    sql = "SELECT COUNT(*) FROM order_items i JOIN orders o ON i.order_id = o.order_id WHERE nosuch > 1"
    with pytest.raises(Refusal) as e:
        rewriter.build_plan(rewriter.parse(sql), _config(loose=False))
    assert e.value.sqlstate == "42703" and "declared columns: " in e.value.message
    assert "__dpgate" not in e.value.message


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "spark"])
def test_a_join_along_the_reference_to_the_unit_carries_the_unit(dialect):
    """order_items ⋈ orders on the reference that leads to the unit (privacy_unit =
    "orders.customer_id"): the statement's join reads orders once, as the table itself (no
    grouping by its key), and each row's unit is the customer_id of the orders row it met."""
    sql = (
        "SELECT o.priority, SUM(i.quantity), COUNT(*) FROM order_items i JOIN orders o "
        "ON i.order_id = o.order_id GROUP BY o.priority"
    )
    plan = rewriter.build_plan(rewriter.parse(sql), _config(loose=True))
    tree = sqlglot.parse_one(str(rewriter.to_sql(plan, dialect, "ab")), read=dialect)
    reads = [t for t in tree.find_all(sqlglot.exp.Table) if t.name == "orders"]
    assert len(reads) == 1
    assert reads[0].find_ancestor(sqlglot.exp.Select).args.get("group") is None
