"""What data-frame libraries and ORMs send around a user's query, over the wire: the
``LIMIT 0`` schema probe (columns, no rows, nothing read or charged) and the ``SELECT *
FROM (<query>) AS q`` wrapper, which is the release of the query itself (the query
afterwards is a free repeat)."""

from __future__ import annotations

import psycopg
import pytest

from support.service import ask

from .test_copy import charged

QUERY = "SELECT educ, COUNT(*) AS n, AVG(income) AS m FROM pums WHERE age > 37 GROUP BY educ"


def test_limit_0_probe_is_free_and_names_the_columns(svc):
    before = svc.gw.ledger.spent("analyst", "day")
    notes: list[str] = []
    with psycopg.connect(svc.dsn(), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        cur = c.execute(f"SELECT * FROM ({QUERY}) AS q LIMIT 0")
        assert cur.fetchall() == []
        assert [(d.name, d.type_code) for d in cur.description] == [("educ", 20), ("n", 20), ("m", 701)]
    assert svc.gw.ledger.spent("analyst", "day") == before
    assert any("nothing charged" in n for n in notes), notes


def test_wrapper_is_the_query_release(svc):
    eps = svc.gw.tier_of("analyst").epsilon
    before = svc.gw.ledger.spent("analyst", "day")
    wrapped, notes = ask(svc, f"SELECT * FROM ({QUERY.replace('37', '38')}) AS q")
    assert svc.gw.ledger.spent("analyst", "day") - before == pytest.approx(eps)
    rows, notes = ask(svc, QUERY.replace("37", "38"))
    assert charged(notes) == 0 and rows == wrapped


def test_explain_of_a_limit_0_probe_says_it_is_free(svc):
    rows, _ = ask(svc, f"EXPLAIN SELECT * FROM ({QUERY}) AS q LIMIT 0")
    assert any("nothing charged" in r[0] for r in rows), rows
