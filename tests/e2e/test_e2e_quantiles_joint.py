"""Several MAX/MIN/percentiles in one statement, and beside COUNT/SUM/AVG, on a central table
through the wire on DuckDB and Postgres: one backend statement (each column's histogram and
the cells), the tier's ε split equally among the releases (sequential composition, stated in
the NOTICE and EXPLAIN), charged once, the percentiles of a column returned ascending, and the
rows the SQL's over the released cells (names, ORDER BY, LIMIT).

A statement with no COUNT of a MAX/MIN/percentile's rows releases the row check's count at
1/20 of ε first (proxy/pipeline/rowcheck.py): its releases share the other 19/20 (``REST``).

Tolerances are the mechanisms' 95% statements at the share of ε each ran at (fixed seed):
the exponential mechanism's rank margin ⌈(2/ε) ln((U + 1)/β)⌉ for a quantile (Smith 2011;
McSherry-Talwar Thm 8), the shifted-rank mechanism's 2·k0 rows beyond MAX/MIN (Chen et al.
2025 §6.4), and the cells' stated half-widths."""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from fractions import Fraction

import psycopg
import pytest

from mechanisms.extreme import ExtremeGrid
from proxy.demo import pums_rows
from proxy.pipeline.extreme import quantile_mechanism
from proxy.stores.release_codec import decode_answer
from rewriter import parse, to_sql
from rewriter.extreme import GridSql, build_extreme_plan, histogram_sql, joint_sql

ROWS = pums_rows()  # (age, sex, educ, race, income, married)
AGE, SEX, INCOME = 0, 1, 4
BETA = 0.05
REST = 0.95  # ε 1 less the row check's 1/20, for a statement with no COUNT beside its ranks


def connect(service, role="other"):
    return psycopg.connect(service.dsn(role), autocommit=True)


def run(service, sql, role="other", params=None):
    notes: list[str] = []
    with connect(service, role) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        cur = c.execute(sql, params)
        return [d.name for d in cur.description], cur.fetchall(), notes


def spent(service, role="other"):
    return service.gw.ledger.spent(role, "day")


def latest_answer(service, role="other") -> dict:
    led = service.gw.ledger
    with led._rlock:
        (text,) = led._rdb.execute(
            "SELECT answer FROM releases WHERE role = ? ORDER BY id DESC LIMIT 1", (role,)
        ).fetchone()
    return decode_answer(text)


@contextlib.contextmanager
def backend_sql(service):
    seen: list[str] = []
    real = service.gw.backend.fetch

    async def spy(sql, *a, **k):
        seen.append(sql)
        return await real(sql, *a, **k)

    service.gw.backend.fetch = spy
    try:
        yield seen
    finally:
        del service.gw.backend.fetch


def margin(eps: float, U: int) -> int:
    """⌈(2/ε) ln((U + 1)/β)⌉: the exponential mechanism's 95% rank margin (k0 of MAX/MIN)."""
    return math.ceil(2.0 / eps * math.log((U + 1) / BETA))


def chosen(eps: float, U: int, q: str):
    """The percentile mechanism the proxy chooses at ``eps`` on an integer grid of U + 1 points."""
    return quantile_mechanism(eps, ExtremeGrid(0.0, float(U), 1.0, U, True), Fraction(q))


def quantile_ok(values, y, q, k, step, rounds=1):
    """|#{x ≤ y} − q·n| ≤ k + the rows on one grid point (per round of draws), allowing one
    grid step of rounding."""
    ties = rounds * max(Counter(int(x // step) for x in values).values())
    below = sum(x <= y + step for x in values)
    above = sum(x <= y - step for x in values)
    return above - k - ties <= q * len(values) <= below + k + ties


def beyond_ok(values, y, func, k0, step):
    """At most 2·k0 rows (plus the rows on one grid point) beyond the released MAX/MIN."""
    ties = max(Counter(int(x // step) for x in values).values())
    out = sum(x > y + step for x in values) if func == "max" else sum(x < y - step for x in values)
    return out <= 2 * k0 + ties


INCOME_STEP = 5.0  # [0, 500000] on 100,000 steps
INCOME_U, AGE_U = 100_000, 100


def test_box_plot_three_percentiles_one_scan(service):
    """p25, median and p75 per sex from ONE histogram scan, drawn together by recursive
    splitting (Kaplan et al. 2022): ⌈log2 4⌉ = 2 rounds of ε/2 (the median first, then p25 and
    p75 on the rows below and above it), ascending by construction, each within d·m rows of
    q·n (d its depth, m = ⌈(2L/ε) ln((U + 1)·L/β)⌉) plus one grid point's rows per round;
    charged ε once; a repeat is free; the NOTICE states the split."""
    sql = (
        "SELECT sex, percentile_cont(0.25) WITHIN GROUP (ORDER BY income) AS p25, median(income), "
        "percentile_cont(0.75) WITHIN GROUP (ORDER BY income) FROM pums GROUP BY sex ORDER BY sex"
    )
    before = spent(service)
    with backend_sql(service) as seen:
        names, rows, notes = run(service, sql)
    assert len(seen) == 1 and spent(service) == pytest.approx(before + 1.0)
    assert names == ["sex", "p25", "median", "percentile_cont"]
    assert [r[0] for r in rows] == [0, 1]
    L = 2
    m = math.ceil(2.0 * L / REST * math.log((INCOME_U + 1) * L / BETA))
    for sex, p25, p50, p75 in rows:
        assert p25 <= p50 <= p75
        group = [r[INCOME] for r in ROWS if r[SEX] == sex]
        for q, y, depth in ((0.25, p25, 2), (0.5, p50, 1), (0.75, p75, 2)):
            assert quantile_ok(group, y, q, depth * m, INCOME_STEP, depth), (sex, q, y)
    note = notes[0]
    assert (
        "ε split into 2 equal shares (sequential composition, after the row count's 1/20): ε 0.475 each"
        in note
    )
    assert "the 3 percentiles of income take 2 of them (recursive splitting)" in note
    assert f"median within {m} rows of 0.5·n" in note and f"p25 within {2 * m} rows of 0.25·n" in note
    assert "ε charged 1;" in note and "recursive_quantiles" in note
    _, again, notes2 = run(service, sql.lower())
    assert again == rows and "repeat" in notes2[0] and spent(service) == pytest.approx(before + 1.0)


def test_two_percentiles_each_at_half_and_sorted(service):
    """Two percentiles of a column (below the tree's threshold): one exponential mechanism
    each at ε/2, within ⌈(2/(ε/2)) ln((U + 1)/β)⌉ rows, returned ascending."""
    names, rows, notes = run(
        service,
        "SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY age) AS p90, "
        "percentile_disc(0.1) WITHIN GROUP (ORDER BY age) AS p10 FROM pums",
    )
    ((p90, p10),) = rows
    assert p10 <= p90 and isinstance(p10, int)
    k = chosen(REST / 2, AGE_U, "0.9").rank_half_width()  # the protected quantile's: margin + its shift
    assert k >= margin(REST / 2, AGE_U) and k == chosen(REST / 2, AGE_U, "0.1").rank_half_width()
    ages = [r[AGE] for r in ROWS]
    assert quantile_ok(ages, p10, 0.1, k, 1) and quantile_ok(ages, p90, 0.9, k, 1)
    assert "ε split into 2 equal shares" in notes[0] and f"within {k} rows of 0.9·n" in notes[0]
    assert "returned in ascending order (post-processing)" in notes[0]


def test_max_and_min_of_two_columns(service):
    """MAX(income) and MIN(age): two capped-rank releases at (19/20)·ε/2, one backend statement."""
    before = spent(service)
    with backend_sql(service) as seen:
        names, rows, notes = run(service, "SELECT MAX(income), MIN(age) AS youngest FROM pums")
    assert len(seen) == 1 and spent(service) == pytest.approx(before + 1.0)
    assert names == ["max", "youngest"]
    ((top, young),) = rows
    assert isinstance(young, int) and isinstance(top, float)
    k_inc, k_age = margin(REST / 2, INCOME_U), margin(REST / 2, AGE_U)
    assert beyond_ok([r[INCOME] for r in ROWS], top, "max", k_inc, INCOME_STEP)
    assert beyond_ok([r[AGE] for r in ROWS], young, "min", k_age, 1)
    assert "ε split into 2 equal shares" in notes[0]
    assert f"k0 = {k_inc}" in notes[0] and f"k0 = {k_age}" in notes[0]


def test_extremes_beside_count_and_avg_grouped(service):
    """COUNT(*), AVG, MAX and MIN per sex in one statement: three releases (MAX, MIN, and the
    cells) at ε/3 each, one backend statement; each value within its own statement; the rows
    are the SQL's over the released cells (ORDER BY a released value, LIMIT)."""
    sql = (
        "SELECT sex, COUNT(*) AS n, AVG(income) AS mean, MAX(income) AS top, MIN(income) AS bottom "
        "FROM pums GROUP BY sex ORDER BY n DESC LIMIT 1"
    )
    before = spent(service)
    with backend_sql(service) as seen:
        names, rows, notes = run(service, sql)
    assert len(seen) == 1 and spent(service) == pytest.approx(before + 1.0)
    assert names == ["sex", "n", "mean", "top", "bottom"]
    ans = latest_answer(service)
    cells = [(k[0], *v) for k, v in zip(ans["keys"], ans["values"])]
    assert rows == [max(cells, key=lambda c: c[1])]  # ORDER BY n DESC LIMIT 1 over the released cells
    assert ans["epsilon"][:2] == [pytest.approx(1 / 6)] * 2  # COUNT and AVG share the cells' ε/3
    k0 = margin(1 / 3, INCOME_U)
    for sex, n, mean, top, bottom in cells:
        group = [r[INCOME] for r in ROWS if r[SEX] == sex]
        assert abs(n - len(group)) <= ans["half_width"][0]
        assert beyond_ok(group, top, "max", k0, INCOME_STEP) and beyond_ok(
            group, bottom, "min", k0, INCOME_STEP
        )
        assert 0 <= mean <= 500_000
    note = notes[0]
    assert "ε split into 3 equal shares" in note and "n, mean (the cells, at ε 0.333333)" in note
    assert "geometric_count" in note and "capped-rank" in note


def test_explain_states_the_split_and_charges_nothing(service):
    before = spent(service)
    _, lines, _ = run(
        service,
        "EXPLAIN SELECT COUNT(*), SUM(income), percentile_disc(0.9) WITHIN GROUP (ORDER BY age) FROM pums",
    )
    text = "\n".join(r[0] for r in lines)
    assert spent(service) == before
    assert "ε split into 2 equal shares (sequential composition): ε 0.5 each" in text
    m = chosen(0.5, AGE_U, "0.9")
    assert (
        f"1) percentile_disc: percentile_disc(0.9) WITHIN GROUP (ORDER BY age) by {m.name} at ε 0.5" in text
    )
    assert "2) the cells at ε 0.5" in text and "UNION ALL" in text
    assert f"within {m.rank_half_width()} rows of 0.9·n" in text and "chosen by the error laws" in text


def test_joint_scan_is_exact(service):
    """Before noise, each part of the one statement is what its own scan returns: the
    histogram of each column and the cells (DuckDB and Postgres alike)."""
    gw = service.gw
    xp = build_extreme_plan(
        parse(
            "SELECT sex, COUNT(*), SUM(age), MAX(income), median(age) FROM pums WHERE educ >= 9 GROUP BY sex"
        ),
        gw.config,
    )
    grids = {}
    for col in xp.columns:
        spec = gw.config.tables["pums"].columns[col]
        g = ExtremeGrid.for_column(spec.type, spec.lower, spec.upper)
        grids[col] = GridSql(g.lower, g.step, g.U, g.integral and g.step == 1.0)
    dialect = gw.backend.dialect

    def fetch(sql):
        return service._call(gw.backend.fetch(sql))

    rows = fetch(joint_sql(xp, grids, dialect))
    got = Counter((r[0], *r[1:]) for r in rows)
    want = Counter((-1, r[0], None, None, *r[1:]) for r in fetch(to_sql(xp.central, dialect)))
    for i, col in enumerate(xp.columns):
        g = grids[col]
        one = build_extreme_plan(
            parse(f"SELECT sex, MAX({col}) FROM pums WHERE educ >= 9 GROUP BY sex"), gw.config
        )
        hist = fetch(histogram_sql(one, g.lower, g.step, g.U, g.integral_step, dialect))
        want.update((i, k, v, n, None, None) for k, v, n in hist)
    assert got == want and xp.columns == ["income", "age"]
    truth = Counter((r[SEX], r[AGE]) for r in ROWS if r[2] >= 9)
    assert {(k, v): n for p, k, v, n, *_ in rows if p == 1} == dict(truth)


def test_per_unit_table_group_privacy(service):
    """purchases (per customer, ≤ 10 rows): the extremes run at (ε/2)/10 and the cells at ε/2
    over their own factor; both stated."""
    names, rows, notes = run(service, "SELECT COUNT(*), MAX(amount) FROM purchases")
    assert names == ["count", "max"] and len(rows) == 1
    assert "ε split into 2 equal shares" in notes[0]
    assert "run at ε/10 of their share" in notes[0] and "mechanisms run at ε/10" in notes[0]


def test_extended_protocol_with_parameters(service):
    with connect(service) as conn:
        cur = conn.cursor(binary=True)
        rows = cur.execute(
            "SELECT sex, MIN(age) AS lo, MAX(age) AS hi, COUNT(*) AS n FROM pums WHERE age >= %s "
            "GROUP BY sex ORDER BY sex",
            (30,),
            prepare=True,
        ).fetchall()
        assert [d.name for d in cur.description] == ["sex", "lo", "hi", "n"]
    assert [r[0] for r in rows] == [0, 1]
    assert all(isinstance(v, int) for r in rows for v in r)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT MAX(income) FILTER (WHERE age > 30), COUNT(*) FROM pums",
        "SELECT sex, MAX(income), MIN(income) FROM pums GROUP BY ROLLUP(sex)",
        "SELECT MAX(income), MIN(income) FROM pums WHERE '__dpgate_x0' = '__dpgate_x0' OR age > 1",
    ],
)
def test_refusals_charge_nothing(service, sql):
    before = spent(service)
    with connect(service) as conn:
        with pytest.raises(psycopg.Error) as e:
            conn.execute(sql)
    assert e.value.sqlstate == "0A000", e.value
    assert e.value.diag.message_hint and spent(service) == before


def test_keys_without_a_public_domain(service):
    """GROUP BY city (no public domain): the cities chosen once by partition selection (half
    of ε, and δ), MAX and the median of each chosen city at the other half, split in two;
    one backend statement; ε and δ charged once."""
    before = spent(service)
    with backend_sql(service) as seen:
        names, rows, notes = run(
            service,
            "SELECT city, MAX(amount) AS hi, median(amount) AS mid FROM purchases GROUP BY city "
            "ORDER BY city LIMIT 5",
        )
    assert len(seen) == 1 and spent(service) == pytest.approx(before + 1.0)
    assert names == ["city", "hi", "mid"] and 0 < len(rows) <= 5
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    cities = {r[0] for r in service._call(service.gw.backend.fetch("SELECT DISTINCT city FROM purchases"))}
    assert all(r[0] in cities and 0 <= r[2] <= 500 and 0 <= r[1] <= 500 for r in rows)
    note = notes[0]
    assert (
        "key(s) released" in note
        and f"values at ε {REST / 2:g}" in note
        and "ε split into 2 equal shares" in note
    )
    assert "δ charged 1e-07" in note


def test_over_a_lookup_join(service):
    """The columns as the central rules resolve them (a qualified column of a lookup join)."""
    names, rows, notes = run(
        service,
        "SELECT s.area, MAX(p.amount) AS top, COUNT(*) AS n, median(p.amount) FROM purchases p "
        "JOIN stores s ON p.store = s.store_id GROUP BY s.area ORDER BY s.area",
    )
    assert names == ["area", "top", "n", "median"]
    assert [r[0] for r in rows] == ["center", "north", "south"]
    assert all(0 <= r[3] <= r[1] <= 500 for r in rows)  # the median below the MAX: far apart on this data
    assert "ε split into 3 equal shares" in notes[0]


def test_a_large_public_domain(service):
    """200 items: the cells are released column by column (a batch), the extremes per item."""
    names, rows, notes = run(
        service,
        "SELECT item, COUNT(*) AS n, MAX(amount) AS top FROM purchases GROUP BY item ORDER BY n DESC LIMIT 3",
    )
    assert names == ["item", "n", "top"] and len(rows) == 3
    assert rows == sorted(rows, key=lambda r: -r[1]) and all(0 <= r[2] <= 500 for r in rows)
    assert "ε split into 2 equal shares" in notes[0]


def test_expressions_over_released_extremes(service):
    """The range, the interquartile range, a ratio to AVG and ORDER BY an extreme spelled out:
    post-processing of the released parts (each drawn once, at its share), evaluated as
    Postgres would over the released values."""
    sql = (
        "SELECT sex, MAX(income) - MIN(income) AS spread, "
        "percentile_cont(0.75) WITHIN GROUP (ORDER BY income) - percentile_cont(0.25) WITHIN GROUP "
        "(ORDER BY income) AS iqr, MAX(income) / AVG(income) AS r FROM pums GROUP BY sex ORDER BY MIN(income) DESC"
    )
    before = spent(service)
    names, rows, notes = run(service, sql)
    assert names == ["sex", "spread", "iqr", "r"] and spent(service) == pytest.approx(before + 1.0)
    ans = latest_answer(service)
    # parts: max, min, p75, p25 (indices 0, 1, 2, 3), the cells' AVG at 4
    cells = {k[0]: v for k, v in zip(ans["keys"], ans["values"])}
    want = sorted(
        ((s, v[0] - v[1], v[2] - v[3], v[0] / v[4], v[1]) for s, v in cells.items()), key=lambda r: -r[4]
    )
    assert [r[:4] for r in want] == [tuple(r) for r in rows]
    assert all(r[2] >= 0 for r in rows)  # p75 ≥ p25: drawn ascending
    assert "ε split into 5 equal shares" in notes[0] and "max(income)" in notes[0]  # 4 parts and the cells


def test_having_over_released_values(service):
    """HAVING beside extremes is a filter on every released cell's values (post-processing):
    the rows are exactly the released cells that satisfy it, as Postgres would return them."""
    names, rows, notes = run(
        service,
        "SELECT educ, MAX(income) AS top, COUNT(*) AS n FROM pums GROUP BY educ "
        "HAVING MAX(income) > 100000 AND SUM(age) > 1000 ORDER BY n DESC LIMIT 4",
    )
    ans = latest_answer(service)
    cells = [(k[0], v[0], v[1], v[2]) for k, v in zip(ans["keys"], ans["values"])]  # top, n, sum(age)
    want = sorted((c for c in cells if c[1] > 100000 and c[3] > 1000), key=lambda c: -c[2])[:4]
    assert names == ["educ", "top", "n"] and rows == [c[:3] for c in want]
    assert "ε split into 2 equal shares" in notes[0]


def test_one_extreme_in_an_expression_or_only_in_having(service):
    """One MAX in an expression, or read only by HAVING: one release at the statement's ε,
    the expression and the filter post-processing of it."""
    before = spent(service)
    names, rows, notes = run(service, "SELECT MAX(income) / 1000 AS k, MIN(age) FROM pums WHERE sex = 1")
    assert names == ["k", "min"] and len(rows) == 1 and "ε split into 2 equal shares" in notes[0]
    names, rows, notes = run(service, "SELECT MAX(income) / 1000 AS k FROM pums")
    ((k,),) = rows
    assert (
        names == ["k"]
        and 0 <= k <= 500
        and "one release at ε 0.95 (the statement's, less the row count's 1/20)" in notes[0]
    )
    ans = latest_answer(service)
    assert k == pytest.approx(ans["values"][0][0] / 1000)
    names, rows, notes = run(service, "SELECT sex FROM pums GROUP BY sex HAVING MAX(age) > 50 ORDER BY sex")
    ans = latest_answer(service)
    assert names == ["sex"] and rows == [(k[0],) for k, v in zip(ans["keys"], ans["values"]) if v[0] > 50]
    assert spent(service) == pytest.approx(before + 3.0)


def _mine():
    from bi.corpus import ANALYST_QUESTIONS

    names = (
        "p25 and p75 together; a box plot",
        "MAX and MIN together",
        "per-record table, one dashboard tile",
    )
    return [q for q in ANALYST_QUESTIONS if q[0] in names]


@pytest.mark.parametrize("name, sql", _mine(), ids=[n for n, _ in _mine()])
def test_the_analyst_questions_answered_with_their_cost(service, name, sql):
    """bench.sql_coverage's analyst questions of this kind: answered over the wire, the NOTICE
    stating the ε charged and how it was split."""
    if "accounts" in sql:  # the per-record table is loaded by the per-record tests' fixture
        from proxy.demo import accounts as demo_accounts

        gw = service.gw
        if gw.backend.dialect == "duckdb":
            demo_accounts.load_duckdb(gw.backend)
        else:
            service._call(demo_accounts.load_postgres(gw.backend))
    names, rows, notes = run(service, sql)
    assert len(rows) == 1 and len(rows[0]) == len(names) == 3 - ("MIN" in sql)
    assert "ε charged 1;" in notes[0] or "ε charged 0 (repeat" in notes[0]
    assert "split" in notes[0]
