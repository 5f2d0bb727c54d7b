"""HAVING and top-c through the wire: over a public domain the release with the lower error
answers (the noisy cells, then HAVING / ORDER BY / LIMIT on them; or the sparse vector, SVT
with exponential noise, values at a separate ε), charged once, repeat free; every returned
row satisfies the HAVING on its released value."""

from __future__ import annotations

import psycopg
import pytest


def _run(svc, sql, role="other", setup=()):
    notes = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        for s in setup:
            c.execute(s)
        rows = c.execute(sql).fetchall()
    return rows, notes


def _explain(svc, sql, role="other"):
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        return "\n".join(r[0] for r in c.execute("EXPLAIN " + sql).fetchall())


def test_having_keys_only_from_the_cells(service):
    # PUMS educ counts: 9 → 201, 13 → 178, 11 → 165; every other level ≤ 76. The cells' count
    # noise (geometric, ε 1: sd √2) is far below the gap to the threshold.
    sql = "SELECT educ FROM pums GROUP BY educ HAVING COUNT(*) > 120 LIMIT 3"
    rows, notes = _run(service, sql)
    assert sorted(r[0] for r in rows) == [9, 11, 13] and all(len(r) == 1 for r in rows)
    assert "sparse vector" not in notes[0] and "count(*) ±" in notes[0]
    assert "the cells have the lower error" in _explain(service, sql)
    spent = service.gw.ledger.spent("other", "day")
    again, notes = _run(service, "select EDUC from PUMS group by educ having count(*) > 120 limit 3")
    assert again == rows and service.gw.ledger.spent("other", "day") == spent and "repeat" in notes[0]


def test_top_c_without_a_threshold_is_a_sort_of_the_cells(service):
    """``ORDER BY COUNT(*) DESC LIMIT c`` is ``ORDER BY 2 DESC LIMIT c``: one release, one sort."""
    by_pos, _ = _run(service, "SELECT race, COUNT(*) FROM pums GROUP BY race ORDER BY 2 DESC LIMIT 2")
    spent = service.gw.ledger.spent("other", "day")
    by_agg, notes = _run(
        service, "SELECT race, COUNT(*) FROM pums GROUP BY race ORDER BY COUNT(*) DESC LIMIT 2"
    )
    keys, _ = _run(
        service,
        "SELECT race FROM pums GROUP BY race ORDER BY COUNT(*) DESC LIMIT 2",
        setup=["SET dpgate.topc_threshold = 50"],
    )
    assert by_agg == by_pos and [r[0] for r in keys] == [r[0] for r in by_pos] and by_pos[0][0] == 1
    assert "repeat" in notes[0] and service.gw.ledger.spent("other", "day") == spent


def test_having_by_sparse_vector_with_values(service):
    """Five aggregates share ε: the cells' count gets ε/5, and with c = 1 the sparse vector's
    comparison noise is the lower (SVT spec Eq. 51); the values cost a separate ε, and the
    returned row satisfies the HAVING on its released value."""
    sql = (
        "SELECT educ, COUNT(*) AS n, SUM(age), SUM(income), COUNT(married), COUNT(DISTINCT race) "
        "FROM pums GROUP BY educ HAVING COUNT(*) >= 100 LIMIT 1"
    )
    assert "sparse vector (Liu et al.), the lower error here" in _explain(service, sql)
    before = service.gw.ledger.spent("other", "day")
    rows, notes = _run(service, sql)
    assert len(rows) <= 1 and all(r[0] in (9, 11, 13) and r[1] >= 100 for r in rows)
    assert "sparse vector" in notes[0] and "separate ε 0.5" in notes[0]
    assert service.gw.ledger.spent("other", "day") - before == pytest.approx(1.0)


def test_having_on_zipf_purchases(service):
    """The demo's Zipf table: item k has about 26000/k·… rows (item 1 ≈ 26k, item 10 ≈ 2.6k)."""
    rows, notes = _run(service, "SELECT item FROM purchases GROUP BY item HAVING COUNT(*) > 8000 LIMIT 5")
    keys = [r[0] for r in rows]
    assert set(keys) <= {1, 2, 3, 4} and {1, 2} <= set(keys)  # 1..3 are far above 8000; 4 ≈ 8.4k


def test_per_group_public_thresholds(service):
    # educ 9 → 201 rows, 13 → 178, 11 → 165, 12 → 76, 10 → 60; thresholds per key: only 12 (>50) and
    # 9 (>150) can pass; every other key faces 1000.
    rows, notes = _run(
        service,
        "SELECT educ FROM pums GROUP BY educ HAVING COUNT(*) > "
        "CASE educ WHEN 9 THEN 150 WHEN 12 THEN 50 ELSE 1000 END LIMIT 3",
    )
    assert sorted(r[0] for r in rows) == [9, 12]
