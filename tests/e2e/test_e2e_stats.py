"""VAR/STDDEV, COUNT(DISTINCT …) and FETCH FIRST end to end (psycopg; DuckDB and Postgres)."""

from __future__ import annotations

import re

import numpy as np
import psycopg
import pytest

from proxy.demo import pums_rows


def _truth():
    rows = pums_rows()
    age = np.clip([r[0] for r in rows], 0, 100).astype(float)
    income = np.clip([r[4] for r in rows], 0, 500000)
    return {
        "var_pop": np.var(age),
        "sd_age": np.std(age, ddof=1),
        "var_income": np.var(income, ddof=1),
        "sd_income": np.std(income),
        "educ": len({r[2] for r in rows if 1 <= r[2] <= 16}),
        "all_educ": len({r[2] for r in rows}),
    }


def _half_widths(note: str) -> dict:
    return {k: float(v) for k, v in re.findall(r"(\w+) ±([0-9.e+-]+)", note)}


def test_variance_and_stddev_within_the_stated_half_width(service):
    t, notes = _truth(), []
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        before = service.gw.ledger.spent("other", "day")
        (row,) = c.execute(
            "SELECT VAR_POP(age) AS var_pop, STDDEV(age) AS sd_age, VARIANCE(income) AS "
            "var_income, STDDEV_POP(income) AS sd_income FROM pums"
        ).fetchall()
        charged = service.gw.ledger.spent("other", "day") - before
    assert charged == pytest.approx(1.0)  # one statement, ε split among its releases
    assert "moment_variance" in notes[0] and "(a bound)" in notes[0]
    hw = _half_widths(notes[0])
    for name, got in zip(("var_pop", "sd_age", "var_income", "sd_income"), row):
        assert isinstance(got, float) and got >= 0
        assert abs(got - t[name]) <= hw[name], (name, got, t[name], hw[name])
    # informative at n = 1000, ε 1/4 each: age's variance (≈ 500) known to better than ±50%
    assert hw["var_pop"] < 0.5 * t["var_pop"]


def test_count_distinct_on_a_public_domain(service):
    t, notes = _truth(), []
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        ((got,),) = c.execute("SELECT COUNT(DISTINCT educ) FROM pums").fetchall()
        assert isinstance(got, int)
        assert abs(got - t["all_educ"]) <= _half_widths(notes[0])["count"]
        assert "geometric_count" in notes[0]
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            c.execute("SELECT COUNT(DISTINCT income) FROM pums")
        assert "public domain" in str(e.value)


def test_fetch_first_is_limit_and_costs_nothing_more(service):
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        a = c.execute(
            "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ ORDER BY educ FETCH FIRST 3 ROWS ONLY"
        ).fetchall()
        before = service.gw.ledger.spent("other", "day")
        b = c.execute(
            "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ ORDER BY educ "
            "OFFSET 1 ROWS FETCH NEXT 2 ROWS ONLY"
        ).fetchall()
        assert service.gw.ledger.spent("other", "day") == before  # the same release: a repeat
    assert [r[0] for r in a] == [1, 2, 3] and b == a[1:]


GROUP = "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ ORDER BY educ"


def test_psycopg_named_cursor_pages_one_release(service, monkeypatch):
    seen = _seen(service, monkeypatch)
    with psycopg.connect(service.dsn("other")) as c:  # a transaction, as named cursors need
        before = service.gw.ledger.spent("other", "day")
        with c.cursor(name="pages") as cur:
            cur.itersize = 5
            cur.execute(GROUP + " FETCH FIRST %s ROWS ONLY", [12])
            assert [d.name for d in cur.description] == ["educ", "n"]
            first = cur.fetchmany(5)
            rest = cur.fetchall()
        spent = service.gw.ledger.spent("other", "day") - before
        plain = c.execute(GROUP).fetchall()  # the same release, free
        assert service.gw.ledger.spent("other", "day") - before == spent
    assert spent in (0, pytest.approx(1.0))  # charged at most once (DECLARE)
    heads = [" ".join(q.split()[:3]).upper() for q in seen]
    assert heads.count("FETCH FORWARD 5") == 1 and heads.count("FETCH FORWARD ALL") == 1, heads
    assert [r[0] for r in first + rest] == list(range(1, 13))
    assert first + rest == plain[:12]


def test_cursor_statements_by_hand(service):
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        c.execute('DECLARE "C" NO SCROLL CURSOR WITH HOLD FOR ' + GROUP)
        assert len(c.execute('FETCH FORWARD 10 FROM "C"').fetchall()) == 10
        assert len(c.execute('FETCH NEXT FROM "C"').fetchall()) == 1
        assert len(c.execute('FETCH ALL IN "C"').fetchall()) == 5
        assert c.execute('FETCH 3 FROM "C"').fetchall() == []
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            c.execute('FETCH PRIOR FROM "C"')
        c.execute('CLOSE "C"')
        with pytest.raises(psycopg.errors.InvalidCursorName):
            c.execute('FETCH 1 FROM "C"')
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # the query is checked as usual
            c.execute("DECLARE d CURSOR FOR SELECT income FROM pums")


def _seen(service, monkeypatch) -> list[str]:
    """The statements the gateway answers (its statement log's input)."""
    seen, log = [], service.gw.log_statement
    monkeypatch.setattr(service.gw, "log_statement", lambda **kw: (seen.append(kw["sql"]), log(**kw)))
    return seen


def test_sqlalchemy_stream_results(service, monkeypatch):
    sa = pytest.importorskip("sqlalchemy", minversion="2.0")
    seen = _seen(service, monkeypatch)
    from support.service import PASSWORDS

    for driver in ("psycopg2", "psycopg"):
        pytest.importorskip(driver)
        url = sa.engine.URL.create(
            f"postgresql+{driver}",
            username="other",
            password=PASSWORDS["other"],
            host="127.0.0.1",
            port=service.port,
            database="demo",
        )
        eng = sa.create_engine(url)
        try:
            with eng.connect() as conn:
                res = conn.execution_options(stream_results=True, max_row_buffer=4).execute(sa.text(GROUP))
                pages = list(res.partitions(4))
            assert [len(p) for p in pages] == [4, 4, 4, 4]
            assert [r[0] for p in pages for r in p] == list(range(1, 17))
            heads = [q.split()[0].upper() for q in seen]
            assert "DECLARE" in heads and "FETCH" in heads, heads  # a server-side cursor was used
            seen.clear()
        finally:
            eng.dispose()


def test_any_with_a_list_parameter(service):
    """psycopg sends a Python list as an array parameter (text or binary): the same release as IN."""
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        a = c.execute("SELECT COUNT(*) FROM pums WHERE educ IN (9, 13)").fetchall()
        before = service.gw.ledger.spent("other", "day")
        b = c.execute("SELECT COUNT(*) FROM pums WHERE educ = ANY(%s)", [[13, 9]]).fetchall()
        with c.cursor(binary=True) as cur:
            d = cur.execute("SELECT COUNT(*) FROM pums WHERE educ = ANY(%b)", [[9, 13]]).fetchall()
        assert service.gw.ledger.spent("other", "day") == before  # repeats of one release
        assert a == b == d
        with pytest.raises(psycopg.errors.ProgramLimitExceeded):
            c.execute("SELECT COUNT(*) FROM pums WHERE educ = ANY(%s)", [list(range(5000))])


def test_close_of_an_unknown_cursor_is_answered(service):
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        c.execute('CLOSE "never_declared"')
        c.execute("CLOSE ALL")
