"""Minimum units per released group (``min_units_per_group``): a cell is released only when its
noisy number of distinct units passes the threshold; the test costs one share of ε, stated in
the NOTICE and EXPLAIN."""

from __future__ import annotations

import psycopg
import pytest

from mechanisms import SeededSource
from support.service import Service, make_config


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    zcdp = {"half": {"accounting": "zcdp", "rho": 0.05, "budget": 1.0, "period": "day"}}
    cfg = make_config(
        {"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "demo.duckdb")}, tiers=zcdp
    )
    cfg["tables"]["pums"]["min_units_per_group"] = 40
    cfg["tables"]["purchases"]["min_units_per_group"] = 500
    s = Service(cfg, tmp_path_factory.mktemp("state"), source=SeededSource(7)).start()
    yield s
    s.close()


def _run(svc, sql, role="other"):
    notes: list[str] = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        rows = c.execute(sql).fetchall()
    return rows, notes


def test_small_groups_are_not_released(svc):
    """pums has 1,000 rows over 16 education levels: the few-row levels are left out, the large
    ones (educ 9, 11, 13: 150–200 rows) pass 40 with noise at ε 0.5 (±6 at 95%)."""
    before = svc.gw.ledger.spent("other", "day")
    rows, notes = _run(svc, "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ")
    assert svc.gw.ledger.spent("other", "day") - before == pytest.approx(1.0)
    keys = {r[0] for r in rows}
    assert {9, 11, 13} <= keys and len(keys) < 16
    assert all(n >= 20 for _, n in rows)  # 40 units ± noise: no tiny group slips through
    note = notes[0]
    assert f"{len(rows)} of 16 groups released" in note
    assert "groups with fewer than 40 distinct rows are not released" in note and "ε 0.5" in note
    again, notes2 = _run(svc, "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ ORDER BY 1")
    assert again == sorted(rows) and "repeat" in notes2[0]


def test_per_unit_threshold_and_explain(svc):
    rows, notes = _run(svc, "SELECT store, COUNT(*) FROM purchases GROUP BY store")
    assert rows and "distinct customer_ids are not released" in notes[0] and "/10 (a customer_id" in notes[0]
    (plan,) = zip(*_run(svc, "EXPLAIN SELECT store, COUNT(*) FROM purchases GROUP BY store")[0])
    text = "\n".join(plan)
    assert "min units per group: groups with fewer than 500 distinct customer_ids" in text


def test_without_group_by_and_other_tables_unchanged(svc):
    rows, notes = _run(svc, "SELECT COUNT(*) FROM pums")
    assert len(rows) == 1 and "not released" not in notes[0]
    with pytest.raises(psycopg.Error) as e:
        _run(svc, "SELECT educ, COUNT(*) FROM pums GROUP BY educ", role="silver")
    assert e.value.sqlstate == "0A000"


def test_having_and_top_c_over_the_released_groups(svc):
    """HAVING and ORDER BY … LIMIT are evaluated on the groups that passed (post-processing)."""
    rows, notes = _run(svc, "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ HAVING COUNT(*) > 100")
    assert rows and all(n > 100 for _, n in rows) and "groups released" in notes[0]
    top, _ = _run(svc, "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ ORDER BY COUNT(*) DESC LIMIT 2")
    assert len(top) == 2 and top[0][1] >= top[1][1]


def test_keys_without_a_public_domain(svc):
    """GROUP BY city (no public domain): partition selection reads the units beyond T − 1 (a
    public shift, the same (ε, δ)), so no city with fewer than T = 500 customers is released;
    without the setting the long tail down to the selection's scan floor is."""
    from support.service import backend_rows

    rows, notes = _run(svc, "SELECT city, COUNT(*) FROM purchases GROUP BY city")
    truth = dict(backend_rows(svc, "SELECT city, COUNT(DISTINCT customer_id) FROM purchases GROUP BY city"))
    assert rows and all(truth[c] >= 500 for c, _ in rows)
    assert "keys with fewer than 500 distinct customer_ids are never released" in notes[0]
    (plan,) = zip(*_run(svc, "EXPLAIN SELECT city, COUNT(*) FROM purchases GROUP BY city")[0])
    assert "min_units_per_group 500: the selection reads the units beyond 499" in "\n".join(plan)


def test_zcdp_tier(svc):
    """On a zCDP tier the test is a pure ε-DP count at ε = √(2ρ_test) (ε²/2-zCDP), the values the
    tier's zCDP mechanisms at the other share; the ledger is charged the tier's ρ."""
    before = svc.gw.ledger.spent("half", "day", "rho")
    rows, notes = _run(svc, "SELECT store, COUNT(*) FROM purchases GROUP BY store", role="half")
    assert rows and "groups released" in notes[0] and "discrete_gaussian_count" in notes[0]
    assert svc.gw.ledger.spent("half", "day", "rho") - before == pytest.approx(0.05, rel=1e-6)
    (plan,) = zip(*_run(svc, "EXPLAIN SELECT store, COUNT(*) FROM purchases GROUP BY store", role="half")[0])
    assert "min units per group" in "\n".join(plan)


def test_max_by_group_is_refused_without_group_answered(svc):
    """MAX/MIN/percentiles do not apply the threshold: by group they are refused (nothing
    charged); over the whole table (one group) they are answered."""
    before = svc.gw.ledger.spent("other", "day")
    with pytest.raises(psycopg.Error) as e:
        _run(svc, "SELECT educ, MAX(age) FROM pums GROUP BY educ")
    assert e.value.sqlstate == "0A000" and "min_units_per_group" in str(e.value)
    assert svc.gw.ledger.spent("other", "day") == before
    rows, _ = _run(svc, "SELECT MAX(age) FROM pums")
    assert len(rows) == 1
