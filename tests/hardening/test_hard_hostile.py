"""Hostile SQL through the wire: every bypass attempt in hostile.txt (and the
rewriter's refusal corpus) is refused with its SQLSTATE in the simple AND the
extended protocol, charges nothing, and never reaches the backend. Benign-looking
tricks are answered as the harmless statement they really are.

hostile.txt runs as role ``other`` (analyst tier, no INSERT grant) until a line
``#@ role: NAME`` switches the role for the lines below it (e.g. a ladder tier, or
``producer``, the demo's one role that may INSERT into trips)."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

HERE = Path(__file__).parent
_TEST_ONLY = re.compile(r"\b(name|big|state|flag)\b")  # rewriter-test columns
_LOCAL = re.compile(r"^SELECT 1$|pg_catalog|information_schema", re.I)


def _corpus():
    """(role, SQLSTATE, statement) for every probe."""
    for path in (HERE / "hostile.txt", HERE.parent / "rewriter" / "refusals.txt"):
        role = "other"
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("#@ role:"):
                role = line.split(":", 1)[1].strip()
            elif line.strip() and not line.startswith("#"):
                state, sql = (s.strip() for s in line.split("|", 1))
                if path.name == "refusals.txt" and (_TEST_ONLY.search(sql) or _LOCAL.search(sql)):
                    continue
                yield role, state, sql


@pytest.fixture
def counted(duck_service):
    calls = []
    real = duck_service.gw.backend.fetch

    async def counting(sql, *a, **k):
        calls.append(sql)
        return await real(sql, *a, **k)

    duck_service.gw.backend.fetch = counting
    yield duck_service, calls
    duck_service.gw.backend.fetch = real


def test_corpus_size():
    assert len(list(_corpus())) >= 150


@pytest.mark.parametrize("prepare", [False, True], ids=["simple", "extended"])
def test_hostile_corpus_refused_without_backend(counted, prepare):
    svc, calls = counted
    bad = []
    reports = svc.gw.backend.query("SELECT COUNT(*) FROM trips_reports")
    roles = sorted({role for role, _, _ in _corpus()})
    assert {"other", "bronze", "gold", "producer"} <= set(roles)
    for role in roles:
        with psycopg.connect(svc.dsn(role), autocommit=True) as conn:
            for _, state, sql in (p for p in _corpus() if p[0] == role):
                try:
                    conn.execute(sql, prepare=prepare)
                    bad.append((role, sql, "answered"))
                except psycopg.Error as e:
                    if e.sqlstate != state:
                        bad.append((role, sql, e.sqlstate, state))
    assert not bad, "\n".join(map(repr, bad))
    assert calls == []
    assert all(svc.gw.ledger.spent(role, "day") == 0 for role in roles)
    assert svc.gw.backend.query("SELECT COUNT(*) FROM trips_reports") == reports  # nothing stored


def test_parameter_type_tricks(counted):
    svc, calls = counted
    with psycopg.connect(svc.dsn("other"), autocommit=True) as conn:
        for sql, params, state in [
            ("SELECT COUNT(*) FROM pums WHERE age > %s", ["1 OR 1=1"], "22023"),
            ("SELECT COUNT(*) FROM pums WHERE age > %s", [10**30], "22023"),
            ("SELECT COUNT(*) FROM pums WHERE sex = %s", ["0; SELECT * FROM pums"], "22023"),
            ("SELECT COUNT(*) FROM pums WHERE income / %s > 1", [0], "42501"),
            ("SELECT sex, COUNT(*) FROM pums GROUP BY sex LIMIT %s", [-1], "2201W"),
        ]:
            with pytest.raises(psycopg.Error) as e:
                conn.execute(sql, params, prepare=True)
            assert e.value.sqlstate == state, (sql, params, e.value.sqlstate)
    assert calls == []


def test_benign_tricks_are_answered_harmlessly(counted):
    svc, calls = counted
    with psycopg.connect(svc.dsn("other"), autocommit=True) as conn:
        # A comment hides the second statement: only the aggregate runs.
        ((n,),) = conn.execute("SELECT COUNT(*) FROM pums -- ; SELECT * FROM pums").fetchall()
        assert isinstance(n, int)
        # Arithmetic that would overflow bigint is computed in float8: no data-dependent error.
        conn.execute("SELECT COUNT(*) FROM pums WHERE age * 9223372036854775807 > 0").fetchall()
    assert len(calls) == 2


def test_prepared_statement_reuse_after_role_budget_change(counted):
    """A statement prepared before the ledger moved on is re-planned against the
    current state on every Execute: it cannot skip the budget check."""
    svc, _ = counted
    with psycopg.connect(svc.dsn("tiny"), autocommit=True) as conn:
        cur = conn.cursor()
        for lo in (20, 21):
            cur.execute("SELECT COUNT(*) FROM pums WHERE age > %s", [lo], prepare=True)
        with pytest.raises(psycopg.Error) as e:
            cur.execute("SELECT COUNT(*) FROM pums WHERE age > %s", [22], prepare=True)
        assert e.value.sqlstate == "53400"


WRITE = (
    "INSERT INTO trips (hour, distance, fare, vendor, payment, passengers, zone) "
    "VALUES (8, 3.2, 12.5, 1, 'card', 1, 'midtown')"
)


def test_one_query_mixing_a_refused_write_with_reads(counted):
    """Several statements in one simple Query: a refused write stops the string there (later
    statements are skipped, as in Postgres); a read before it is an ordinary charged read.
    The extended protocol takes one statement only (42601). Nothing is ever stored."""
    svc, calls = counted
    reports = svc.gw.backend.query("SELECT COUNT(*) FROM trips_reports")
    for role, sql in [
        ("other", "DELETE FROM trips; SELECT COUNT(*) FROM pums"),
        ("bronze", f"{WRITE}; SELECT COUNT(*) FROM pums"),
        ("other", f"BEGIN; {WRITE}; COMMIT"),
        ("bronze", f"SELECT 1; {WRITE}; SELECT COUNT(*) FROM pums WHERE age > 30"),
    ]:
        for prepare, state in ((False, "42501"), (True, "42601")):
            with psycopg.connect(svc.dsn(role), autocommit=True) as conn:
                with pytest.raises(psycopg.Error) as e:
                    conn.execute(sql, prepare=prepare)
                assert e.value.sqlstate == state, (sql, prepare, e.value.sqlstate)
    assert calls == [] and svc.gw.ledger.spent("bronze", "day") == 0
    with psycopg.connect(svc.dsn("bronze"), autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as e:
            conn.execute(f"SELECT COUNT(*) FROM pums WHERE age > 31; {WRITE}")
        assert e.value.sqlstate == "42501"
    assert len(calls) == 1 and svc.gw.ledger.spent("bronze", "day") == pytest.approx(0.1)  # the read
    assert svc.gw.backend.query("SELECT COUNT(*) FROM trips_reports") == reports


def test_set_of_backend_settings_is_inert(counted):
    """SET is answered by the session emulation: a DuckDB setting named in it never reaches
    the backend and changes nothing there."""
    svc, calls = counted
    names = ("threads", "memory_limit", "enable_external_access", "search_path")
    q = "SELECT " + ", ".join(f"current_setting('{n}')" for n in names)
    before = svc.gw.backend.query(q)
    with psycopg.connect(svc.dsn("other"), autocommit=True) as conn:
        for sql in (
            "SET threads = 1",
            "SET memory_limit = '1MB'",
            "SET enable_external_access = true",
            "SET search_path = main",
            "SET GLOBAL threads = 1",
            "RESET ALL",
        ):
            conn.execute(sql)
        ((n,),) = conn.execute("SELECT COUNT(*) FROM pums WHERE age > 40").fetchall()
    assert isinstance(n, int) and len(calls) == 1
    assert svc.gw.backend.query(q) == before
