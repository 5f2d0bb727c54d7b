"""rewriter.cells.complete: the empty-cell completion the proxy does after the scan, with
the meaning of the LEFT JOIN from the public domain it replaced (issue 21)."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

from rewriter.cells import complete
from rewriter.plan import GroupKey, Measure, Plan


def _plan(*keys: GroupKey, measures: int = 1) -> Plan:
    return Plan(table="t", source="t", where=None, group_by=tuple(keys),
                measures=tuple(Measure("count_rows") for _ in range(measures)),
                aggregates=(), outputs=())


def test_every_cell_in_key_order_with_zeros_and_out_of_domain_dropped():
    p = _plan(GroupKey("g", "text", ("b", "a", "c")))
    got = complete(p, [("c", 5), ("zz", 9), (None, 4), ("a ", 7)])   # 'a ' is not 'a'
    assert got == [("a", 0), ("b", 0), ("c", 5)]


def test_numbers_match_by_value_whatever_their_type():
    p = _plan(GroupKey("g", "int", (1, 2, 3)), measures=2)
    got = complete(p, [(Decimal(2), 10, None), (3.0, 1, Decimal("2.5"))])
    assert got == [(1, 0, 0), (2, 10, 0), (3, 1, Decimal("2.5"))]
    assert [type(r[0]) for r in got] == [int, int, int]              # keys written from the domain


def test_float_keys_nan_and_null_bin():
    p = _plan(GroupKey("g", "float", (0.5, float("nan"), None)))
    got = complete(p, [(float("nan"), 3), (None, 2), (-0.0, 8)])      # 0.0 is not in the domain
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
