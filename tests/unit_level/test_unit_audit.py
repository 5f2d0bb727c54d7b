"""Privacy audit of the privacy unit: neighbouring databases that differ by ONE
unit and all of its rows.

1. Sensitivity, exactly: for worst-case neighbours (a new unit with rows in every cell,
   many rows per cell, values at the bounds; an existing heavy unit removed), the bounded
   scan's exact measure vectors differ in L1 by at most k = min(G, cells)·R rows' worth —
   COUNT by ≤ k, clamped SUM by ≤ k·max(|lower|, |upper|) — and COUNT(DISTINCT unit) by
   ≤ min(G, cells). The mechanisms are pure ε/k-DP per row of that vector (geometric /
   discrete Laplace: Pr ratio ≤ e^{(ε/k)·L1}), so this is the whole per-unit proof's
   data-dependent step.
2. Empirically, end to end through the release code (noisy_answer at ε/k): for COUNT and
   AVG per cell, the events {release ≥ t} satisfy P_D ≤ e^ε·P_D' + 4σ and vice versa,
   σ the binomial standard error √(p(1-p)/N) of the estimate, N = 4000 per side, fixed seed.
"""

from __future__ import annotations

import math

import duckdb
import pytest

import rewriter
from mechanisms import SeededSource
from proxy.pipeline.central import mechanism_epsilon
from proxy.pipeline.release import noisy_answer
from rewriter.unit import factor
from support.bound import duck_rows

from .test_unit_bounds import CELLS, ROWS, _config

EPS = 1.0


def _scan(rows, sql, G, R):
    con = duckdb.connect()
    con.execute("CREATE TABLE t (u INTEGER, g INTEGER, a DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    plan = rewriter.build_plan(rewriter.parse(sql), _config(G, R))
    out = rewriter.complete(plan, duck_rows(con, rewriter.to_sql(plan, "duckdb", "5eed")))
    con.close()
    return plan, out


def neighbours():
    """(name, D') pairs: D' = D with one unit added or removed."""
    heavy_new = [(999, g, a) for g in CELLS for a in (10.0, 0.0) for _ in range(40)]
    yield "add a unit with 80 rows in every cell at the bounds", ROWS + heavy_new
    yield "add a unit with one row", ROWS + [(998, 2, 7.0)]
    yield "remove the heaviest unit", [r for r in ROWS if r[0] != 1]
    yield "remove a light unit", [r for r in ROWS if r[0] != 30]


@pytest.mark.parametrize("G,R", [(1, 1), (2, 3), (6, 5), (3, 40)])
@pytest.mark.parametrize("name,other", list(neighbours()), ids=lambda v: v if isinstance(v, str) else "")
def test_bounded_scan_sensitivity(G, R, name, other):
    sql = "SELECT g, COUNT(*), SUM(a), COUNT(a) FROM t GROUP BY g"
    plan, a = _scan(ROWS, sql, G, R)
    _, b = _scan(other, sql, G, R)
    k = factor(plan)
    assert k == min(G, len(CELLS)) * R
    l1 = [sum(abs(float(x[j]) - float(y[j])) for x, y in zip(a, b)) for j in (1, 2, 3)]
    assert l1[0] <= k and l1[2] <= k and l1[1] <= k * 10.0, (name, l1, k)
    plan_u, a = _scan(ROWS, "SELECT g, COUNT(DISTINCT u) FROM t GROUP BY g", G, R)
    _, b = _scan(other, "SELECT g, COUNT(DISTINCT u) FROM t GROUP BY g", G, R)
    assert sum(abs(int(x[1]) - int(y[1])) for x, y in zip(a, b)) <= factor(plan_u) == min(G, len(CELLS))


@pytest.mark.parametrize(
    "sql", ["SELECT g, COUNT(*) FROM t GROUP BY g", "SELECT g, AVG(a) FROM t GROUP BY g"]
)
def test_release_ratio_between_unit_neighbours(sql):
    G, R, N = 2, 3, 4000
    other = ROWS + [(999, g, 10.0) for g in CELLS for _ in range(50)]  # a heavy new unit
    plan, a = _scan(ROWS, sql, G, R)
    _, b = _scan(other, sql, G, R)
    eps = mechanism_epsilon(plan, EPS)
    assert math.isclose(eps, EPS / (G * R))

    def sample(cells, seed):
        src = SeededSource(seed)
        return [[v[0] for v in noisy_answer(plan, cells, eps, src)["values"]] for _ in range(N)]

    sa, sb = sample(a, 1), sample(b, 2)
    bound = math.exp(EPS)
    checked = 0
    for c in range(len(CELLS)):
        xs = sorted({round(float(v[c]), 1) for v in sa[:200]})
        for t in xs[::20]:
            pa = sum(float(v[c]) >= t for v in sa) / N
            pb = sum(float(v[c]) >= t for v in sb) / N
            for p, q in ((pa, pb), (pb, pa)):
                sd = math.sqrt(max(p * (1 - p), q * (1 - q), 1 / N) / N)
                assert p <= bound * q + 4 * (1 + bound) * sd, (sql, c, t, pa, pb)
            checked += 1
    assert checked >= 10


def test_join_sensitivity_between_unit_neighbours():
    """A lookup join (orders ⋈ customers on the unit; order_items through the reference to
    orders): removing one customer — their customer row, orders and order lines — moves the
    bounded scan's exact measures by at most k rows' worth in L1."""
    import tomllib

    from config import parse_config
    from proxy.demo import demo_config_path, shop

    raw = tomllib.loads(demo_config_path().read_text())
    raw["server"] = {"auth": "trust"}
    for r in raw["roles"].values():
        r.pop("scram", None)
    cfg = parse_config(raw)
    con = duckdb.connect()
    for sql in shop.statements(lambda n: f"range(0, {n}) AS t(i)"):
        con.execute(sql)
    heavy = con.execute(
        "SELECT customer_id FROM orders GROUP BY 1 ORDER BY COUNT(*) DESC LIMIT 1"
    ).fetchone()[0]
    queries = [
        "SELECT c.segment, COUNT(*), SUM(o.total) FROM orders o JOIN customers c "
        "ON o.customer_id = c.customer_id GROUP BY c.segment",
        "SELECT o.priority, COUNT(*), SUM(i.quantity) FROM order_items i JOIN orders o "
        "ON i.order_id = o.order_id GROUP BY o.priority",
    ]
    plans = [rewriter.build_plan(rewriter.parse(q), cfg) for q in queries]
    before = [rewriter.complete(p, duck_rows(con, rewriter.to_sql(p, "duckdb", "5eed"))) for p in plans]
    con.execute(
        f"DELETE FROM order_items WHERE order_id IN (SELECT order_id FROM orders WHERE customer_id = {heavy})"
    )
    con.execute(f"DELETE FROM orders WHERE customer_id = {heavy}")
    con.execute(f"DELETE FROM customers WHERE customer_id = {heavy}")
    after = [rewriter.complete(p, duck_rows(con, rewriter.to_sql(p, "duckdb", "5eed"))) for p in plans]
    for p, a, b, bound in zip(plans, before, after, (500.0, 5.0)):
        k = factor(p)
        l1 = [sum(abs(float(x[j]) - float(y[j])) for x, y in zip(a, b)) for j in (1, 2)]
        assert 0 < l1[0] <= k and l1[1] <= k * bound, (p.table, l1, k)
