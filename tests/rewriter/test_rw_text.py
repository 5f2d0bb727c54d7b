"""trim/btrim/ltrim/rtrim and || in row predicates: the same rows on both backends as in
Python, and the cost caps; ~ and SIMILAR TO refused with a hint."""

from __future__ import annotations

import pytest
from rw_data import ROWS

import rewriter
from rewriter.errors import Refusal

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


@pytest.mark.parametrize(
    "where, state, words",
    [
        ("name ~ 'a.*'", "0A000", "LIKE"),
        ("name SIMILAR TO 'a%'", "0A000", "LIKE"),
        ("trim(age) = 'x'", "42804", "text"),
        ("age || 'x' = 'x'", "42804", "text"),
        ("trim(name, name) = 'x'", "0A000", "literal or a parameter"),
        ("name || '" + "x" * 300 + "' || '" + "y" * 300 + "' = 'x'", "54000", "characters"),
    ],
)
def test_refused(config, where, state, words):
    with pytest.raises(Refusal) as e:
        _plan(config, where)
    assert e.value.sqlstate == state and words in e.value.message, e.value.message


def test_trim_counts_as_a_text_operation(config):
    many = " AND ".join(["trim(name) = 'a'"] * 40)
    with pytest.raises(Refusal) as e:
        _plan(config, many)
    assert "text operations" in e.value.message


# ---- = ANY($1) with an array parameter ----------------------------------------------------

ANY_CASES = [
    ("educ = ANY($1)", [[12, 16]], lambda r: r[2] in (12, 16)),
    ("state = ANY($1)", [["ca", "tx", None]], lambda r: r[STATE] in ("ca", "tx")),
    ("educ = ANY($1)", [[]], lambda r: False),
    ("educ = ANY(ARRAY[1, 3])", None, lambda r: r[2] in (1, 3)),
    ("NOT (educ = ANY($1))", [[12]], lambda r: r[2] is not None and r[2] != 12),
]


@pytest.mark.parametrize("where, params, pred", ANY_CASES, ids=[c[0] + repr(c[1]) for c in ANY_CASES])
def test_any_is_in_on_both_backends(config, duck, pg, where, params, pred):
    p = _plan(config, where, params)
    for run, dialect in ((duck.execute, "duckdb"), (pg.execute, "postgres")):
        assert run(rewriter.to_sql(p, dialect)).fetchall() == [(_n(pred),)], dialect


def test_any_same_release_as_in(config):
    a = _plan(config, "educ = ANY($1)", [[16, 12, 12]])
    assert a.canonical() == _plan(config, "educ IN (12, 16)").canonical()


def test_any_parameter_type_is_an_array(config):
    assert rewriter.param_types(
        rewriter.parse("SELECT COUNT(*) FROM pums WHERE state = ANY($1) AND age > $2"), config
    ) == ["text[]", "int"]


@pytest.mark.parametrize(
    "where, params, state",
    [
        ("educ = ANY($1)", [12], "42804"),  # not a list
        ("educ = ANY($1)", [["x"]], "22023"),  # element of the wrong type
        ("educ = ANY($1)", [list(range(5000))], "54000"),  # the IN-list cap
        ("educ <> ANY($1)", [[1]], "0A000"),
        ("educ = ALL($1)", [[1]], "42883"),  # parsed as a function: not allowed
        ("educ = ANY(SELECT 1)", None, "42501"),  # a subquery
    ],
)
def test_any_refused(config, where, params, state):
    with pytest.raises(Refusal) as e:
        _plan(config, where, params)
    assert e.value.sqlstate == state, e.value.message
