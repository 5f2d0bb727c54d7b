"""A least-privilege backend role in the test Postgres, made with the documented script
(:func:`proxy.cli.privileges.grant_script`, the script of docs/least-privilege.md), run as
the server's superuser (standing in for the tables' owner)."""

from __future__ import annotations

import psycopg

from proxy.cli.privileges import READER, grant_script


def drop_role(pg, role: str) -> None:
    """Drop ``role`` if it exists, with its grants and objects in every database (DROP OWNED
    acts in the database it runs in)."""
    with psycopg.connect(pg.dsn, autocommit=True) as c:
        if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone():
            return
        dbs = [d for (d,) in c.execute("SELECT datname FROM pg_database WHERE datallowconn")]
    for db in dbs:
        with psycopg.connect(pg.dsn.rsplit("/", 1)[0] + f"/{db}", autocommit=True) as c:
            c.execute(f'DROP OWNED BY "{role}"')
    with psycopg.connect(pg.dsn, autocommit=True) as c:
        c.execute(f'DROP ROLE "{role}"')


def reader_dsn(pg, tables: list[str], role: str = READER, schema: str = "public") -> str:
    """Make ``role`` afresh with the documented GRANT script; its DSN (the test server trusts
    loopback logins, so the script's password is not needed)."""
    drop_role(pg, role)
    with psycopg.connect(pg.dsn, autocommit=True) as c:
        c.execute(grant_script("postgres", schema, [f"{schema}.{t}" for t in tables], role))
    return pg.dsn.replace("postgres@", f"{role}@", 1)
