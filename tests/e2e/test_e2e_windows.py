"""Window functions over released cells, through the wire on DuckDB and Postgres: a window
whose inputs are the statement's released aggregates and group keys is post-processing
(free), and its value is Postgres' own window over the same released cells (the oracle:
the released rows loaded into a table of the test's Postgres, the same window run there).
A window over raw rows is refused with 0A000 and a hint."""

from __future__ import annotations

import math
from decimal import Decimal

import psycopg
import pytest


def _named(svc, sql, role="other"):
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


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return (
            a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-12)
        )
    return a == b


def _oracle(postgres, keys: list[str], cells: list[tuple], types: list[str], sql: str):
    """(type oids, rows) of ``sql`` run by Postgres over a table ``cells`` holding the
    released rows (group keys, then released aggregate values as columns v0, v1, …)."""
    cols = keys + [f"v{i}" for i in range(len(types) - len(keys))]
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS cells")
        c.execute("CREATE TABLE cells (" + ", ".join(f"{n} {t}" for n, t in zip(cols, types)) + ")")
        with c.cursor() as cur:
            cur.executemany(
                "INSERT INTO cells VALUES (" + ", ".join(["%s"] * len(cols)) + ")", [tuple(r) for r in cells]
            )
        cur = c.execute(sql)
        return [d.type_code for d in cur.description], cur.fetchall()


# Each case: the dpgate statement (its first columns: the keys and the released aggregates,
# in the order of ``types``) and the same statement over ``cells``, each aggregate spelled
# MAX(v_i) over one-row groups, so Postgres computes the window over the released values.
CASES = [
    (
        "running total and change",
        "SELECT educ, COUNT(*), SUM(COUNT(*)) OVER (ORDER BY educ), "
        "COUNT(*) - LAG(COUNT(*)) OVER (ORDER BY educ), LEAD(COUNT(*), 2, 0) OVER (ORDER BY educ) "
        "FROM pums GROUP BY educ ORDER BY educ",
        ["educ"],
        ["bigint", "bigint"],
        "SELECT educ, MAX(v0), SUM(MAX(v0)) OVER (ORDER BY educ), "
        "MAX(v0) - LAG(MAX(v0)) OVER (ORDER BY educ), LEAD(MAX(v0), 2, 0) OVER (ORDER BY educ) "
        "FROM cells GROUP BY educ ORDER BY educ",
    ),
    (
        "ranks",
        "SELECT educ, COUNT(*), RANK() OVER (ORDER BY COUNT(*) DESC), "
        "DENSE_RANK() OVER (ORDER BY COUNT(*) DESC), ROW_NUMBER() OVER (ORDER BY COUNT(*) DESC, educ), "
        "PERCENT_RANK() OVER (ORDER BY COUNT(*)), CUME_DIST() OVER (ORDER BY COUNT(*)), "
        "NTILE(4) OVER (ORDER BY educ) FROM pums GROUP BY educ ORDER BY educ",
        ["educ"],
        ["bigint", "bigint"],
        "SELECT educ, MAX(v0), RANK() OVER (ORDER BY MAX(v0) DESC), "
        "DENSE_RANK() OVER (ORDER BY MAX(v0) DESC), ROW_NUMBER() OVER (ORDER BY MAX(v0) DESC, educ), "
        "PERCENT_RANK() OVER (ORDER BY MAX(v0)), CUME_DIST() OVER (ORDER BY MAX(v0)), "
        "NTILE(4) OVER (ORDER BY educ) FROM cells GROUP BY educ ORDER BY educ",
    ),
    (
        "moving average over rows",
        "SELECT educ, SUM(income), AVG(SUM(income)) OVER (ORDER BY educ ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), "
        "MAX(SUM(income)) OVER (ORDER BY educ ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING), "
        "FIRST_VALUE(SUM(income)) OVER (ORDER BY educ GROUPS BETWEEN 1 PRECEDING AND UNBOUNDED FOLLOWING) "
        "FROM pums GROUP BY educ ORDER BY educ",
        ["educ"],
        ["bigint", "float8"],
        "SELECT educ, MAX(v0), AVG(MAX(v0)) OVER (ORDER BY educ ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), "
        "MAX(MAX(v0)) OVER (ORDER BY educ ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING), "
        "FIRST_VALUE(MAX(v0)) OVER (ORDER BY educ GROUPS BETWEEN 1 PRECEDING AND UNBOUNDED FOLLOWING) "
        "FROM cells GROUP BY educ ORDER BY educ",
    ),
    (
        "share of the total",
        "SELECT sex, COUNT(*), AVG(age), COUNT(*) * 1.0 / SUM(COUNT(*)) OVER () AS share, "
        "AVG(age) - AVG(AVG(age)) OVER () FROM pums GROUP BY sex ORDER BY sex",
        ["sex"],
        ["bigint", "bigint", "float8"],
        "SELECT sex, MAX(v0), MAX(v1), MAX(v0) * 1.0 / SUM(MAX(v0)) OVER () AS share, "
        "MAX(v1) - AVG(MAX(v1)) OVER () FROM cells GROUP BY sex ORDER BY sex",
    ),
    (
        "partitioned by a key",
        "SELECT sex, race, COUNT(*), SUM(COUNT(*)) OVER (PARTITION BY sex ORDER BY race), "
        "COUNT(*) * 100.0 / SUM(COUNT(*)) OVER (PARTITION BY sex), "
        "RANK() OVER (PARTITION BY race ORDER BY COUNT(*) DESC) "
        "FROM pums GROUP BY sex, race ORDER BY sex, race",
        ["sex", "race"],
        ["bigint", "bigint", "bigint"],
        "SELECT sex, race, MAX(v0), SUM(MAX(v0)) OVER (PARTITION BY sex ORDER BY race), "
        "MAX(v0) * 100.0 / SUM(MAX(v0)) OVER (PARTITION BY sex), "
        "RANK() OVER (PARTITION BY race ORDER BY MAX(v0) DESC) "
        "FROM cells GROUP BY sex, race ORDER BY sex, race",
    ),
    (
        "ordered by a derived date key",
        "SELECT date_trunc('month', ts) AS month, COUNT(*), SUM(COUNT(*)) OVER (ORDER BY date_trunc('month', ts)), "
        "COUNT(*) - LAG(COUNT(*)) OVER (ORDER BY date_trunc('month', ts) DESC) FROM purchases GROUP BY 1 ORDER BY 1",
        ["month"],
        ["timestamp", "bigint"],
        "SELECT month, MAX(v0), SUM(MAX(v0)) OVER (ORDER BY month), "
        "MAX(v0) - LAG(MAX(v0)) OVER (ORDER BY month DESC) FROM cells GROUP BY month ORDER BY month",
    ),
    (
        "nth value and RANGE offsets",
        "SELECT educ, COUNT(*), NTH_VALUE(COUNT(*), 2) OVER (ORDER BY educ), "
        "SUM(COUNT(*)) OVER (ORDER BY educ RANGE BETWEEN 2 PRECEDING AND 1 FOLLOWING), "
        "AVG(COUNT(*)) OVER (ORDER BY educ DESC RANGE BETWEEN 1 PRECEDING AND CURRENT ROW), "
        "NTH_VALUE(COUNT(*), 3) OVER (ORDER BY COUNT(*) RANGE BETWEEN 5 FOLLOWING AND 40 FOLLOWING), "
        "COUNT(*) OVER (ORDER BY educ RANGE BETWEEN UNBOUNDED PRECEDING AND 3 PRECEDING) "
        "FROM pums GROUP BY educ ORDER BY educ",
        ["educ"],
        ["bigint", "bigint"],
        "SELECT educ, MAX(v0), NTH_VALUE(MAX(v0), 2) OVER (ORDER BY educ), "
        "SUM(MAX(v0)) OVER (ORDER BY educ RANGE BETWEEN 2 PRECEDING AND 1 FOLLOWING), "
        "AVG(MAX(v0)) OVER (ORDER BY educ DESC RANGE BETWEEN 1 PRECEDING AND CURRENT ROW), "
        "NTH_VALUE(MAX(v0), 3) OVER (ORDER BY MAX(v0) RANGE BETWEEN 5 FOLLOWING AND 40 FOLLOWING), "
        "COUNT(*) OVER (ORDER BY educ RANGE BETWEEN UNBOUNDED PRECEDING AND 3 PRECEDING) "
        "FROM cells GROUP BY educ ORDER BY educ",
    ),
    (
        "RANGE offset along a released float",
        "SELECT educ, COUNT(*), AVG(income), "
        "SUM(COUNT(*)) OVER (ORDER BY AVG(income) RANGE BETWEEN 2500.5 PRECEDING AND 1000 FOLLOWING), "
        "MAX(educ) OVER (ORDER BY AVG(income) DESC RANGE BETWEEN CURRENT ROW AND 5000.25 FOLLOWING) "
        "FROM pums GROUP BY educ ORDER BY educ",
        ["educ"],
        ["bigint", "bigint", "float8"],
        "SELECT educ, MAX(v0), MAX(v1), "
        "SUM(MAX(v0)) OVER (ORDER BY MAX(v1) RANGE BETWEEN 2500.5 PRECEDING AND 1000 FOLLOWING), "
        "MAX(educ) OVER (ORDER BY MAX(v1) DESC RANGE BETWEEN CURRENT ROW AND 5000.25 FOLLOWING) "
        "FROM cells GROUP BY educ ORDER BY educ",
    ),
    (
        "the WINDOW clause",
        "SELECT sex, race, COUNT(*), SUM(COUNT(*)) OVER w, RANK() OVER (p ORDER BY COUNT(*) DESC), "
        "LAG(COUNT(*)) OVER w FROM pums GROUP BY sex, race "
        "WINDOW p AS (PARTITION BY sex), w AS (p ORDER BY race) ORDER BY sex, race",
        ["sex", "race"],
        ["bigint", "bigint", "bigint"],
        "SELECT sex, race, MAX(v0), SUM(MAX(v0)) OVER w, RANK() OVER (p ORDER BY MAX(v0) DESC), "
        "LAG(MAX(v0)) OVER w FROM cells GROUP BY sex, race "
        "WINDOW p AS (PARTITION BY sex), w AS (p ORDER BY race) ORDER BY sex, race",
    ),
    (
        "after HAVING, before ORDER BY and LIMIT",
        "SELECT educ, COUNT(*), SUM(COUNT(*)) OVER (ORDER BY COUNT(*) DESC) AS upto "
        "FROM pums GROUP BY educ HAVING COUNT(*) > 50 ORDER BY COUNT(*) LIMIT 5",
        ["educ"],
        ["bigint", "bigint"],
        "SELECT educ, MAX(v0), SUM(MAX(v0)) OVER (ORDER BY MAX(v0) DESC) AS upto "
        "FROM cells GROUP BY educ HAVING MAX(v0) > 50 ORDER BY MAX(v0) LIMIT 5",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_window_equals_postgres_window_over_the_released_cells(service, postgres, case):
    _, sql, keys, types, oracle_sql = case
    names, oids, rows, notes = _named(service, sql)
    assert rows and notes
    # the released cells: the same release without the windows (a repeat, at no cost)
    _, _, released, again = _named(service, _released_sql(sql, keys, len(types)))
    want_oids, want = _oracle(postgres, keys, released, types, oracle_sql)
    assert oids == want_oids, (names, oids, want_oids)
    assert len(rows) == len(want)
    for got, exp_ in zip(rows, want):
        assert all(_same(a, b) for a, b in zip(got, exp_)), (got, exp_)


def _released_sql(sql: str, keys: list[str], width: int) -> str:
    """The statement's released cells: its keys and aggregates without windows, HAVING,
    ORDER BY or LIMIT (the same release: post-processing is not part of the measurement)."""
    select = sql.split("SELECT ", 1)[1]
    items, rest = select.split(" FROM ", 1)
    parts = [p.strip() for p in _split_items(items)][:width]
    group = rest.split(" GROUP BY ", 1)
    by = group[1].split(" HAVING ")[0].split(" WINDOW ")[0].split(" ORDER BY ")[0]
    return f"SELECT {', '.join(parts)} FROM {group[0]} GROUP BY {by}"


def _split_items(items: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in items:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


WINDOWED = (
    "SELECT sex, race, COUNT(*), SUM(COUNT(*)) OVER (PARTITION BY sex ORDER BY race) AS running, "
    "RANK() OVER (ORDER BY COUNT(*) DESC) AS r, NTILE(3) OVER (ORDER BY race) AS t, "
    "AVG(AVG(income)) OVER () AS mean_of_means, COUNT(*) * 1.0 / SUM(COUNT(*)) OVER () AS share "
    "FROM pums GROUP BY sex, race"
)


def test_prepared_windowed_statement_has_postgres_types(service, postgres):
    """A prepared windowed statement (extended protocol, binary results) describes Postgres'
    result types: SUM(bigint) OVER is numeric, RANK bigint, NTILE integer, AVG(float8)
    float8; binary results decode as those types."""
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        cur = c.cursor(binary=True)
        rows = cur.execute(WINDOWED, prepare=True).fetchall()
        got = [d.type_code for d in cur.description]
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS typed")
        c.execute("CREATE TABLE typed (sex bigint, race bigint, income float8)")
        want = [d.type_code for d in c.execute(WINDOWED.replace("pums", "typed")).description]
    assert got == want == [20, 20, 20, 1700, 20, 23, 701, 1700]
    assert rows and all(isinstance(r[3], Decimal) and isinstance(r[5], int) for r in rows)


def test_a_window_costs_nothing_and_says_so(service):
    """The window adds no aggregate: the windowed statement is the plain statement's release
    (a repeat at no cost), and its NOTICE and EXPLAIN say the window is post-processing."""
    _, _, _, first = _named(service, "SELECT race, COUNT(*) FROM pums WHERE age > 33 GROUP BY race")
    assert "ε charged 0 " not in first[0]
    _, _, rows, notes = _named(
        service,
        "SELECT race, COUNT(*), COUNT(*) - LAG(COUNT(*)) OVER (ORDER BY race) AS change "
        "FROM pums WHERE age > 33 GROUP BY race",
    )
    assert "ε charged 0 (repeat" in notes[0]
    assert "window functions (lag) computed over the released rows (post-processing, no ε)" in notes[0]
    _, _, plan, _ = _named(
        service,
        "EXPLAIN SELECT race, COUNT(*), COUNT(*) - LAG(COUNT(*)) OVER (ORDER BY race) AS change "
        "FROM pums WHERE age > 33 GROUP BY race",
    )
    text = "\n".join(r[0] for r in plan)
    assert "change: a window function computed over the released rows" in text
    assert "1 aggregate(s) sharing ε" in text


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT SUM(age) OVER () FROM pums",
        "SELECT age, ROW_NUMBER() OVER (ORDER BY income) FROM pums",
        "SELECT sex, SUM(income) OVER (PARTITION BY sex) FROM pums GROUP BY sex",
        "SELECT sex, COUNT(*), RANK() OVER (ORDER BY age) FROM pums GROUP BY sex",
    ],
)
def test_a_window_over_raw_rows_is_refused_with_a_hint(service, sql):
    with pytest.raises(psycopg.Error) as e:
        _named(service, sql)
    assert e.value.sqlstate == "0A000"
    assert "SUM(COUNT(*)) OVER (ORDER BY month)" in (e.value.diag.message_hint or "")
