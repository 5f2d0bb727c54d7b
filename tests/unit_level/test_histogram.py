"""Per-unit histograms (rewriter.histogram), on DuckDB and Postgres, over the demo's
purchases (privacy unit customer_id, max_rows_per_unit = 10) and its shop schema.

* Exact before noise: the scan's cells equal the backend's own answer to the analyst's
  SQL, with each per-unit count in a GROUP BY capped at max_rows_per_unit (the bucket
  "cap or more"); a WHERE on a count is the analyst's own filter, uncapped.
* The sensitivity the mechanisms are run with holds: removing one customer and all their
  rows changes the exact histogram in one bucket, by 1 (L1 distance 1).
* Never a silent 0: an inner GROUP BY on the unit is never partition-selected; what is not a
  per-unit count is refused with 0A000 and a hint.
"""

from __future__ import annotations

import pytest

import rewriter
from proxy.demo import purchases_select, shop
from rewriter.errors import Refusal
from rewriter.extreme import build_extreme_plan
from rewriter.route import route

from .engines import engine
from .test_joins import _config

PER = "(SELECT customer_id, COUNT(*) AS n FROM purchases GROUP BY customer_id) t"
CAP = 10  # the demo's purchases.max_rows_per_unit (and orders')
Q13 = (
    "(SELECT c.customer_id, COUNT(o.order_id) AS c_count FROM customers c LEFT JOIN orders o "
    "ON c.customer_id = o.customer_id GROUP BY c.customer_id) c_orders"
)

# (the analyst's statement, the backend statement whose rows the exact cells must equal)
EXACT = [
    (f"SELECT COUNT(*) FROM {PER} WHERE n > 10", None),
    (f"SELECT COUNT(*) FROM {PER} WHERE n >= 3 AND n < 7", None),
    (f"SELECT n, COUNT(*) FROM {PER} GROUP BY n", f"SELECT LEAST(n, {CAP}), COUNT(*) FROM {PER} GROUP BY 1"),
    (
        f"SELECT n, COUNT(*) AS custdist FROM {PER} WHERE n > 2 GROUP BY n ORDER BY custdist DESC, n DESC",
        f"SELECT LEAST(n, {CAP}), COUNT(*) FROM {PER} WHERE n > 2 GROUP BY 1",
    ),
    (
        "SELECT n, COUNT(*) FROM (SELECT customer_id, COUNT(*) AS n FROM purchases WHERE item <= 20 "
        "GROUP BY customer_id) t GROUP BY n",
        f"SELECT LEAST(n, {CAP}), COUNT(*) FROM (SELECT customer_id, COUNT(*) AS n FROM purchases WHERE item <= 20 "
        "GROUP BY customer_id) t GROUP BY 1",
    ),
    (
        f"SELECT CASE WHEN n >= 5 THEN 'regular' ELSE 'occasional' END AS kind, COUNT(*) FROM {PER} GROUP BY 1",
        None,
    ),
    (
        "SELECT SUM(n), COUNT(*) FROM (SELECT p.customer_id, COUNT(DISTINCT s.area) AS n FROM purchases p "
        "JOIN stores s ON p.store = s.store_id GROUP BY p.customer_id) t",
        None,
    ),  # areas ≤ 3 < cap
    # order_items' unit is orders.customer_id: grouped by it through the joined orders (cap 20)
    (
        "SELECT n, COUNT(*) FROM (SELECT o.customer_id, COUNT(*) AS n FROM order_items i JOIN orders o "
        "ON i.order_id = o.order_id GROUP BY o.customer_id) t GROUP BY n",
        "SELECT LEAST(n, 20), COUNT(*) FROM (SELECT o.customer_id, COUNT(*) AS n FROM order_items i JOIN orders o "
        "ON i.order_id = o.order_id GROUP BY o.customer_id) t GROUP BY 1",
    ),
    ("SELECT COUNT(*) FROM (SELECT customer_id FROM purchases WHERE item = 1 GROUP BY customer_id) t", None),
    (
        "WITH per AS (SELECT customer_id, COUNT(*) AS n FROM purchases GROUP BY customer_id) "
        "SELECT COUNT(*) FROM per WHERE n BETWEEN 2 AND 4",
        None,
    ),
    (
        "SELECT n, COUNT(*) FROM (SELECT p.customer_id, COUNT(*) AS n FROM purchases p JOIN orders o "
        "ON o.customer_id = p.customer_id GROUP BY p.customer_id) t GROUP BY n",  # many rows on both sides
        f"SELECT LEAST(n, {CAP}), COUNT(*) FROM (SELECT p.customer_id, COUNT(*) AS n FROM purchases p JOIN orders o "
        "ON o.customer_id = p.customer_id GROUP BY p.customer_id) t GROUP BY 1",
    ),
    (
        "SELECT COUNT(*) FROM (SELECT customer_id AS who, COUNT(*) AS n FROM purchases GROUP BY who) t "
        "WHERE n BETWEEN 3 AND 5",
        None,
    ),  # the unit by its alias
    # TPC-H Q13: the table of the people LEFT JOINed on the unit: customers with no order in bucket 0
    (
        f"SELECT c_count, COUNT(*) AS custdist FROM {Q13} GROUP BY c_count ORDER BY custdist DESC, c_count DESC",
        f"SELECT LEAST(c_count, {CAP}), COUNT(*) FROM {Q13} GROUP BY 1",
    ),
    (
        "SELECT c_count, COUNT(*) FROM (SELECT c.customer_id, COUNT(o.order_id) AS c_count FROM customers c "
        "LEFT JOIN orders o ON c.customer_id = o.customer_id AND o.priority NOT LIKE '%ig%' GROUP BY c.customer_id) x "
        "GROUP BY c_count",  # Q13's further ON condition
        f"SELECT LEAST(c_count, {CAP}), COUNT(*) FROM (SELECT c.customer_id, COUNT(o.order_id) AS c_count FROM customers c "
        "LEFT JOIN orders o ON c.customer_id = o.customer_id AND o.priority NOT LIKE '%ig%' GROUP BY c.customer_id) x "
        "GROUP BY 1",
    ),
    (
        "SELECT n, COUNT(*) FROM (SELECT c.customer_id, COUNT(*) AS n FROM customers c JOIN orders o "
        "ON o.customer_id = c.customer_id WHERE c.segment = 'business' GROUP BY c.customer_id) t GROUP BY n",
        f"SELECT LEAST(n, {CAP}), COUNT(*) FROM (SELECT c.customer_id, COUNT(*) AS n FROM customers c JOIN orders o "
        "ON o.customer_id = c.customer_id WHERE c.segment = 'business' GROUP BY c.customer_id) t GROUP BY 1",
    ),
]

REFUSED = [
    "SELECT customer_id, COUNT(*) FROM purchases GROUP BY customer_id",  # one row per person
    "SELECT DISTINCT customer_id FROM purchases",
    "SELECT COUNT(*) FROM (SELECT customer_id, SUM(amount) AS s FROM purchases GROUP BY customer_id) t WHERE s > 10",
    "SELECT COUNT(*) FROM (SELECT customer_id, store, COUNT(*) AS n FROM purchases GROUP BY customer_id, store) t",
    "SELECT COUNT(*) FROM (SELECT customer_id, COUNT(*) AS n FROM purchases GROUP BY customer_id "
    "HAVING COUNT(*) > 3) t",
    f"SELECT customer_id, n FROM {PER} WHERE n > 3 GROUP BY customer_id, n",
    f"SELECT COUNT(customer_id) FROM {PER}",
    f"SELECT MAX(n) FROM {PER}",
    f"SELECT CASE WHEN n > 50 THEN 'heavy' ELSE 'light' END AS k, COUNT(*) FROM {PER} GROUP BY 1",  # above cap
    f"SELECT n / 2 AS half, COUNT(*) FROM {PER} GROUP BY 1",  # a capped value
    "SELECT COUNT(*) FROM (SELECT c.customer_id, COUNT(o.order_id) AS n FROM customers c LEFT JOIN orders o "
    "ON c.customer_id = o.customer_id GROUP BY c.customer_id, o.priority) t",  # not per unit
]


def test_q13_bucket_zero_holds_the_people_with_no_order(db):
    dialect, run = db
    got = _cells(_plan(f"SELECT c_count, COUNT(*) FROM {Q13} GROUP BY c_count"), dialect, run)
    ((none,),) = run(
        "SELECT COUNT(*) FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o "
        "WHERE o.customer_id = c.customer_id)"
    )
    assert got[(0,)] == none > 0


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def db(request):
    with engine(request, "hist_t") as e:
        e.run("CREATE TABLE purchases AS " + purchases_select(e.series(30000)))
        for sql in shop.statements(e.series):
            e.run(sql)
        yield e.dialect, e.run


def _plan(sql: str, params=None):
    return rewriter.build_plan(rewriter.parse(sql), _config(loose=False), params)


def _cells(plan, dialect, run) -> dict:
    k = len(plan.group_by)
    return {tuple(r[:k]): int(r[k]) for r in rewriter.complete(plan, run(rewriter.to_sql(plan, dialect)))}


@pytest.mark.parametrize("sql,want", EXACT)
def test_exact_cells_are_the_analysts_own_answer_with_counts_capped(db, sql, want):
    dialect, run = db
    plan = _plan(sql)
    assert not plan.selected and plan.unit is None and "per-unit histogram" in plan.per_unit
    if not plan.group_by:  # one row: each aggregate's exact measure
        (row,) = rewriter.complete(plan, run(rewriter.to_sql(plan, dialect)))
        assert [float(row[a.measures[0]]) for a in plan.aggregates] == [float(v) for v in run(sql)[0]]
        return
    got = _cells(plan, dialect, run)
    truth = {tuple(r[:-1]): int(r[-1]) for r in run(want or sql)}
    assert set(truth) <= set(got)  # every key the data has is a public bucket
    assert {key: n for key, n in got.items() if n} == truth  # and the empty ones are 0


def test_count_of_units_with_more_than_n_rows_counts_units(db):
    """`customers who bought more than 10 times` counts customers, never released keys."""
    dialect, run = db
    sql = f"SELECT COUNT(*) FROM {PER} WHERE n > 10"
    plan = _plan(sql)
    ((exact,),) = run(rewriter.to_sql(plan, dialect))
    ((truth,),) = run(sql)
    assert exact == truth > 0


def test_removing_one_unit_moves_one_bucket_by_one(db):
    """The neighbouring notion: add/remove one customer with all their rows. The exact
    histogram of the two databases differs by 1 in one bucket (L1 = 1), heavy customers
    included (customer 1 has the most rows)."""
    dialect, run = db
    plan = _plan(f"SELECT n, COUNT(*) FROM {PER} GROUP BY n")
    before = _cells(plan, dialect, run)
    for cid in (1, 51, 777):
        run(f"CREATE TABLE keep_{cid} AS SELECT * FROM purchases WHERE customer_id = {cid}")
        run(f"DELETE FROM purchases WHERE customer_id = {cid}")
        try:
            after = _cells(plan, dialect, run)
        finally:
            run(f"INSERT INTO purchases SELECT * FROM keep_{cid}")
            run(f"DROP TABLE keep_{cid}")
        assert sum(abs(before[k] - after[k]) for k in before) == 1


@pytest.mark.parametrize("sql", REFUSED)
def test_other_groupings_on_the_unit_are_refused_not_partition_selected(sql):
    with pytest.raises(Refusal) as e:
        _plan(sql)
    assert e.value.sqlstate == "0A000" and e.value.hint


def test_the_per_unit_relation_is_part_of_the_release_key():
    a = _plan(f"SELECT n, COUNT(*) FROM {PER} GROUP BY n")
    b = _plan(
        "SELECT n, COUNT(*) FROM (SELECT customer_id, COUNT(*) AS n FROM purchases WHERE item <= 20 "
        "GROUP BY customer_id) t GROUP BY n"
    )
    c = _plan(
        "SELECT n, COUNT(*) FROM (SELECT customer_id, COUNT(store) AS n FROM purchases "
        "GROUP BY customer_id) t GROUP BY n"
    )
    d = _plan(f"SELECT n AS m, COUNT(*) AS c FROM {PER} GROUP BY n ORDER BY 2 DESC")  # post-processing only
    assert len({a.canonical(), b.canonical(), c.canonical()}) == 3 and d.canonical() == a.canonical()


def test_parameters_bind_inside_and_outside():
    sql = (
        "SELECT COUNT(*) FROM (SELECT customer_id, COUNT(*) AS n FROM purchases WHERE item <= $1 "
        "GROUP BY customer_id) t WHERE n > $2"
    )
    a = _plan(sql, [20, 3])
    b = _plan(sql.replace("$1", "20").replace("$2", "3"))
    assert a.canonical() == b.canonical()
    assert rewriter.param_types(rewriter.parse(sql), _config(loose=False)) == ["int", "int"]


def test_max_of_a_per_unit_count_is_refused_on_the_extreme_path():
    """MAX/MIN are planned on their own path (SUM substituted); a count named like a column of
    the table (``amount``) must not be read there as that column."""
    sql = "SELECT MAX(amount) FROM (SELECT customer_id, COUNT(*) AS amount FROM purchases GROUP BY customer_id) t"
    with pytest.raises(Refusal) as e:
        build_extreme_plan(rewriter.parse(sql), _config(loose=False))
    assert e.value.sqlstate == "0A000" and "per-unit" in e.value.message


@pytest.mark.parametrize("sql", [sql for sql, _ in EXACT])
def test_the_router_reads_the_table_the_plan_reads(sql):
    """The pipeline checks that the plan's table is the route's (else an internal error)."""
    cfg = _config(loose=False)
    assert route(sql, cfg.tables).table == _plan(sql).table
