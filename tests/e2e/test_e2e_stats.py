"""VAR/STDDEV, COUNT(DISTINCT …) and FETCH FIRST end to end (psycopg; DuckDB and Postgres)."""
from __future__ import annotations

import math
import re

import numpy as np
import psycopg
import pytest

from proxy.demo import pums_rows


def _truth():
    rows = pums_rows()
    age = np.clip([r[0] for r in rows], 0, 100).astype(float)
    income = np.clip([r[4] for r in rows], 0, 500000)
    return {"var_pop": np.var(age), "sd_age": np.std(age, ddof=1), "var_income": np.var(income, ddof=1),
            "sd_income": np.std(income), "educ": len({r[2] for r in rows if 1 <= r[2] <= 16}),
            "all_educ": len({r[2] for r in rows})}


def _half_widths(note: str) -> dict:
    return {k: float(v) for k, v in re.findall(r"(\w+) ±([0-9.e+-]+)", note)}


def test_variance_and_stddev_within_the_stated_half_width(service):
    t, notes = _truth(), []
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        before = service.gw.ledger.spent("other", "day")
        (row,) = c.execute("SELECT VAR_POP(age) AS var_pop, STDDEV(age) AS sd_age, VARIANCE(income) AS "
                           "var_income, STDDEV_POP(income) AS sd_income FROM pums").fetchall()
        charged = service.gw.ledger.spent("other", "day") - before
    assert charged == pytest.approx(1.0)                     # one statement, ε split among its releases
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
        assert abs(got - t["all_educ"]) <= _half_widths(notes[0])["count"]
        assert "geometric_count" in notes[0]
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            c.execute("SELECT COUNT(DISTINCT income) FROM pums")
        assert "public domain" in str(e.value)


def test_fetch_first_is_limit_and_costs_nothing_more(service):
    with psycopg.connect(service.dsn("other"), autocommit=True) as c:
        a = c.execute("SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ ORDER BY educ "
                      "FETCH FIRST 3 ROWS ONLY").fetchall()
        before = service.gw.ledger.spent("other", "day")
        b = c.execute("SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ ORDER BY educ "
                      "OFFSET 1 ROWS FETCH NEXT 2 ROWS ONLY").fetchall()
        assert service.gw.ledger.spent("other", "day") == before     # the same release: a repeat
    assert [r[0] for r in a] == [1, 2, 3] and b == a[1:]
