"""Running the rewriter's SQL on a client of the test's own, its named parameters bound
(``rewriter.params.ParamSQL``: the privacy unit's salt) as each backend binds them."""

from __future__ import annotations


def named(q: str) -> dict | None:
    """The named parameters a statement binds, or None."""
    params = getattr(q, "params", None)
    return params if isinstance(params, dict) else None


def duck_rows(con, q: str) -> list:
    """Rows of ``q`` on a DuckDB connection."""
    return con.execute(q, named(q)).fetchall()


def pg_execute(con, q: str):
    """``q`` on a psycopg connection, its parameters set as the session settings the backend's
    connections carry (``proxy.backends.postgres``); the cursor."""
    for k, v in (named(q) or {}).items():
        con.execute("SELECT set_config(%s, %s, false)", (k, v))
    return con.execute(str(q))


def pg_rows(con, q: str) -> list:
    return pg_execute(con, q).fetchall()


def spark_df(session, q: str):
    """``q`` on a Spark session (a DataFrame)."""
    return session.sql(str(q), args=named(q))
