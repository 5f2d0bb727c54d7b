"""Error bars in the rows over the wire (psycopg): dp_interval_low/high and SET dpgate.intervals."""

from __future__ import annotations

import psycopg


def _run(svc, sql, role="other", params=None, setup=()):
    notes = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        for s in setup:
            c.execute(s)
        cur = c.execute(sql, params)
        rows = cur.fetchall()
        names = [d.name for d in cur.description]
    return rows, names, notes


def test_interval_functions(duck_service):
    rows, names, notes = _run(
        duck_service,
        "SELECT educ, COUNT(*), dp_interval_low(COUNT(*)), dp_interval_high(COUNT(*)), "
        "AVG(income) AS m, dp_interval_low(AVG(income), 0.9) AS m_lo, dp_interval_high(AVG(income), 0.9) AS m_hi "
        "FROM pums GROUP BY educ",
    )
    print(names, rows[:3], notes)
    assert names[:4] == ["educ", "count", "dp_interval_low", "dp_interval_high"]


def test_set_intervals(duck_service):
    rows, names, notes = _run(
        duck_service,
        "SELECT educ, COUNT(*) AS n, ROUND(AVG(income), 1) FROM pums GROUP BY educ",
        setup=["SET dpgate.intervals = on"],
    )
    print(names, rows[:3], notes)
    with psycopg.connect(duck_service.dsn("other"), autocommit=True) as c:
        c.execute("SET dpgate.intervals = 0.9")
        cur = c.execute("SELECT COUNT(*) FROM pums WHERE age > %s", (30,), prepare=True)
        print([d.name for d in cur.description], cur.fetchall())


def test_ladder_and_having(duck_service):
    rows, names, notes = _run(
        duck_service,
        "SELECT educ, COUNT(*) FROM pums GROUP BY educ HAVING dp_interval_low(COUNT(*)) > 50 "
        "ORDER BY dp_interval_high(COUNT(*)) DESC",
    )
    print(names, rows, notes)


def test_ladder(duck_service):
    rows, names, notes = _run(
        duck_service,
        "SELECT educ, COUNT(*), dp_interval_low(COUNT(*)), dp_interval_high(COUNT(*)), AVG(age), "
        "dp_interval_low(AVG(age)), dp_interval_high(AVG(age)) FROM pums GROUP BY educ",
        role="silver",
    )
    print(names, rows[:3], notes)
