"""AVG through the wire: the hourglass mean (Kulesza et al. 2024), in bounds, and AVG/SUM/COUNT of
one column from ONE release charged once."""

from __future__ import annotations

import psycopg
import pytest


def test_avg_sum_count_one_release(service):
    notes = []
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        before = service.gw.ledger.spent("other", "day")
        rows = c.execute("SELECT sex, AVG(age), SUM(age), COUNT(age) FROM pums GROUP BY sex").fetchall()
        after = service.gw.ledger.spent("other", "day")
    assert after - before == pytest.approx(1.0)  # charged once, not three times
    assert "hourglass_mean" in notes[0] and "geometric" not in notes[0]
    for sex, avg, s, n in rows:
        assert 0 <= avg <= 100
        # AVG is the clipped ratio of the SAME release's SUM and COUNT (post-processing).
        assert avg == pytest.approx(min(max(s / n, 0), 100), rel=1e-3, abs=0.05)


def test_avg_mechanism_is_configurable(tmp_path):
    from mechanisms import SeededSource
    from support.service import Service, make_config

    cfg = make_config({"kind": "duckdb", "path": str(tmp_path / "d.duckdb")})
    cfg["tables"]["pums"]["columns"]["age"]["avg_mechanism"] = "shifted_laplace"
    svc = Service(cfg, tmp_path / "s", people_rows=1000, source=SeededSource(5)).start()
    try:
        notes = []
        with psycopg.connect(svc.dsn("other"), autocommit=True) as c:
            c.add_notice_handler(lambda d: notes.append(d.message_primary))
            ((avg,),) = c.execute("SELECT AVG(age) FROM pums").fetchall()
            explain = "\n".join(r[0] for r in c.execute("EXPLAIN SELECT AVG(age) FROM pums").fetchall())
        assert "shifted_laplace_mean" in notes[0] and "shifted_laplace_mean" in explain
        assert 0 <= avg <= 100
    finally:
        svc.close()
