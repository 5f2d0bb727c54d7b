"""Post-processing plans: expressions over aggregates, HAVING without GROUP BY,
derived tables and CTEs. The release key (``Plan.canonical``) is the underlying
measurement's; the expression is evaluated by the proxy on released values."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import psycopg
import pytest

import rewriter
from proxy.pipeline.rows import answer_rows, output_types
from proxy.wire.api import SqlError
from rewriter.errors import Refusal


def plan(config, sql, params=None):
    return rewriter.build_plan(rewriter.parse(sql), config, params)


def rows(p, value):
    """answer_rows over a fake release: every aggregate of every cell released as ``value(agg, cell)``
    (as the raw values of a ``consistent = false`` table: the evaluator sees them as given)."""
    vals = [[value(a, i) for a in p.aggregates] for i, _ in enumerate(p.cells)]
    p = dataclasses.replace(p, consistent=False)
    return answer_rows(
        p, {"keys": [list(c) for c in p.cells], "values": vals, "labels": [a.label for a in p.aggregates]}
    )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM (SELECT * FROM pums WHERE age > 1) s",
        "SELECT COUNT(*) FROM (SELECT age, sex FROM pums) AS s WHERE s.age > 1",
        "WITH x AS (SELECT * FROM pums WHERE age > 1) SELECT COUNT(*) FROM x",
        "WITH x AS (SELECT age AS a FROM pums), y AS (SELECT a FROM x WHERE a > 1) SELECT COUNT(*) FROM y",
    ],
)
def test_derived_tables_inline_to_the_flat_release(config, sql):
    flat = plan(config, "SELECT COUNT(*) FROM pums WHERE age > 1")
    assert plan(config, sql).canonical() == flat.canonical()


def test_renamed_expression_inlines(config):
    p = plan(
        config,
        "SELECT sex, SUM(a) FROM (SELECT sex, age AS a FROM pums WHERE sex = 1) s "
        "WHERE a BETWEEN 1 AND 50 GROUP BY sex",
    )
    q = plan(config, "SELECT sex, SUM(age) FROM pums WHERE sex = 1 AND age BETWEEN 1 AND 50 GROUP BY sex")
    assert p.canonical() == q.canonical()


def test_outer_query_over_aggregating_subquery_is_post_processing(config):
    inner = plan(config, "SELECT educ, COUNT(*) AS c FROM pums GROUP BY educ")
    p = plan(
        config,
        "SELECT educ, c FROM (SELECT educ, COUNT(*) AS c FROM pums GROUP BY educ) s "
        "WHERE c > 10 ORDER BY c DESC LIMIT 3",
    )
    assert p.canonical() == inner.canonical()
    got = rows(p, lambda a, i: i * 3)  # educ 1..16 released as 0, 3, …, 45
    assert got == [(16, 45), (15, 42), (14, 39)]
    cte = plan(
        config,
        "WITH g AS (SELECT educ, COUNT(*) AS c FROM pums GROUP BY educ) "
        "SELECT educ, c * 2 AS d FROM g WHERE educ = $1",
        [3],
    )
    assert cte.canonical() == inner.canonical() and rows(cte, lambda a, i: 10) == [(3, 20)]


def test_expressions_over_aggregates(config):
    p = plan(
        config,
        "SELECT SUM(age) / COUNT(*), COUNT(*) * 100.0 / 7 AS pct, POWER(AVG(age), 2), "
        "SUM(age) * 1, PI(), SUM(1), CASE WHEN COUNT(*) > 5 THEN 'many' ELSE 'few' END, "
        "COUNT(*) % 4, -COUNT(*) FROM pums",
    )
    assert [o.name for o in p.outputs] == [
        "?column?",
        "pct",
        "power",
        "?column?",
        "pi",
        "sum",
        "case",
        "?column?",
        "?column?",
    ]
    assert output_types(p) == [20, 1700, 701, 20, 701, 20, 25, 20, 20]
    # each aggregate released once: AVG(age) (with SUM(age) from its release) and COUNT(*)
    assert sorted(a.label for a in p.aggregates) == ["avg(age)", "count(*)", "sum(age)"]
    vals = {"count": 7, "sum": -23, "avg": 2.5}
    (got,) = rows(p, lambda a, i: vals[a.func])
    assert got == (-3, Decimal("100.0000000000000000"), 6.25, -23, 3.141592653589793, 7, "many", 3, -7)


def test_same_release_for_two_spellings(config):
    a = plan(config, "SELECT SUM(age) / COUNT(*) FROM pums")
    b = plan(config, "SELECT COUNT(*), SUM(age) FROM pums")
    assert a.canonical() == b.canonical()
    # a stored answer of one spelling serves the other (aggregates realigned by label)
    stored = {"keys": [[]], "values": [[10, 4]], "labels": ["count(*)", "sum(age)"]}
    assert answer_rows(a, stored) == [(0,)] and answer_rows(b, stored) == [(10, 4)]


def test_numeric_division_scale_and_nulls(config):
    p = plan(
        config, "SELECT COUNT(*) * 1.0 / 3, AVG(age) / NULLIF(COUNT(*), 0), COALESCE(AVG(age), 0) FROM pums"
    )
    (got,) = rows(p, lambda a, i: 2 if a.func == "count" else None)
    assert got == (Decimal("0.66666666666666666667"), None, 0)
    z = plan(config, "SELECT SUM(age) / COUNT(*) FROM pums")
    with pytest.raises(SqlError) as e:
        rows(z, lambda a, i: 0)
    assert e.value.sqlstate == "22012"


def test_having_without_group_by_filters_the_row(config):
    p = plan(config, "SELECT SUM(age) FROM pums HAVING COUNT(*) > 5")
    assert sorted(a.label for a in p.aggregates) == ["count(*)", "sum(age)"]  # the filter's COUNT is released
    assert rows(p, lambda a, i: 9) == [(9,)] and rows(p, lambda a, i: 3) == []


@pytest.mark.parametrize(
    "sql, needle",
    [
        ("SELECT LN(COUNT(*)) FROM pums", "compute it in the client"),
        ("SELECT COUNT(*) FROM (SELECT * FROM pums LIMIT 10) s", "outer query"),
        ("SELECT sex, SUM(c) FROM (SELECT sex, COUNT(*) AS c FROM pums GROUP BY sex) s", "or only COUNT(*)"),
        (
            "SELECT SUM(c) FROM (SELECT sex, COUNT(*) AS c FROM pums GROUP BY sex) s GROUP BY sex",
            "inner query",
        ),
        ("SELECT x FROM (SELECT sex, COUNT(*) AS c FROM pums GROUP BY sex) s", "its columns: sex, c"),
        ("SELECT COUNT(*) + 'a' FROM pums", "operator +"),
    ],
)
def test_refusals_say_what_to_write(config, sql, needle):
    with pytest.raises(Refusal) as e:
        plan(config, sql)
    assert needle in e.value.message + (e.value.hint or "")


# ---- conditional counts: one more aggregate sharing ε ---------------------------------


def test_conditional_counts_are_one_aggregate(config):
    p = plan(
        config,
        "SELECT COUNT(*) FILTER (WHERE age > 40) AS a, SUM(CASE WHEN age > 40 THEN 1 ELSE 0 END) AS b, "
        "COUNT(CASE WHEN age > 40 THEN 1 END) AS c, SUM(CASE WHEN age > 40 THEN 2.5 END) AS d FROM pums",
    )
    assert [a.label for a in p.aggregates] == ['count(*) filter (where "age" > 40)']
    assert p.where is None  # a filter on one aggregate, not on the rows
    assert rows(p, lambda a, i: 4) == [(4, 4, 4, Decimal("10.0"))]
    assert output_types(p) == [20, 20, 20, 1700]
    other = plan(config, "SELECT COUNT(*) FILTER (WHERE age > 41) FROM pums")
    assert other.canonical() != p.canonical()


CONDITIONAL = (
    "SELECT COUNT(*) FILTER (WHERE age > 30), SUM(CASE WHEN sex = 1 THEN 1 ELSE 0 END), "
    "COUNT(CASE WHEN state = 'ca' OR age IS NULL THEN 1 END), COUNT(*) FROM pums"
)


def _exact(con, p):
    """The exact measures of plan ``p`` (the backend scan, no noise)."""
    got = rewriter.complete(
        p, con.execute(rewriter.to_sql(p, "duckdb" if hasattr(con, "sql") else "postgres")).fetchall()
    )
    return [tuple(int(v) for v in r) for r in got]


def test_conditional_count_measures_equal_the_backend(config, duck, pg):
    p = plan(config, CONDITIONAL)
    for con in (duck, pg):
        direct = [tuple(int(v) for v in r) for r in con.execute(CONDITIONAL).fetchall()]
        assert _exact(con, p) == direct


# ---- the evaluator is Postgres: expressions over released values, compared with Postgres ----

EXPRESSIONS = [
    "{c} / {s}",
    "{s} / {c}",
    "{c} * 100.0 / 7",
    "{c} * 1.0 / 3",
    "{s} % {c}",
    "-{s} / {c}",
    "-{s} % {c}",
    "POWER({a}, 2)",
    "{a} * 2",
    "{a} / {c}",
    "{c} + {a}",
    "SQRT({c})",
    "ABS(-{s})",
    "PI() * {c}",
    "ROUND({a})",
    "CAST({a} AS INTEGER)",
    "ROUND({c} * 100.0 / 7, 1)",
    "CASE WHEN {c} > 5 THEN {a} ELSE 0 END",
    "COALESCE(NULL, {c})",
    "NULLIF({c}, 7)",
    "GREATEST({c}, {s}, 3)",
    "{c} > {a} AND {s} < 0",
    "{c} * 2.5 - {s}",
    "{s} * 1",
    "FLOOR({a} / 3)",
    "CEIL({c} / 2.0)",
]


@pytest.mark.parametrize("expr", EXPRESSIONS)
@pytest.mark.parametrize("c, s, a", [(7, -23, 2.5), (1000, 45017, 45.017), (3, 0, -0.125)])
def test_evaluation_equals_postgres(config, pg, expr, c, s, a):
    p = plan(config, "SELECT " + expr.format(c="COUNT(*)", s="SUM(age)", a="AVG(age)") + " FROM pums")
    sql = "SELECT " + expr.format(c=f"({c}::bigint)", s=f"({s}::bigint)", a=f"({a!r}::float8)")
    release = lambda agg, i: {"count": c, "sum": s, "avg": a}[agg.func]
    try:
        cur = pg.execute(sql)
    except psycopg.errors.DivisionByZero:  # Postgres raises 22012: so does dpgate
        with pytest.raises(SqlError) as e:
            rows(p, release)
        assert e.value.sqlstate == "22012"
        return
    ((ours,),) = rows(p, release)
    (theirs,) = cur.fetchone()
    assert ours == theirs and type(ours) is type(theirs)
    # dpgate returns every integer as bigint (int8), also CAST(… AS INTEGER)
    assert output_types(p) == [{23: 20}.get(cur.description[0].type_code, cur.description[0].type_code)]


def test_plan_templates_never_reuse_a_post_processing_constant(config):
    """The template fast path (rewriter.template) fills WHERE literals only: a constant of an
    outer filter, a conditional count or HAVING must come from the statement itself."""
    from rewriter.template import Templates

    cache = Templates()
    base = (
        "SELECT sex, c FROM (SELECT sex, COUNT(*) AS c FROM pums WHERE age > {a} GROUP BY sex) s "
        "WHERE c > {b}"
    )
    for a, b in [(30, 10), (31, 11), (32, 12)]:
        sql = base.format(a=a, b=b)
        assert cache.plan(sql, config, "duckdb") == plan(config, sql)
    for q in [
        "SELECT COUNT(*) FILTER (WHERE age > {a}) FROM pums WHERE age < {b}",
        "SELECT SUM(age) FILTER (WHERE age > {a}), AVG(age) FILTER (WHERE educ > {a}) FROM pums "
        "WHERE age < {b}",
        "SELECT COUNT(*) FROM pums WHERE age < {b} HAVING COUNT(*) > {a}",
    ]:
        for a, b in [(30, 90), (31, 91), (32, 92)]:
            sql = q.format(a=a, b=b)
            got = cache.plan(sql, config, "duckdb")
            assert got.canonical() == plan(config, sql).canonical() and got == plan(config, sql)


# ---- the shapes BI tools generate (as their documented SQL generation writes them) ------------

BI = {
    "metabase scalar": (
        'SELECT "source"."count" AS "count" FROM (SELECT COUNT(*) AS "count" FROM "public"."pums") '
        'AS "source" LIMIT 1048575',
        "SELECT COUNT(*) FROM pums",
    ),
    "metabase nested": (
        'SELECT "source"."educ" AS "educ", "source"."count" AS "count" FROM (SELECT '
        '"public"."pums"."educ" AS "educ", COUNT(*) AS "count" FROM "public"."pums" GROUP BY '
        '"public"."pums"."educ" ORDER BY "public"."pums"."educ" ASC) AS "source" '
        'ORDER BY "source"."count" DESC, "source"."educ" ASC LIMIT 10',
        "SELECT educ, COUNT(*) FROM pums GROUP BY educ",
    ),
    "superset virtual dataset": (
        "SELECT educ AS educ, COUNT(*) AS count FROM (SELECT * FROM pums) AS "
        "virtual_table GROUP BY educ ORDER BY count DESC LIMIT 10000",
        "SELECT educ, COUNT(*) FROM pums GROUP BY educ",
    ),
    "tableau number of records": (
        'SELECT SUM(1) AS "Number of Records" FROM "public"."pums" "pums" HAVING (COUNT(1) > 0)',
        "SELECT COUNT(*) FROM pums",
    ),
    "tableau custom sql": (
        'SELECT COUNT(*) AS "a0" FROM (SELECT "age", "sex" FROM "pums") AS "t0" WHERE ("t0"."age" >= 18)',
        "SELECT COUNT(*) FROM pums WHERE age >= 18",
    ),
    "looker ratio": (
        "SELECT (SUM(age) * 1.0) / NULLIF(COUNT(*), 0) AS ratio FROM pums",
        "SELECT SUM(age), COUNT(*) FROM pums",
    ),
    "cte with ordered output": (
        "WITH base AS (SELECT age, sex FROM pums WHERE age > 0) SELECT sex, "
        "COUNT(*) AS n, AVG(age) AS a FROM base GROUP BY sex ORDER BY n DESC",
        "SELECT sex, COUNT(*), AVG(age) FROM pums WHERE age > 0 GROUP BY sex",
    ),
}


@pytest.mark.parametrize("name", sorted(BI))
def test_bi_shapes_are_the_plain_release(demo_config, name):
    sql, plain = BI[name]
    assert plan(demo_config, sql).canonical() == plan(demo_config, plain).canonical()


def test_metabase_nested_order_and_limit(demo_config):
    p = plan(demo_config, BI["metabase nested"][0])
    got = rows(p, lambda a, i: [5, 9, 9, 1][i % 4])  # educ 1..16
    assert got[:4] == [(2, 9), (3, 9), (6, 9), (7, 9)] and len(got) == 10


@pytest.fixture(scope="module")
def demo_config():
    import tomllib

    from config import parse_config
    from proxy.demo import demo_config_path

    data = tomllib.loads(demo_config_path().read_text())
    data["server"]["auth"] = "trust"
    return parse_config(data)


def test_arithmetic_failures_are_sql_errors(config):
    p = plan(config, "SELECT SUM(income) * 1e308 * 1e308, POWER(COUNT(*) * 1.0, 1000000) FROM pums")
    with pytest.raises(SqlError) as e:
        rows(p, lambda a, i: 1e300 if a.func == "sum" else 10)
    assert e.value.sqlstate == "22003"


def test_per_record_tables_answer_the_bare_aggregate(demo_config):
    from rewriter.per_record import build_pr_plan

    with pytest.raises(Refusal) as e:
        build_pr_plan(rewriter.parse("SELECT SUM(balance) / 2 FROM accounts"), demo_config)
    assert "compute in the client" in e.value.message
    for sql in (
        "SELECT SUM(balance) FILTER (WHERE branch = 1) FROM accounts",
        "SELECT COUNT(*) FILTER (WHERE branch = 1) FROM accounts",
    ):
        with pytest.raises(Refusal) as e:
            build_pr_plan(rewriter.parse(sql), demo_config)
        assert e.value.sqlstate == "0A000" and "put the condition in WHERE" in e.value.message


def test_aggregates_of_released_rows_equal_postgres(config, pg):
    """``SELECT COUNT(*), SUM(c), … FROM (… GROUP BY …) s WHERE …`` aggregates the released rows:
    the same release as the inner statement, and Postgres's answer over those rows."""
    outer = (
        "SELECT COUNT(*) AS n, SUM(c) AS s, AVG(c) AS a, MAX(c), MIN(educ), COUNT(c) FROM {src} WHERE c > 3"
    )
    p = plan(config, outer.format(src="(SELECT educ, COUNT(*) AS c FROM pums GROUP BY educ) s"))
    assert p.canonical() == plan(config, "SELECT educ, COUNT(*) FROM pums GROUP BY educ").canonical()
    released = [7 * i % 11 for i in range(16)]  # educ 1..16
    ours = rows(p, lambda a, i: released[i])
    values = ", ".join(f"({e}, {c}::bigint)" for e, c in zip(range(1, 17), released))
    cur = pg.execute(outer.format(src=f"(VALUES {values}) AS s(educ, c)"))
    assert ours == cur.fetchall()
    assert output_types(p) == [{23: 20}.get(d.type_code, d.type_code) for d in cur.description]
    empty = plan(
        config,
        "SELECT COUNT(*), SUM(c) FROM (SELECT sex, COUNT(*) AS c FROM pums GROUP BY sex) s WHERE c > 100",
    )
    assert rows(empty, lambda a, i: 1) == [(0, None)]


@pytest.mark.parametrize(
    "sql, kept",
    [
        ("SELECT sex, SUM(age + 1) FROM pums GROUP BY sex HAVING SUM(age + 1) > 10", lambda v: v > 10),
        ("SELECT sex, SUM(age + 1) FROM pums GROUP BY sex ORDER BY SUM(age + 1) DESC LIMIT 1", None),
    ],
)
def test_threshold_on_sum_of_an_expression_is_answered_from_released_cells(config, sql, kept):
    """The sparse vector technique thresholds one declared column; HAVING / top-c over SUM of
    an expression is evaluated on the released cells instead (post-processing)."""
    p = plan(config, sql)
    assert p.selection is None
    got = rows(p, lambda a, i: 5 + 10 * i)
    released = [5 + 10 * i for i in range(len(p.cells))]
    if kept is not None:
        assert [r[1] for r in got] == [v for v in released if kept(v)]
    else:
        assert [r[1] for r in got] == sorted(released, reverse=True)[:1]
