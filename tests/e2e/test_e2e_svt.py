"""HAVING and top-c through the wire: keys only (SVT with exponential noise),
charged once, repeat free; values at a separate ε when asked for."""
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


def test_having_returns_keys_only(service):
    # PUMS educ counts: 9 → 201, 13 → 178, 11 → 165; every other level ≤ 76. With c = 3 the
    # SVT query noise is about c/ε₂ ≈ 5 (spec 004 Table 6), far below the gap to the threshold.
    rows, notes = _run(service, "SELECT educ FROM pums GROUP BY educ HAVING COUNT(*) > 120 LIMIT 3")
    keys = [r[0] for r in rows]
    assert keys == sorted(keys) and len(keys) >= 2 and set(keys) <= {9, 11, 13}
    assert all(len(r) == 1 for r in rows)
    assert "sparse vector" in notes[0] and "keys only" in notes[0] and "may be incomplete" in notes[0]
    spent = service.gw.ledger.spent("other", "day")
    again, _ = _run(service, "select EDUC from PUMS group by educ having count(*) > 120 limit 3")
    assert again == rows and service.gw.ledger.spent("other", "day") == spent


def test_top_c_needs_a_threshold(service):
    with pytest.raises(psycopg.Error) as e:
        _run(service, "SELECT race FROM pums GROUP BY race ORDER BY COUNT(*) DESC LIMIT 2")
    assert e.value.sqlstate == "22023" and "threshold" in str(e.value)
    rows, notes = _run(service, "SELECT race FROM pums GROUP BY race ORDER BY COUNT(*) DESC LIMIT 2",
                       setup=["SET dpgate.topc_threshold = 50"])
    assert 1 <= len(rows) <= 2 and 1 in [r[0] for r in rows]      # race 1 is the large majority


def test_having_with_values_costs_separate_epsilon(service):
    before = service.gw.ledger.spent("other", "day")
    rows, notes = _run(service, "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ HAVING COUNT(*) >= 100 LIMIT 3")
    assert all(isinstance(r[1], int) for r in rows)
    assert "separate ε 0.5" in notes[0]
    assert service.gw.ledger.spent("other", "day") - before == pytest.approx(1.0)


def test_having_on_zipf_purchases(service):
    """The demo's Zipf table: item k has about 26000/k·… rows (item 1 ≈ 26k, item 10 ≈ 2.6k)."""
    rows, notes = _run(service, "SELECT item FROM purchases GROUP BY item HAVING COUNT(*) > 8000 LIMIT 5")
    keys = [r[0] for r in rows]
    assert set(keys) <= {1, 2, 3, 4} and {1, 2} <= set(keys)   # 1..3 are far above 8000; 4 ≈ 8.4k
    assert "keys only" in notes[0]


def test_per_group_public_thresholds(service):
    # educ 9 → 201 rows, 13 → 178, 11 → 165, 12 → 76, 10 → 60; thresholds per key: only 12 (>50) and
    # 9 (>150) can pass; every other key faces 1000.
    rows, notes = _run(service, "SELECT educ FROM pums GROUP BY educ HAVING COUNT(*) > "
                                "CASE educ WHEN 9 THEN 150 WHEN 12 THEN 50 ELSE 1000 END LIMIT 3")
    assert {r[0] for r in rows} <= {9, 12} and rows
    assert "per-group thresholds" in notes[0]
