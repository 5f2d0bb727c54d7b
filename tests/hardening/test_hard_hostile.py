"""Hostile SQL through the wire: every bypass attempt in hostile.txt (and the
rewriter's refusal corpus) is refused with its SQLSTATE in the simple AND the
extended protocol, charges nothing, and never reaches the backend. Benign-looking
tricks are answered as the harmless statement they really are."""
from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

HERE = Path(__file__).parent
_TEST_ONLY = re.compile(r"\b(name|big|state|flag)\b")            # rewriter-test columns
_LOCAL = re.compile(r"^SELECT 1$|pg_catalog|information_schema", re.I)


def _corpus():
    for path in (HERE / "hostile.txt", HERE.parent / "rewriter" / "refusals.txt"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                state, sql = (s.strip() for s in line.split("|", 1))
                if path.name == "refusals.txt" and (_TEST_ONLY.search(sql) or _LOCAL.search(sql)):
                    continue
                yield state, sql


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
    with psycopg.connect(svc.dsn("other"), autocommit=True) as conn:
        for state, sql in _corpus():
            try:
                conn.execute(sql, prepare=prepare)
                bad.append((sql, "answered"))
            except psycopg.Error as e:
                if e.sqlstate != state:
                    bad.append((sql, e.sqlstate, state))
    assert not bad, "\n".join(map(repr, bad))
    assert calls == []
    assert svc.gw.ledger.spent("other", "day") == 0


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
        (n,), = conn.execute("SELECT COUNT(*) FROM pums -- ; SELECT * FROM pums").fetchall()
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
