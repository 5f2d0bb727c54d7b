"""Every rewriter rule fails closed: a statement the rules do not fully understand is a
:class:`rewriter.errors.Refusal` (a SQLSTATE and what to write instead), never another
exception.

A fuzz (hypothesis, derandomized, bounded) over the demo config's tables writes
statements from odd pieces — casts to catalog, JSON, array, range, interval, domain and
time-zone types; unknown functions and operators; wrong arity, NULL, star and named
arguments, nested aggregates, FILTER, WITHIN GROUP, windows, subqueries in odd places —
and puts them where every rule reads: WHERE, GROUP BY, the SELECT list and its
aggregates, HAVING, ORDER BY, derived tables, CTEs and joins. Each statement is routed
and planned as the proxy does (central, MAX/MIN, partition selection, per-record, local,
public) and every plan is emitted for DuckDB, Postgres and Spark."""

from __future__ import annotations

import os
import tomllib
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rewriter
from config import parse_config
from proxy.demo import demo_config_path
from proxy.pipeline.partitions import floor_sql, selection_plan
from rewriter.errors import ExtremeAggregate, Refusal
from rewriter.extreme import build_extreme_plan, histogram_sql
from rewriter.local import plan_local
from rewriter.per_record import build_pr_plan
from rewriter.public import plan_public
from rewriter.route import route

EXAMPLES = int(os.environ.get("DPGATE_RW_FUZZ_EXAMPLES", "600"))  # more for a nightly-size run
DIALECTS = ("duckdb", "postgres", "spark")


def _demo():
    raw = tomllib.loads(demo_config_path().read_text())
    raw["server"] = {"auth": "trust"}
    for r in raw["roles"].values():
        r.pop("scram", None)
    return parse_config(raw)


CONFIG = _demo()
TABLES = {name: list(t.columns) for name, t in CONFIG.tables.items()}

TYPES = [
    "regclass",
    "oid",
    "regtype",
    "regproc",
    "regprocedure",
    "regnamespace",
    "regrole",
    "regconfig",
    "json",
    "jsonb",
    "interval",
    "timestamptz",
    "timestamp",
    "date",
    "time",
    "timetz",
    "int[]",
    "text[]",
    "int4range",
    "bytea",
    "uuid",
    "money",
    "inet",
    "xml",
    "tsvector",
    "point",
    "bit(3)",
    "varbit",
    "numeric(5,2)",
    "character varying(3)",
    "double precision",
    "boolean",
    '"char"',
    "name",
    "pg_catalog.int4",
    "public.my_domain",
    "my_domain",
    "integer[][]",
    "int8",
    "smallint",
    "real",
    "text",
    "unknown",
    "record",
    "void",
    "anyelement",
    "interval day to second",
    "time with time zone",
    "timestamp(3) with time zone",
    "bigint[]",
]
LITERALS = [
    "NULL",
    "1",
    "-1",
    "0.5",
    "'x'",
    "'2025-01-01'",
    "TRUE",
    "ARRAY[1, 2]",
    "'{1,2}'::int[]",
    "INTERVAL '1 day'",
    "'{}'::json",
    "ROW(1, 2)",
    "(1, 2)",
    "'1 day'::interval",
    "$1",
    "1e308",
    "'NaN'::float8",
    "'infinity'::timestamptz",
    "E'\\\\x'",
    "B'101'",
    "X'1F'",
    "DATE '2025-01-01'",
    "TIMESTAMP '2025-01-01 00:00'",
    "'pums'::regclass",
    "current_date",
    "now()",
    "CURRENT_USER",
    "9223372036854775808",
    "''",
]
FUNCS = [
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "variance",
    "stddev",
    "var_samp",
    "stddev_pop",
    "median",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "string_agg",
    "array_agg",
    "bool_and",
    "every",
    "json_agg",
    "corr",
    "covar_pop",
    "regr_slope",
    "grouping",
    "row_number",
    "rank",
    "lag",
    "coalesce",
    "nullif",
    "greatest",
    "least",
    "abs",
    "round",
    "trunc",
    "floor",
    "ceil",
    "sqrt",
    "ln",
    "log",
    "exp",
    "power",
    "mod",
    "sign",
    "length",
    "lower",
    "upper",
    "substr",
    "concat",
    "date_trunc",
    "date_part",
    "extract",
    "to_char",
    "to_date",
    "age",
    "pg_sleep",
    "random",
    "generate_series",
    "unnest",
    "pg_read_file",
    "nosuchfn",
    "cast",
    "width_bucket",
    "make_date",
    "jsonb_extract_path",
    "array_length",
    "cardinality",
    "format",
    "md5",
    "hash",
    "left",
    "position",
]


def _columns(table: str) -> st.SearchStrategy:
    cols = TABLES[table]
    odd = st.sampled_from([f"{table}.{cols[0]}", "*", "nosuch", f"{table}.*", "ctid", "t.x", '"Age"', "oid"])
    real = st.sampled_from(cols)
    return st.one_of(real, real, real, real, odd)


OPS = [
    "+",
    "-",
    "*",
    "/",
    "%",
    "^",
    "||",
    "=",
    "<>",
    "<",
    ">=",
    "AND",
    "OR",
    "IS DISTINCT FROM",
    "LIKE",
    "ILIKE",
    "~",
    "@>",
    "->>",
    "->",
    "#>",
    "&&",
    "<<",
    "&",
    "|",
    "#",
    "IS NOT DISTINCT FROM",
    "SIMILAR TO",
]


def _expr(table: str, depth: int = 2) -> st.SearchStrategy:
    """An expression over ``table``: mostly a column, a literal or one mild step from them
    (so the statement reaches the later rules), sometimes a wild one."""
    col = _columns(table)
    base = st.one_of(col, col, st.sampled_from(LITERALS))
    if depth == 0:
        return base
    sub = _expr(table, depth - 1)
    lit = st.sampled_from(LITERALS)
    mild = st.one_of(
        st.builds(lambda e, t: f"{e}::{t}", col, st.sampled_from(TYPES)),
        st.builds(lambda e, op, b: f"{e} {op} {b}", col, st.sampled_from(OPS), lit),
        st.builds(lambda f, e: f"{f}({e})", st.sampled_from(FUNCS), col),
        st.builds(
            lambda f, e: f"EXTRACT({f} FROM {e})",
            st.sampled_from(["year", "epoch", "dow", "nosuch", "timezone", "julian"]),
            col,
        ),
        st.builds(
            lambda u, e: f"date_trunc('{u}', {e})", st.sampled_from(["month", "hour", "x", "week"]), col
        ),
        st.builds(lambda e, a, b: f"{e} BETWEEN {a} AND {b}", col, lit, lit),
        st.builds(lambda e, xs: f"{e} IN ({', '.join(xs) or 'NULL'})", col, st.lists(lit, max_size=3)),
        st.builds(lambda e, x: f"{e} IS {x}", col, st.sampled_from(["NULL", "NOT NULL", "TRUE", "UNKNOWN"])),
        st.builds(lambda e, op, b: f"CASE WHEN {e} {op} {b} THEN {e} END", col, st.sampled_from(OPS), lit),
        st.builds(lambda e, b: f"coalesce({e}, {b})", col, lit),
        st.builds(lambda e: f"-{e}", col),
    )
    return st.one_of(base, base, mild, mild, mild, _wild(sub))


def _wild(sub: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.builds(lambda e, t: f"{e}::{t}", sub, st.sampled_from(TYPES)),
        st.builds(lambda e, t: f"CAST({e} AS {t})", sub, st.sampled_from(TYPES)),
        st.builds(
            lambda f, args: f"{f}({', '.join(args)})", st.sampled_from(FUNCS), st.lists(sub, max_size=3)
        ),
        st.builds(lambda f, e: f"{f}(*, {e})", st.sampled_from(FUNCS), sub),
        st.builds(lambda f, e: f"{f}(DISTINCT {e})", st.sampled_from(FUNCS), sub),
        st.builds(lambda f, e: f"{f}(x => {e})", st.sampled_from(FUNCS), sub),
        st.builds(lambda f, e, g: f"{f}({e}) FILTER (WHERE {g} IS NULL)", st.sampled_from(FUNCS), sub, sub),
        st.builds(lambda f, e: f"{f}(0.5) WITHIN GROUP (ORDER BY {e})", st.sampled_from(FUNCS), sub),
        st.builds(lambda f, e, g: f"{f}({e}) OVER (PARTITION BY {g})", st.sampled_from(FUNCS), sub, sub),
        st.builds(lambda f, e: f"{f}({f}({e}))", st.sampled_from(FUNCS), sub),
        st.builds(lambda f, e: f"{f}({e} ORDER BY {e})", st.sampled_from(FUNCS), sub),
        st.builds(lambda a, op, b: f"({a} {op} {b})", sub, st.sampled_from(OPS), sub),
        st.builds(lambda e: f"-{e}", sub),
        st.builds(lambda e: f"NOT {e}", sub),
        st.builds(
            lambda e, x: f"{e} IS {x}",
            sub,
            st.sampled_from(["NULL", "NOT NULL", "TRUE", "UNKNOWN", "NOT FALSE", "DOCUMENT"]),
        ),
        st.builds(lambda e, a, b: f"{e} BETWEEN {a} AND {b}", sub, sub, sub),
        st.builds(lambda e, a, b: f"{e} BETWEEN SYMMETRIC {a} AND {b}", sub, sub, sub),
        st.builds(lambda e, xs: f"{e} IN ({', '.join(xs) or 'NULL'})", sub, st.lists(sub, max_size=3)),
        st.builds(lambda e: f"{e} IN (SELECT 1)", sub),
        st.builds(
            lambda e, t: f"{e} = ANY(SELECT {TABLES[t][0]} FROM {t})", sub, st.sampled_from(list(TABLES))
        ),
        st.builds(lambda e, a: f"{e} = ANY({a})", sub, st.sampled_from(["ARRAY[1, 2]", "'{1}'", "NULL"])),
        st.builds(lambda e: f"EXISTS (SELECT {e})", sub),
        st.builds(lambda e: f"(SELECT {e})", sub),
        st.builds(lambda e, t: f"(SELECT COUNT(*) FROM {t} WHERE {e})", sub, st.sampled_from(list(TABLES))),
        st.builds(lambda c, a, b: f"CASE WHEN {c} THEN {a} ELSE {b} END", sub, sub, sub),
        st.builds(lambda e, a, b: f"CASE {e} WHEN {a} THEN {b} END", sub, sub, sub),
        st.builds(lambda e: f'{e} COLLATE "C"', sub),
        st.builds(lambda e: f"{e} AT TIME ZONE 'UTC'", sub),
        st.builds(lambda e: f"{e}[1]", sub),
        st.builds(lambda e: f"({e}).f", sub),
        st.builds(
            lambda f, e: f"EXTRACT({f} FROM {e})",
            st.sampled_from(["year", "epoch", "dow", "nosuch", "timezone", "julian"]),
            sub,
        ),
        st.builds(lambda e: f"date_trunc('month', {e})", sub),
        st.builds(lambda e: f"{e} + INTERVAL '1 day'", sub),
        st.builds(lambda e: f"SUBSTRING({e} FROM 1 FOR 2)", sub),
        st.builds(lambda e: f"TRIM(BOTH 'x' FROM {e})", sub),
        st.builds(lambda e: f"POSITION('a' IN {e})", sub),
        st.builds(lambda e: f"OVERLAY({e} PLACING 'x' FROM 1)", sub),
        st.builds(lambda e: f"{e}::regclass IS NULL", sub),
        st.builds(lambda e: f"GROUPING({e})", sub),
        st.builds(lambda e: f"ROW({e}, 1)", sub),
        st.builds(lambda e: f"ARRAY[{e}]", sub),
        st.builds(lambda e: f"ARRAY(SELECT {e})", sub),
    )


STATEMENTS = [
    "SELECT COUNT(*) FROM {t} WHERE {e}",
    "SELECT COUNT(*) FROM {t} WHERE {e} IS NULL",
    "SELECT COUNT(*) FROM {t} WHERE {e} = {e2}",
    "SELECT {e} AS g, COUNT(*) FROM {t} GROUP BY {e}",
    "SELECT {e}, COUNT(*) FROM {t} GROUP BY 1",
    "SELECT {c}, SUM({e}) FROM {t} GROUP BY {c}",
    "SELECT AVG({e}), COUNT({e2}) FROM {t}",
    "SELECT {e} FROM {t}",
    "SELECT {c}, COUNT(*) FROM {t} GROUP BY {c} HAVING {e} > 1",
    "SELECT {c}, COUNT(*) FROM {t} GROUP BY {c} HAVING COUNT({e}) > 10",
    "SELECT {c}, COUNT(*) AS n FROM {t} GROUP BY {c} ORDER BY {e}",
    "SELECT {c}, COUNT(*) AS n FROM {t} GROUP BY {c} ORDER BY n DESC LIMIT {e}",
    "SELECT COUNT(*) FROM (SELECT {e} AS x FROM {t}) s WHERE x IS NOT NULL",
    "SELECT x, COUNT(*) FROM (SELECT {e} AS x FROM {t}) s GROUP BY x",
    "SELECT SUM(x) FROM (SELECT {c}, {e} AS x FROM {t} WHERE {e2}) s",
    "SELECT n + 1 FROM (SELECT COUNT(*) AS n FROM {t} WHERE {e}) s",
    "SELECT {e} FROM (SELECT {c}, COUNT(*) AS n FROM {t} GROUP BY {c}) s",
    "WITH w AS (SELECT * FROM {t} WHERE {e}) SELECT COUNT(*) FROM w",
    "WITH w AS (SELECT {c}, COUNT(*) AS n FROM {t} GROUP BY {c}) SELECT {e} FROM w",
    "SELECT COUNT(*) FROM {t} JOIN stores s ON {e} = s.store_id",
    "SELECT s.area, COUNT(*) FROM {t} p JOIN stores s ON p.store = s.store_id WHERE {e} GROUP BY s.area",
    "SELECT COUNT(*) FROM {t} a JOIN {t} b ON {e}",
    "SELECT COUNT(*) FROM {t}, LATERAL (SELECT {e}) x",
    "SELECT MAX({e}) FROM {t}",
    "SELECT {c}, MIN({e}) FROM {t} GROUP BY {c}",
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY {e}) FROM {t}",
    "SELECT COUNT(DISTINCT {e}) FROM {t}",
    "SELECT DISTINCT {e} FROM {t}",
    "SELECT COUNT(*) FROM {t} GROUP BY ROLLUP({e})",
    "SELECT COUNT(*) FROM {t} WHERE {e} GROUP BY {c} HAVING {e2}",
    "SELECT COUNT(*) FILTER (WHERE {e}) FROM {t}",
    "SELECT {e} FROM {t} GROUP BY {c}",
    "SELECT COUNT(*) OVER (PARTITION BY {e}) FROM {t}",
    "SELECT COUNT(*) FROM {t} WHERE {c} IN (SELECT {e} FROM {t})",
    "SELECT COUNT(*) FROM {t} WHERE EXISTS (SELECT 1 FROM {t} x WHERE {e})",
    "SELECT COUNT(*) FROM {t} TABLESAMPLE SYSTEM ({e})",
    "SELECT COUNT(*) FROM {t} WHERE {e} ORDER BY {e2} LIMIT 1 OFFSET {e}",
    "SELECT {e} FROM {t} UNION SELECT COUNT(*) FROM {t}",
    "SELECT COUNT(*), {e} FROM {t}",
    "INSERT INTO trips (hour) VALUES ({e})",
    "EXPLAIN SELECT COUNT(*) FROM {t} WHERE {e}",
]


@st.composite
def statement(draw) -> str:
    t = draw(st.sampled_from(sorted(TABLES)))
    e, e2 = draw(_expr(t)), draw(_expr(t))
    c = draw(st.sampled_from(TABLES[t]))
    return draw(st.sampled_from(STATEMENTS)).format(t=t, e=e, e2=e2, c=c)


def plan_everything(sql: str) -> None:
    """Route and plan ``sql`` as the proxy does, and emit every plan for every backend;
    raises only :class:`Refusal` when the rules refuse it."""
    r = route(sql, CONFIG.tables)
    if r.kind == "explain":
        sql, r = r.body, r.inner
    if r.kind == "unparsed":
        raise r.error
    if r.kind not in ("dp", "public") or r.table is None:
        return  # catalog, views, INSERT: not the rewriter's rules
    tree = rewriter.parse(sql)
    table = CONFIG.tables[r.table]
    params = ["1"] if "$1" in sql else None
    if r.kind == "public":
        q = plan_public(tree, CONFIG, params)
        for d in DIALECTS:
            q.sql(d)
    elif table.mode == "local":
        plan_local(tree, CONFIG, params or [])
    elif table.privacy is not None:
        build_pr_plan(tree, CONFIG, params)
    elif r.planner == "extreme":  # chosen from the parse (rewriter.planner)
        xp = build_extreme_plan(tree, CONFIG, params)
        for d in DIALECTS:
            histogram_sql(xp, 0.0, 1.0, 16, True, d, "ab", floor=3 if xp.plan.selected else None)
    else:
        try:
            plan = rewriter.build_plan(tree, CONFIG, params)
        except ExtremeAggregate as e:  # the parse named the cells' planner for a MAX/MIN: wrong
            raise AssertionError(f"route chose the cells' planner for {sql!r}") from e
        for d in DIALECTS:
            rewriter.to_sql(plan, d, "ab")
            rewriter.to_sql(plan, d, "ab", frozen=True)
            rewriter.to_sql(plan, d, "ab", frozen=True, rows=True)
            if plan.selected:
                gw = SimpleNamespace(
                    backend=SimpleNamespace(
                        dialect=d, frozen=lambda *_: True, holds=lambda *_: True, decimals=lambda *_: {}
                    ),
                    config=SimpleNamespace(backend=SimpleNamespace(kept_rows=1_000_000)),
                )
                floor_sql(gw, plan, selection_plan(plan, 1.0, 1e-6), "ab")


def _check(sql: str) -> None:
    try:
        plan_everything(sql)
    except Refusal as r:
        assert r.sqlstate and len(r.sqlstate) == 5, (sql, r)
    # anything else propagates: a rule crashed instead of refusing


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(statement())
def test_every_rule_fails_closed(sql):
    _check(sql)


CRASHES = [
    "SELECT COUNT(*) FROM customers WHERE segment::regclass IS NULL",  # a type sqlglot does not know
    "SELECT COUNT(*) FROM pums WHERE age::regclass IS NULL",
    "SELECT store, COUNT(*) AS n FROM purchases GROUP BY store ORDER BY oid::regclass",
    "SELECT COUNT(*) FROM purchases WHERE ts::date BETWEEN '2025-01-01'::regclass AND 1",
    "SELECT COUNT(*) FROM purchases WHERE floor()",  # a function without its argument
    "SELECT floor() AS k, COUNT(*) FROM purchases GROUP BY 1",
    "SELECT x, COUNT(*) FROM (SELECT floor() AS x FROM purchases) s GROUP BY x",
]


@pytest.mark.parametrize("sql", CRASHES)
def test_statements_that_crashed_a_rule_are_refused(sql):
    with pytest.raises(Refusal) as r:
        plan_everything(sql)
    assert r.value.sqlstate and r.value.hint


# Aggregates with odd argument shapes, and time and cast expressions, in every clause a rule
# reads, over a central table with a privacy unit (purchases): each is planned or refused.
AGG_SHAPES = [
    "count()",
    "sum()",
    "count(*, amount)",
    "sum(amount, amount)",
    "sum(NULL)",
    "sum(sum(amount))",
    "avg(DISTINCT amount)",
    "percentile_cont() WITHIN GROUP (ORDER BY amount)",
    "percentile_cont(0.5, 0.2) WITHIN GROUP (ORDER BY amount)",
    "percentile_cont(0.5) WITHIN GROUP (ORDER BY amount, store)",
    "percentile_cont('x') WITHIN GROUP (ORDER BY amount)",
    "median(*)",
    "max()",
    "max(*)",
    "max(NULL)",
    "min(amount, store)",
    "max(amount) FILTER (WHERE store = 1)",
    "max(amount ORDER BY amount)",
    "variance(amount, amount)",
    "count(DISTINCT *)",
    "count(DISTINCT amount, store)",
    "count(*) FILTER (WHERE amount::regclass IS NULL)",
    "sum(amount::oid)",
    "avg(amount::regtype)",
    "sum(CAST(amount AS int[]))",
    "sum(amount)::regclass",
    "count(*)::json",
    "mode() WITHIN GROUP (ORDER BY amount)",
    "max(amount::interval)",
    "sum(x => amount)",
    "grouping(store)",
    "sum(amount) OVER ()",
]
TIME_SHAPES = [
    "ts::date",
    "ts::timestamptz",
    "ts::regclass",
    "date_trunc('month')",
    "date_trunc(ts)",
    "date_part(ts)",
    "ts AT TIME ZONE 'UTC'",
    "ts - ts",
    "to_char(ts)",
    "to_char(ts, 'YYYY', 'x')",
    "date()",
    "date(ts, ts)",
    "CAST(ts AS date)::regclass",
    "width_bucket(amount)",
    "floor()",
    "round(amount, 'x')",
    "trunc(amount, 1, 2)",
    "amount::numeric(5,2)",
    "store::regclass::text",
    "city::regtype",
    "coalesce()",
    "extract(nosuch from ts)",
    "now() - ts",
    "ts::date BETWEEN '2025-01-01'::regclass AND 1",
    "ts > ALL(ARRAY[now()])",
    "city::oid = 1",
    "(store, item)",
    "store[1]",
]


def test_odd_argument_shapes_in_every_clause():
    cases = []
    for f in AGG_SHAPES:
        cases += [
            f"SELECT {f} FROM purchases",
            f"SELECT store, {f} FROM purchases GROUP BY store",
            f"SELECT store FROM purchases GROUP BY store HAVING {f} > 1",
            f"SELECT store, COUNT(*) FROM purchases GROUP BY store ORDER BY {f}",
            f"SELECT city, {f} FROM purchases GROUP BY city",
        ]
    for e in TIME_SHAPES:
        cases += [
            f"SELECT COUNT(*) FROM purchases WHERE {e}",
            f"SELECT {e} AS k, COUNT(*) FROM purchases GROUP BY 1",
            f"SELECT SUM({e}) FROM purchases",
            f"SELECT MAX({e}) FROM purchases",
            f"SELECT x, COUNT(*) FROM (SELECT {e} AS x FROM purchases) s GROUP BY x",
            f"SELECT COUNT(*) FROM purchases p JOIN stores s ON p.store = s.store_id WHERE {e}",
        ]
    for sql in cases:
        _check(sql)
