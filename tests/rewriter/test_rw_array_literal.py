"""``x = ANY('{…}')``: PostgreSQL's array literal text in a row predicate is the IN list of
its elements, typed by the column (the same plan, hence the same release, as ``x IN (…)``);
a malformed or nested literal, or an element the column's type cannot take, is refused."""

from __future__ import annotations

import pytest

from rewriter import Refusal, build_plan, parse, to_sql
from rewriter.arrays import ArrayLiteralError, parse_array_literal


def plan(sql, config):
    return build_plan(parse(sql), config)


@pytest.mark.parametrize("form", ["'{1,2,3}'", "'{3, 2,1}'::int[]", "('{\"1\",2,3}')"])
def test_array_literal_is_the_in_list(config, form):
    same = plan("SELECT COUNT(*) FROM pums WHERE educ IN (1, 2, 3)", config)
    assert (
        plan(f"SELECT COUNT(*) FROM pums WHERE educ = ANY({form})", config).fingerprint()
        == same.fingerprint()
    )


def test_text_elements_and_the_empty_array(config):
    a = plan("SELECT COUNT(*) FROM pums WHERE state = ANY('{\"New York\",CA}')", config)
    b = plan("SELECT COUNT(*) FROM pums WHERE state IN ('New York', 'CA')", config)
    assert a.fingerprint() == b.fingerprint()
    empty = plan("SELECT COUNT(*) FROM pums WHERE educ = ANY('{}')", config)
    assert empty.fingerprint() == plan("SELECT COUNT(*) FROM pums WHERE FALSE", config).fingerprint()


@pytest.mark.parametrize("form, state", [("'{1,{2}}'", "22P02"), ("'{1,x}'", "22023"), ("'1,2'", "22P02")])
def test_bad_array_literals_are_refused(config, form, state):
    with pytest.raises(Refusal) as e:
        plan(f"SELECT COUNT(*) FROM pums WHERE educ = ANY({form})", config)
    assert e.value.sqlstate == state


@pytest.mark.parametrize(
    "text, items",
    [
        ("{}", []),
        ("{r,p}", ["r", "p"]),
        ('{"a,b", c ,NULL,"NULL"}', ["a,b", "c", None, "NULL"]),
        ('{"q\\"x","b\\\\s"}', ['q"x', "b\\s"]),
        ("{ x y }", ["x y"]),
    ],
)
def test_array_literal_reads_as_array_in(text, items):
    assert parse_array_literal(text) == items


@pytest.mark.parametrize("text", ["r,p", "{r,p", "{a,,b}", "{{a}}", '{"a}'])
def test_not_an_array_literal(text):
    with pytest.raises(ArrayLiteralError):
        parse_array_literal(text)


@pytest.mark.parametrize("form, params", [("'{1,2,3}'", None), ("ARRAY[1, 2, 3]", None), ("$1", [[3, 1, 2]])])
def test_not_equal_all_is_not_in(config, form, params):
    same = plan("SELECT COUNT(*) FROM pums WHERE NOT (educ IN (1, 2, 3))", config)
    got = build_plan(parse(f"SELECT COUNT(*) FROM pums WHERE educ <> ALL({form})"), config, params)
    assert got.fingerprint() == same.fingerprint()
    empty = plan("SELECT COUNT(*) FROM pums WHERE educ <> ALL('{}')", config)
    assert empty.fingerprint() == plan("SELECT COUNT(*) FROM pums WHERE TRUE", config).fingerprint()


def test_not_equal_all_rows(config, duck):
    """Evaluated by the backend as PostgreSQL evaluates <> ALL (NULL elements, NULL x)."""
    sql = to_sql(plan("SELECT COUNT(*) FROM pums WHERE educ <> ALL('{1,2,3}')", config), "duckdb")
    assert (
        duck.execute(sql).fetchall()
        == duck.execute("SELECT COUNT(*) FROM pums WHERE educ <> ALL([1, 2, 3])").fetchall()
    )
