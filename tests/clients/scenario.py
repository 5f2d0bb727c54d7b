"""The scenario every client runs, and the checks every client's report must pass.

Each client test connects with a password (SCRAM), lists the tables and the columns of
``pums``, runs the same DP aggregate, a refused ``SELECT *``, the same parameterised
count, and a query on a table that exists in the backend but is not declared. It then
hands a *report* (a dict) to :func:`check_report`, so that every client is held to the
same expectations. Within one service all clients must see the very same numbers: the
first client pays ε, the others get the stored release back.
"""

from __future__ import annotations

import datetime as dt
import math

GROUP_SQL = (
    "SELECT sex, COUNT(*), SUM(income), AVG(age) FROM pums "
    "WHERE age BETWEEN 30 AND 60 GROUP BY sex ORDER BY sex"
)
PARAM_SQL = {  # the same count in each driver's placeholder style; the parameter is 40
    "dollar": "SELECT COUNT(*) FROM pums WHERE age > $1",
    "format": "SELECT COUNT(*) FROM pums WHERE age > %s",
    "qmark": "SELECT COUNT(*) FROM pums WHERE age > ?",
    "named": "SELECT COUNT(*) FROM pums WHERE age > :age",
}
PARAM = 40
MORE_SQL = {  # three more typical aggregates, sent as written by every client
    "date bucket": "SELECT date_trunc('month', ts) AS month, COUNT(*) AS n FROM purchases "
    "WHERE amount > 5 GROUP BY 1 ORDER BY 1",
    "join": "SELECT s.area, SUM(p.amount) AS total FROM purchases p JOIN stores s "
    "ON p.store = s.store_id WHERE p.item < 90 GROUP BY 1 ORDER BY 1",
    "top 3": "SELECT race, COUNT(*) AS n FROM pums WHERE age > 21 GROUP BY race ORDER BY n DESC, race LIMIT 3",
}
#: the five typical aggregates of the compatibility table (docs/clients.md)
AGGREGATES = ("group by", "parameter", *MORE_SQL)
COPY_SQL = "SELECT sex, COUNT(*) AS n FROM pums WHERE age BETWEEN 29 AND 51 GROUP BY sex ORDER BY sex"
"""Fetched by each driver's own COPY API (``COPY (…) TO STDOUT``): the release of the SELECT."""
REFUSED_SQL = "SELECT * FROM pums"
SECRET = "secret_salaries"  # exists in the backend, not declared
SECRET_SQL = f"SELECT COUNT(*) FROM {SECRET}"

PUMS_COLUMNS = ["age", "sex", "educ", "race", "income", "married"]
PUMS_TYPES = {
    "age": "bigint",
    "sex": "bigint",
    "educ": "bigint",
    "race": "bigint",
    "income": "double precision",
    "married": "bigint",
}
INCOME_UPPER = 500_000


def declared_tables(svc) -> list[str]:
    """The tables of the service's config: exactly what every client must list."""
    return sorted(svc.cfg.tables)


def check_tables(svc, names) -> None:
    names = list(names)
    assert sorted(names) == declared_tables(svc), names
    assert "pums" in names and not any("secret" in str(n).lower() for n in names)


def check_columns(names) -> None:
    assert list(names) == PUMS_COLUMNS


def check_rows(rows) -> list[tuple]:
    """The GROUP BY answer: two rows (sex 0 and 1), integer counts, floats in bounds."""
    rows = [tuple(r) for r in rows]
    assert len(rows) == 2, rows
    assert [r[0] for r in rows] == [0, 1]
    for sex, count, total, avg in rows:
        assert type(sex) is int and type(count) is int, rows
        assert isinstance(total, float) and isinstance(avg, float), rows
        assert 100 < count < 1000  # true counts are in the hundreds
        assert 0 <= avg <= 100  # AVG(age) is clamped to age's bounds
        assert 0 <= total <= 1000 * INCOME_UPPER  # SUM(income) of at most 1000 clamped rows
    return rows


def check_refused(sqlstate: str, message: str) -> None:
    assert sqlstate == "42501", (sqlstate, message)
    assert "raw rows" in message


def check_secret_error(sqlstate: str, message: str) -> None:
    """Querying the undeclared table fails exactly as for a table that does not exist."""
    assert sqlstate == "42P01", (sqlstate, message)
    assert SECRET in message


def canon(v):
    """A value as the client gave it, made comparable across clients: drivers that return text
    (psql, pgjdbc's getString, node-postgres without type parsers) and drivers that return
    Python values report the same numbers and timestamps."""
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, str):
        for parse in (int, float):
            try:
                return parse(v)
            except ValueError:
                pass
    return v


def check_more(more: dict) -> dict:
    """The three statements of :data:`MORE_SQL`: their shapes, values made comparable."""
    assert set(more) == set(MORE_SQL), sorted(more)
    out = {name: [tuple(canon(v) for v in r) for r in rows] for name, rows in more.items()}
    months = out["date bucket"]
    assert [m for m, _ in months] == [f"2025-{i:02d}-01 00:00:00" for i in range(1, 13)], months
    assert all(type(n) is int and n > 1000 for _, n in months), months
    assert [a for a, _ in out["join"]] == sorted(a for a, _ in out["join"]) and len(out["join"]) >= 3
    assert all(isinstance(t, float) for _, t in out["join"]), out["join"]
    top = out["top 3"]
    assert len(top) == 3 and [n for _, n in top] == sorted((n for _, n in top), reverse=True), top
    return out


def _same(mine, theirs) -> bool:
    if isinstance(mine, float) or isinstance(theirs, float):
        return math.isclose(mine, theirs, rel_tol=1e-12)
    return mine == theirs


def check_report(svc, client: str, report: dict) -> list[str]:
    """Apply every check to a client's report and compare it with the other clients'.
    Returns what the report showed, as the compatibility table's items."""
    check_tables(svc, report["tables"])
    check_columns(report["columns"])
    check_refused(*report["refused"])
    check_secret_error(*report["secret_error"])
    return ["connect", "introspection", *check_answers(svc, client, report)]


def check_answers(svc, client: str, report: dict) -> list[str]:
    """Check the five aggregates of a report (``rows``, ``param_count``, ``more``) and that
    they are the very numbers every other client got (same measurement, same role, same data
    version: the stored release, whatever the client). Returns their table items; a client
    without bind parameters reports ``param_count`` None and has no "parameter" item."""
    rows = check_rows(report["rows"])
    n = report["param_count"]
    ref = svc.reference.get("scenario")
    if n is not None:
        assert type(n) is int and 0 < n < 1000
        ref = svc.reference.setdefault("scenario", {"client": client, "rows": rows, "param_count": n})
        assert n == ref["param_count"], (client, ref["client"])
    ref = ref or {"client": client, "rows": rows}
    for mine, theirs in zip(rows, ref["rows"]):
        assert mine[:2] == theirs[:2], (client, ref["client"], rows, ref["rows"])
        for a, b in zip(mine[2:], theirs[2:]):
            assert math.isclose(a, b, rel_tol=1e-12), (client, ref["client"], rows, ref["rows"])
    more = check_more(report["more"])
    ref_more = svc.reference.setdefault("more", {"client": client, "rows": more})
    for name, got in more.items():
        theirs = ref_more["rows"][name]
        assert len(got) == len(theirs) and all(
            len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b)) for a, b in zip(got, theirs)
        ), (name, client, ref_more["client"], got, theirs)
    return [f"aggregate: {a}" for a in AGGREGATES if n is not None or a != "parameter"]
