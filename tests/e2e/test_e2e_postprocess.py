"""Post-processing through the wire: derived tables and CTEs share the flat
statement's release (a free repeat), outer filters over an aggregating subquery, a ratio
KPI and HAVING without GROUP BY are computed from released values, charged once."""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pytest


def _run(svc, sql, role="other", params=None):
    notes = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        rows = c.execute(sql, params).fetchall()
    return rows, notes


def _spent(svc, role="other"):
    return svc.gw.ledger.spent(role, "day")


def test_derived_table_is_the_flat_release(service):
    flat, notes = _run(service, "SELECT COUNT(*) FROM pums WHERE age > 40")
    spent = _spent(service)
    derived, again = _run(service, "SELECT COUNT(*) FROM (SELECT * FROM pums WHERE age > 40) s")
    cte, again2 = _run(service, "WITH x AS (SELECT age AS a FROM pums) SELECT COUNT(*) FROM x WHERE x.a > 40")
    assert derived == flat == cte
    assert "repeat" in again[0] and "repeat" in again2[0] and _spent(service) == spent


def test_outer_filter_over_aggregating_subquery(service):
    inner, _ = _run(service, "SELECT educ, COUNT(*) AS c FROM pums GROUP BY educ")
    spent = _spent(service)
    rows, notes = _run(
        service,
        "SELECT educ, c FROM (SELECT educ, COUNT(*) AS c FROM pums GROUP BY educ) s "
        "WHERE c > 100 ORDER BY c DESC LIMIT 5",
    )
    expect = sorted([r for r in inner if r[1] > 100], key=lambda r: -r[1])[:5]
    assert rows == expect and len(rows) >= 2  # educ 9, 13, 11 are far above 100
    assert "repeat" in notes[0] and _spent(service) == spent


def test_ratio_kpi_and_constants(service):
    before = _spent(service)
    rows, notes = _run(
        service,
        "SELECT SUM(age) / COUNT(*) AS mean_age, COUNT(*) * 100.0 / 1000 AS pct, "
        "PI() AS pi, SUM(1) AS n FROM pums",
    )
    ((mean_age, pct, pi, n),) = rows
    assert isinstance(mean_age, int) and 30 <= mean_age <= 60  # PUMS ages: mean ≈ 45
    assert isinstance(pct, Decimal) and pct == Decimal(n) * 100 / 1000
    assert pi == pytest.approx(3.141592653589793)
    assert _spent(service) - before == pytest.approx(1.0)  # one statement, charged once
    assert "sum(age) ±" in notes[0] and "count(*) ±" in notes[0]


def test_having_without_group_by(service):
    rows, _ = _run(service, "SELECT COUNT(*) FROM pums HAVING COUNT(*) > 100")
    assert len(rows) == 1 and rows[0][0] > 100  # 1000 rows
    spent = _spent(service)
    none, notes = _run(service, "SELECT COUNT(*) FROM pums HAVING COUNT(*) > 100000")
    free = "repeat" in notes[0] or "derived from earlier" in notes[0]  # (pums' COUNT was released above)
    assert none == [] and free and _spent(service) == spent


def test_division_by_a_released_zero(service):
    with pytest.raises(psycopg.Error) as e:
        _run(service, "SELECT COUNT(*) / 0 FROM pums")
    assert e.value.sqlstate == "22012"


def test_conditional_count_is_one_release(service):
    """SUM(CASE WHEN p THEN 1000000 ELSE 0 END) is 1000000 × the released count of rows where p
    holds (formerly a hostile probe: the noise scales with it, nothing more is revealed)."""
    ((n,),) = _run(service, "SELECT COUNT(*) FILTER (WHERE age > 60) FROM pums")[0]
    spent = _spent(service)
    rows, notes = _run(
        service,
        "SELECT SUM(CASE WHEN age > 60 THEN 1000000 ELSE 0 END), "
        "COUNT(CASE WHEN age > 60 THEN 1 END) FROM pums",
    )
    assert rows == [(n * 1000000, n)] and "repeat" in notes[0] and _spent(service) == spent


def test_ladder_tier_post_processing_is_free(service):
    """On a ladder tier (bronze) the derived-table spelling is the flat statement's release."""
    flat, _ = _run(service, "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex", role="bronze")
    spent = _spent(service, "bronze")
    rows, notes = _run(
        service,
        "SELECT sex, n * 2 AS twice FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) s ORDER BY sex",
        role="bronze",
    )
    assert rows == [(k, n * 2) for k, n in sorted(flat)]
    assert "repeat" in notes[0] and _spent(service, "bronze") == spent


def test_parameters_in_the_outer_query(service):
    """psycopg binds %s server-side ($n): an outer filter with a parameter over a CTE."""
    inner, _ = _run(service, "SELECT race, COUNT(*) AS c FROM pums GROUP BY race")
    spent = _spent(service)
    rows, notes = _run(
        service,
        "WITH g AS (SELECT race, COUNT(*) AS c FROM pums GROUP BY race) "
        "SELECT race, c FROM g WHERE c >= %s ORDER BY race",
        params=[50],
    )
    assert rows == sorted(r for r in inner if r[1] >= 50) and _spent(service) == spent


def test_explain_names_post_processing(service):
    rows, _ = _run(service, "EXPLAIN SELECT SUM(age) / COUNT(*) AS mean_age FROM pums")
    text = "\n".join(r[0] for r in rows)
    assert "mean_age: computed from the released aggregates (post-processing, no ε)" in text
    assert "(sum(age)): sum(age), clamped to" in text and "(count(*)): count(*) via" in text


def test_aggregates_of_released_rows(service):
    inner, _ = _run(service, "SELECT educ, COUNT(*) AS c FROM pums GROUP BY educ")
    spent = _spent(service)
    rows, notes = _run(
        service,
        "SELECT COUNT(*) AS groups, SUM(c) AS total FROM (SELECT educ, COUNT(*) AS c "
        "FROM pums GROUP BY educ) s WHERE c > 50",
    )
    big = [c for _, c in inner if c > 50]
    assert rows == [(len(big), Decimal(sum(big)))] and "repeat" in notes[0] and _spent(service) == spent


def test_filtered_aggregates_are_one_release_of_the_tier(service):
    """SUM/AVG/COUNT(x) FILTER (WHERE …) share the statement's ε with the plain aggregates;
    the NOTICE and EXPLAIN name each with its condition; the same FILTERs respelled are a repeat."""
    before = _spent(service)
    rows, notes = _run(
        service,
        "SELECT SUM(income) FILTER (WHERE age > 60) AS s, AVG(age) FILTER (WHERE sex = 1) "
        "AS a, COUNT(income) FILTER (WHERE age > 60) AS n, COUNT(*) FROM pums",
    )
    assert _spent(service) - before == pytest.approx(1.0)
    widths = dict(w.split(" ±") for w in notes[0].split("95% half-width: ")[1].split(";")[0].split(", "))
    assert widths["n"] == widths["count"]  # a filtered count: the plain count's noise
    ((s, a, n, c),) = rows
    assert 0 <= a <= 100 and 0 <= n <= c
    again, notes2 = _run(
        service,
        "select count(*), count(income) filter (where (AGE > 60)) as n, "
        "avg(age) filter (where sex = 1) as a, sum(income) filter (where age > 60) as s "
        "from pums",
    )
    assert again == [(c, n, a, s)] and "repeat" in notes2[0]
    plan, _ = _run(service, "EXPLAIN SELECT SUM(income) FILTER (WHERE age > 60) FROM pums")
    assert any('sum(income) filter (where "age" > 60)' in line for (line,) in plan)
