"""The backend role's privileges, reported by ``check-config --backend`` and ``serve``: a
superuser or a write privilege on a declared table is a warning, and an error (the service does
not start) with ``[backend] require_least_privilege = true``; the role made by the documented
GRANT script gets no line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from config import load_config
from proxy.backends import PostgresBackend
from proxy.cli.main import main
from proxy.cli.privileges import grant_script, least_privilege, privilege_report
from support.least_privilege import reader_dsn

TABLES = ["lp_orders", "lp_items"]


@pytest.fixture(scope="module")
def pg(postgres):
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        for t in TABLES:
            c.execute(
                f"DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id int, amount float8); "
                f"INSERT INTO {t} VALUES (1, 2.5)"
            )
    return postgres


def _config(tmp_path, dsn: str, require: bool = False) -> str:
    path = tmp_path / "lp.toml"
    tables = "\n".join(
        f'[tables.{t}.columns]\nid = {{ type = "int" }}\namount = {{ type = "float", lower = 0, upper = 10 }}'
        for t in TABLES
    )
    path.write_text(
        f'[server]\nauth = "trust"\nstate_dir = "{tmp_path / "state"}"\n'
        f'[backend]\nkind = "postgres"\ndsn = "{dsn}"\n'
        f"require_least_privilege = {'true' if require else 'false'}\n"
        '[tiers.t]\nepsilon = 1.0\nbudget = 10.0\n[roles.analyst]\ntier = "t"\n' + tables + "\n"
    )
    return str(path)


def _report(cfg_file: str) -> list[str]:
    cfg = load_config(cfg_file)

    async def run():
        b = PostgresBackend(cfg.backend.dsn, 1)
        await b.connect()
        try:
            return await privilege_report(cfg, b), await least_privilege(cfg, b, cfg_file)
        finally:
            await b.close()

    return asyncio.run(run())


def _check(capsys, cfg_file: str) -> tuple[int, str]:
    code = main(["check-config", "--backend", cfg_file])
    return code, capsys.readouterr().err


def test_superuser_is_a_warning(pg, tmp_path, capsys):
    lines, (warnings, problems) = _report(_config(tmp_path, pg.dsn))
    assert len(lines) == 1 and "the backend role postgres is a superuser" in lines[0]
    assert problems == [] and warnings[0].startswith("warning: ") and "require_least_privilege" in warnings[0]
    code, err = _check(capsys, _config(tmp_path, pg.dsn))
    assert code == 0 and "superuser" in err and "docs/least-privilege.md" in err


def test_superuser_is_an_error_when_least_privilege_is_required(pg, tmp_path, capsys):
    cfg_file = _config(tmp_path, pg.dsn, require=True)
    _, (warnings, problems) = _report(cfg_file)
    assert warnings == [] and len(problems) == 1
    assert problems[0].startswith(
        f"{cfg_file}: backend.require_least_privilege: the backend role postgres is a superuser"
    )
    code, err = _check(capsys, cfg_file)
    assert code == 2 and "backend.require_least_privilege" in err


def test_documented_reader_role_has_no_warning(pg, tmp_path, capsys):
    dsn = reader_dsn(pg, TABLES)
    lines, _ = _report(_config(tmp_path, dsn))
    assert lines == []
    code, err = _check(capsys, _config(tmp_path, dsn, require=True))
    assert code == 0 and err == ""


def test_write_privileges_and_server_roles_are_named(pg, tmp_path):
    dsn = reader_dsn(pg, TABLES, role="lp_writer")
    with psycopg.connect(pg.dsn, autocommit=True) as c:
        c.execute(
            "GRANT INSERT, TRUNCATE ON lp_items TO lp_writer; GRANT CREATE ON SCHEMA public TO lp_writer; "
            "GRANT pg_write_server_files TO lp_writer"
        )
    lines, (_, problems) = _report(_config(tmp_path, dsn, require=True))
    assert sorted(lines) == sorted(
        [
            "the backend role lp_writer is a member of pg_write_server_files: it writes files on the database "
            "server (COPY … TO 'file')",
            "the backend role lp_writer has INSERT, TRUNCATE on lp_items (tables.lp_items): "
            "REVOKE INSERT, TRUNCATE ON lp_items FROM lp_writer",
            "the backend role lp_writer has CREATE on schema public: REVOKE CREATE ON SCHEMA public FROM "
            "lp_writer (and FROM PUBLIC)",
        ]
    )
    assert len(problems) == 3


def test_grant_script_quotes_names():
    script = grant_script("ware house", "Sales", ['"Sales".orders', '"Sales"."Order Items"'], role="reader")
    assert 'GRANT USAGE ON SCHEMA "Sales" TO reader;' in script
    assert 'GRANT SELECT ON "Sales".orders, "Sales"."Order Items" TO reader;' in script
    assert 'GRANT CONNECT ON DATABASE "ware house" TO reader;' in script


def test_the_docs_page_shows_the_script():
    """docs/least-privilege.md's Postgres script is :func:`grant_script`'s, word for word."""
    page = (Path(__file__).parents[2] / "docs" / "least-privilege.md").read_text()
    block = page.split("## Postgres", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    assert block == grant_script("warehouse", "public", ["public.pums", "public.people"])
