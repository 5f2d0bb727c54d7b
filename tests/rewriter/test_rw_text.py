"""trim/btrim/ltrim/rtrim and || in row predicates: the same rows on both backends as in
Python, and the cost caps; ~ and SIMILAR TO refused with a hint."""
from __future__ import annotations

import pytest

import rewriter
from rewriter.errors import Refusal
from rw_data import ROWS

NAME, STATE = 6, 7


def _n(pred):
    return sum(1 for r in ROWS if pred(r))


CASES = [
    ("trim(name) = 'bob'", lambda r: r[NAME] == "bob"),
    ("btrim(name, 'a') = 'lice'", lambda r: r[NAME] is not None and r[NAME].strip("a") == "lice"),
    ("ltrim(name, 'ae') = 'lice'", lambda r: r[NAME] is not None and r[NAME].lstrip("ae") == "lice"),
    ("rtrim(name, 'n') = 'eri'", lambda r: r[NAME] is not None and r[NAME].rstrip("n") == "eri"),
    ("trim(leading 'g' from name) = 'ina'", lambda r: r[NAME] == "gina"),
    ("trim(both 'a' from name) = 'lice'", lambda r: r[NAME] == "alice"),
    ("name || '-' || state = 'bob-ny'", lambda r: r[NAME] == "bob" and r[STATE] == "ny"),
    ("state || 'x' LIKE 'c%'", lambda r: r[STATE] is not None and r[STATE].startswith("c")),
    ("(name || state) IS NULL", lambda r: r[NAME] is None or r[STATE] is None),
    ("trim($1 || name) = 'xbob'", lambda r: r[NAME] == "bob"),
]


def _plan(config, where, params=None):
    return rewriter.build_plan(rewriter.parse(f"SELECT COUNT(*) FROM pums WHERE {where}"), config, params)


@pytest.mark.parametrize("where, pred", CASES, ids=[c[0] for c in CASES])
def test_duckdb(config, duck, where, pred):
    p = _plan(config, where, ["x"] if "$1" in where else None)
    assert duck.execute(rewriter.to_sql(p, "duckdb")).fetchall() == [(_n(pred),)]


@pytest.mark.parametrize("where, pred", CASES, ids=[c[0] for c in CASES])
def test_postgres(config, pg, where, pred):
    p = _plan(config, where, ["x"] if "$1" in where else None)
    assert pg.execute(rewriter.to_sql(p, "postgres")).fetchall() == [(_n(pred),)]


@pytest.mark.parametrize("where, state, words", [
    ("name ~ 'a.*'", "0A000", "LIKE"),
    ("name SIMILAR TO 'a%'", "0A000", "LIKE"),
    ("trim(age) = 'x'", "42804", "text"),
    ("age || 'x' = 'x'", "42804", "text"),
    ("trim(name, name) = 'x'", "0A000", "literal or a parameter"),
    ("name || '" + "x" * 300 + "' || '" + "y" * 300 + "' = 'x'", "54000", "characters"),
])
def test_refused(config, where, state, words):
    with pytest.raises(Refusal) as e:
        _plan(config, where)
    assert e.value.sqlstate == state and words in e.value.message, e.value.message


def test_trim_counts_as_a_text_operation(config):
    many = " AND ".join(["trim(name) = 'a'"] * 40)
    with pytest.raises(Refusal) as e:
        _plan(config, many)
    assert "text operations" in e.value.message
