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

from ..backends.postgres import ident

__all__ = ["READER", "grant_script", "least_privilege", "privilege_report"]

READER = "dpgate_reader"


def grant_script(database: str, schema: str, relations: list[str], role: str = READER) -> str:
    """The Postgres script that makes ``role``: it logs in, reads ``relations`` (SQL names as a
    table's ``source`` writes them, e.g. ``public.orders``) in ``schema`` and nothing else, and
    its sessions are read-only by default. Run it as the tables' owner."""
    r = ident(role)
    return (
        "\n".join(
            [
                f"CREATE ROLE {r} LOGIN PASSWORD 'choose-a-password';   -- not a superuser, owns nothing",
                f"ALTER ROLE {r} SET default_transaction_read_only = on;",
                f"GRANT CONNECT ON DATABASE {ident(database)} TO {r};",
                f"GRANT USAGE ON SCHEMA {ident(schema)} TO {r};",
                f"GRANT SELECT ON {', '.join(relations)} TO {r};",
            ]
        )
        + "\n"
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
    privilege): the backend's own report (``Backend.privilege_problems``: on Postgres the role's
    attributes and memberships, each declared table's write privileges and its schema's CREATE;
    on DuckDB whether file access is confined to the sources' directories; on Spark that it
    cannot be checked)."""
    return await backend.privilege_problems(config)
