"""The result-shape oracle for statements with several MAX/MIN/percentiles, or with them beside
COUNT/SUM/AVG: dpgate's rows are Postgres's answer to the analyst's SQL over the released
cells. An in-process dpgate (ε = 20, seeded) answers each statement on DuckDB and on
Postgres; its stored release (every public-domain cell's released values) is written to a
Postgres table of cells, the statement is rewritten to read it (each aggregate replaced by
the column of its released value, WHERE and GROUP BY already applied), and Postgres's rows
— names, ORDER BY, OFFSET, LIMIT — must be dpgate's. The column names are also Postgres's
for the analyst's own text where Postgres can run it (it has no ``median``). The values'
accuracy is the mechanisms' (tests/e2e/test_e2e_quantiles_joint.py)."""

from __future__ import annotations

import copy
import math

import pytest
from shape import Dpgate
from shape_corpus import SHAPE_CONFIG, open_duckdb
from sqlglot import exp

from proxy.pipeline.rows import consistent_ranges
from proxy.stores.release_codec import decode_answer
from rewriter import parse
from rewriter.extreme import build_extreme_plan

JOINT = [
    "SELECT g, MAX(i), MIN(i) FROM fx GROUP BY g ORDER BY 2 DESC, g LIMIT 2",
    "SELECT g, COUNT(*) AS n, MAX(f) AS hi, median(i) FROM fx GROUP BY g ORDER BY n DESC, g",
    "SELECT percentile_cont(0.25) WITHIN GROUP (ORDER BY i) AS q1, median(i) AS q2, "
    "percentile_cont(0.75) WITHIN GROUP (ORDER BY i) AS q3 FROM fx",
    "SELECT b, SUM(i) AS total, MIN(f), MAX(f) FROM fx WHERE i > 0 GROUP BY b ORDER BY total LIMIT 1",
    "SELECT s, percentile_disc(0.1) WITHIN GROUP (ORDER BY f), "
    "percentile_disc(0.9) WITHIN GROUP (ORDER BY f) AS p90, COUNT(f) FROM fx GROUP BY s "
    "ORDER BY p90 DESC, s OFFSET 1",
    "SELECT g, AVG(i) AS mean, percentile_cont(0.5) WITHIN GROUP (ORDER BY i DESC) AS m, MIN(i) "
    "FROM fx WHERE g IN (0, 2) GROUP BY g ORDER BY g DESC",
    "SELECT MAX(i) AS a, MAX(i) AS b, MIN(f) FROM fx",
]

_AGGS = (exp.AggFunc, exp.WithinGroup, exp.Median)


def _outermost_aggregate(item: exp.Expression) -> exp.Expression | None:
    for node in item.walk():
        if isinstance(node, _AGGS):
            return node
    return None


def over_cells(sql: str, plan) -> str:
    """The analyst's statement reading the cells table: each aggregate item its released column
    (an unaliased one keeps dpgate's name), no WHERE or GROUP BY (the cells are the groups)."""
    tree = parse(sql)
    for item, out in zip(tree.expressions, plan.outputs):
        if out.source != "aggregate":
            continue
        agg = _outermost_aggregate(item)
        col = exp.column(f"a{out.index}")
        if agg is item:
            item.replace(exp.alias_(col, out.name, quoted=True))
        else:
            agg.replace(col)
    tree.set("where", None)
    tree.set("group", None)
    tree.set("from_", exp.From(this=exp.to_table("jcells")))
    return tree.sql("postgres")


@pytest.fixture(scope="module")
def duck_dp(tmp_path_factory):
    oracle = open_duckdb(tmp_path_factory.mktemp("joint-duck"))
    yield oracle.dp
    oracle.dp.close()


@pytest.fixture(scope="module")
def pg_dp(tmp_path_factory, oracle_pg):
    dsn = oracle_pg.info.dsn
    cfg = copy.deepcopy(SHAPE_CONFIG)
    cfg["backend"] = {"kind": "postgres", "dsn": f"{dsn} options='-c search_path=oracle_fx'", "pool_size": 1}
    dp = Dpgate(cfg, tmp_path_factory.mktemp("joint-pg"))
    yield dp
    dp.close()


def _latest(dp) -> dict:
    led = dp.gw.ledger
    with led._rlock:
        (text,) = led._rdb.execute("SELECT answer FROM releases ORDER BY id DESC LIMIT 1").fetchone()
    return decode_answer(text)


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return (
            a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-9)
        )
    return a == b


def _check(dp, pg, sql: str) -> None:
    got = dp.ask(sql)
    assert not got.refused, (sql, got.sqlstate, got.message)
    xp = build_extreme_plan(parse(sql), dp.gw.config)
    plan = xp.plan
    ans = _latest(dp)
    ranges = consistent_ranges(plan)
    keys = [g.column for g in plan.group_by]
    types = {"int": "bigint", "float": "double precision", "text": "text", "bool": "boolean"}
    cols = [f"{k} {types[g.type]}" for k, g in zip(keys, plan.group_by)]
    cols += [f"a{j} double precision" for j in range(len(plan.aggregates))]
    pg.execute("DROP TABLE IF EXISTS jcells")
    pg.execute(f"CREATE TEMP TABLE jcells ({', '.join(cols)})")
    with pg.cursor() as cur:
        for key, vals in zip(ans["keys"], ans["values"]):
            clamped = []
            for v, r in zip(vals, ranges):
                if r is not None and v is not None:
                    lo, hi = r
                    v = max(v, lo) if lo is not None else v
                    v = min(v, hi) if hi is not None else v
                clamped.append(v)
            cur.execute(f"INSERT INTO jcells VALUES ({', '.join(['%s'] * len(cols))})", [*key, *clamped])
    ref = pg.execute(over_cells(sql, plan))
    ref_rows = ref.fetchall()
    assert got.names == [d.name for d in ref.description], sql
    assert len(got.rows) == len(ref_rows), (sql, got.rows, ref_rows)
    for g_row, r_row in zip(got.rows, ref_rows):
        assert all(_same(a, b) for a, b in zip(g_row, r_row)), (sql, got.rows, ref_rows)
    if "median" not in sql:  # Postgres's names for the analyst's own text
        names = [d.name for d in pg.execute(sql).description]
        assert got.names == names, sql
    assert "ε split into" in got.notice


@pytest.mark.parametrize("sql", JOINT)
def test_joint_rows_are_the_sql_over_released_cells_duckdb(duck_dp, oracle_pg, sql):
    _check(duck_dp, oracle_pg, sql)


@pytest.mark.parametrize("sql", JOINT)
def test_joint_rows_are_the_sql_over_released_cells_postgres(pg_dp, oracle_pg, sql):
    _check(pg_dp, oracle_pg, sql)
