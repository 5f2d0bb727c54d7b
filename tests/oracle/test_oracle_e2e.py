"""Negations through the wire on the demo `people` table (DuckDB and Postgres): NOT LIKE
and IS NOT NULL keep their negation. Noise at ε = 1 is a few units;
the bounds below are hundreds, and the dropped negation misses them by thousands."""

from __future__ import annotations

import psycopg


def _count(c, where: str) -> float:
    ((n,),) = c.execute(f"SELECT COUNT(*) FROM people WHERE {where}").fetchall()
    return n


def test_not_like_and_is_not_null_through_the_wire(service):
    n = service.people_rows
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        like, not_like = _count(c, "region LIKE 'n%'"), _count(c, "region NOT LIKE 'n%'")
        is_null, not_null = _count(c, "hours IS NULL"), _count(c, "hours IS NOT NULL")
    # every region is non-NULL and 'north' is one of five: LIKE + NOT LIKE = all rows
    assert abs(like + not_like - n) < 200 and not_like > 2 * like
    # hours is never NULL in the demo: IS NOT NULL is every row (the bug answered ~0),
    # and it is a release of its own (IS NULL's key differs), not a free "repeat"
    assert abs(not_null - n) < 100 and abs(is_null) < 100
