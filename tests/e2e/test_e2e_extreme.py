"""MAX / MIN on a central table through the wire, on DuckDB and Postgres: one histogram
scan, the capped- or shifted-rank exponential mechanism per group (the error laws choose), charged once, repeats free."""

from __future__ import annotations

import math
from collections import Counter

import psycopg
import pytest

from proxy.demo import pums_rows

ROWS = pums_rows()  # (age, sex, educ, race, income, married): the table both backends hold


def connect(service, role="analyst"):
    return psycopg.connect(service.dsn(role), autocommit=True)


def test_max_is_released_once_with_its_rank_guarantee(service):
    notices = []
    with connect(service, "other") as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        before = service.gw.ledger.spent("other", "day")
        ((y,),) = conn.execute("SELECT MAX(age) FROM pums").fetchall()
        ((again,),) = conn.execute("select max(AGE) from PUMS").fetchall()  # a repeat
        assert service.gw.ledger.spent("other", "day") == before + 1.0
    assert isinstance(y, int) and again == y and 0 <= y <= 100
    k0 = int(notices[0].split("k0 = ")[1].split(")")[0])
    ties = max(Counter(r[0] for r in ROWS).values())  # rows sharing one age
    assert sum(r[0] > y for r in ROWS) <= 2 * k0 + ties  # the 95% statement (fixed seed: it holds)
    assert "capped_rank_max" in notices[0] and "ε charged 1" in notices[0] and "repeat" in notices[1]
    # no COUNT beside it: the row check's count of the rows, stored with the release (the repeat says it too)
    counted = notices[0].split("row count: ")[1]
    assert counted.startswith("COUNT(age) ≈ ") and counted == notices[1].split("row count: ")[1]
    n_hat = int(counted.split("≈ ")[1].split(" ")[0].replace(",", ""))
    # the geometric count at ε/20 (a row per row): P(|Z| > 400) = 2α^401/(1 + α) < 10^-8, α = e^(−1/20)
    assert abs(n_hat - sum(r[0] is not None for r in ROWS)) <= 400


def test_min_per_group_extended_protocol(service):
    with connect(service, "other") as conn:
        cur = conn.cursor(binary=True)
        rows = cur.execute(
            "SELECT sex, MIN(income) AS lo FROM pums WHERE age >= %s GROUP BY sex ORDER BY sex",
            (30,),
            prepare=True,
        ).fetchall()
        assert [d.name for d in cur.description] == ["sex", "lo"]
    assert [r[0] for r in rows] == [0, 1] and all(isinstance(r[1], float) for r in rows)
    for sex, lo in rows:
        group = [r[4] for r in ROWS if r[1] == sex and r[0] >= 30]
        ties = max(Counter(x // 5 for x in group).values())  # rows on one grid point
        below = sum(x < lo - 5 for x in group)  # one grid step of 5
        assert below <= 2 * 31 + ties  # k0 = ⌈(2/0.95) ln(100001/0.05)⌉ = 31 (19/20 of ε: the row check)


def test_refused_max_shapes_charge_nothing(service):
    with connect(service, "other") as conn:
        before = service.gw.ledger.spent("other", "day")
        for sql, state in [
            ("SELECT MAX(age) FILTER (WHERE sex = 1), COUNT(*) FROM pums", "0A000"),
            ("SELECT sex, MAX(income) FROM pums GROUP BY ROLLUP(sex)", "0A000"),
            ("SELECT MAX(amount) FROM purchases GROUP BY ts", "42501"),
        ]:
            with pytest.raises(psycopg.Error) as e:
                conn.execute(sql)
            assert e.value.sqlstate == state, (sql, e.value)
        lines = [r[0] for r in conn.execute("EXPLAIN SELECT MAX(income) FROM pums WHERE age > 30")]
        assert service.gw.ledger.spent("other", "day") == before
    text = "\n".join(lines)
    assert (
        "capped_rank_max" in text
        and f"k0 = {math.ceil(2 / 0.95 * math.log(100_001 / 0.05))}" in text  # 19/20 of ε: the row check
        and "row check" in text
        and "chosen by the error laws" in text
        and "histogram" in text
    )
