"""The result-shape oracle for statements with several MAX/MIN/percentiles, or with them beside
COUNT/SUM/AVG, or in expressions and ORDER BY: dpgate's rows are Postgres's answer to the
analyst's SQL over the released cells. An in-process dpgate (ε = 20, seeded) answers each statement on DuckDB and on
Postgres; its stored release (every public-domain cell's released values) is written to a
Postgres table of cells, the statement is rewritten to read it (each aggregate replaced by
the column of its released value, WHERE and GROUP BY already applied), and Postgres's rows
— names, ORDER BY, OFFSET, LIMIT — must be dpgate's. The column names are also Postgres's
for the analyst's own text where Postgres can run it (it has no ``median``). The values'
accuracy is the mechanisms' (tests/e2e/test_e2e_quantiles_joint.py)."""

from __future__ import annotations

import copy
import math
from decimal import Decimal
from fractions import Fraction

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
    "SELECT g, MAX(i) - MIN(i) AS spread, COUNT(*) FROM fx GROUP BY g ORDER BY MIN(i) DESC, g",
    "SELECT g, MAX(f) / 2 AS half, percentile_cont(0.75) WITHIN GROUP (ORDER BY i) - "
    "percentile_cont(0.25) WITHIN GROUP (ORDER BY i) AS iqr FROM fx GROUP BY g ORDER BY iqr, g",
    "SELECT b, SUM(i) AS total, MAX(i) FROM fx GROUP BY b ORDER BY SUM(i) DESC, MAX(i) LIMIT 1",
    "SELECT g, MAX(i) / AVG(i) AS r, percentile_disc(0.9) WITHIN GROUP (ORDER BY f DESC) AS p10 "
    "FROM fx GROUP BY g ORDER BY g",
]

_EXTREMES = (exp.Max, exp.Min, exp.Median, exp.WithinGroup)


def _extreme_key(node: exp.Expression) -> tuple:
    """(kind, ascending q, column) of a MAX/MIN/median/percentile node, read from the SQL."""
    if isinstance(node, (exp.Max, exp.Min)):
        return (node.key, None, node.this.name)
    if isinstance(node, exp.Median):
        return ("q", Fraction(1, 2), node.this.name)
    ordered = node.expression.expressions[0]
    q = Fraction(Decimal(node.this.this.this))
    return ("q", 1 - q if ordered.args.get("desc") else q, ordered.this.name)


def _aggregates(tree: exp.Expression) -> list[exp.Expression]:
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (*_EXTREMES, exp.AggFunc)):
            out.append(node)
            continue
        stack.extend(node.iter_expressions())
    return out


def over_cells(sql: str, xp) -> str:
    """The analyst's statement reading the cells table: each aggregate — in the select list or
    ORDER BY, alone or in an expression — the column of its released value, found by what it
    asks (a MAX/MIN/percentile by function, level and column; another aggregate by its label);
    an unaliased aggregate item keeps dpgate's name; no WHERE or GROUP BY (the cells are the
    groups)."""
    plan = xp.plan
    part_of = {(p.func if p.q is None else "q", p.q, p.column): p.index for p in xp.parts}
    labels = [a.label for a in xp.central.aggregates] if xp.central is not None else []
    cell_of = {ci: j for j, ci in enumerate(xp.central_index) if ci is not None}
    tree = parse(sql)
    for i, item in enumerate(tree.expressions):
        out = plan.outputs[i]
        for node in _aggregates(item):
            if isinstance(node, _EXTREMES):
                j = part_of[_extreme_key(node)]
            else:
                j = cell_of[labels.index(node.sql("postgres").lower())]
            col = exp.column(f"a{j}")
            if node is item:
                item.replace(exp.alias_(col, out.name, quoted=True))
            else:
                node.replace(col)
    order = tree.args.get("order")
    for node in _aggregates(order) if order is not None else []:
        j = (
            part_of[_extreme_key(node)]
            if isinstance(node, _EXTREMES)
            else cell_of[labels.index(node.sql("postgres").lower())]
        )
        node.replace(exp.column(f"a{j}"))
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
    ref = pg.execute(over_cells(sql, xp))
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
