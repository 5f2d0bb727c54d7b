"""A least-privilege backend role in the test Postgres, made with the documented script
(:func:`proxy.cli.privileges.grant_script`, the script of docs/least-privilege.md), run as
the server's superuser (standing in for the tables' owner)."""
from __future__ import annotations

import psycopg

from proxy.cli.privileges import READER, grant_script


def reader_dsn(pg, tables: list[str], role: str = READER, schema: str = "public") -> str:
    """Make ``role`` afresh with the documented GRANT script; its DSN (the test server trusts
    loopback logins, so the script's password is not needed)."""
    with psycopg.connect(pg.dsn, autocommit=True) as c:
        exists = c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone()
        if exists:
            c.execute(f'DROP OWNED BY "{role}"; DROP ROLE "{role}"')
        c.execute(grant_script("postgres", schema, [f"{schema}.{t}" for t in tables], role))
    return pg.dsn.replace("postgres@", f"{role}@", 1)
