"""The shapes SQL generators write (ibis, SQLAlchemy, polars/pandas) are the statement they
wrap: a derived table over a join, a join of a filtered derived table, a labelled
subquery, ``SELECT * FROM (<query>) AS q`` and its ``LIMIT 0`` probe plan to the release
of the hand-written form (``Plan.canonical``, the release key), so a repeat is free."""

from __future__ import annotations

import pytest

import rewriter
from config import parse_config
from rewriter.errors import Refusal
from support.service import make_config


@pytest.fixture(scope="module")
def demo():
    return parse_config(make_config(), "demo")


def plan(config, sql):
    return rewriter.build_plan(rewriter.parse(sql), config, [])


JOIN = 'FROM "purchases" AS "t2" INNER JOIN "stores" AS "t3" ON "t2"."store" = "t3"."store_id"'
COLS = (
    '"t2"."customer_id", "t2"."city", "t2"."item", "t2"."store", "t2"."amount", "t2"."ts", '
    '"t3"."store_id", "t3"."area", "t3"."opened"'
)

SAME = [  # (what a generator sends, the hand-written statement)
    (
        f'SELECT "t4"."area", COUNT(*) AS "n" FROM (SELECT {COLS} {JOIN}) AS "t4" GROUP BY 1',  # ibis join
        f"SELECT t3.area, COUNT(*) AS n {JOIN} GROUP BY 1",
    ),
    (
        f'SELECT * FROM (SELECT "t4"."area", COUNT(*) AS "n" FROM (SELECT {COLS} {JOIN}) AS "t4" GROUP BY 1) '
        'AS "t5" ORDER BY "t5"."area" ASC',  # ibis join, ordered
        f"SELECT t3.area, COUNT(*) AS n {JOIN} GROUP BY 1 ORDER BY area",
    ),
    (
        f'SELECT "t4"."area", AVG("t4"."amount") AS "m" FROM (SELECT "t3"."area", "t2"."amount" {JOIN}) '
        'AS "t4" GROUP BY 1',  # ibis join + select
        f"SELECT t3.area, AVG(t2.amount) AS m {JOIN} GROUP BY 1",
    ),
    (
        f'SELECT COUNT(*) AS "n" FROM (SELECT * FROM (SELECT {COLS} {JOIN}) AS "t4" '
        'WHERE "t4"."area" = \'north\') AS "t5"',  # ibis join, then filter
        f"SELECT COUNT(*) AS n {JOIN} WHERE t3.area = 'north'",
    ),
    (
        'SELECT "t5"."area", COUNT(*) AS "n" FROM (SELECT "t4"."customer_id", "t4"."store", "t4"."amount", '
        '"t2"."area" FROM (SELECT * FROM "purchases" AS "t0" WHERE "t0"."amount" > 10) AS "t4" INNER JOIN '
        '"stores" AS "t2" ON "t4"."store" = "t2"."store_id") AS "t5" GROUP BY 1',  # ibis filter, then join
        "SELECT t2.area, COUNT(*) AS n FROM purchases AS t4 JOIN stores AS t2 ON t4.store = t2.store_id "
        "WHERE t4.amount > 10 GROUP BY 1",
    ),
    (
        'SELECT "t4"."segment", COUNT(*) AS "n" FROM (SELECT "t2"."order_id", "t2"."customer_id", '
        '"t3"."segment" FROM "orders" AS "t2" INNER JOIN "customers" AS "t3" ON "t2"."customer_id" = '
        '"t3"."customer_id") AS "t4" GROUP BY 1',  # join along the unit
        "SELECT t3.segment, COUNT(*) AS n FROM orders t2 JOIN customers t3 ON t2.customer_id = t3.customer_id "
        "GROUP BY 1",
    ),
    (
        "SELECT anon.sex, avg(anon.income) AS m FROM (SELECT sex, income FROM pums WHERE age > 30) AS anon "
        "GROUP BY anon.sex",  # SQLAlchemy .subquery()
        "SELECT sex, AVG(income) AS m FROM pums WHERE age > 30 GROUP BY sex",
    ),
    (
        "SELECT j.area, COUNT(*) AS n FROM (SELECT * FROM purchases p JOIN stores s ON p.store = s.store_id) j "
        "GROUP BY 1",  # SELECT * over a join
        "SELECT t.area, COUNT(*) AS n FROM purchases q JOIN stores t ON q.store = t.store_id GROUP BY 1",
    ),
    (
        "SELECT * FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) AS q",  # polars/pandas wrapper
        "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex",
    ),
]


@pytest.mark.parametrize("wrapped,flat", SAME)
def test_wrapper_is_the_hand_written_release(demo, wrapped, flat):
    assert plan(demo, wrapped).canonical() == plan(demo, flat).canonical()


def test_limit_0_probe_over_a_wrapper_is_the_same_release(demo):
    probe = plan(demo, "SELECT * FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) AS q LIMIT 0")
    flat = plan(demo, "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex LIMIT 0")
    assert probe.canonical() == flat.canonical() and probe.limit == 0
    assert [o.name for o in probe.outputs] == ["sex", "n"]


@pytest.mark.parametrize(
    "sql,code",
    [
        # a filter on the right of a LEFT JOIN is not a WHERE: the operand stays and is refused
        (
            "SELECT COUNT(*) FROM purchases p LEFT JOIN (SELECT * FROM stores s WHERE s.area = 'north') n "
            "ON p.store = n.store_id",
            "42501",
        ),
        # the derived table names `store` twice: ambiguous outside, as in Postgres
        (
            f'SELECT "t4"."store", COUNT(*) FROM (SELECT "t2"."store", "t3"."store_id" AS store {JOIN}) AS "t4" '
            "GROUP BY 1",
            "42702",
        ),
        # a join Postgres answers but dpgate does not (private table off its unit), also when wrapped
        (
            'SELECT COUNT(*) FROM (SELECT "t2"."amount" FROM "purchases" AS "t2" INNER JOIN "orders" AS "t3" '
            'ON "t2"."store" = "t3"."order_id") AS "t4"',
            "42501",
        ),
    ],
)
def test_other_wrapped_shapes_fail_closed(demo, sql, code):
    with pytest.raises(Refusal) as e:
        plan(demo, sql)
    assert e.value.sqlstate == code
