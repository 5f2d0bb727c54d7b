"""Least privilege on the backend: what the backend role may do, and the script that makes one.

dpgate only reads the declared tables. The rewriter emits SELECTs only and every scan session
is read-only at the database (:mod:`proxy.backends.postgres`, :mod:`proxy.backends.duckdb`);
the third wall is the role itself. :func:`privilege_report` lists what the role could write —
a superuser; a member of ``pg_write_server_files`` / ``pg_execute_server_program`` (files and
programs on the server, which a read-only session does not stop) or ``pg_read_server_files``;
INSERT/UPDATE/DELETE/TRUNCATE on a declared table; CREATE on a declared table's schema — and
``serve`` / ``check-config --backend`` print each as a warning, or refuse to start with
``[backend] require_least_privilege = true``. :func:`grant_script` is the Postgres script of
docs/least-privilege.md for a read-only role (``dpgate init --dsn`` prints it).
"""

from __future__ import annotations

from psycopg import sql as pgsql

__all__ = ["READER", "grant_script", "least_privilege", "privilege_report"]

READER = "dpgate_reader"
WRITE_PRIVILEGES = ("INSERT", "UPDATE", "DELETE", "TRUNCATE")
SERVER_ROLES = {
    "pg_write_server_files": "writes files on the database server (COPY … TO 'file')",
    "pg_execute_server_program": "runs programs on the database server (COPY … PROGRAM)",
    "pg_read_server_files": "reads any file on the database server (COPY … FROM 'file')",
}


def _ident(name: str) -> str:
    """``name`` as a Postgres identifier (quoted when it is not a plain lower-case name)."""
    return pgsql.Identifier(name).as_string(None) if not name.isidentifier() or name != name.lower() else name


def grant_script(database: str, schema: str, relations: list[str], role: str = READER) -> str:
    """The Postgres script that makes ``role``: it logs in, reads ``relations`` (SQL names as a
    table's ``source`` writes them, e.g. ``public.orders``) in ``schema`` and nothing else, and
    its sessions are read-only by default. Run it as the tables' owner."""
    r = _ident(role)
    return (
        "\n".join(
            [
                f"CREATE ROLE {r} LOGIN PASSWORD 'choose-a-password';   -- not a superuser, owns nothing",
                f"ALTER ROLE {r} SET default_transaction_read_only = on;",
                f"GRANT CONNECT ON DATABASE {_ident(database)} TO {r};",
                f"GRANT USAGE ON SCHEMA {_ident(schema)} TO {r};",
                f"GRANT SELECT ON {', '.join(relations)} TO {r};",
            ]
        )
        + "\n"
    )


# -- the report --------------------------------------------------------------------------------
_ROLE_SQL = (
    "SELECT current_user, rolsuper, "
    + ", ".join(f"pg_has_role(current_user, '{m}', 'USAGE')" for m in SERVER_ROLES)
    + " FROM pg_roles WHERE rolname = current_user"
)
_TABLE_SQL = (
    "SELECT c.oid IS NOT NULL, n.nspname, "
    + ", ".join(f"c.oid IS NOT NULL AND has_table_privilege(c.oid, '{p}')" for p in WRITE_PRIVILEGES)
    + ", n.oid IS NOT NULL AND has_schema_privilege(n.oid, 'CREATE') "
    "FROM (SELECT to_regclass(%s) AS oid) r LEFT JOIN pg_class c ON c.oid = r.oid "
    "LEFT JOIN pg_namespace n ON n.oid = c.relnamespace"
)


async def least_privilege(config, backend, file: str) -> tuple[list[str], list[str]]:
    """(warnings, problems) at start: the report's lines are warnings, or with ``[backend]
    require_least_privilege = true`` problems (the service does not start). A report that
    cannot be made is itself such a line (fail closed when least privilege is required)."""
    try:
        lines = await privilege_report(config, backend)
    except Exception as e:  # a backend error: one line
        lines = [
            f"cannot read the backend role's privileges: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
        ]
    if config.backend.require_least_privilege:
        return [], [f"{file}: backend.require_least_privilege: {line}" for line in lines]
    return [
        f"warning: {line} (docs/least-privilege.md; [backend] require_least_privilege = true "
        "refuses to start)"
        for line in lines
    ], []


async def privilege_report(config, backend) -> list[str]:
    """One line per way the backend role could change data or reach the server (empty: least
    privilege). Postgres: the role's attributes and memberships, each declared (central or public)
    table's write privileges and its schema's CREATE. DuckDB: whether file access is confined to
    the sources' directories. Spark: that it cannot be checked."""
    if backend.dialect == "postgres":
        return await _postgres(config, backend)
    if backend.dialect == "spark":
        return [
            "the Spark backend has no read-only session and dpgate cannot read the catalog's grants: "
            "give the Connect server's user SELECT only on the declared tables (docs/least-privilege.md)"
        ]
    if getattr(backend, "allowed", None) is None:
        return [
            "a declared source reads a remote URL, so DuckDB's file access is not confined to the "
            "sources' directories (docs/least-privilege.md)"
        ]
    return []


async def _postgres(config, backend) -> list[str]:
    out: list[str] = []
    async with backend.pool.connection(timeout=10) as conn:
        cur = await conn.execute(_ROLE_SQL)
        user, superuser, *member = await cur.fetchone()
        if superuser:
            out.append(
                f"the backend role {user} is a superuser: it can write every table and, even in a "
                "read-only session, files on the server (COPY … TO)"
            )
        for (role, what), yes in zip(SERVER_ROLES.items(), member):
            if yes and not superuser:
                out.append(f"the backend role {user} is a member of {role}: it {what}")
        schemas: set[str] = set()
        for name, table in config.tables.items():
            if table.mode == "local":  # its reports are written through [backend] write_dsn
                continue
            source = config.source_of(name)
            cur = await conn.execute(_TABLE_SQL, [source])
            found, schema, *can = await cur.fetchone()
            if not found or superuser:
                continue  # a missing relation: the schema check's line
            writes = [p for p, yes in zip(WRITE_PRIVILEGES, can) if yes]
            if writes:
                out.append(
                    f"the backend role {user} has {', '.join(writes)} on {source} (tables.{name}): "
                    f"REVOKE {', '.join(writes)} ON {source} FROM {user}"
                )
            if can[-1] and schema not in schemas:
                schemas.add(schema)
                out.append(
                    f"the backend role {user} has CREATE on schema {schema}: "
                    f"REVOKE CREATE ON SCHEMA {_ident(schema)} FROM {user} (and FROM PUBLIC)"
                )
    return out
