"""dpgate's own writes go through ``write_dsn``: the demo on Postgres with the two roles of
docs/least-privilege.md (its reader script and its writer script, as written), the demo tables
and the local table's reports created by dpgate_writer, a producer's INSERT stored through it,
every scan as dpgate_reader — which has no write privilege and whose session refuses a write."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from proxy.backends import BackendError
from proxy.cli.privileges import privilege_report
from support.least_privilege import drop_role
from support.service import Service, ask, make_config

DOCS = Path(__file__).parents[2] / "docs" / "least-privilege.md"
DB = "lp_local"


def _scripts() -> tuple[str, str]:
    """(the reader's script without its GRANT SELECT line — the writer's default privileges grant
    it on what the writer creates —, the writer's script), for database ``DB``."""
    page = DOCS.read_text()
    reader = page.split("## Postgres", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    writer = page.split("### The writes dpgate makes", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    reader = "\n".join(x for x in reader.splitlines() if not x.startswith("GRANT SELECT"))
    return reader.replace("warehouse", DB), writer.replace("warehouse", DB)


@pytest.fixture(scope="module")
def svc(postgres, tmp_path_factory):
    for role in ("dpgate_reader", "dpgate_writer"):
        drop_role(postgres, role)
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB}")
        c.execute(f"CREATE DATABASE {DB}")
    base = postgres.dsn.rsplit("/", 1)[0].replace("postgres@", "{role}@", 1) + f"/{DB}"
    reader, writer = _scripts()
    with psycopg.connect(base.format(role="postgres"), autocommit=True) as c:  # the database's owner
        c.execute(reader)
        c.execute(writer)
    cfg = make_config(
        {
            "kind": "postgres",
            "dsn": base.format(role="dpgate_reader"),
            "write_dsn": base.format(role="dpgate_writer"),
            "require_least_privilege": True,
        }
    )
    s = Service(cfg, tmp_path_factory.mktemp("lp_local"), people_rows=2_000, trips_rows=2_000).start()
    s.owner_dsn = base.format(role="postgres")
    yield s
    s.close()


def test_reports_are_written_through_write_dsn_and_read_by_the_reader(svc):
    with psycopg.connect(svc.owner_dsn, autocommit=True) as c:
        before = c.execute("SELECT COUNT(*) FROM trips_reports").fetchone()[0]
        owners = {
            o for (o,) in c.execute("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'")
        }
    assert owners == {"dpgate_writer"} and before == 2_000
    with psycopg.connect(svc.dsn("producer"), autocommit=True) as c:
        cur = c.execute(
            "INSERT INTO trips (hour, distance, fare, vendor, payment, passengers, zone) VALUES "
            "(8, 3.2, 12.5, 1, 'card', 1, 'midtown'), (9, 1.0, 7.5, 2, 'cash', 2, 'uptown')"
        )
        assert cur.statusmessage == "INSERT 0 2"
    with psycopg.connect(svc.owner_dsn, autocommit=True) as c:
        assert c.execute("SELECT COUNT(*) FROM trips_reports").fetchone()[0] == before + 2
    rows, notes = ask(svc, "SELECT COUNT(*) FROM trips")
    assert rows[0][0] > 0 and notes
    rows, _ = ask(svc, "SELECT sex, COUNT(*) FROM pums GROUP BY sex ORDER BY sex")
    assert [r[0] for r in rows] == [0, 1]


def test_the_reader_has_least_privilege_and_a_read_only_session(svc):
    assert svc._call(privilege_report(svc.cfg, svc.gw.backend)) == []
    for sql in (
        "INSERT INTO trips_reports SELECT * FROM trips_reports LIMIT 1",
        "DELETE FROM pums",
        "CREATE TABLE lp_x (a int)",
    ):
        with pytest.raises(BackendError):
            svc._call(svc.gw.backend.fetch(sql, 5))
    with psycopg.connect(svc.owner_dsn, autocommit=True) as c:
        assert c.execute("SELECT COUNT(*) FROM pums").fetchone()[0] > 0
        assert c.execute("SELECT to_regclass('lp_x')").fetchone()[0] is None
