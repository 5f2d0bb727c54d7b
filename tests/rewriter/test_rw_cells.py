"""rewriter.cells.complete: the empty-cell completion the proxy does after the scan, with
the meaning of the LEFT JOIN from the public domain it replaced."""

from __future__ import annotations

import datetime as dt
import random
import tomllib
from decimal import Decimal

from config import parse_config
from proxy.demo import demo_config_path
from rewriter.cells import complete
from rewriter.plan import GroupKey, Measure, Plan
from rewriter.template import Templates


def _plan(*keys: GroupKey, measures: int = 1) -> Plan:
    return Plan(
        table="t",
        source="t",
        where=None,
        group_by=tuple(keys),
        measures=tuple(Measure("count_rows") for _ in range(measures)),
        aggregates=(),
        outputs=(),
    )


def test_every_cell_in_key_order_with_zeros_and_out_of_domain_dropped():
    p = _plan(GroupKey("g", "text", ("b", "a", "c")))
    got = complete(p, [("c", 5), ("zz", 9), (None, 4), ("a ", 7)])  # 'a ' is not 'a'
    assert got == [("a", 0), ("b", 0), ("c", 5)]


def test_numbers_match_by_value_whatever_their_type():
    p = _plan(GroupKey("g", "int", (1, 2, 3)), measures=2)
    got = complete(p, [(Decimal(2), 10, None), (3.0, 1, Decimal("2.5"))])
    assert got == [(1, 0, 0), (2, 10, 0), (3, 1, Decimal("2.5"))]
    assert [type(r[0]) for r in got] == [int, int, int]  # keys written from the domain


def test_float_keys_nan_and_null_bin():
    p = _plan(GroupKey("g", "float", (0.5, float("nan"), None)))
    got = complete(p, [(float("nan"), 3), (None, 2), (-0.0, 8)])  # 0.0 is not in the domain
    assert got[0] == (0.5, 0) and got[1][1] == 3 and got[2] == (None, 2)


def test_date_equals_timestamp_at_midnight():
    days = (dt.date(2025, 1, 1), dt.date(2025, 2, 1))
    p = _plan(GroupKey("m", "date", days))
    got = complete(p, [(dt.datetime(2025, 2, 1, 0, 0), 4), (dt.datetime(2025, 1, 1, 0, 0, 1), 9)])
    assert got == [(dt.date(2025, 1, 1), 0), (dt.date(2025, 2, 1), 4)]


def test_cartesian_product_of_two_keys():
    p = _plan(GroupKey("a", "int", (0, 1)), GroupKey("b", "bool", (False, True)))
    got = complete(p, [(1, True, 6)])
    assert got == [(0, False, 0), (0, True, 0), (1, False, 0), (1, True, 6)]


def test_no_group_by_is_the_one_aggregate_row_with_null_sums_as_zero():
    assert complete(_plan(measures=2), [(7, None)]) == [(7, 0)]


def _reference(plan: Plan, rows) -> list[tuple]:
    """The LEFT JOIN from the domain, cell by cell (the meaning ``complete`` must keep), for
    int and text keys: a text key compares as text, NULL matches no cell without NULL."""
    k, types = len(plan.group_by), [g.type for g in plan.group_by]
    norm = lambda v, t: v if v is None or t != "text" else str(v)
    out = []
    for cell in plan.cells:
        hits = [r for r in rows if all(norm(v, t) == norm(c, t) for v, c, t in zip(r[:k], cell, types))]
        m = tuple(hits[-1][k:]) if hits else (0,) * len(plan.measures)
        out.append((*cell, *(0 if x is None else x for x in m)))
    return out


def test_fast_paths_equal_the_cell_by_cell_join():
    """One int key, one text key (values of other types too), rows as lists (drivers whose
    rows are not tuples), NULL measures, out-of-domain and NULL keys: the same cells as the
    cell-by-cell LEFT JOIN."""
    rnd = random.Random(5)
    ip = _plan(GroupKey("g", "int", tuple(range(1, 301))), measures=2)
    rows = [[g, rnd.randrange(50), rnd.choice([None, 1.5, 2])] for g in rnd.sample(range(-5, 320), 200)]
    rows += [[None, 4, 4], [Decimal(7), 1, 1]]
    assert complete(ip, rows) == _reference(ip, rows) and len(complete(ip, rows)) == 300
    tp = _plan(GroupKey("g", "text", ("1", "2", "x", "y")))
    trows = [(1, 5), ("x", 2), ("z", 9), (None, 1)]
    assert complete(tp, trows) == _reference(tp, trows) == [("1", 5), ("2", 0), ("x", 2), ("y", 0)]


def test_the_domain_index_is_computed_once_and_shared_by_a_template():
    """A template's filled plans share the public cells' index (only WHERE differs)."""
    data = tomllib.loads(demo_config_path().read_text())
    data["server"]["auth"] = "trust"
    cfg, tpl = parse_config(data), Templates()
    sql = "SELECT region, COUNT(*) FROM people WHERE age BETWEEN {} AND {} GROUP BY region"
    plans = [tpl.plan(sql.format(a, b), cfg, "duckdb") for a, b in [(20, 30), (21, 40), (22, 50)]]
    assert tpl.filled == 2  # the first planned in full (and derived it)
    rows = [("north", 3), ("west", 1)]
    assert complete(plans[1], rows) == complete(plans[2], rows) == _reference(plans[2], rows)
    assert plans[1].memo.domain is plans[2].memo.domain


def test_a_plan_carries_its_declared_fields_only():
    """What is derived from a plan (canonical text, backend SQL, public cells, and the clock of
    now()) lives in declared fields, never in attributes written onto the frozen object: a
    template's filled plan included (a plan of now(): test_rw_derived_keys)."""
    import dataclasses

    from rewriter import to_sql

    data = tomllib.loads(demo_config_path().read_text())
    data["server"]["auth"] = "trust"
    cfg, tpl = parse_config(data), Templates()
    declared = {f.name for f in dataclasses.fields(Plan)}
    sql = "SELECT region, COUNT(*) FROM people WHERE age BETWEEN {} AND {} GROUP BY region"
    plans = [tpl.plan(sql.format(a, b), cfg, "duckdb") for a, b in [(20, 30), (21, 40)]]
    for p in plans:
        p.canonical(), to_sql(p, "duckdb"), complete(p, [])
        assert set(vars(p)) == declared, set(vars(p)) - declared
    assert tpl.filled == 1 and plans[1].memo.canonical and plans[1].memo.sql
    assert not plans[0].clock
