"""The scenario every client runs, and the checks every client's report must pass.

Each client test connects with a password (SCRAM), lists the tables and the columns of
``pums``, runs the same DP aggregate, a refused ``SELECT *``, the same parameterised
count, and a query on a table that exists in the backend but is not declared. It then
hands a *report* (a dict) to :func:`check_report`, so that every client is held to the
same expectations. Within one service all clients must see the very same numbers: the
first client pays ε, the others get the stored release back.
"""

from __future__ import annotations

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


def check_report(svc, client: str, report: dict) -> None:
    """Apply every check to a client's report and compare it with the other clients'."""
    check_tables(svc, report["tables"])
    check_columns(report["columns"])
    rows = check_rows(report["rows"])
    check_refused(*report["refused"])
    check_secret_error(*report["secret_error"])
    n = report["param_count"]
    assert type(n) is int and 0 < n < 1000
    ref = svc.reference.setdefault("scenario", {"client": client, "rows": rows, "param_count": n})
    # Same measurement, same role, same data version: the stored release, whatever the client.
    assert n == ref["param_count"], (client, ref["client"])
    for mine, theirs in zip(rows, ref["rows"]):
        assert mine[:2] == theirs[:2], (client, ref["client"], rows, ref["rows"])
        for a, b in zip(mine[2:], theirs[2:]):
            assert math.isclose(a, b, rel_tol=1e-12), (client, ref["client"], rows, ref["rows"])
