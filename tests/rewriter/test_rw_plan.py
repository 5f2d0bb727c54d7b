"""Plans, parameters, canonical forms and totality of the emitted predicates."""

from __future__ import annotations

import pytest

import rewriter
from rewriter.errors import Refusal
from rewriter.plan import GroupKey, Measure, OrderItem


def plan(config, sql, params=None):
    return rewriter.build_plan(rewriter.parse(sql), config, params)


# ---- plans -----------------------------------------------------------------------------


def test_count_star(config):
    p = plan(config, "SELECT COUNT(*) FROM pums")
    assert (p.table, p.source, p.where, p.group_by) == ("pums", "pums", None, ())
    assert p.measures == (Measure("count_rows"),)
    assert [a.label for a in p.aggregates] == ["count(*)"]
    assert [(o.name, o.source) for o in p.outputs] == [("count", "aggregate")]


def test_measures_are_shared(config):
    p = plan(
        config,
        "SELECT AVG(age), SUM(age) AS s, COUNT(age), count(*), COUNT(*) AS n2, avg(age) FROM public.pums",
    )
    assert p.measures == (
        Measure("sum", "age", "int", 0, 100),
        Measure("count", "age"),
        Measure("count_rows"),
    )
    assert [a.label for a in p.aggregates] == ["avg(age)", "sum(age)", "count(age)", "count(*)"]
    assert p.aggregates[0].measures == (0, 1)
    assert [o.index for o in p.outputs] == [0, 1, 2, 3, 3, 0]
    assert [o.name for o in p.outputs] == ["avg", "s", "count", "count", "n2", "avg"]


def test_group_keys_aliases_and_order(config):
    p = plan(
        config,
        "SELECT sex AS s, educ, COUNT(*) AS n FROM pums AS p WHERE p.age >= 18 "
        "GROUP BY s, 2 ORDER BY n DESC, 1 NULLS FIRST, educ LIMIT $1 OFFSET 2",
        [5],
    )
    assert p.group_by == (GroupKey("educ", "int", tuple(range(1, 17))), GroupKey("sex", "int", (0, 1)))
    assert [(o.name, o.source, o.index) for o in p.outputs] == [
        ("s", "group", 1),
        ("educ", "group", 0),
        ("n", "aggregate", 0),
    ]
    assert p.order_by == (OrderItem(2, True, True), OrderItem(0, False, True), OrderItem(1, False, False))
    assert (p.limit, p.offset) == (5, 2)
    assert p.where.sql("postgres") == '"age" >= 18'


def test_schema_qualified_columns_as_bi_tools_write_them(config):
    """Metabase and others qualify every column with schema and table: same plan as bare names."""
    bare = plan(config, "SELECT sex, count(*) AS count FROM pums WHERE age > 30 GROUP BY sex ORDER BY sex")
    full = plan(
        config,
        'SELECT "public"."pums"."sex" AS "sex", count(*) AS "count" FROM "public"."pums" '
        'WHERE "public"."pums"."age" > 30 GROUP BY "public"."pums"."sex" '
        'ORDER BY "public"."pums"."sex" ASC',
    )
    assert full.canonical() == bare.canonical() and full.order_by == bare.order_by
    for sql in (
        "SELECT COUNT(*) FROM pums p WHERE public.p.age > 3",  # an alias hides the table
        "SELECT COUNT(*) FROM pums WHERE other.pums.age > 3",
        "SELECT COUNT(*) FROM pums WHERE demo.public.pums.age > 3",
    ):
        with pytest.raises(Refusal) as e:
            plan(config, sql)
        assert e.value.sqlstate == "42P01"


@pytest.mark.parametrize(
    "bi,plain",
    [
        ("SELECT COUNT(1) FROM pums", "SELECT COUNT(*) FROM pums"),
        ("SELECT COUNT('x') AS count FROM pums", "SELECT COUNT(*) FROM pums"),
        (
            'SELECT SUM(CAST("pums"."income" AS DOUBLE PRECISION)) AS sum FROM "public"."pums" "pums"',
            "SELECT SUM(income) FROM pums",
        ),
        (
            "SELECT AVG(age::numeric) AS avg, AVG(CAST(age AS float)) AS avg FROM pums",
            "SELECT AVG(age), AVG(age) FROM pums",
        ),
        ("SELECT COUNT(TRY_CAST(age AS BIGINT)) AS count FROM pums", "SELECT COUNT(age) FROM pums"),
    ],
)
def test_bi_tool_aggregate_spellings_are_the_same_release(config, bi, plain):
    """COUNT(1) is COUNT(*); a cast that keeps every value of a numeric column changes nothing
    an aggregate sees: the same plan, so the same release (a repeat is free)."""
    a, b = plan(config, bi), plan(config, plain)
    assert a.canonical() == b.canonical() and [o.name for o in a.outputs] == [o.name for o in b.outputs]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT SUM(age::int) FROM pums",
        "SELECT SUM(income::bigint) FROM pums",
        "SELECT AVG(age::numeric(5,1)) FROM pums",
        "SELECT SUM(age::text) FROM pums",
        "SELECT COUNT(NULL) FROM pums",
    ],
)
def test_casts_that_change_values_stay_refused(config, sql):
    with pytest.raises(Refusal):
        plan(config, sql)


@pytest.mark.parametrize(
    "sql,name,typ,post",
    [
        ("SELECT ROUND(AVG(age), 2) FROM pums", "round", "numeric", (("round", 2),)),
        ("SELECT ROUND(AVG(age)) FROM pums", "round", "float", (("round", None),)),
        ("SELECT CAST(AVG(age) AS INTEGER) FROM pums", "avg", "int", (("cast", "int"),)),
        ("SELECT COUNT(*)::double precision FROM pums", "count", "float", (("cast", "float"),)),
        (
            "SELECT ROUND(AVG(age)::numeric, 1) AS a FROM pums",
            "a",
            "numeric",
            (("cast", "numeric"), ("round", 1)),
        ),
        ("SELECT FLOOR(SUM(income)) FROM pums", "floor", "float", (("floor", None),)),
        ("SELECT CEIL(SUM(age)) FROM pums", "ceil", "int", (("ceil", None),)),
    ],
)
def test_display_steps_over_one_aggregate(config, sql, name, typ, post):
    """Post-processing of the released value: Postgres's output name and type, and the same
    measurement (canonical text) as the bare aggregate."""
    p = plan(config, sql)
    (o,) = p.outputs
    assert (o.name, o.type, o.post) == (name, typ, post)
    inner = {
        "count": "COUNT(*)",
        "sum": f"SUM({p.aggregates[0].column})",
        "avg": f"AVG({p.aggregates[0].column})",
    }
    assert p.canonical() == plan(config, f"SELECT {inner[p.aggregates[0].func]} FROM pums").canonical()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT ROUND(AVG(age), age) FROM pums",
        "SELECT AVG(age)::text FROM pums",
        "SELECT ROUND(AVG(age), 99) FROM pums",
        "SELECT CAST(AVG(age) AS NUMERIC(4, 1)) FROM pums",
    ],
)
def test_other_expressions_over_aggregates_are_refused(config, sql):
    with pytest.raises(Refusal) as e:
        plan(config, sql)
    assert e.value.sqlstate == "0A000" and "ROUND" in e.value.message + (e.value.hint or "")


def test_post_process_matches_postgres():
    from decimal import Decimal

    from proxy.pipeline.postexpr import post_process

    assert post_process(2.5, (("cast", "int"),)) == 2 and post_process(3.5, (("cast", "int"),)) == 4  # rint
    assert post_process(2.345, (("round", 2),)) == Decimal("2.35")  # numeric: half away from zero
    assert post_process(-2.5, (("round", None),)) == -2.0  # round(float8) is rint
    assert post_process(7, (("cast", "float"),)) == 7.0 and post_process(None, (("round", 1),)) is None
    assert post_process(-1.5, (("floor", None),)) == -2.0 and post_process(-1.5, (("ceil", None),)) == -1.0
    assert post_process(12, (("cast", "numeric"), ("round", 1))) == Decimal("12.0")


def test_order_by_aggregate_expression(config):
    p = plan(config, "SELECT sex, SUM(income) FROM pums GROUP BY sex ORDER BY SUM(income)")
    assert p.order_by == (OrderItem(1, False, False),)


def test_text_and_bool_domains(config):
    p = plan(config, "SELECT state, flag, COUNT(*) FROM pums GROUP BY state, flag")
    assert p.group_by[1] == GroupKey("state", "text", ("ca", "ny", "tx"))
    assert p.n_cells == 6


def test_where_is_unqualified_and_total(config):
    p = plan(config, "SELECT COUNT(*) FROM pums t WHERE t.age + 1 > 30 AND 5 < t.income")
    sql = p.where.sql("postgres")
    assert 'CAST("age" AS DOUBLE PRECISION)' in sql and '"income" > 5' in sql
    assert "t." not in sql


def test_int_modulo_uses_absolute_divisor(config):
    p = plan(config, "SELECT COUNT(*) FROM pums WHERE age % -1 = 0")
    assert p.where.sql("postgres") == '("age" % 1) = 0'


def test_no_data_dependent_errors(config, duck, pg):
    """Predicates that naively overflow/underflow/divide by zero run on both backends."""
    for where in [
        "age * 1e18 > 5",
        "age * age * age * age * age * age * age * age > 1",
        "income * 1e300 > 1",
        "income * income * income > 0",
        "income / 1e-300 > 0",
        "income * 1e-300 * 1e-300 > 0",
        "income / 1e300 / 1e300 >= 0",
        "income + income + 1e300 > 0",
        "-income - 1e300 < 0",
        "hours * hours < 1",
        "abs(age) * 2147483647 * 2147483647 > 1",
        "round(income, 15) > 0",
        "round(income, -15) >= 0",
        "(age % 3) * 1e300 >= 0",
        "length(name) * 1e300 > 0",
        "greatest(income, hours) * 1e299 > 1",
        "coalesce(hours, income) / 3 > 1",
        "ceil(income) * floor(hours) > 0",
        "age::float * 1e300 > 0",
    ]:
        p = plan(config, f"SELECT COUNT(*), SUM(income), SUM(age) FROM pums WHERE {where}")
        duck.execute(rewriter.to_sql(p, "duckdb")).fetchall()
        pg.execute(rewriter.to_sql(p, "postgres")).fetchall()


# ---- parameters ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql,types",
    [
        ("SELECT COUNT(*) FROM pums WHERE age > $1", ["int"]),
        ("SELECT COUNT(*) FROM pums WHERE $1 < income AND name = $2", ["float", "text"]),
        ("SELECT COUNT(*) FROM pums LIMIT $1 OFFSET $2", ["int", "int"]),
        (
            "SELECT COUNT(*) FROM pums WHERE age BETWEEN $1 AND $2 OR state IN ($3, 'ca')",
            ["int", "int", "text"],
        ),
        ("SELECT COUNT(*) FROM pums WHERE name LIKE $1 AND flag = $2", ["text", "bool"]),
        ("SELECT COUNT(*) FROM pums WHERE age + $1 > $2", ["int", "int"]),  # as Postgres: int + int
        ("SELECT COUNT(*) FROM pums WHERE income / $1 > 2", ["float"]),
        ("SELECT COUNT(*) FROM pums WHERE $2 = $2 AND $1 IS NULL", [None, None]),
        ("SELECT COUNT(*) FROM pums WHERE $1", ["bool"]),
        ("SELECT COUNT(*) FROM pums WHERE coalesce(age, $1) > 3", ["int"]),
        ("SELECT COUNT(*) FROM pums WHERE $1::int > 3", ["int"]),
    ],
)
def test_param_types(config, sql, types):
    assert rewriter.param_types(rewriter.parse(sql), config) == types


@pytest.mark.parametrize(
    "sql,types,params,literal",
    [
        ("SELECT COUNT(*) FROM pums WHERE age > $1 + 1", ["int"], ["30"], "age > 30 + 1"),
        (
            "SELECT COUNT(*) FROM pums WHERE age BETWEEN $1 % 101 AND $2",
            ["int", "int"],
            ["130", "50"],
            "age BETWEEN 130 % 101 AND 50",
        ),
        ("SELECT COUNT(*) FROM pums WHERE income > $1 * 2.5", ["float"], ["1000.5"], "income > 1000.5 * 2.5"),
        ("SELECT COUNT(*) FROM pums WHERE age < $1 - 3", ["int"], [40], "age < 40 - 3"),
    ],
)
def test_an_untyped_parameter_takes_the_other_operands_type(config, sql, types, params, literal):
    """``$1 + 1`` as Postgres resolves ``unknown + integer``: Describe and Execute agree, and the
    bound statement is its literal twin (drivers that send parameters untyped: node-postgres, pgbench)."""
    assert rewriter.param_types(rewriter.parse(sql), config) == types
    twin = plan(config, f"SELECT COUNT(*) FROM pums WHERE {literal}")
    assert plan(config, sql, params).canonical() == twin.canonical()


def test_an_untyped_parameter_is_not_a_number_it_cannot_be(config):
    with pytest.raises(Refusal) as err:
        plan(config, "SELECT COUNT(*) FROM pums WHERE age > $1 + 1", ["2.5"])  # integer, as in Postgres
    assert err.value.sqlstate == "22023"


def test_params_bind_as_literals(config):
    p = plan(
        config,
        "SELECT COUNT(*) FROM pums WHERE age > $1 AND name = $2 AND income < $3 AND flag = $4",
        ["30", "o'brien", 2, "true"],
    )
    assert p.where.sql("postgres") == (
        '("age" > 30) AND ("flag" = TRUE) AND ("income" < 2) AND ("name" = \'o\'\'brien\')'
    )


@pytest.mark.parametrize(
    "params,state",
    [
        ([], "08P01"),
        ([1, 2], "08P01"),
        (["abc"], "22023"),
        ([30.5], "22023"),
        ([True], "22023"),
        ([float("inf")], "22023"),
    ],
)
def test_param_errors(config, params, state):
    with pytest.raises(Refusal) as err:
        plan(config, "SELECT COUNT(*) FROM pums WHERE age > $1", params)
    assert err.value.sqlstate == state and err.value.message


@pytest.mark.parametrize(
    "sql,params",
    [
        ("SELECT COUNT(*) FROM pums WHERE income / $1 > 1", [0]),
        ("SELECT COUNT(*) FROM pums WHERE age % $1 = 1", [0]),
        ("SELECT COUNT(*) FROM pums WHERE name LIKE $1", ["abc\\"]),
        ("SELECT COUNT(*) FROM pums LIMIT $1", [-1]),
    ],
)
def test_param_values_are_checked(config, sql, params):
    with pytest.raises(Refusal):
        plan(config, sql, params)


def test_params_unused_when_none_needed(config):
    with pytest.raises(Refusal) as err:
        plan(config, "SELECT COUNT(*) FROM pums", [1])
    assert err.value.sqlstate == "08P01"


# ---- canonical form ---------------------------------------------------------------------

SAME = [
    (
        "SELECT COUNT(*) FROM pums WHERE age > 30 AND sex = 1",
        "select   count(*)  from PUMS p where P.sex=1 and p.AGE>30.0",
        "SELECT COUNT(*) AS n FROM public.pums WHERE (1 = sex) AND (30 < age) ORDER BY 1 LIMIT 3",
        ("SELECT count(*) FROM pums WHERE age > $1 AND sex = $2", [30, 1]),
        ("SELECT count(*) FROM pums WHERE age > $1 AND sex = $2", ["30", "1"]),
    ),
    (
        "SELECT sex, educ, SUM(age), AVG(income) FROM pums GROUP BY sex, educ",
        "SELECT AVG(income) a, SUM(age) s, educ FROM pums GROUP BY educ, sex ORDER BY a DESC",
        "SELECT avg(income), sum(age), sum(age) FROM pums GROUP BY sex, educ",
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE (age > 3 OR name = 'x') AND income < 5.0",
        "SELECT COUNT(*) FROM pums WHERE income < 5 AND (name = 'x' OR age > 3)",
        "SELECT COUNT(*) FROM pums WHERE ((income < 5)) AND ((name = 'x') OR ((age > 3)))",
    ),
    (
        "SELECT COUNT(*) FROM pums WHERE age IN (1, 2, 3)",
        "SELECT COUNT(*) FROM pums WHERE age IN (3, 2, 1, 1.0)",
    ),
]

DIFFERENT = [
    "SELECT COUNT(*) FROM pums",
    "SELECT COUNT(*) FROM pums WHERE age > 30",
    "SELECT COUNT(*) FROM pums WHERE age >= 30",
    "SELECT COUNT(*) FROM pums WHERE age > 31",
    "SELECT COUNT(*) FROM pums WHERE income > 30",
    "SELECT COUNT(age) FROM pums WHERE age > 30",
    "SELECT SUM(age) FROM pums WHERE age > 30",
    "SELECT sex, COUNT(*) FROM pums WHERE age > 30 GROUP BY sex",
    "SELECT educ, COUNT(*) FROM pums WHERE age > 30 GROUP BY educ",
    "SELECT COUNT(*) FROM pums WHERE age > 30 OR sex = 1",
    "SELECT COUNT(*) FROM pums WHERE NOT age > 30",
]


def _canon(config, q):
    sql, params = q if isinstance(q, tuple) else (q, None)
    return plan(config, sql, params).canonical()


@pytest.mark.parametrize("group", SAME, ids=range(len(SAME)))
def test_canonical_equal(config, group):
    assert len({_canon(config, q) for q in group}) == 1


def test_canonical_different(config):
    canon = [_canon(config, q) for q in DIFFERENT]
    assert len(set(canon)) == len(canon)
    fps = {plan(config, q).fingerprint() for q in DIFFERENT}
    assert len(fps) == len(DIFFERENT)


def test_parse_errors():
    with pytest.raises(Refusal) as err:
        rewriter.parse("SELECT COUNT(* FROM pums")
    assert err.value.sqlstate == "42601" and "line" in err.value.message
    with pytest.raises(Refusal):
        rewriter.parse("SELECT 1; SELECT 2")
