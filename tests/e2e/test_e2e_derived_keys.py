"""Derived group keys and dates through the wire, on DuckDB and Postgres:
histogram bins with their empty bins, CASE labels, boolean keys, the monthly series of
the demo's purchases (timestamp OID 1114, date 1082, text and binary), and DISTINCT over
a public domain answered from the config at no charge."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest


@pytest.fixture(scope="module")
def service(row_service):
    """These tests read purchases as a per-purchase time series (its counts are row counts);
    tests/e2e/test_e2e_unit.py covers the demo's per-customer purchases."""
    return row_service


def _run(svc, sql, role="other", binary=False):
    notes = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        cur = c.cursor(binary=binary)
        rows = cur.execute(sql).fetchall()
        oids = [d.type_code for d in cur.description]
    return rows, notes, oids


def _spent(svc, role="other"):
    return svc.gw.ledger.spent(role, "day")


def test_bins_answer_every_bin_empty_ones_too(service):
    rows, notes, oids = _run(
        service, "SELECT floor(age / 10) * 10 AS decade, COUNT(*) AS n FROM pums GROUP BY 1 ORDER BY 1"
    )
    assert [r[0] for r in rows] == [float(d) for d in range(0, 101, 10)] + [None]  # NULL bin: nullable
    assert oids == [701, 20]
    assert abs(sum(r[1] for r in rows) - 1000) < 60  # PUMS: 1,000 rows; 12 cells of noise ±~2
    assert "ε" in notes[0]
    rows, _, oids = _run(service, "SELECT age / 10 * 10 AS decade, COUNT(*) FROM pums GROUP BY decade")
    assert oids[0] == 20 and [r[0] for r in rows][:3] == [0, 10, 20]


def test_case_and_boolean_keys(service):
    rows, _, oids = _run(
        service,
        "SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' "
        "ELSE 'senior' END AS band, COUNT(*) FROM pums GROUP BY band ORDER BY band",
    )
    assert [r[0] for r in rows] == ["middle", "senior", "young"] and oids[0] == 25
    rows, _, oids = _run(service, "SELECT income > 50000 AS rich, COUNT(*) FROM pums GROUP BY 1")
    assert [r[0] for r in rows] == [False, True, None] and oids[0] == 16


def test_monthly_series_of_purchases(service):
    sql = "SELECT date_trunc('month', ts) AS month, COUNT(*) AS n FROM purchases GROUP BY 1 ORDER BY 1"
    rows, notes, oids = _run(service, sql)
    assert [r[0] for r in rows] == [dt.datetime(2025, m, 1) for m in range(1, 13)]  # not nullable
    assert oids == [1114, 20]
    # uniform over 2025 (~14,300 a month) plus a holiday peak: November and December ~27,000
    assert all(13_000 < n < 16_000 for _, n in rows[:10]) and all(n > 25_000 for _, n in rows[10:])
    binary, _, _ = _run(service, sql, binary=True)  # a repeat: the same release, binary
    assert binary == rows
    rows, _, oids = _run(
        service,
        "SELECT CAST(date_trunc('quarter', ts) AS date) AS q, SUM(amount) "
        "FROM purchases WHERE ts >= '2025-04-01' GROUP BY 1 ORDER BY 1",
    )
    # the range on ts cuts the quarters to those it can produce: Q1 is no row, as in Postgres
    assert oids[0] == 1082 and [r[0] for r in rows] == [dt.date(2025, m, 1) for m in (4, 7, 10)]


def test_date_filters_and_extract(service):
    rows, _, _ = _run(
        service,
        "SELECT COUNT(*) FROM purchases WHERE ts BETWEEN '2025-12-01' AND TIMESTAMP '2025-12-31 23:59:59'",
    )
    assert 26_000 < rows[0][0] < 29_000
    rows, _, _ = _run(service, "SELECT extract(dow from ts) AS dow, COUNT(*) FROM purchases GROUP BY 1")
    assert [r[0] for r in rows] == list(range(7))
    rows, notes, _ = _run(service, "SELECT COUNT(*) FROM purchases WHERE ts > now() - INTERVAL '1 day'")
    assert abs(rows[0][0]) < 50  # every purchase is in 2025
    assert "evaluated by dpgate" in notes[0] and "now() = 20" in notes[0]


def test_distinct_over_a_public_domain_charges_nothing(service):
    before = _spent(service)
    rows, notes, oids = _run(service, "SELECT DISTINCT educ FROM pums ORDER BY educ")
    assert [r[0] for r in rows] == list(range(1, 17))
    rows2, _, _ = _run(service, "SELECT date_trunc('month', ts) FROM purchases GROUP BY 1")
    assert len(rows2) == 12
    rows3, _, _ = _run(service, "SELECT DISTINCT CASE WHEN age < 30 THEN 'young' ELSE 'other' END FROM pums")
    assert sorted(r[0] for r in rows3) == ["other", "young"]
    assert _spent(service) == before
    assert "no data was read and nothing was charged" in notes[0]


def test_max_by_month(service):
    rows, _, oids = _run(
        service, "SELECT date_trunc('month', ts) AS m, MAX(amount) FROM purchases GROUP BY 1 ORDER BY 1"
    )
    assert [r[0] for r in rows] == [dt.datetime(2025, m, 1) for m in range(1, 13)] and oids[0] == 1114
    assert all(400 < r[1] <= 500 for r in rows)  # amounts up to 499.99 every month


def test_date_parameters_text_and_binary(service):
    """psycopg binds a datetime as timestamp (binary), a date as date, a str as text: all are the
    same literal, hence one release (the repeats charge nothing)."""
    before = _spent(service)
    got = []
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        for p in (dt.datetime(2025, 12, 1), dt.date(2025, 12, 1), "2025-12-01"):
            for binary in (False, True):
                got.append(
                    c.cursor(binary=binary)
                    .execute("SELECT COUNT(*) FROM purchases WHERE ts >= %s", [p])
                    .fetchall()
                )
    assert all(g == got[0] for g in got) and 26_000 < got[0][0][0] < 29_000
    assert _spent(service) - before == 1.0


def test_metabase_binning_spelling(service):
    sql = (
        'SELECT ((floor((("public"."people"."age" - 0.0) / 10.0)) * 10.0) + 0.0) AS "age", '
        'count(*) AS "count" FROM "public"."people" GROUP BY ((floor((("public"."people"."age" - 0.0) '
        '/ 10.0)) * 10.0) + 0.0) ORDER BY ((floor((("public"."people"."age" - 0.0) / 10.0)) * 10.0) + 0.0) ASC'
    )
    rows, _, _ = _run(service, sql)
    assert [r[0] for r in rows] == [float(d) for d in range(0, 101, 10)] + [None]
    assert rows[0][1] < 50 and rows[3][1] > 1_000  # ages 18–87: decade 0 empty, 30s full


def test_distinct_on_a_per_record_table_is_the_domain(service):
    before = _spent(service)
    rows, notes, _ = _run(service, "SELECT DISTINCT kind FROM accounts ORDER BY kind")
    assert [r[0] for r in rows] == ["checking", "savings"] and "nothing was charged" in notes[0]
    assert _spent(service) == before
