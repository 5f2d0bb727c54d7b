"""percentile_cont / percentile_disc / median on a central table through the wire, on DuckDB
and Postgres: one histogram scan (exact: the backend's own counts), the exponential
mechanism per group (mechanisms/quantile.py), the rank error in NOTICE and EXPLAIN,
charged once, repeats free, refusals charge nothing."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import psycopg
import pytest

from mechanisms.extreme import ExtremeGrid
from proxy.demo import pums_rows
from proxy.pipeline.extreme import quantile_mechanism
from rewriter import parse
from rewriter.extreme import build_extreme_plan, histogram_sql

ROWS = pums_rows()  # (age, sex, educ, race, income, married)


def connect(service, role="other"):
    return psycopg.connect(service.dsn(role), autocommit=True)


def scan(service, sql):
    return service._call(service.gw.backend.fetch(sql))


@pytest.mark.parametrize(
    "stmt, col",
    [
        ("SELECT sex, median(age) FROM pums WHERE educ >= 9 GROUP BY sex", "age"),
        (
            "SELECT married, percentile_disc(0.9) WITHIN GROUP (ORDER BY income) FROM pums GROUP BY married",
            "income",
        ),
    ],
)
def test_histogram_scan_is_exact(service, stmt, col):
    """Exact before noise: the histogram the mechanism reads equals the rows' own grid counts
    (int column: the backend's GROUP BY of the analyst's filter; float: floor((x − lower)/step)
    of the raw rows)."""
    gw = service.gw
    xp = build_extreme_plan(parse(stmt), gw.config)
    spec = gw.config.tables["pums"].columns[col]
    grid = ExtremeGrid.for_column(spec.type, spec.lower, spec.upper)
    got = Counter(
        {
            (r[0], r[1]): r[2]
            for r in scan(
                service,
                histogram_sql(
                    xp, grid.lower, grid.step, grid.U, grid.integral and grid.step == 1.0, gw.backend.dialect
                ),
            )
        }
    )
    if col == "age":
        truth = Counter(
            {
                (r[0], r[1]): r[2]
                for r in scan(
                    service, "SELECT sex, age, COUNT(*) FROM pums WHERE educ >= 9 GROUP BY sex, age"
                )
            }
        )
    else:
        truth = Counter(
            (r[5], min(int(math.floor(min(max(r[4], 0.0), 500_000.0) / grid.step)), grid.U)) for r in ROWS
        )
    assert got == truth and sum(got.values()) > 0


def rank_ok(values, y, q, k):
    """|#{x ≤ y} − q·n| ≤ k + ties, allowing one grid step of rounding (the 95% statement)."""
    ties = max(Counter(values).values())
    n = len(values)
    return abs(sum(x <= y for x in values) - q * n) <= k + ties + sum(x == y for x in values)


def test_median_and_percentiles_released_once(service):
    notices = []
    with connect(service) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        before = service.gw.ledger.spent("other", "day")
        cur = conn.execute("SELECT median(age) FROM pums")
        ((m,),) = cur.fetchall()
        assert cur.description[0].name == "median" and isinstance(m, float)
        ((again,),) = conn.execute("select MEDIAN(AGE) from PUMS").fetchall()  # a repeat: free
        cur = conn.execute(
            "SELECT sex, percentile_disc(0.9) WITHIN GROUP (ORDER BY age) AS p90 "
            "FROM pums GROUP BY sex ORDER BY sex"
        )
        rows = cur.fetchall()
        assert [d.name for d in cur.description] == ["sex", "p90"]
        ((p25,),) = conn.execute(
            "SELECT percentile_cont(0.75) WITHIN GROUP (ORDER BY age DESC) FROM pums"
        ).fetchall()
        assert service.gw.ledger.spent("other", "day") == pytest.approx(before + 3.0)
    rest = 0.95  # ε 1 less the row check's 1/20 (no COUNT beside them: proxy/pipeline/rowcheck.py)
    k = math.ceil(2 / rest * math.log(101 / 0.05))
    age_grid = ExtremeGrid.for_column("int", 0, 100)
    chosen = {q: quantile_mechanism(rest, age_grid, Fraction(q)) for q in ("0.5", "0.9", "0.25")}
    assert chosen["0.5"].rank_half_width() == k  # the median's aim is n/2: no shift
    ages = [r[0] for r in ROWS]
    assert (
        again == m and rank_ok(ages, m, 0.5, k) and rank_ok(ages, p25, 0.25, chosen["0.25"].rank_half_width())
    )
    for sex, p in rows:
        group = [r[0] for r in ROWS if r[1] == sex]
        assert isinstance(p, int) and rank_ok(group, p, 0.9, chosen["0.9"].rank_half_width())
    assert f"within {k} rows of 0.5·n" in notices[0] and chosen["0.5"].name in notices[0]
    assert "repeat" in notices[1] and "each of the 2 groups" in notices[2] and "0.25·n" in notices[3]


def test_refusals_and_explain_charge_nothing(service):
    with connect(service) as conn:
        before = service.gw.ledger.spent("other", "day")
        for sql, state in [
            ("SELECT median(age) FILTER (WHERE sex = 1), COUNT(*) FROM pums", "0A000"),
            ("SELECT percentile_cont(1.5) WITHIN GROUP (ORDER BY age) FROM pums", "22023"),
            (
                "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY age), "
                "percentile_cont(0.9) WITHIN GROUP (ORDER BY age) FROM pums GROUP BY ROLLUP(sex)",
                "0A000",
            ),
            ("SELECT median(amount) FROM purchases GROUP BY ts", "42501"),
            ("SELECT median(sex + age) FROM pums", "0A000"),
        ]:
            with pytest.raises(psycopg.Error) as e:
                conn.execute(sql)
            assert e.value.sqlstate == state, (sql, e.value)
            assert e.value.diag.message_hint, sql
        lines = [
            r[0]
            for r in conn.execute(
                "EXPLAIN SELECT percentile_cont(0.9) WITHIN GROUP (ORDER BY income) FROM pums WHERE age > 30"
            )
        ]
        assert service.gw.ledger.spent("other", "day") == before
    text = "\n".join(lines)
    m = quantile_mechanism(
        0.95, ExtremeGrid.for_column("float", 0, 500_000), Fraction(9, 10)
    )  # 19/20: the row check
    assert m.name == "protected_quantile" and m.rank_half_width() > 30  # k0 = 30, and the protection's shift
    assert f"within {m.rank_half_width()} rows of 0.9·n" in text and "histogram" in text
    assert "chosen by the error laws" in text and "plain exponential mechanism" in text
    assert "row check: no COUNT of the ranked rows" in text and "at ε 0.95" in text


def test_extended_protocol_with_parameters(service):
    """Describe before Bind (parameter and column types), binary results, a $1 in WHERE."""
    with connect(service) as conn:
        cur = conn.cursor(binary=True)
        rows = cur.execute(
            "SELECT sex, median(income) AS m FROM pums WHERE age >= %s GROUP BY sex ORDER BY sex",
            (30,),
            prepare=True,
        ).fetchall()
        assert [d.name for d in cur.description] == ["sex", "m"]
    assert [r[0] for r in rows] == [0, 1] and all(isinstance(r[1], float) for r in rows)
    k = math.ceil(2 * math.log(100_001 / 0.05))
    for sex, m in rows:
        group = [r[4] for r in ROWS if r[1] == sex and r[0] >= 30]
        ties = max(Counter(x // 5 for x in group).values())
        below = sum(x <= m + 5 for x in group)  # one grid step of 5
        above = sum(x <= m - 5 for x in group)
        assert above - k - ties <= 0.5 * len(group) <= below + k + ties
