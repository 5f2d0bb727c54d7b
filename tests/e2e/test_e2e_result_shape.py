"""The result is the SQL's result over the released cells, through the wire on DuckDB and
Postgres: output names follow Postgres' rules, a predicate on a group key restricts the
keys returned, HAVING holds on every returned row's released value, ORDER BY an aggregate
by expression, alias or position is one thing, and released values are consistent (a COUNT
is never negative, …) unless the table says ``consistent = false``."""
from __future__ import annotations

import psycopg

from support.service import ask


def _named(svc, sql, role="other"):
    """(column names, rows, NOTICE texts) of one statement."""
    notes: list[str] = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        cur = c.execute(sql)
        return [d.name for d in cur.description], cur.fetchall(), notes


# -- output names ------------------------------------------------------------------------

def test_derived_table_column_keeps_its_name(service):
    names, rows, _ = _named(service, "SELECT s, COUNT(*) FROM (SELECT store AS s, customer_id FROM purchases) x "
                                     "GROUP BY s")
    assert names == ["s", "count"] and [r[0] for r in rows] == list(range(1, 11))


def test_views_name_columns_as_postgres_does(service):
    ask(service, "SELECT COUNT(*) FROM pums WHERE sex = 1", role="other")
    names, rows, _ = _named(service, "SELECT mechanism, COUNT(*), SUM(epsilon), MAX(epsilon) AS top "
                                     "FROM dpgate.releases GROUP BY mechanism")
    assert names == ["mechanism", "count", "sum", "top"] and rows
