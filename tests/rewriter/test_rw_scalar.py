"""rewriter.scalar: which subqueries are releases of their own, the statements they are, and
the constants their released values become — decided from the parse."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

import rewriter
from bench.tpch_queries import Q15_WITH
from config import parse_config
from rewriter import lookup, scalar
from rewriter.errors import Refusal
from rewriter.route import route

TABLES = {"people", "purchases", "stores"}


def _found(sql: str) -> list[str]:
    tree = rewriter.parse(sql)
    return [s.sql for s in scalar.scalars(tree)]


def test_scalars_in_expressions_and_filters_in_the_order_written():
    assert _found(
        "SELECT region, COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people) FROM people "
        "WHERE income > (SELECT AVG(income) FROM people WHERE age > 30) GROUP BY region"
    ) == ["SELECT COUNT(*) FROM people", "SELECT AVG(income) FROM people WHERE age > 30"]
    assert _found("SELECT (SELECT COUNT(*) FROM a)::float / (SELECT COUNT(DISTINCT u) FROM a)") == [
        "SELECT COUNT(*) FROM a",
        "SELECT COUNT(DISTINCT u) FROM a",
    ]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM (SELECT region FROM people) t",  # a derived table
        "SELECT COUNT(*) FROM people WHERE age IN (SELECT age FROM people)",  # IN's query
        "SELECT COUNT(*) FROM people WHERE EXISTS (SELECT 1 FROM people)",
        "SELECT COUNT(*) FROM people WHERE age > ALL (SELECT age FROM people)",
        # over the statement's own WITH query: that release's rows (rewriter.inline), not a release
        "WITH r AS (SELECT store, COUNT(*) AS n FROM purchases GROUP BY store) "
        "SELECT store FROM r WHERE n = (SELECT MAX(n) FROM r)",
    ],
)
def test_not_releases_of_their_own(sql):
    assert _found(sql) == []


def test_a_scalar_reads_the_with_queries_it_names():
    (sql,) = _found(
        "WITH old AS (SELECT * FROM people WHERE age > 60), x AS (SELECT 1 AS one) "
        "SELECT region, COUNT(*) / (SELECT COUNT(*) FROM old) FROM people GROUP BY region"
    )
    assert sql == "WITH old AS (SELECT * FROM people WHERE age > 60) SELECT COUNT(*) FROM old"


@pytest.mark.parametrize(
    "sql, words",
    [
        (
            "SELECT COUNT(*) FROM people p WHERE age > (SELECT AVG(age) FROM people q WHERE q.sex = p.sex)",
            "correlated",
        ),
        ("SELECT COUNT(*) FROM people WHERE age > (SELECT AVG(age) FROM people GROUP BY sex)", "GROUP BY"),
        ("SELECT COUNT(*) FROM people WHERE age > (SELECT age FROM people LIMIT 1)", "aggregate"),
        ("SELECT COUNT(*) FROM people WHERE age > (SELECT AVG(age), 1 FROM people)", "one column"),
    ],
)
def test_refused_with_what_to_write(sql, words):
    with pytest.raises(Refusal) as e:
        scalar.scalars(rewriter.parse(sql))
    assert e.value.sqlstate == "0A000" and words in e.value.message
    assert "run it as a statement of its own" in e.value.hint


def test_route_of_a_statement_of_several_releases():
    r = route("SELECT COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people) FROM people", TABLES)
    assert (r.kind, r.table, r.scalars) == ("dp", "people", True)
    # two declared tables, one of them only in the subquery: each part reads one
    r = route("SELECT COUNT(*) * 1.0 / (SELECT COUNT(*) FROM stores) FROM purchases", TABLES)
    assert (r.table, r.scalars) == ("purchases", True)
    assert not route("SELECT (SELECT COUNT(*) FROM pg_class)", TABLES, {"pg_class"}).scalars


def test_bind_replaces_each_subquery_by_its_value():
    tree = rewriter.parse(
        "SELECT COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people) FROM people WHERE age > (SELECT 1)"
    )
    found = scalar.find(tree)
    assert len(found) == 2
    text = scalar.bind(tree, found, [scalar.literal(19987), scalar.literal(2.5)])
    assert text == "SELECT COUNT(*) * 1.0 / 19987 FROM people WHERE age > CAST((2.5) AS DOUBLE PRECISION)"


@pytest.mark.parametrize(
    "value, sql",
    [
        (7, "7"),
        (-7, "-7"),
        (2.5, "CAST((2.5) AS DOUBLE PRECISION)"),
        (-0.125, "CAST((-0.125) AS DOUBLE PRECISION)"),
        (Decimal("1.50"), "1.50"),
        (None, "NULL"),
        (float("nan"), "CAST('NaN' AS DOUBLE PRECISION)"),
    ],
)
def test_literal(value, sql):
    assert scalar.literal(value).sql("postgres") == sql


def test_parameters_bound_as_constants():
    tree = rewriter.parse(
        "SELECT COUNT(*) FROM t WHERE a > $1 AND ts < $2 AND s = $3 AND f > (SELECT AVG(f) FROM t WHERE a > $1)"
    )
    scalar.bind_params(tree, [3, dt.datetime(2025, 6, 1, 12, 0), "x"])
    assert tree.sql("postgres") == (
        "SELECT COUNT(*) FROM t WHERE a > 3 AND ts < CAST('2025-06-01 12:00:00' AS TIMESTAMP) AND s = 'x' "
        "AND f > (SELECT AVG(f) FROM t WHERE a > 3)"
    )
    with pytest.raises(Refusal) as e:
        scalar.bind_params(rewriter.parse("SELECT COUNT(*) FROM t WHERE a > $2"), [1, 2, 3])
    assert e.value.sqlstate == "08P01"


def test_constant_select_list():
    tree = rewriter.parse("SELECT 19987 * 1.0 / 200000 AS share, 2 + 2")
    outs = scalar.constant_outputs(tree)
    assert [(n, typ) for n, _, typ in outs] == [("share", "numeric"), ("?column?", "int")]
    assert scalar.constant_outputs(rewriter.parse("SELECT COUNT(*) FROM people")) is None
    with pytest.raises(Refusal):
        scalar.constant_outputs(rewriter.parse("SELECT 1 WHERE 1 = 1"))


def test_same_unit_by_the_entity_the_config_resolves():
    """Tables hold the same people when they reach the same unit entity (``[units.customer]``,
    through references), whatever their columns are called; a table of another unit
    is refused; a public table is exact and may be read beside any."""
    i = {"type": "int"}
    cfg = parse_config(
        {
            "server": {"auth": "trust"},
            "tiers": {"d": {"epsilon": 1, "budget": 10}},
            "roles": {"a": {"tier": "d"}},
            "units": {
                "customer": {"table": "customer", "key": "c_custkey"},
                "driver": {"table": "driver", "key": "d_id"},
            },
            "tables": {
                "customer": {"columns": {"c_custkey": i}},
                "orders": {
                    "columns": {"o_orderkey": i, "o_custkey": i},
                    "key": "o_orderkey",
                    "references": {"o_custkey": "customer"},
                },
                "lineitem": {"columns": {"l_orderkey": i}, "references": {"l_orderkey": "orders"}},
                "driver": {"columns": {"d_id": i}},
                "nation": {"public": True, "columns": {"n_nationkey": i}, "key": "n_nationkey"},
            },
        }
    )
    scalar.check_unit(cfg.tables, "lineitem", "customer")
    scalar.check_unit(cfg.tables, "orders", "nation")
    for outer, inner in (("orders", "driver"), ("driver", "customer")):
        with pytest.raises(Refusal) as e:
            scalar.check_unit(cfg.tables, outer, inner)
        assert "different privacy units" in e.value.message


def test_q15_is_a_release_looked_up_in_a_public_table():
    """TPC-H Q15 (its WITH variant): revenue0 released alone with its own-rows condition, the
    supplier rows read as a public statement, joined on s_suppkey = supplier_no."""
    i, f, t = {"type": "int"}, {"type": "float", "lower": 0, "upper": 1e5}, {"type": "text"}
    cfg = parse_config(
        {
            "server": {"auth": "trust"},
            "tiers": {"d": {"epsilon": 1, "budget": 10}},
            "roles": {"a": {"tier": "d"}},
            "tables": {
                "lineitem": {
                    "privacy_unit": "l_orderkey",
                    "columns": {
                        "l_orderkey": i,
                        "l_suppkey": {"type": "int", "domain_range": [1, 10]},
                        "l_extendedprice": f,
                        "l_discount": f,
                        "l_shipdate": {"type": "date", "lower": "1992-01-01", "upper": "1998-12-31"},
                    },
                },
                "supplier": {
                    "public": True,
                    "key": "s_suppkey",
                    "columns": {"s_suppkey": i, "s_name": t, "s_address": t, "s_phone": t},
                },
            },
        }
    )
    tree = rewriter.parse(Q15_WITH)
    assert route(Q15_WITH, cfg.tables).lookup
    lk = lookup.split(tree, cfg.tables)
    assert (lk.public_table, lk.p_key, lk.d_key) == ("supplier", "s_suppkey", "supplier_no")
    assert lk.public == "SELECT * FROM supplier"
    assert lk.released.endswith(
        "SELECT * FROM revenue0 WHERE total_revenue = (SELECT MAX(total_revenue) FROM revenue0)"
    )
    assert [o[:2] for o in lk.outputs] == [
        ("p", "s_suppkey"),
        ("p", "s_name"),
        ("p", "s_address"),
        ("p", "s_phone"),
        ("d", "total_revenue"),
    ]
    assert lk.order == ((0, False, False),)


def test_an_unqualified_column_of_the_statement_around_is_a_correlated_subquery():
    """TPC-H Q17 writes its correlation unqualified (``l_partkey = p_partkey``): the column is
    declared by a table of the statement around the subquery and by none of the subquery's,
    so the subquery is a query per outer row — refused as such, not as an unknown column. A
    column of the subquery's own table of the same name stays its own."""
    i = {"type": "int", "lower": 0, "upper": 100}
    cfg = parse_config(
        {
            "server": {"auth": "trust"},
            "tiers": {"d": {"epsilon": 1, "budget": 10}},
            "roles": {"a": {"tier": "d"}},
            "tables": {
                "lineitem": {"columns": {"l_partkey": i, "l_quantity": i}},
                "part": {"public": True, "columns": {"p_partkey": i, "l_quantity": i}, "key": "p_partkey"},
            },
        }
    )
    q17 = (
        "SELECT SUM(l_quantity) FROM lineitem, part WHERE p_partkey = l_partkey AND l_quantity < "
        "(SELECT 0.2 * AVG(l_quantity) FROM lineitem WHERE l_partkey = p_partkey)"
    )
    with pytest.raises(Refusal) as e:
        route(q17, cfg.tables)
    assert e.value.sqlstate == "0A000" and "p_partkey, a column of part" in e.value.message
    assert "correlated" in e.value.message
    own = "SELECT COUNT(*) FROM lineitem WHERE l_quantity < (SELECT AVG(l_quantity) FROM lineitem)"
    assert route(own, cfg.tables).scalars
