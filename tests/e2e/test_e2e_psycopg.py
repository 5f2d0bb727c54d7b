"""End to end with psycopg 3: simple and extended protocol, repeats, budget,
refusals, EXPLAIN, on DuckDB and on a real Postgres."""

from __future__ import annotations

import math

import psycopg
import pytest


def connect(service, role="analyst", **kw):
    return psycopg.connect(service.dsn(role), autocommit=True, **kw)


def test_simple_protocol_count_avg(service):
    notices = []
    with connect(service) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        cur = conn.cursor()
        cur.execute(
            "SELECT sex, COUNT(*) AS n, AVG(age) AS mean_age FROM pums GROUP BY sex ORDER BY sex",
            prepare=False,
        )
        rows = cur.fetchall()
        assert [d.name for d in cur.description] == ["sex", "n", "mean_age"]
    assert [r[0] for r in rows] == [0, 1]
    assert all(isinstance(r[1], int) and isinstance(r[2], float) for r in rows)
    # Each count gets two-sided geometric noise at ε/2 = 0.5: P(|Z| > 30) = 2p^31/(1+p), p = e^-0.5,
    # about 4e-7 per cell (and the seeded test source makes the draw reproducible).
    assert sum(r[1] for r in rows) == pytest.approx(1000, abs=60)
    assert len(notices) == 1 and "ε charged 1" in notices[0]


def test_extended_protocol_params_binary(service):
    with connect(service) as conn:
        cur = conn.cursor(binary=True)
        cur.execute(
            "SELECT COUNT(*), SUM(income) FROM pums WHERE age > %s AND married = %s", (40, 1), prepare=True
        )
        ((n, s),) = cur.fetchall()
        assert isinstance(n, int) and isinstance(s, float)
        assert 0 <= n <= 1000


def test_repeat_is_free_and_identical(service):
    q = "SELECT educ, COUNT(*) FROM pums WHERE income >= 20000 GROUP BY educ"
    with connect(service, "other") as conn:
        first = conn.execute(q).fetchall()
        spent1 = service.gw.ledger.spent("other", "day")
        # Different spelling, same measurement: conjunct order, case, whitespace, ORDER BY.
        second = conn.execute(
            "select  EDUC, count(*) from PUMS where 20000 <= income group by educ order by 1"
        ).fetchall()
        spent2 = service.gw.ledger.spent("other", "day")
    assert len(first) == 16 and sorted(first) == sorted(second)
    assert spent1 == spent2 == 1.0


@pytest.mark.parametrize("typed", [True, False], ids=["int-params", "text-params"])
def test_parameters_and_their_literal_twin_are_one_release(service, typed):
    """A driver's $n statement is the release its literal twin is (one charge, the same rows),
    whichever comes first, with integer parameters or untyped digits (node-postgres, pgbench);
    from the second statement of a shape on, it is planned from a template."""
    role = "other"
    q = (
        "SELECT sex, COUNT(*), AVG(income) FROM pums WHERE age BETWEEN {} AND {} AND educ >= {} "
        "GROUP BY sex ORDER BY sex"
    )
    filled = service.gw._templates.filled
    with connect(service, role) as conn:
        before = service.gw.ledger.spent(role, "day")
        for i in range(4):
            a, b, c = 20 + i + (10 if typed else 0), 61 + i, 3 + i
            params = (a, b, c) if typed else (str(a), str(b), str(c))
            pair = [
                lambda: conn.execute(q.format(a, b, c)).fetchall(),
                lambda: conn.execute(q.format("%s", "%s", "%s"), params).fetchall(),
            ]
            first, second = pair if i % 2 else pair[::-1]
            assert first() == second()
        assert service.gw.ledger.spent(role, "day") == before + 4.0
    assert service.gw._templates.filled >= filled + 4


def test_describe_of_a_parameterised_statement_is_kept(service, monkeypatch):
    """A driver re-Parses and re-Describes one text with new parameters every time: the
    parameter types and columns are found once (a refusal is found again each time)."""
    import proxy.pipeline.central as central

    calls = []
    real = central.param_types
    monkeypatch.setattr(central, "param_types", lambda *a: calls.append(1) or real(*a))
    q = "SELECT race, COUNT(*) FROM pums WHERE age > %s AND income < %s GROUP BY race"
    with connect(service, "other") as conn:
        for v in (301, 302, 303):
            cur = conn.execute(q, (v, 1000))
            assert [d.name for d in cur.description] == ["race", "count"] and len(cur.fetchall()) == 6
        assert len(calls) == 1
        for _ in range(2):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT age FROM pums WHERE age > %s", (1,))
    assert len(calls) == 3


@pytest.mark.parametrize("binary", [False, True])
def test_display_steps_over_aggregates_are_post_processing(service, binary):
    """ROUND / CAST / FLOOR over an aggregate: computed from the released value (the plain
    statement afterwards is a free repeat of the same release), with Postgres's types."""
    from decimal import Decimal

    role = "other"
    q = (
        "SELECT sex, ROUND(AVG(age), 1) AS r, CAST(AVG(age) AS INTEGER) AS i, COUNT(*)::float AS f, "
        "FLOOR(SUM(income)) AS fl FROM pums WHERE married = {m} GROUP BY sex ORDER BY sex"
    )
    m = 1 if binary else 0
    with connect(service, role) as conn:
        before = service.gw.ledger.spent(role, "day")
        cur = conn.cursor(binary=binary)
        post = cur.execute(q.format(m=m)).fetchall()
        plain = conn.execute(
            f"SELECT sex, AVG(age), COUNT(*), SUM(income) FROM pums WHERE married = {m} "
            "GROUP BY sex ORDER BY sex"
        ).fetchall()
        assert service.gw.ledger.spent(role, "day") == before + 1.0  # one release for both
    for (k, r, i, f, fl), (k2, avg, n, total) in zip(post, plain):
        assert k == k2 and isinstance(r, Decimal) and r.as_tuple().exponent == -1
        assert r == Decimal(repr(avg)).quantize(Decimal("0.1"), "ROUND_HALF_UP")
        assert isinstance(i, int) and i == round(avg)
        assert isinstance(f, float) and f == float(n)
        assert isinstance(fl, float) and fl == float(math.floor(total))


def test_empty_groups_are_released(service):
    with connect(service) as conn:
        rows = conn.execute("SELECT race, COUNT(*) FROM pums WHERE age > 200 GROUP BY race").fetchall()
    assert sorted(r[0] for r in rows) == [1, 2, 3, 4, 5, 6]  # every domain value, though no row matches


def test_budget_exhaustion_and_no_charge_on_refusal(service):
    with connect(service, "tiny") as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM pums")
        assert service.gw.ledger.spent("tiny", "day") == 0
        conn.execute("SELECT COUNT(*) FROM pums WHERE age < 30").fetchall()
        conn.execute("SELECT COUNT(*) FROM pums WHERE age < 31").fetchall()
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT COUNT(*) FROM pums WHERE age < 32").fetchall()
        assert e.value.sqlstate == "53400" and "0.5 of 2.5" in str(e.value)
        conn.execute("SELECT COUNT(*) FROM pums WHERE age < 30").fetchall()  # repeat still free
    assert service.gw.ledger.spent("tiny", "day") == 2.0


def test_explain_charges_nothing(service):
    with connect(service, "other") as conn:
        before = service.gw.ledger.spent("other", "day")
        lines = [
            r[0] for r in conn.execute("EXPLAIN SELECT COUNT(*), AVG(age) FROM pums GROUP BY sex").fetchall()
        ]
        assert service.gw.ledger.spent("other", "day") == before
    text = "\n".join(lines)
    assert "geometric" in text.lower() and "one scan" in text and "95% half-width" in text
    with connect(service, "other") as conn:
        text = "\n".join(r[0] for r in conn.execute("EXPLAIN SELECT ROUND(AVG(age), 1) AS a FROM pums"))
    assert "a: avg(age)" in text and "then round(·, 1) (post-processing, no ε)" in text


def test_transaction_status(service):
    with psycopg.connect(service.dsn()) as conn:  # not autocommit: psycopg sends BEGIN
        conn.execute("SELECT COUNT(*) FROM pums").fetchall()
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.rollback()
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_wrong_password_and_unknown_role(service):
    bad = service.dsn().replace("password=analyst-pw", "password=nope")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(bad)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(service.dsn().replace("user=analyst", "user=mallory"))
