"""Prepared templates on DuckDB (``rewriter.template.ParamSQL``, ``proxy.backends.duckdb``):
a statement filled from a plan template runs its template prepared, with its integer
literals as ``CAST($k AS INTEGER)`` parameters. The oracle: on the NULL-laden fixture (and a
table of DECIMAL(4,2) and SMALLINT columns, where a parameter typed from its column rather
than from the literal would overflow), the prepared run returns exactly the rows of the
statement's own text, for every value hypothesis picks; the prepared path is taken; and
what DuckDB will not prepare or execute runs as text."""

from __future__ import annotations

import math

import pytest
from fixture import TABLE, create_sql, rows
from hypothesis import given, settings
from hypothesis import strategies as st

from config import parse_config
from proxy.backends.duckdb import DuckDBBackend
from rewriter import to_sql
from rewriter.template import ParamSQL, Templates, _param_form

SHAPES = [
    f"SELECT g, COUNT(*), SUM(f), AVG(i) FROM {TABLE} WHERE i BETWEEN {{a}} AND {{b}} GROUP BY g",
    f"SELECT COUNT(*), SUM(i) FROM {TABLE} WHERE f > {{a}} AND i < {{b}}",
    f"SELECT s, COUNT(*), AVG(f) FROM {TABLE} WHERE i >= {{a}} OR f <= {{b}} GROUP BY s",
    f"SELECT b, COUNT(*) FROM {TABLE} WHERE i >= {{a}} AND i <= {{b}} GROUP BY b",
    "SELECT COUNT(*), SUM(sm), AVG(d) FROM dx WHERE d < {a} AND sm > {b}",
]
DX = {
    "dx": {
        "columns": {
            "d": {"type": "float", "lower": -10, "upper": 10},
            "sm": {"type": "int", "lower": -100, "upper": 100},
        }
    }
}


@pytest.fixture(scope="module")
def setup(oracle_config):
    from fixture import CONFIG

    cfg = parse_config({**CONFIG, "tables": {**CONFIG["tables"], **DX}})
    backend = DuckDBBackend(None)
    backend.execute_script(create_sql())
    backend.execute_script("CREATE TABLE dx (d DECIMAL(4,2), sm SMALLINT)")
    for r in rows():
        backend.query(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)", list(r))
    assert backend.query(f"SELECT COUNT(*), COUNT(g), COUNT(s), COUNT(b) FROM {TABLE}")[0][0] == len(rows())
    backend.execute_script(
        "INSERT INTO dx VALUES (NULL, 1), (-3.25, NULL), (0.5, -7), (99.99, 12), "
        "(-99.99, 32767), (7.1, -32768), (0, 0)"
    )
    templates = Templates()
    for q in SHAPES:  # the first statement of each shape derives it
        templates.plan(q.format(a=1, b=2), cfg, "duckdb")
    yield cfg, backend, templates
    backend._close_cursors()


def _same_rows(a, b) -> bool:
    def key(r):
        return tuple((v is None, "nan" if isinstance(v, float) and math.isnan(v) else v) for v in r)

    return sorted(map(key, a)) == sorted(map(key, b))


@settings(max_examples=60, deadline=None)
@given(
    shape=st.sampled_from(SHAPES),
    a=st.integers(0, 999_999_999),
    b=st.integers(0, 999_999_999),
    small=st.booleans(),
)
def test_prepared_runs_equal_the_text(setup, shape, a, b, small):
    cfg, backend, templates = setup
    if small:  # values inside the fixture's ranges too
        a, b = a % 12, b % 12
    if a == b:
        b = a + 1  # repeated values are planned in full
    sql = to_sql(templates.plan(shape.format(a=a, b=b), cfg, "duckdb"), "duckdb")
    assert isinstance(sql, ParamSQL) and sql.params == (a, b) and "$2" in sql.template
    before = backend.prepared_runs
    prepared = backend.run(sql)
    assert backend.prepared_runs == before + 1
    assert _same_rows(prepared, backend.query(str(sql)))


def test_what_duckdb_will_not_prepare_or_execute_runs_as_text():
    backend = DuckDBBackend(None)
    try:
        bad = ParamSQL("SELECT 1")
        bad.template, bad.params = "SELECT nonsense(", (1,)  # PREPARE fails
        assert backend.run(bad) == [(1,)] and backend.prepared_runs == 0
        failing = ParamSQL("SELECT 2")
        failing.template, failing.params = "SELECT CAST($1 AS INTEGER) WHERE error('boom') IS NULL", (1,)
        assert backend.run(failing) == [(2,)]  # EXECUTE fails: the text runs
        assert backend.run(failing) == [(2,)]  # and is not prepared again
    finally:
        backend._close_cursors()


def test_a_hole_inside_a_string_is_never_a_parameter():
    assert _param_form("SELECT 1 WHERE a = \x000\x01", 1) == "SELECT 1 WHERE a = CAST($1 AS INTEGER)"
    assert _param_form("SELECT 1 WHERE a = '\x000\x01'", 1) is None
    assert _param_form('SELECT "\x000\x01" FROM t WHERE a = \x000\x01', 1) is None
