"""A privacy unit looked up through one reference, its heavy units kept
(``rewriter.unit.lookup_splits``): lines whose customer is their order's (``privacy_unit =
"o.u"``, ``references = { ok = "o" }``). On frozen data where every line finds exactly one order
and it has a customer (``rewriter.unit.lookup_premise``), the scan that adds to the analyst's own
aggregate over the lines alone the bounded less exact measures of the lines joined to the kept
heavy customers' order keys gives the cells of the one-pass plan (every line joined to its
order), per cell and in total, with and without the L0 ranking, a WHERE, FILTER and no GROUP BY.
The premise is false for a duplicated order key, a dangling or NULL reference and an order
without a customer, and then the service keeps nothing; through the service (the demo's
``order_items``, the file held read-only) the kept scan gives the scan's cells and EXPLAIN says
what it reads."""

from __future__ import annotations

import random
import time
from collections import Counter

import duckdb
import pytest

import rewriter
from config import parse_config
from proxy.backends.duckdb import DuckDBBackend
from proxy.pipeline.central import KEPT_KEYS_MAX, premise_sql, scan_sql
from proxy.pipeline.common import unit_salt
from rewriter import unit
from rewriter.params import needs
from support.bound import duck_rows
from support.service import ask

from .test_unit_frozen import rows_scan
from .test_unit_heavy_apart import CELLS, _plans, _same_rows


def _data(seed: int = 5) -> tuple[list[tuple], list[tuple]]:
    """Orders (key, customer) and their lines (order, cell, n, a): every seventh customer has
    many orders with many lines, the others a few."""
    rnd = random.Random(seed)
    orders, lines = [], []
    for c in range(1, 41):
        heavy = c % 7 == 0
        for _ in range(rnd.randint(6, 10) if heavy else rnd.randint(1, 2)):
            k = len(orders) + 1
            orders.append((k, c))
            for _ in range(rnd.randint(3, 8) if heavy else rnd.randint(1, 3)):
                lines.append((k, rnd.choice(CELLS), rnd.randint(0, 12), round(rnd.uniform(-1, 11), 3)))
    lines += [(k, None, 2, 1.5) for k in (3, 3, 9)]  # a NULL key: a cell of its own
    lines += [(4, 99, 1, 2.0)]  # a key outside the domain
    return orders, lines


ORDERS, LINES = _data()


def lookup_config(G: int, R: int, scope: str):
    bounds = {"max_groups_per_unit": G, "max_rows_per_unit": R, "max_rows_scope": scope}
    return parse_config(
        {
            "tiers": {"default": {"epsilon": 1, "budget": 10}},
            "roles": {"a": {"tier": "default"}},
            "server": {"auth": "trust"},
            "tables": {
                "o": {
                    "privacy_unit": "u",
                    "key": "k",
                    "columns": {"k": {"type": "int"}, "u": {"type": "int"}},
                },
                "l": {
                    "privacy_unit": "o.u",
                    "references": {"ok": "o"},
                    **bounds,
                    "columns": {
                        "ok": {"type": "int"},
                        "g": {"type": "int", "domain": CELLS},
                        "n": {"type": "int", "lower": 0, "upper": 10},
                        "a": {"type": "float", "lower": 0, "upper": 10},
                    },
                },
            },
        }
    )


def _con(orders=ORDERS, lines=LINES):
    con = duckdb.connect()
    con.execute("CREATE TABLE o (k INTEGER, u INTEGER)")
    con.execute("CREATE TABLE l (ok INTEGER, g INTEGER, n INTEGER, a DOUBLE)")
    con.executemany("INSERT INTO o VALUES (?, ?)", orders)
    con.executemany("INSERT INTO l VALUES (?, ?, ?, ?)", lines)
    return con


@pytest.fixture(scope="module")
def con():
    c = _con()
    yield c
    c.close()


SQLS = [
    "SELECT g, COUNT(*), SUM(n), AVG(a) FROM l GROUP BY g",
    "SELECT g, COUNT(*) FROM l WHERE a < 3 GROUP BY g",
    "SELECT g, COUNT(*) FILTER (WHERE n > 4), SUM(a) FROM l GROUP BY g",
    "SELECT COUNT(*), SUM(n) FROM l",
    "SELECT COUNT(*), AVG(a) FROM l WHERE n <= 3",
]


@pytest.mark.parametrize("kept", ["keys", "rows", "cells"])
@pytest.mark.parametrize("scope", ["cell", "total"])
@pytest.mark.parametrize("G,R", [(6, 3), (2, 4), (3, 1), (6, 500)])
@pytest.mark.parametrize("sql", SQLS)
def test_kept_heavy_keys_give_the_one_pass_plan(con, sql, G, R, scope, kept):
    """The heavy customers' order keys kept (the scan joins their lines), or their lines themselves
    (``rows``: the scan reads them alone), and in total mode without a WHERE or the L0 ranking
    their (customer, cell) rows with running sums made from those lines (``cells``), give the
    one-pass plan's cells."""
    rows = kept != "keys"
    plan = rewriter.build_plan(rewriter.parse(sql), lookup_config(G, R, scope))
    assert plan.unit_lookup is not None and unit.lookup_splits(plan)
    frozen = rewriter.to_sql(
        plan, _plans("duckdb", True), "0a1b", frozen=True, rows=rows, cells=kept == "cells"
    )
    one = rewriter.to_sql(plan, _plans("duckdb", False), "0a1b")
    [(name, select), *more] = needs(frozen)
    cells = kept == "cells" and scope == "total" and "l WHERE" not in sql and "GROUP BY" in sql and G >= 6
    assert [n[: len(unit.KEPT_CELLS)] for n, _ in more] == ([unit.KEPT_CELLS] if cells else [])
    for n, q in needs(frozen):  # the cells' relation reads the lines'
        con.execute(f'CREATE OR REPLACE TEMP TABLE "{n}" AS {q}')
    kept = con.execute(f'SELECT COUNT(*) FROM "{name}"').fetchone()[0]
    assert (kept > 0) == (R < 500)  # heavy customers' orders (or their lines) kept where a bound binds
    assert name.startswith(unit.KEPT_ROWS if rows else unit.KEPT_HEAVY)
    # the analyst's aggregate reads the lines alone; only the kept orders' lines are joined
    assert '"o"' not in frozen.split('"per" AS')[0]
    _same_rows(lambda q: duck_rows(con, q), frozen, one)


def test_the_kept_keys_are_named_by_what_they_hold():
    """One relation per (tables, unit, T): statements that differ in WHERE, keys or measures
    share it; another threshold is another relation."""

    def kept(sql: str, R: int, rows: bool = False) -> tuple:
        plan = rewriter.build_plan(rewriter.parse(sql), lookup_config(6, R, "total"))
        return needs(rewriter.to_sql(plan, "duckdb", "0a1b", frozen=True, rows=rows))

    assert kept(SQLS[0], 3) == kept(SQLS[1], 3) == kept(SQLS[3], 3) != kept(SQLS[0], 4)
    assert kept(SQLS[0], 3, True) == kept(SQLS[1], 3, True) != kept(SQLS[0], 4, True)
    assert kept(SQLS[0], 3, True) != kept(SQLS[0], 3)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(DISTINCT g) FROM l",  # not a count or a sum of rows
        "SELECT g, COUNT(*) FROM l JOIN o ON l.ok = o.k GROUP BY g",  # the analyst's own join
    ],
)
def test_a_plan_that_is_not_the_lookup_alone_keeps_nothing(sql):
    plan = rewriter.build_plan(rewriter.parse(sql), lookup_config(6, 3, "total"))
    assert not unit.lookup_splits(plan)


def test_the_premise_is_one_text_per_table_lookup_and_bound():
    """Statements over the table share their premise's text (it reads no WHERE, key or measure)
    and a threshold of its own is another premise."""

    def text(sql: str, R: int) -> str:
        plan = rewriter.build_plan(rewriter.parse(sql), lookup_config(6, R, "total"))
        return premise_sql(plan, "duckdb")

    assert text(SQLS[0], 3) == text(SQLS[1], 3) == text(SQLS[3], 3) != text(SQLS[0], 4)
    plan = rewriter.build_plan(rewriter.parse(SQLS[1]), lookup_config(6, 3, "total"))
    assert text(SQLS[0], 3) == rewriter.dialects.get("duckdb").sql(unit.lookup_premise(plan, KEPT_KEYS_MAX))


def _holds(orders, lines, keys_at_most: int = 1000) -> bool:
    plan = rewriter.build_plan(rewriter.parse(SQLS[0]), lookup_config(6, 3, "total"))
    c = _con(orders, lines)
    try:
        premise = unit.lookup_premise(plan, keys_at_most)
        return c.execute(rewriter.dialects.get("duckdb").sql(premise)).fetchone()[0]
    finally:
        c.close()


def test_the_premise_holds_only_where_every_line_has_one_order_with_a_customer_and_few_keys():
    assert _holds(ORDERS, LINES) is True
    assert _holds([*ORDERS, (ORDERS[0][0], 3)], LINES) is False  # an order key twice
    assert _holds(ORDERS, [*LINES, (10_000, 1, 1, 1.0)]) is False  # a line without its order
    assert _holds(ORDERS, [*LINES, (None, 1, 1, 1.0)]) is False  # a line without an order key
    no_customer = [(k, None if k == 2 else u) for k, u in ORDERS]
    assert _holds(no_customer, LINES) is False  # an order without a customer
    assert _holds([*ORDERS, (None, 5)], LINES) is True  # an order no line reaches: nothing changes
    customer = dict(ORDERS)
    rows = Counter(customer[k] for k, *_ in LINES)
    heavy = sum(1 for _, u in ORDERS if rows[u] > 3)  # the orders of customers above T = R = 3: kept
    assert _holds(ORDERS, LINES, heavy) is True and _holds(ORDERS, LINES, heavy - 1) is False


SERVED = [
    "SELECT item, COUNT(*), SUM(quantity) FROM order_items WHERE item <= 10 GROUP BY item",
    "SELECT COUNT(*), AVG(price) FROM order_items WHERE quantity > 2",
]


def _kept_scan(gw, plan):
    """The scan text once the backend has answered the lookup's premise (on a scan thread: until
    then the scan joins every row, as it must not hold the event loop)."""
    deadline = time.time() + 30
    while not needs(text := scan_sql(gw, plan)) and time.time() < deadline:
        time.sleep(0.05)
    return text


@pytest.mark.parametrize("sql", SERVED)
def test_the_served_scan_reads_the_kept_keys_and_gives_the_same_cells(served, sql):
    gw = served.gw
    plan = gw.plan(sql, None)
    assert plan.unit_lookup is not None
    text = rows_scan(gw, plan)
    [(name, _)] = needs(text)
    assert name.startswith(unit.KEPT_ROWS)
    salt = unit_salt(gw, plan)
    plain = rewriter.to_sql(plan, gw.backend.dialect, salt)
    keys = rewriter.to_sql(plan, gw.backend.dialect, salt, frozen=True)
    for q in (text, keys):
        _same_rows(lambda q: served._call(gw.backend.fetch(q)), q, plain)
    rows, _ = ask(served, sql)
    assert rows
    explained = "\n".join(r[0] for r in ask(served, "EXPLAIN " + sql)[0])
    assert f"the units above the bound and their rows are read from {name}" in explained, explained
    assert "the analyst's aggregate reads the base table alone" in explained


def test_a_premise_that_fails_keeps_nothing(served, monkeypatch):
    """Where the premise does not hold, the scan joins every line to its order, as before."""
    gw = served.gw
    plan = gw.plan(SERVED[0], None)
    assert needs(_kept_scan(gw, plan))
    monkeypatch.setattr(gw.backend, "holds", lambda sql: False)
    assert not needs(scan_sql(gw, plan))


def test_the_premise_is_answered_off_the_event_loop(tmp_path):
    """A premise reads whole tables: the backend answers it on a scan thread (until then it does
    not hold: the first scans join every row), and only of a file held read-only."""
    path = tmp_path / "data.duckdb"
    con = _con()
    con.execute(f"ATTACH '{path}' AS f")
    con.execute("CREATE TABLE f.o AS SELECT * FROM o")
    con.execute("CREATE TABLE f.l AS SELECT * FROM l")
    con.close()
    plan = rewriter.build_plan(rewriter.parse(SQLS[0]), lookup_config(6, 3, "total"))
    premise = rewriter.dialects.get("duckdb").sql(unit.lookup_premise(plan, 1000))
    b = DuckDBBackend(path)
    try:
        assert not b.holds(premise)  # read-write: nothing is frozen
        b.reopen_read_only()
        deadline = time.time() + 30
        while not b.holds(premise) and time.time() < deadline:  # answered on a scan thread
            time.sleep(0.01)
        assert b.holds(premise)
    finally:
        b.discard()
