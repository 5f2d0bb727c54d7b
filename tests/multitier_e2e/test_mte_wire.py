"""Data-market tiers through the wire (DuckDB and Postgres): bronze/silver/gold ask
the same query in random order, each gets its own level of ONE chain; repeats
are free and identical; the owner's coalition loss is max ε, not Σε."""

from __future__ import annotations

import random

import psycopg
import pytest
from mte_helpers import TIER_EPS, ask, expected_rows, ladder_row, same_rows

from proxy.pipeline.multitier import coalition_rows, explain_ladder_lines

Q = "SELECT sex, COUNT(*), SUM(income), AVG(age) FROM pums WHERE age >= 18 GROUP BY sex"


def test_three_tiers_one_chain(service):
    svc = service
    order = ["bronze", "silver", "gold"]
    random.Random(20261122).shuffle(order)
    first: dict[str, list] = {}
    for role in order:
        spent = svc.gw.ledger.spent(role, "day")
        rows, notices = ask(svc, role, Q)
        first[role] = rows
        assert len(rows) == 2 and {r[0] for r in rows} == {0, 1}
        assert f"ε charged {TIER_EPS[role]:g};" in notices[0]
        assert (
            "multitier_geometric_count" in notices[0] and "multitier_laplace_transformed_mean" in notices[0]
        )
        assert f"tier {role} gets level ε {TIER_EPS[role]:g} of {{2, 0.5, 0.1}}" in notices[0]
        assert svc.gw.ledger.spent(role, "day") == pytest.approx(spent + TIER_EPS[role])
    # each tier its own value ...
    assert first["bronze"] != first["silver"] != first["gold"] != first["bronze"]
    # ... and each one is exactly its level of the ONE stored chain
    plan, row = ladder_row(svc, Q)
    assert row.levels == [2.0, 0.5, 0.1] and row.version == [2.0, 0.5, 0.1]
    for role, rows in first.items():
        assert same_rows(rows, expected_rows(svc, Q, TIER_EPS[role], TIER_EPS[role]))
    # repeats (any spelling) cost nothing and return the same rows
    respelled = (
        "select SEX, count(*), sum(INCOME), avg(age) from PUMS where 18 <= age group by sex order by sex"
    )
    for role in reversed(order):
        spent = svc.gw.ledger.spent(role, "day")
        for sql in (Q, respelled):
            rows, notices = ask(svc, role, sql)
            assert same_rows(sorted(rows), sorted(first[role]))
            assert "ε charged 0 (repeat" in notices[0]
        assert svc.gw.ledger.spent(role, "day") == spent
    # the data owner's coalition view: max ε vs Σε
    cols, crow = coalition_rows(svc.gw, "admin")
    names = [c for c, _ in cols]
    mine = [dict(zip(names, r)) for r in crow if r[1] == row.statement and r[2] == row.data_version]
    assert len(mine) == 1
    c = mine[0]
    assert c["coalition_loss"] == 2.0 and c["independent_loss"] == pytest.approx(2.6)
    assert c["releases"] == 3 and c["tiers_released"] == "gold 2, silver 0.5, bronze 0.1"
    assert c["roles"] == "bronze, gold, silver"
    from rewriter.errors import Refusal

    with pytest.raises(Refusal) as e:
        coalition_rows(svc.gw, "gold")
    assert e.value.sqlstate == "42501"
    with psycopg.connect(svc.dsn("admin"), autocommit=True) as conn:
        lit = row.statement.replace("'", "''")  # dpgate's views take no parameters
        got = conn.execute(
            "SELECT tiers_released, coalition_loss, independent_loss FROM dpgate.coalition "
            f"WHERE statement = '{lit}'"
        ).fetchall()
        assert got == [("gold 2, silver 0.5, bronze 0.1", 2.0, pytest.approx(2.6))]
    with psycopg.connect(svc.dsn("silver"), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM dpgate.coalition").fetchall()


def test_group_by_cells_each_own_chain(service):
    svc = service
    q = "SELECT educ, COUNT(*) FROM pums GROUP BY educ"
    rows = {role: ask(svc, role, q)[0] for role in ("gold", "bronze")}
    plan, row = ladder_row(svc, q)
    cells = row.body["cells"]
    assert sorted(c["key"][0] for c in cells) == list(range(1, 17))
    slot = "count(*)#0"
    assert all(set(c["raw"][slot]) == {repr(2.0), repr(0.5), repr(0.1)} for c in cells)
    # every cell drew its own residuals: the bronze-minus-gold differences are not one shared draw
    diffs = [c["raw"][slot][repr(0.1)] - c["raw"][slot][repr(2.0)] for c in cells]
    assert len(set(diffs)) > 4
    for role in rows:
        assert same_rows(rows[role], expected_rows(svc, q, TIER_EPS[role], TIER_EPS[role]))


def test_having_on_a_ladder_tier_filters_its_cells(service):
    """HAVING on a ladder tier is evaluated on the ladder's released cells (post-processing)."""
    svc = service
    with psycopg.connect(svc.dsn("silver"), autocommit=True) as conn:
        rows = conn.execute("SELECT educ, COUNT(*) FROM pums GROUP BY educ HAVING COUNT(*) > 50").fetchall()
    assert {9, 11, 13} <= {r[0] for r in rows} and all(n > 50 for _, n in rows)


def test_max_is_refused_for_ladder_tiers_and_charges_nothing(service):
    svc = service
    spent = svc.gw.ledger.spent("silver", "day")
    with psycopg.connect(svc.dsn("silver"), autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as e:  # MAX/MIN are not drawn from the ladder
            conn.execute("SELECT MAX(age) FROM pums").fetchall()
        assert e.value.sqlstate == "0A000" and "ladder" in str(e.value)
    assert svc.gw.ledger.spent("silver", "day") == spent


def test_explain_for_a_ladder_tier(service):
    svc = service
    q = "SELECT sex, COUNT(*), AVG(income), SUM(income) FROM pums GROUP BY sex"
    plan = svc.gw.plan(q, None)
    lines = explain_ladder_lines(plan, svc.gw.tier_of("silver"))
    assert "from ladder market: ε 0.5 per query" in lines[0]
    assert any("count: count(*) via multitier_geometric_count, ε 0.25" in line for line in lines)
    assert any(
        "sum: sum(income), clamped to [0, 500000] via multitier_laplace_transformed_mean "
        "(from the avg(income) release)" in line
        for line in lines
    )
    spent = svc.gw.ledger.spent("silver", "day")
    rows, _ = ask(svc, "silver", "EXPLAIN " + q)
    text = "\n".join(r[0] for r in rows)
    assert "from ladder market" in text and "backend SQL (one scan):" in text
    assert svc.gw.ledger.spent("silver", "day") == spent
