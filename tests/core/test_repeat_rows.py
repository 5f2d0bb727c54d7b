"""The kept encodings of large releases' rows (proxy/pipeline/repeat_rows.py): the bytes are
the wire's encoding of the rows, small results are not kept, an entry belongs to one plan
object and one release, and the total is bounded by bytes, least recently used first."""

from __future__ import annotations

import gc

from proxy.pipeline.repeat_rows import ENCODE_FROM, RepeatRows
from proxy.wire.api import Column
from proxy.wire.rows import data_rows

COLS = [Column("k", 20), Column("n", 20)]


class Plan:  # any object held weakly stands for a statement's plan
    pass


def _rows(n: int, start: int = 0) -> list[tuple]:
    return [(i, i * 7) for i in range(start, start + n)]


def test_kept_bytes_are_the_wire_encoding():
    cache, plan, rows = RepeatRows(), Plan(), _rows(ENCODE_FROM)
    kept = cache.keep(plan, ("r", "k", 1, 0.5), COLS, rows, "body")
    assert kept is not None and kept.data == data_rows([20, 20], [0, 0], rows)
    got = cache.get(plan, ("r", "k", 1, 0.5))
    assert got is kept and got.body == "body"
    out = got.rows(lambda: rows)
    assert out.encoded_for([0, 0]) == kept.data and out.encoded_for([1, 1]) is None and list(out) == rows


def test_small_results_and_other_releases_are_not_found():
    cache, plan = RepeatRows(), Plan()
    assert cache.keep(plan, ("r", "k", 1, 0.5), COLS, _rows(ENCODE_FROM - 1), "b") is None
    cache.keep(plan, ("r", "k", 1, 0.5), COLS, _rows(ENCODE_FROM), "b")
    for other in (("s", "k", 1, 0.5), ("r", "k2", 1, 0.5), ("r", "k", 2, 0.5), ("r", "k", 1, 0.75)):
        assert cache.get(plan, other) is None
    assert cache.get(Plan(), ("r", "k", 1, 0.5)) is None


def test_a_dropped_plan_drops_its_entry():
    cache = RepeatRows()
    plan = Plan()
    cache.keep(plan, ("r", "k", 1, 0.5), COLS, _rows(ENCODE_FROM), "b")
    ident = id(plan)
    del plan
    gc.collect()
    stale = [Plan() for _ in range(2000)]  # one of them may take the old id
    for p in stale:
        if id(p) == ident:
            assert cache.get(p, ("r", "k", 1, 0.5)) is None
    assert all(cache.get(p, ("r", "k", 1, 0.5)) is None for p in stale)


def test_bounded_by_bytes_least_recently_used_first():
    one = len(data_rows([20, 20], [0, 0], _rows(ENCODE_FROM)))
    cache = RepeatRows(max_bytes=4 * one + one // 2)  # room for four entries
    plans = [Plan() for _ in range(6)]
    for i, p in enumerate(plans[:4]):
        cache.keep(p, ("r", str(i), 1, 0.0), COLS, _rows(ENCODE_FROM), "b")
    assert cache.get(plans[0], ("r", "0", 1, 0.0)) is not None  # now the most recently used
    cache.keep(plans[4], ("r", "4", 1, 0.0), COLS, _rows(ENCODE_FROM), "b")
    assert len(cache) == 4 and cache.get(plans[1], ("r", "1", 1, 0.0)) is None
    assert cache.get(plans[0], ("r", "0", 1, 0.0)) is not None
    big = _rows(20 * ENCODE_FROM)  # more than a quarter of the bound: not kept
    assert cache.keep(plans[5], ("r", "5", 1, 0.0), COLS, big, "b") is None
