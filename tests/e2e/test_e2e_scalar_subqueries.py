"""Scalar subqueries and shares of a total, over the wire on DuckDB and Postgres.

A scalar subquery over the statement's table (or one of the same privacy unit) is a release
of its own: released first at its share of the tier's ε, its value bound as a constant into
the statement around it (sequential composition; the arithmetic over it is post-processing).
The statement is charged the tier's ε once, split as its NOTICE and EXPLAIN say; a repeat is
free; a subquery released before at the tier's ε is served again and takes no share. The
values are checked against Postgres evaluating the same expressions over the released values.
COUNT(*) over COUNT(DISTINCT unit) is one release (two aggregates sharing ε), and windows in an
outer query over an aggregating derived table equal Postgres' windows over its released rows.
"""

from __future__ import annotations

import re
from decimal import Decimal

import psycopg
import pytest


def _run(svc, sql, role="other"):
    """(column names, type oids, rows, NOTICE texts) of one statement."""
    notes: list[str] = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        cur = c.execute(sql)
        return (
            [d.name for d in cur.description],
            [d.type_code for d in cur.description],
            cur.fetchall(),
            notes,
        )


def _left(note: str) -> float:
    return float(re.search(r"budget left ([0-9.e+-]+) of", note).group(1))


def _pg(postgres, sql, params=()):
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        cur = c.execute(sql, params)
        return [d.type_code for d in cur.description], cur.fetchall()


SHARE = (
    "SELECT region, COUNT(*) AS n, (SELECT COUNT(*) FROM people) AS total, "
    "COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people) AS share FROM people GROUP BY region ORDER BY region"
)


def test_share_of_total_is_two_releases_charged_once(service, postgres):
    names, oids, rows, notes = _run(service, SHARE)
    assert names == ["region", "n", "total", "share"]
    assert [r[0] for r in rows] == ["central", "east", "north", "south", "west"]
    head = notes[0]
    assert "ε charged 1 for this statement's 2 releases" in head
    assert "scalar subquery 1 SELECT COUNT(*) FROM people: ε 0.5" in head
    assert "the statement around them: ε 0.5" in head
    assert "sequential composition" in head
    # each release's own NOTICE follows, at its share
    assert any(n.startswith("(scalar subquery 1) dpgate: ε charged 0.5") for n in notes)
    assert sum("dpgate: ε charged 0.5" in n for n in notes) == 2
    # one value of the subquery, the same in every row; the share is Postgres' arithmetic over it
    totals = {r[2] for r in rows}
    assert len(totals) == 1
    for region, n, total, share in rows:
        want_oids, want = _pg(postgres, "SELECT %s::bigint * 1.0 / %s::bigint", (n, total))
        assert share == want[0][0] and isinstance(share, Decimal)
    want_oids, _ = _pg(postgres, "SELECT 'a'::text, 1::bigint, 2::bigint, 1::bigint * 1.0 / 2::bigint")
    assert oids == want_oids
    # a repeat: every release served again, nothing charged
    _, _, again, notes2 = _run(service, SHARE)
    assert again == rows
    assert "ε charged 0 for this statement's 2 releases" in notes2[0]
    assert _left(notes2[0]) == _left(head)


def test_comparison_against_a_released_average(service):
    """Q22's shape: a row filter against a released value. The average is released first; the
    count reads the rows its released value selects (sequential composition)."""
    sql = "SELECT COUNT(*) FROM people WHERE income > (SELECT AVG(income) FROM people WHERE age > 30)"
    _, _, before, n0 = _run(service, "SELECT COUNT(*) FROM people WHERE sex = 0 AND age < 20")
    _, _, rows, notes = _run(service, sql)
    assert len(rows) == 1 and rows[0][0] > 0
    assert "ε charged 1 for this statement's 2 releases" in notes[0]
    assert "scalar subquery 1 SELECT AVG(income) FROM people WHERE age > 30: ε 0.5" in notes[0]
    assert _left(n0[0]) - _left(notes[0]) == pytest.approx(1.0)
    _, _, plan, _ = _run(service, "EXPLAIN " + sql)
    text = "\n".join(r[0] for r in plan)
    assert "statement of 2 releases: ε 1 split" in text
    assert "(ε 0.5 each)" in text
    assert "scalar subquery 1: SELECT AVG(income) FROM people WHERE age > 30" in text
    assert "ε 0.5 per query" in text


def test_a_release_made_before_at_the_tiers_epsilon_is_reused(service):
    """The subquery asked alone before (at the tier's ε) is served from the ledger: it takes no
    share, and the statement around it runs at the whole ε; the value bound is that release's."""
    _, _, alone, _ = _run(service, "SELECT AVG(income) FROM people WHERE sex = 1")
    x = alone[0][0]
    _, _, rows, notes = _run(
        service,
        "SELECT region, AVG(income) AS a, AVG(income) - (SELECT AVG(income) FROM people WHERE sex = 1) AS d "
        "FROM people WHERE sex = 1 GROUP BY region",
    )
    assert "scalar subquery 1 SELECT AVG(income) FROM people WHERE sex = 1: ε 0 (a stored release" in notes[0]
    assert "the statement around them: ε 1" in notes[0]
    assert "ε charged 1 for this statement's 2 releases" in notes[0]
    assert all(d == a - x for _, a, d in rows)


def test_count_over_count_distinct_unit_is_one_release(service, postgres):
    _, _, both, _ = _run(service, "SELECT COUNT(*), COUNT(DISTINCT customer_id) FROM purchases")
    _, oids, rows, notes = _run(
        service, "SELECT COUNT(*)::float / COUNT(DISTINCT customer_id) FROM purchases"
    )
    assert "ε charged 0 (repeat of an earlier release)" in notes[0]  # the same two aggregates
    want_oids, want = _pg(postgres, "SELECT %s::bigint::float / %s::bigint", both[0])
    assert oids == want_oids == [701]
    assert rows[0][0] == want[0][0]


def test_windows_over_an_aggregating_derived_table_equal_postgres(service, postgres):
    inner = "SELECT store, COUNT(*) AS c FROM purchases GROUP BY store"
    outer = (
        "SELECT store, c, SUM(c) OVER (ORDER BY store) AS running, RANK() OVER (ORDER BY c DESC) AS r, "
        "c - LAG(c) OVER (ORDER BY store) AS change, c * 1.0 / SUM(c) OVER () AS share, "
        "NTH_VALUE(c, 2) OVER w AS second FROM ({}) t WINDOW w AS (ORDER BY store) ORDER BY store"
    )
    _, oids, rows, notes = _run(service, outer.format(inner))
    assert "window functions" in notes[0]
    _, _, cells, again = _run(service, inner)
    assert "ε charged 0 (repeat" in again[0]  # the windowed statement released the same cells
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS released")
        c.execute("CREATE TABLE released (store bigint, c bigint)")
        with c.cursor() as cur:
            cur.executemany("INSERT INTO released VALUES (%s, %s)", cells)
    want_oids, want = _pg(postgres, outer.format("SELECT * FROM released"))
    assert oids == want_oids
    assert rows == want


@pytest.mark.parametrize(
    "sql, words",
    [
        (
            "SELECT COUNT(*) FROM people p WHERE income > (SELECT AVG(income) FROM people q WHERE q.region = p.region)",
            "correlated",
        ),
        ("SELECT COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people GROUP BY sex) FROM people", "GROUP BY"),
        ("SELECT COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people) FROM purchases", "different privacy units"),
        ("SELECT (SELECT COUNT(*) FROM people) WHERE 1 = 1", "without FROM"),
    ],
)
def test_refused_before_anything_is_charged(service, sql, words):
    _, _, _, before = _run(service, "SELECT COUNT(*) FROM people WHERE age > 90")
    with pytest.raises(psycopg.Error) as e:
        _run(service, sql)
    assert e.value.sqlstate == "0A000"
    assert words in e.value.diag.message_primary
    assert e.value.diag.message_hint  # says what to write instead
    _, _, _, after = _run(service, "SELECT COUNT(*) FROM people WHERE age > 90")
    assert _left(after[0]) == _left(before[0])


def test_whole_statement_checked_against_the_budget_first(service):
    """The role `tiny` (budget 2.5, ε 1): after 2 releases, a statement of two fresh releases
    (ε 1 in all) fits; after 3, it is refused before its first scan, nothing charged."""
    _run(service, "SELECT COUNT(*) FROM people WHERE age > 10", role="tiny")
    _, _, _, n = _run(service, "SELECT COUNT(*) FROM people WHERE age > 11", role="tiny")
    assert _left(n[0]) == pytest.approx(0.5)
    with pytest.raises(psycopg.Error) as e:
        _run(
            service,
            "SELECT COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people) FROM people WHERE sex = 1",
            role="tiny",
        )
    assert e.value.sqlstate == "53400"
    _, _, _, still = _run(service, "SELECT COUNT(*) FROM people WHERE age > 11", role="tiny")
    assert _left(still[0]) == pytest.approx(0.5)


def _corpus():
    from bi.corpus import ANALYST_QUESTIONS, SCALAR_SHAPES

    mine = (
        "share of total",
        "purchases per customer",
        "rank of groups",
        "running total / month-over-month change",
    )
    return SCALAR_SHAPES + [q for q in ANALYST_QUESTIONS if q[0] in mine]


@pytest.mark.parametrize("name, sql", _corpus(), ids=[n for n, _ in _corpus()])
def test_corpus_shapes_answered_with_their_cost(service, name, sql):
    """bench.sql_coverage's scalar and window shapes and the analyst's questions of this kind:
    answered, the NOTICE stating the ε charged."""
    _, _, rows, notes = _run(service, sql)
    assert rows and notes and "ε charged" in notes[0]


OWN_ROWS = (
    "WITH r AS (SELECT store, SUM(amount) AS rev FROM purchases WHERE amount > 7 GROUP BY store) "
    "SELECT store, rev, rev / (SELECT SUM(rev) FROM r) AS share FROM r "
    "WHERE rev >= (SELECT MAX(rev) FROM r WHERE store > 3) OR rev = (SELECT MIN(rev) FROM r) ORDER BY store"
)


def test_scalar_over_the_statements_own_rows_is_that_release(service, postgres):
    """TPC-H Q15's shape: ``total = (SELECT MAX(total) FROM revenue0)`` over the statement's own
    aggregating WITH query is an aggregate of that one release's rows (post-processing): one
    release, and the answer is Postgres's over the released rows."""
    _, oids, rows, notes = _run(service, OWN_ROWS)
    assert "ε charged 1;" in notes[0] and len(notes) == 1  # one release, not several
    _, _, cells, again = _run(
        service, "SELECT store, SUM(amount) AS rev FROM purchases WHERE amount > 7 GROUP BY store"
    )
    assert "ε charged 0 (repeat" in again[0]
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS released_rev")
        c.execute("CREATE TABLE released_rev (store bigint, rev float8)")
        with c.cursor() as cur:
            cur.executemany("INSERT INTO released_rev VALUES (%s, %s)", cells)
    want_oids, want = _pg(
        postgres,
        OWN_ROWS.replace(
            "SELECT store, SUM(amount) AS rev FROM purchases WHERE amount > 7 GROUP BY store",
            "TABLE released_rev",
        ),
    )
    assert oids == want_oids
    assert rows == want and 2 <= len(rows) < len(cells)


def test_q15_with_a_column_list(service):
    """TPC-H Q15's approved WITH variant names the view's columns in a list: the same release
    (a repeat), the supplier of the largest released revenue."""
    spelled = (
        "WITH revenue0 (supplier_no, total_revenue) AS (SELECT store, SUM(amount) FROM purchases GROUP BY store) "
        "SELECT supplier_no, total_revenue FROM revenue0 "
        "WHERE total_revenue = (SELECT MAX(total_revenue) FROM revenue0) ORDER BY supplier_no"
    )
    _, _, cells, _ = _run(service, "SELECT store, SUM(amount) FROM purchases GROUP BY store")
    names, _, rows, notes = _run(service, spelled)
    assert names == ["supplier_no", "total_revenue"]
    assert "ε charged 0 (repeat" in notes[0]
    top = max(v for _, v in cells)
    assert rows == [(k, v) for k, v in sorted(cells) if v == top]
    with pytest.raises(psycopg.Error) as e:
        _run(
            service,
            "WITH r (a, b, c) AS (SELECT store, SUM(amount) FROM purchases GROUP BY store) SELECT a FROM r",
        )
    assert e.value.sqlstate == "42P10"


def test_parameters_bound_in_each_part(service):
    """$n in the subquery and in the statement around it (psycopg binds server-side; asyncpg
    encodes each argument by the type Describe gives it): each part is its statement with the
    values in place, so its release key is the one the same statement written out has."""
    import asyncio

    import asyncpg

    sql = "SELECT region, COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people WHERE age > $1) FROM people WHERE income > $2 GROUP BY region"
    written = (
        "SELECT region, COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people WHERE age > 47) FROM people "
        "WHERE income > 1000.5 GROUP BY region"
    )

    async def run():
        c = await asyncpg.connect(service.url("other"))
        try:
            st = await c.prepare(sql)
            return [t.name for t in st.get_parameters()], [tuple(r) for r in await st.fetch(47, 1000.5)]
        finally:
            await c.close()

    types, rows = asyncio.run(run())
    assert types == ["int8", "float8"]
    _, _, again, notes = _run(service, written)
    assert again == rows
    assert "ε charged 0 for this statement's 2 releases" in notes[0]  # the same two releases
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        got = c.execute(sql.replace("$1", "%s").replace("$2", "%s"), (47, 1000.5)).fetchall()
    assert got == rows


def test_select_without_from_over_scalar_subqueries(service, postgres):
    """``SELECT (SELECT COUNT(*) …)::float / (SELECT COUNT(DISTINCT …) …)``: two releases at ε/2
    (each subquery written twice is one release), the arithmetic computed by dpgate over the
    released values with Postgres's types and values."""
    n = "(SELECT COUNT(*) FROM purchases WHERE store = 3)"
    u = "(SELECT COUNT(DISTINCT customer_id) FROM purchases WHERE store = 3)"
    sql = f"SELECT {n} AS n, {u} AS u, {n}::float / {u} AS per_customer, {n} * 100.0 / 7 AS scaled"
    names, oids, rows, notes = _run(service, sql)
    assert names == ["n", "u", "per_customer", "scaled"]
    assert "ε charged 1 for this statement's 2 releases" in notes[0]
    assert "scalar subquery 1 SELECT COUNT(*) FROM purchases WHERE store = 3: ε 0.5" in notes[0]
    (got,) = rows
    want_oids, want = _pg(
        postgres,
        "SELECT %s::bigint AS n, %s::bigint AS u, %s::bigint::float / %s::bigint AS per_customer, "
        "%s::bigint * 100.0 / 7 AS scaled",
        (got[0], got[1], got[0], got[1], got[0]),
    )
    assert oids == want_oids == [20, 20, 701, 1700]
    assert got == want[0]


LOOKUP = (
    "WITH r (store_no, rev) AS (SELECT store, SUM(amount) FROM purchases WHERE amount > 3 GROUP BY store) "
    "SELECT s.store_id, s.area, r.rev FROM stores s, r "
    "WHERE s.store_id = r.store_no AND r.rev > (SELECT MIN(rev) FROM r) AND s.opened >= 2000 "
    "ORDER BY s.area DESC, s.store_id LIMIT 6"
)
BOTH_SIDES = LOOKUP.replace("AND s.opened >= 2000", "OR s.area = 'north'")


def test_public_table_looked_up_by_released_keys(service, postgres):
    """TPC-H Q15's shape: a public table joined to an aggregating WITH query on its key. The
    query is released alone (its condition on its own rows included); the public rows are read
    exactly; the join, the conditions, the order and LIMIT are Postgres's over those rows."""
    names, oids, rows, notes = _run(service, LOOKUP)
    assert names == ["store_id", "area", "rev"]
    assert "ε charged 1;" in notes[0]
    assert "joined with the rows of the public table stores: exact, no ε" in notes[-1]
    _, _, cells, again = _run(
        service, "SELECT store, SUM(amount) FROM purchases WHERE amount > 3 GROUP BY store"
    )
    assert "ε charged 0 (repeat" in again[0]  # the statement's one release
    _, _, public, _ = _run(service, "SELECT store_id, area, opened FROM stores")
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        # the oracle's own table names: the test Postgres also holds the demo's tables
        c.execute("DROP TABLE IF EXISTS rel_r, pub_stores")
        c.execute("CREATE TABLE rel_r (store_no bigint, rev float8)")
        c.execute("CREATE TABLE pub_stores (store_id bigint, area text, opened bigint)")
        with c.cursor() as cur:
            cur.executemany("INSERT INTO rel_r VALUES (%s, %s)", cells)
            cur.executemany("INSERT INTO pub_stores VALUES (%s, %s, %s)", public)
    want_oids, want = _pg(
        postgres,
        LOOKUP.replace(
            "WITH r (store_no, rev) AS (SELECT store, SUM(amount) FROM purchases WHERE amount > 3 GROUP BY store)",
            "WITH r AS (TABLE rel_r)",
        ).replace("FROM stores s", "FROM pub_stores s"),
    )
    assert oids == want_oids
    assert rows == want and len(rows) == 6  # 9 stores above the smallest revenue, LIMIT 6


@pytest.mark.parametrize(
    "sql, state",
    [
        (BOTH_SIDES, "0A000"),  # a condition reading both sides
        (
            "WITH r AS (SELECT store, COUNT(*) AS n FROM purchases GROUP BY store) "
            "SELECT s.area, r.n * 2 FROM stores s JOIN r ON s.store_id = r.store",
            "0A000",  # an expression in the select list
        ),
    ],
)
def test_lookup_refusals_charge_nothing(service, sql, state):
    _, _, _, before = _run(service, "SELECT COUNT(*) FROM people WHERE age > 91")
    with pytest.raises(psycopg.Error) as e:
        _run(service, sql)
    assert e.value.sqlstate == state and e.value.diag.message_hint
    _, _, _, after = _run(service, "SELECT COUNT(*) FROM people WHERE age > 91")
    assert _left(after[0]) == _left(before[0])


def test_a_temporary_view_reads_as_its_with_query(service):
    """Q15 with its view as a temporary view (inlined as a derived table): the subquery over the
    view's rows and the public lookup are the same one release as the WITH spelling's."""
    _, _, want, _ = _run(service, LOOKUP)
    view = (
        "CREATE TEMPORARY VIEW r AS SELECT store AS store_no, SUM(amount) AS rev FROM purchases "
        "WHERE amount > 3 GROUP BY store"
    )
    notes: list[str] = []
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        c.execute(view)
        got = c.execute("SELECT" + LOOKUP.split(") SELECT", 1)[1]).fetchall()  # the view, not WITH
    assert got == want
    assert "ε charged 0 (repeat" in notes[0]
