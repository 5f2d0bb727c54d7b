"""SUM / AVG of arithmetic over bounded columns (rewriter/intervals.py) through the wire, on
DuckDB and Postgres: released once at the interval bounds' sensitivity, within the NOTICE's
95% half-width of the truth (fixed seed), refused with a hint where not bounded."""

from __future__ import annotations

import psycopg
import pytest

from proxy.demo import pums_rows

ROWS = pums_rows()  # (age, sex, educ, race, income, married)


def connect(service, role="other"):
    return psycopg.connect(service.dsn(role), autocommit=True)


def half_widths(notice: str) -> list[float]:
    part = notice.split("95% half-width: ")[1].split(";")[0]
    return [float(x.split("±")[1].split()[0]) for x in part.split(", ")]


def test_sums_of_arithmetic_within_their_half_widths(service):
    notices = []
    with connect(service) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        before = service.gw.ledger.spent("other", "day")
        cur = conn.execute(
            "SELECT SUM(age + 1), SUM(2 * age), AVG(age - 10) AS a, SUM(income / 1000.0) FROM pums"
        )
        ((s1, s2, a, s3),) = cur.fetchall()
        assert [d.name for d in cur.description] == ["sum", "sum", "a", "sum"]
        assert service.gw.ledger.spent("other", "day") == pytest.approx(before + 1.0)  # charged once
    truth = [
        sum(r[0] + 1 for r in ROWS),
        sum(2 * r[0] for r in ROWS),
        sum(r[0] - 10 for r in ROWS) / len(ROWS),
        sum(r[4] / 1000.0 for r in ROWS),
    ]
    hw = half_widths(notices[0])
    assert isinstance(s1, int) and isinstance(s2, int) and isinstance(s3, float)
    for got, want, h in zip((s1, s2, a, s3), truth, hw):
        assert abs(got - want) <= h, (got, want, h)  # the 95% statement (fixed seed: it holds)


def test_explain_shows_interval_bounds(service):
    with connect(service) as conn:
        lines = [r[0] for r in conn.execute("EXPLAIN SELECT SUM(age + income) FROM pums")]
    assert any("sum(age + income), clamped to [0, 500100]" in x for x in lines), lines


@pytest.mark.parametrize(
    "sql, state",
    [
        ("SELECT SUM(age / 10) FROM pums", "0A000"),  # integer division: write / 10.0
        ("SELECT SUM(age + educ) FROM pums", "42501"),  # educ has no bounds
        ("SELECT MAX(age + 1) FROM pums", "0A000"),
        ("SELECT SUM(balance + 1) FROM accounts", "0A000"),  # per-record table
        ("SELECT SUM(age + %s) FROM pums", "0A000"),  # a parameter: write the number
    ],
)
def test_refused_with_a_hint(service, sql, state):
    with connect(service) as conn:
        before = service.gw.ledger.spent("other", "day")
        with pytest.raises(psycopg.Error) as e:
            conn.execute(sql, [1] if "%s" in sql else None)
        assert e.value.sqlstate == state and e.value.diag.message_hint
        assert service.gw.ledger.spent("other", "day") == before
