"""Contribution bounding of the privacy unit (rewriter/unit.py) on DuckDB and
Postgres, with bounds that BIND: the bounded scan's exact measures are what the bounds
define, computed independently in Python.

Fixture: units with many rows in several cells, all rows of one (unit, cell) carrying the
same amount, so which R rows a unit keeps does not change the sums and the expected
values are exact whatever the keyed hash picks:
* G ≥ cells: COUNT per cell = Σ_u min(c_u,cell, R), SUM = Σ_u min(c, R)·a_u,cell;
* G < cells: each unit appears in exactly min(G, cells_u) cells (Σ over cells of
  COUNT(DISTINCT u)), and each kept (unit, cell) keeps min(c, R) rows;
* the same salt gives the same scan; another salt keeps the invariants.
"""

from __future__ import annotations

import random

import pytest

import rewriter
from config import parse_config

from .engines import engine

CELLS = [1, 2, 3, 4, 5, 6]


def _rows(seed: int = 7) -> list[tuple]:
    rnd = random.Random(seed)
    out = []
    for u in range(1, 41):
        heavy = u <= 4  # a few units with many rows everywhere
        for g in rnd.sample(CELLS, rnd.randint(1, 6) if not heavy else 6):
            a = float(rnd.randint(1, 9))
            for _ in range(rnd.randint(1, 3) if not heavy else rnd.randint(20, 60)):
                out.append((u, g, a))
    out += [(None, 1, 5.0)] * 30  # no known unit: left out
    return out


ROWS = _rows()


def _config(G: int, R: int):
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
                    "columns": {
                        "u": {"type": "int"},
                        "g": {"type": "int", "domain": CELLS},
                        "a": {"type": "float", "lower": 0, "upper": 10},
                    },
                }
            },
        }
    )


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def run(request):
    with engine(request, "unit_bounds") as e:
        e.run("CREATE TABLE t (u INTEGER, g INTEGER, a DOUBLE PRECISION)")
        e.insert("t", ROWS)
        yield e.dialect, e.run


def _scan(run, sql: str, G: int, R: int, salt: str = "0a1b"):
    dialect, go = run
    plan = rewriter.build_plan(rewriter.parse(sql), _config(G, R))
    return rewriter.complete(plan, go(rewriter.to_sql(plan, dialect, salt)))


def _per_unit_cell():
    c: dict[tuple, list] = {}
    for u, g, a in ROWS:
        if u is not None:
            c.setdefault((u, g), []).append(a)
    return c


@pytest.mark.parametrize("R", [1, 3, 25])
def test_rows_per_unit_bound(run, R):
    got = _scan(run, "SELECT g, COUNT(*), SUM(a), COUNT(DISTINCT u) FROM t GROUP BY g", G=6, R=R)
    want = {g: [0, 0.0, 0] for g in CELLS}
    for (u, g), amounts in _per_unit_cell().items():
        n = min(len(amounts), R)
        want[g][0] += n
        want[g][1] += n * amounts[0]
        want[g][2] += 1
    assert [(g, int(c), float(s), int(d)) for g, c, s, d in got] == [(g, *v) for g, v in want.items()]


@pytest.mark.parametrize("G", [1, 2, 4])
def test_groups_per_unit_bound(run, G):
    R = 2
    got = _scan(run, "SELECT g, COUNT(*), COUNT(DISTINCT u) FROM t GROUP BY g", G=G, R=R)
    cells_of: dict[int, int] = {}
    for u, _g in _per_unit_cell():
        cells_of[u] = cells_of.get(u, 0) + 1
    assert sum(int(r[2]) for r in got) == sum(min(G, n) for n in cells_of.values())
    assert sum(int(r[1]) for r in got) <= sum(min(G, n) * R for n in cells_of.values())
    again = _scan(run, "SELECT g, COUNT(*), COUNT(DISTINCT u) FROM t GROUP BY g", G=G, R=R)
    assert again == got  # the keyed choice is deterministic
    other = _scan(run, "SELECT g, COUNT(*), COUNT(DISTINCT u) FROM t GROUP BY g", G=G, R=R, salt="ffee")
    assert sum(int(r[2]) for r in other) == sum(int(r[2]) for r in got)


def test_no_group_by_keeps_r_rows_per_unit(run):
    ((c, s),) = _scan(run, "SELECT COUNT(*), SUM(a) FROM t WHERE g <> 3", G=1, R=4)
    per_unit: dict[int, list] = {}
    for (u, g), amounts in _per_unit_cell().items():
        if g != 3:
            per_unit.setdefault(u, []).extend(amounts)
    assert int(c) == sum(min(len(v), 4) for v in per_unit.values())
    lo = sum(sum(sorted(v)[:4]) for v in per_unit.values())
    hi = sum(sum(sorted(v)[-4:]) for v in per_unit.values())
    assert lo <= float(s) <= hi


@pytest.mark.parametrize("R", [1, 3, 25])
def test_filtered_aggregates_bound_the_rows_they_keep(run, R):
    """``agg FILTER (WHERE cond)`` under the unit's bounds: a unit keeps at most R of the rows
    the condition keeps in a cell (here every row of a (unit, cell) carries one amount, so
    ``a > 4`` keeps or drops a (unit, cell) whole and the bounded values are exact)."""
    got = _scan(
        run,
        "SELECT g, COUNT(*) FILTER (WHERE a > 4), SUM(a) FILTER (WHERE a > 4), "
        "COUNT(a) FILTER (WHERE a > 4) FROM t GROUP BY g",
        G=6,
        R=R,
    )
    want = {g: [0, 0.0, 0] for g in CELLS}
    for (u, g), amounts in _per_unit_cell().items():
        if amounts[0] > 4:
            n = min(len(amounts), R)
            want[g][0] += n
            want[g][1] += n * amounts[0]
            want[g][2] += n
    assert [(g, int(c), float(s or 0), int(k)) for g, c, s, k in got] == [(g, *v) for g, v in want.items()]
