"""Heavy units apart (rewriter/unit.py, ``per_unit_scan`` with ``heavy_apart``): the scan
that aggregates per (unit, cell) only the units with more than T rows and adds their bounded
less their exact measures to the analyst's own aggregate returns the cells of the one-pass
plan (every unit aggregated per (unit, cell)), on DuckDB and Postgres, with bounds that bind
(per cell and in total, with and without the L0 ranking of cells), a WHERE, FILTER, no GROUP
BY, NULL keys and rows whose unit is NULL. Counts and integer sums are equal exactly; a
double sum up to the order of its additions (relative 1e-9: the sums here are < 10^5 and
a double carries 15 significant digits).

The heavy units read from a relation the backend keeps (``to_sql(…, frozen=True)``, DuckDB):
the same cells, with statements whose WHERE leaves some of the kept heavy units light; so do
their rows kept, and a total-mode statement's (unit, cell) rows with running sums kept
(``cells``), which read no salt: one relation serves every salt."""

from __future__ import annotations

import copy
import random

import pytest

import rewriter
from config import parse_config
from rewriter import dialects
from rewriter.params import needs
from rewriter.unit import KEPT_CELLS, SALT_PARAM, heavy_threshold

from .engines import engine

CELLS = [1, 2, 3, 4, 5, 6]


def _rows(seed: int = 11) -> list[tuple]:
    rnd = random.Random(seed)
    out = []
    for u in range(1, 61):
        heavy = u % 7 == 0
        for g in rnd.sample(CELLS, 6 if heavy else rnd.randint(1, 4)):
            for _ in range(rnd.randint(15, 40) if heavy else rnd.randint(1, 2)):
                out.append((u, g, rnd.randint(0, 12), round(rnd.uniform(-1, 11), 3)))
    out += [(None, 2, 5, 5.0)] * 9  # no known unit: left out
    out += [(u, None, 3, 1.5) for u in (7, 7, 7, 8, 9)]  # a NULL key: a cell of its own
    out += [(u, 99, 1, 2.0) for u in (14, 15)]  # a key outside the domain
    return out


ROWS = _rows()


def unit_config(G: int, R: int, scope: str):
    return parse_config(
        {
            "tiers": {"default": {"epsilon": 1, "budget": 10}},
            "roles": {"a": {"tier": "default"}},
            "server": {"auth": "trust"},
            "tables": {
                "t": {
                    "privacy_unit": "u",
                    "max_groups_per_unit": G,
                    "max_rows_per_unit": R,
                    "max_rows_scope": scope,
                    "columns": {
                        "u": {"type": "int"},
                        "g": {"type": "int", "domain": CELLS},
                        "n": {"type": "int", "lower": 0, "upper": 10},
                        "a": {"type": "float", "lower": 0, "upper": 10},
                    },
                }
            },
        }
    )


def _load(request):
    with engine(request, "unit_heavy_apart") as e:
        e.run("CREATE TABLE t (u INTEGER, g INTEGER, n INTEGER, a DOUBLE PRECISION)")
        e.insert("t", ROWS)
        yield e.dialect, e.run


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def run(request):
    yield from _load(request)


@pytest.fixture(scope="module", params=["spark"])
def spark_run(request):
    yield from _load(request)


SQLS = [
    "SELECT g, COUNT(*), SUM(a), AVG(a), SUM(n) FROM t GROUP BY g",
    "SELECT g, COUNT(a), SUM(n) FILTER (WHERE a > 5), VARIANCE(a) FROM t WHERE n < 9 GROUP BY g",
    "SELECT COUNT(*), SUM(a), SUM(n) FROM t",
    "SELECT COUNT(*), AVG(a) FROM t WHERE g IN (1, 2, 3)",
]


def _plans(dialect: str, heavy_apart: bool) -> dialects.SQLDialect:
    d = copy.copy(dialects.get(dialect))
    d.unit_heavy_apart = heavy_apart
    return d


def _close(x, y) -> bool:
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    if x is None or y is None:
        return x is None and y is None
    return abs(float(x) - float(y)) <= 1e-9 * max(1.0, abs(float(x)))


@pytest.mark.parametrize("scope", ["cell", "total"])
@pytest.mark.parametrize("G,R", [(6, 3), (2, 4), (3, 1), (6, 200)])
@pytest.mark.parametrize("sql", SQLS)
def test_heavy_units_apart_is_the_one_pass_plan(run, sql, G, R, scope):
    _same_cells(run, sql, G, R, scope)


@pytest.mark.parametrize("scope", ["cell", "total"])
@pytest.mark.parametrize("sql,G,R", [(SQLS[1], 2, 4), (SQLS[0], 6, 3)])
def test_heavy_units_apart_on_spark(spark_run, sql, G, R, scope):
    """Spark (a query takes seconds there): the filtered statement with the L0 ranking binding,
    and the plain one without it (each heavy row's bounded less its exact measures in one row;
    in total mode N from the heavy aggregate)."""
    _same_cells(spark_run, sql, G, R, scope)


def _same_cells(run, sql: str, G: int, R: int, scope: str) -> None:
    dialect, go = run
    plan = rewriter.build_plan(rewriter.parse(sql), unit_config(G, R, scope))
    split = rewriter.to_sql(plan, _plans(dialect, True), "0a1b")
    one = rewriter.to_sql(plan, _plans(dialect, False), "0a1b")
    assert "__dpgate_heavy" in split and "__dpgate_heavy" not in one
    _same_rows(go, split, one)


def _same_rows(go, sql: str, reference: str) -> None:
    """``sql`` and ``reference`` return the same rows (doubles up to the order of their additions)."""
    got = sorted(go(sql), key=repr)
    want = sorted(go(reference), key=repr)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert all(_close(x, y) for x, y in zip(a, b)), (a, b)


def test_heavy_threshold_keeps_light_units_whole():
    """T = R without the L0 ranking (G ≥ cells) and min(R, G) with it; a plan without GROUP BY
    has one cell."""

    def t(sql: str, G: int, R: int) -> int:
        return heavy_threshold(rewriter.build_plan(rewriter.parse(sql), unit_config(G, R, "cell")))

    assert t(SQLS[0], 6, 3) == 3
    assert t(SQLS[0], 2, 4) == 2
    assert t(SQLS[0], 3, 1) == 1
    assert t(SQLS[2], 1, 5) == 5


@pytest.fixture(scope="module", params=["duckdb"])
def duck_run(request):
    yield from _load(request)


FROZEN_SQLS = [
    *SQLS,
    # a unit heavy in the whole table keeps few rows here: light, kept whole (its correction is 0)
    "SELECT g, COUNT(*), SUM(n), AVG(a) FROM t WHERE a < 0.6 GROUP BY g",
    "SELECT COUNT(*), SUM(n) FROM t WHERE a < 0.6",
]


# without a WHERE: a total-mode statement's (unit, cell) rows may be kept (FILTER, VARIANCE, NULL and
# out-of-domain keys, integer and double sums)
CELLS_SQLS = [SQLS[0], "SELECT g, COUNT(a), SUM(n) FILTER (WHERE a > 5), VARIANCE(a) FROM t GROUP BY g"]


@pytest.mark.parametrize("kept", ["units", "rows", "cells"])
@pytest.mark.parametrize("scope", ["cell", "total"])
@pytest.mark.parametrize("G,R", [(6, 3), (2, 4), (3, 1), (6, 200)])
@pytest.mark.parametrize("sql", [*FROZEN_SQLS, CELLS_SQLS[1]])
def test_a_kept_heavy_set_is_the_one_pass_plan(duck_run, sql, G, R, scope, kept):
    """The heavy units of the whole table, made once into a relation (a superset of any
    statement's), give the one-pass plan's cells, WHERE or not; so do their rows kept
    (``rows``: the scan reads them instead of joining the table to the units) and, in total mode
    without a WHERE or the L0 ranking, their (unit, cell) rows with running sums (``cells``: a
    relation made from the kept rows, read after them)."""
    dialect, go = duck_run
    plan = rewriter.build_plan(rewriter.parse(sql), unit_config(G, R, scope))
    frozen = rewriter.to_sql(
        plan, _plans(dialect, True), "0a1b", frozen=True, rows=kept != "units", cells=kept == "cells"
    )
    one = rewriter.to_sql(plan, _plans(dialect, False), "0a1b")
    [(name, select), *more] = needs(frozen)
    assert "HAVING COUNT(*) > " in select and "WHERE" in select and "a < 0.6" not in select
    cells = kept == "cells" and scope == "total" and "t WHERE" not in sql and "GROUP BY" in sql and G >= 6
    assert [n[: len(KEPT_CELLS)] for n, _ in more] == ([KEPT_CELLS] if cells else [])
    for n, q in needs(frozen):  # in order: the cells' relation reads the rows'
        assert SALT_PARAM not in q
        go(f'CREATE OR REPLACE TEMP TABLE "{n}" AS {q}')
    light = [r for r in go(f'SELECT * FROM "{name}"')]
    assert (len(light) > 0) == (R < 200)  # the test has heavy units where a bound binds
    _same_rows(go, frozen, one)


@pytest.mark.parametrize("sql", CELLS_SQLS)
def test_kept_cells_read_no_salt(duck_run, sql):
    """The (unit, cell) rows with running sums are one relation for every salt (the same text):
    the scan adds the keyed offset, and each salt gives the one-pass plan's cells of that salt."""
    dialect, go = duck_run
    plan = rewriter.build_plan(rewriter.parse(sql), unit_config(6, 3, "total"))
    kept = {}
    for salt in ("0a1b", "ffee", "5eedfacecafe0123"):
        frozen = rewriter.to_sql(plan, _plans(dialect, True), salt, frozen=True, rows=True, cells=True)
        kept[salt] = needs(frozen)
        for n, q in needs(frozen):
            go(f'CREATE OR REPLACE TEMP TABLE "{n}" AS {q}')
        _same_rows(go, frozen, rewriter.to_sql(plan, _plans(dialect, False), salt))
    assert len(set(kept.values())) == 1 and len(kept["0a1b"]) == 2
    one = {s: sorted(go(rewriter.to_sql(plan, _plans(dialect, False), s)), key=repr) for s in kept}
    assert one["0a1b"] != one["ffee"]  # the salt moves the shares: the offset is the scan's


def test_the_kept_heavy_set_is_named_by_what_it_holds():
    """One relation per (source, unit, T): statements that differ in their WHERE, keys or measures
    share it; another threshold is another relation; a plan that does not split needs none."""

    def kept(sql: str, G: int, R: int, rows: bool = False) -> tuple:
        plan = rewriter.build_plan(rewriter.parse(sql), unit_config(G, R, "total"))
        return needs(rewriter.to_sql(plan, "duckdb", "0a1b", frozen=True, rows=rows))

    assert kept(SQLS[0], 6, 3) == kept(SQLS[1], 6, 3) == kept(SQLS[2], 6, 3) != kept(SQLS[0], 6, 4)
    assert kept(SQLS[0], 6, 3, True) == kept(SQLS[1], 6, 3, True) != kept(SQLS[0], 6, 4, True)
    assert kept(SQLS[0], 6, 3, True) != kept(SQLS[0], 6, 3)
    assert kept("SELECT g, COUNT(DISTINCT u) FROM t GROUP BY g", 6, 3) == ()
    plan = rewriter.build_plan(rewriter.parse(SQLS[0]), unit_config(6, 3, "total"))
    assert needs(rewriter.to_sql(plan, "duckdb", "0a1b")) == ()
