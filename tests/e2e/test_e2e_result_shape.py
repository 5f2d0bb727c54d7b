"""The result is the SQL's result over the released cells, through the wire on DuckDB and
Postgres: output names follow Postgres' rules, a predicate on a group key restricts the
keys returned, HAVING holds on every returned row's released value, ORDER BY an aggregate
by expression, alias or position is one thing, and released values are consistent (a COUNT
is never negative, …) unless the table says ``consistent = false``."""

from __future__ import annotations

import psycopg
import pytest

from mechanisms import SeededSource
from proxy.demo import accounts as demo_accounts
from support.service import Service, ask, make_config


def _named(svc, sql, role="other"):
    """(column names, rows, NOTICE texts) of one statement."""
    notes: list[str] = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        cur = c.execute(sql)
        return [d.name for d in cur.description], cur.fetchall(), notes


# -- output names ------------------------------------------------------------------------


def test_derived_table_column_keeps_its_name(service):
    names, rows, _ = _named(
        service, "SELECT s, COUNT(*) FROM (SELECT store AS s, customer_id FROM purchases) x GROUP BY s"
    )
    assert names == ["s", "count"] and [r[0] for r in rows] == list(range(1, 11))


def test_views_name_columns_as_postgres_does(service):
    ask(service, "SELECT COUNT(*) FROM pums WHERE sex = 1", role="other")
    names, rows, _ = _named(
        service,
        "SELECT mechanism, COUNT(*), SUM(epsilon), MAX(epsilon) AS top "
        "FROM dpgate.releases GROUP BY mechanism",
    )
    assert names == ["mechanism", "count", "sum", "top"] and rows


# -- a predicate on a group key restricts the keys -----------------------------------------


def test_in_on_a_group_key_returns_only_those_keys(service):
    _, rows, _ = _named(
        service, "SELECT region, COUNT(*) FROM people WHERE region IN ('north','south') GROUP BY region"
    )
    assert [r[0] for r in rows] == ["north", "south"]


def test_key_predicates_like_between_not(service):
    _, rows, _ = _named(
        service,
        "SELECT region, sex, COUNT(*) FROM people WHERE region LIKE '%th' AND sex = 1 "
        "AND age > 30 GROUP BY region, sex",
    )
    assert [r[:2] for r in rows] == [("north", 1), ("south", 1)]
    _, rows, _ = _named(
        service, "SELECT item, COUNT(*) FROM purchases WHERE item BETWEEN 3 AND 5 GROUP BY item"
    )
    assert [r[0] for r in rows] == [3, 4, 5]
    _, rows, _ = _named(
        service, "SELECT region, COUNT(*) FROM people WHERE region NOT IN ('north','south') GROUP BY region"
    )
    assert [r[0] for r in rows] == ["central", "east", "west"]


def test_key_predicate_through_a_lookup_join(service):
    """The TPC-H Q12 shape (``l_shipmode IN ('MAIL','SHIP')`` over lineitem ⋈ orders): a key
    of the looked-up table, restricted by IN."""
    _, rows, _ = _named(
        service,
        "SELECT o.priority, COUNT(*) FROM order_items l JOIN orders o "
        "ON l.order_id = o.order_id WHERE o.priority IN ('high','low') GROUP BY o.priority",
    )
    assert [r[0] for r in rows] == ["high", "low"]


def test_key_predicate_is_not_a_template_slot(service):
    """Statements differing only in the integer a group key is compared with are different cells
    (a value outside the domain first: no cell, and no template that would keep none)."""
    for v in (5, 0, 1):
        _, rows, _ = _named(
            service, f"SELECT sex, COUNT(*) FROM people WHERE sex = {v} AND age > 20 GROUP BY sex"
        )
        assert [r[0] for r in rows] == ([v] if v in (0, 1) else [])


# -- HAVING holds on the released values; ORDER BY an aggregate is one sort ------------------


def test_having_holds_on_every_returned_row(service):
    """The demo's Zipf purchases: items 1..5 are above 5000 (item 5 ≈ 5.2k); noise ±300."""
    _, rows, _ = _named(
        service, "SELECT item, COUNT(*) FROM purchases GROUP BY item HAVING COUNT(*) > 5000 LIMIT 10"
    )
    assert rows and all(n > 5000 for _, n in rows) and {1, 2, 3} <= {k for k, _ in rows}


def test_having_any_condition_over_released_values(service):
    """HAVING beyond one threshold (AVG, <, AND) is a filter on the released cells."""
    names, rows, _ = _named(
        service,
        "SELECT race, AVG(age) AS a, COUNT(*) FROM pums GROUP BY race "
        "HAVING AVG(age) < 50 AND COUNT(*) > 10 ORDER BY a",
    )
    assert names == ["race", "a", "count"] and rows
    assert all(a < 50 and n > 10 for _, a, n in rows) and [r[1] for r in rows] == sorted(r[1] for r in rows)


def test_having_over_partition_selected_keys(service):
    """Keys without a public domain: the sparse vector over the selected keys; the released
    values returned still satisfy the HAVING."""
    for t in (300, 600, 900):
        _, rows, notes = _named(
            service, f"SELECT city, COUNT(*) FROM purchases GROUP BY city HAVING COUNT(*) > {t} LIMIT 40"
        )
        assert "sparse vector" in notes[0] and all(n > t for _, n in rows)


def test_order_by_aggregate_expression_alias_position_are_one(service):
    _, by_pos, _ = _named(
        service, "SELECT region, COUNT(*) FROM people GROUP BY region ORDER BY 2 DESC LIMIT 3"
    )
    _, by_expr, notes = _named(
        service, "SELECT region, COUNT(*) FROM people GROUP BY region ORDER BY COUNT(*) DESC LIMIT 3"
    )
    _, by_alias, _ = _named(
        service, "SELECT region, COUNT(*) AS n FROM people GROUP BY region ORDER BY n DESC LIMIT 3"
    )
    _, keys, _ = _named(service, "SELECT region FROM people GROUP BY region ORDER BY COUNT(*) DESC LIMIT 3")
    assert (
        by_expr == by_alias == by_pos
        and [k for (k,) in keys] == [r[0] for r in by_expr]
        and len(by_expr) == 3
    )
    assert [r[1] for r in by_expr] == sorted((r[1] for r in by_expr), reverse=True) and "repeat" in notes[0]


# -- consistent values ----------------------------------------------------------------------

# items 150..200 of one store: a few purchases each, with count noise ±300 and sum noise
# ±150000 (ε/100 per customer): about half the raw noisy values are negative
_SPARSE = (
    "SELECT item, COUNT(*), SUM(amount), AVG(amount) FROM purchases WHERE store = 1 AND item >= 150 "
    "GROUP BY item"
)


def test_released_values_are_consistent(service):
    _, rows, notes = _named(service, _SPARSE)
    assert len(rows) == 51
    assert all(n >= 0 and s >= 0 and 0 <= a <= 500 for _, n, s, a in rows)
    assert "count(*) clamped to ≥ 0" in notes[0] and "sum(amount) clamped to ≥ 0" in notes[0]
    assert "avg(amount) clamped to [0, 500]" in notes[0]
    spent = service.gw.ledger.spent("other", "day")
    _, again, notes = _named(service, _SPARSE.replace("SELECT item,", "SELECT item AS i,"))
    assert again == rows and "repeat" in notes[0] and service.gw.ledger.spent("other", "day") == spent


@pytest.fixture(scope="module")
def raw_service(tmp_path_factory):
    """The demo on DuckDB with ``[tables.purchases] consistent = false``."""
    cfg = make_config({"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "demo.duckdb")})
    cfg["tables"]["purchases"]["consistent"] = False
    cfg["tiers"]["half"]["consistent"] = False  # role `half`: raw values on every table
    svc = Service(cfg, tmp_path_factory.mktemp("state"), source=SeededSource(20261122)).start()
    yield svc
    svc.close()


def test_consistent_false_returns_the_raw_noisy_values(raw_service):
    _, rows, notes = _named(raw_service, _SPARSE)
    assert any(n < 0 for _, n, _, _ in rows) and any(s < 0 for _, _, s, _ in rows)
    assert "clamped" not in notes[0]


@pytest.fixture()
def pr_service(tmp_path):
    """The demo on DuckDB with its per-record table ``accounts`` (Chen et al. 2025) and a tier
    (role `half`) with ``consistent = false``; its own seeded source, so the draws of one
    test are the same whatever else runs."""
    cfg = make_config({"kind": "duckdb", "path": str(tmp_path / "demo.duckdb")})
    cfg["tiers"]["half"]["consistent"] = False
    svc = Service(cfg, tmp_path / "state", source=SeededSource(20261128)).start()
    demo_accounts.load_duckdb(svc.gw.backend)
    yield svc
    svc.close()


def test_a_tier_with_consistent_false_reads_raw_values_of_a_per_record_table(pr_service):
    """Accounts above 990 million are a handful, spread over 10 cells: the count noise is ±29
    (99%) at ε 0.5, so raw values below 0 are all but certain (each empty cell is < 0 with
    probability about 1/2)."""
    sql = "SELECT branch, kind, COUNT(*) FROM accounts WHERE balance > 990000000 GROUP BY branch, kind"
    _, raw, notes = _named(pr_service, sql, role="half")
    _, kept, notes2 = _named(pr_service, sql, role="other")
    assert len(raw) == len(kept) == 10
    assert any(n < 0 for *_, n in raw) and "clamped" not in notes[0]
    assert all(n >= 0 for *_, n in kept) and "count(*) clamped to ≥ 0" in notes2[0]


def test_outer_query_over_an_inner_having_is_the_same_release(service):
    """HAVING inside an aggregating subquery is a filter of the inner release: the outer query
    counts / filters the released rows that pass it, charged nothing more."""
    _, cells, _ = _named(service, "SELECT item, COUNT(*) AS n FROM purchases GROUP BY item")
    spent = service.gw.ledger.spent("other", "day")
    _, (got,), notes = _named(
        service,
        "SELECT COUNT(*) FROM (SELECT item, COUNT(*) AS n FROM purchases "
        "GROUP BY item HAVING COUNT(*) > 1000) t",
    )
    _, rows, _ = _named(
        service,
        "SELECT item, n FROM (SELECT item, COUNT(*) AS n FROM purchases GROUP BY item "
        "HAVING COUNT(*) > 1000) t WHERE item > 10 ORDER BY n DESC, item",
    )
    assert got == (sum(n > 1000 for _, n in cells),) and "repeat" in notes[0]
    assert rows == sorted([c for c in cells if c[1] > 1000 and c[0] > 10], key=lambda r: (-r[1], r[0]))
    assert service.gw.ledger.spent("other", "day") == spent


def test_a_tier_with_consistent_false_reads_raw_values(raw_service):
    """PUMS has a handful of people over 90: the education cells are mostly empty, count noise ±3."""
    sql = "SELECT educ, COUNT(*) FROM pums WHERE age > 90 GROUP BY educ"
    _, raw, notes = _named(raw_service, sql, role="half")
    _, kept, notes2 = _named(raw_service, sql, role="other")
    assert any(n < 0 for _, n in raw) and "clamped" not in notes[0]
    assert all(n >= 0 for _, n in kept) and "clamped to ≥ 0" in notes2[0]
