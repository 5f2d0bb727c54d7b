"""Window functions over released cells equal Postgres' own: the proxy's evaluator
(:func:`proxy.pipeline.postexpr.window_values`) and the test's Postgres compute the same
windows over one table of cells with ties, NULLs in values, keys and partitions, for every
function and frame dpgate answers (peers of the default RANGE frame, ROWS / GROUPS offsets,
RANGE offsets along one ORDER BY key — integer or float, NULL keys framing their NULL peers —,
NTH_VALUE, NULLS FIRST / LAST)."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal

import psycopg
import pytest

from proxy.pipeline.postexpr import window_values

# cells: key (k, p), values (v0 bigint, v1 float8); ties in v0, NULLs in v0, v1, p
CELLS = [
    ((1, 0), [5, 1.5]),
    ((2, 0), [3, None]),
    ((3, 1), [5, 2.25]),
    ((4, 1), [None, -1.0]),
    ((5, None), [3, 0.5]),
    ((6, 0), [8, 4.0]),
    ((7, 1), [5, None]),
    ((8, None), [0, 3.5]),
]
COLS = {"k": ("key", 0), "p": ("key", 1), "v0": ("agg", 0), "v1": ("agg", 1)}
ORDERS = [
    ("", ()),
    ("ORDER BY v0", ((COLS["v0"], False, False),)),
    ("ORDER BY v0 DESC", ((COLS["v0"], True, True),)),
    ("ORDER BY v0 NULLS FIRST, k DESC", ((COLS["v0"], False, True), (COLS["k"], True, True))),
    ("ORDER BY p DESC NULLS LAST, k", ((COLS["p"], True, False), (COLS["k"], False, False))),
    ("ORDER BY v1", ((COLS["v1"], False, False),)),
    ("ORDER BY v1 DESC NULLS LAST", ((COLS["v1"], True, False),)),
]
FRAMES = [
    ("", None),
    ("ROWS BETWEEN 2 PRECEDING AND CURRENT ROW", ("rows", ("preceding", 2), ("current",))),
    ("ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING", ("rows", ("preceding", 1), ("following", 1))),
    ("ROWS BETWEEN 1 FOLLOWING AND 3 FOLLOWING", ("rows", ("following", 1), ("following", 3))),
    (
        "RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING",
        ("range", ("current",), ("unbounded", "following")),
    ),
    ("GROUPS BETWEEN 1 PRECEDING AND CURRENT ROW", ("groups", ("preceding", 1), ("current",))),
    ("RANGE BETWEEN 2 PRECEDING AND 1 FOLLOWING", ("range", ("preceding", 2), ("following", 1))),
    ("RANGE BETWEEN 1 FOLLOWING AND 3 FOLLOWING", ("range", ("following", 1), ("following", 3))),
    (
        "RANGE BETWEEN UNBOUNDED PRECEDING AND 2 PRECEDING",
        ("range", ("unbounded", "preceding"), ("preceding", 2)),
    ),
    (
        "RANGE BETWEEN 0 PRECEDING AND UNBOUNDED FOLLOWING",
        ("range", ("preceding", 0), ("unbounded", "following")),
    ),
    (
        "RANGE BETWEEN 1.5 PRECEDING AND 0.25 FOLLOWING",
        ("range", ("preceding", Decimal("1.5")), ("following", Decimal("0.25"))),
    ),
]
FRAMED = [
    ("sum(v0)", "sum", (COLS["v0"],)),
    ("avg(v0)", "avg", (COLS["v0"],)),
    ("sum(v1)", "sum", (COLS["v1"],)),
    ("avg(v1)", "avg", (COLS["v1"],)),
    ("count(v1)", "count", (COLS["v1"],)),
    ("count(*)", "count", ()),
    ("min(v0)", "min", (COLS["v0"],)),
    ("max(v1)", "max", (COLS["v1"],)),
    ("first_value(v0)", "first_value", (COLS["v0"],)),
    ("last_value(v1)", "last_value", (COLS["v1"],)),
    ("nth_value(v0, 2)", "nth_value", (COLS["v0"], ("lit", 2, "int"))),
    ("nth_value(v1, 3)", "nth_value", (COLS["v1"], ("lit", 3, "int"))),
]
RANKING = [
    ("rank()", "rank", ()),
    ("dense_rank()", "dense_rank", ()),
    ("percent_rank()", "percent_rank", ()),
    ("cume_dist()", "cume_dist", ()),
    ("ntile(3)", "ntile", (("lit", 3, "int"),)),
    ("lag(v0)", "lag", (COLS["v0"], ("lit", 1, "int"), ("lit", None, None))),
    ("lead(v1, 2, 9.5)", "lead", (COLS["v1"], ("lit", 2, "int"), ("lit", 9.5, "float"))),
    ("lag(v0, 0)", "lag", (COLS["v0"], ("lit", 0, "int"), ("lit", None, None))),
]
PARTS = [("", ()), ("PARTITION BY p", (COLS["p"],))]


_PEER_INVARIANT = ("sum", "avg", "count", "min", "max", "rank", "dense_rank", "percent_rank", "cume_dist")


def _cases():
    """Every window whose value SQL defines: one that depends on the order of peers (ROWS
    frames, LAG/LEAD, NTILE, FIRST/LAST_VALUE, ROW_NUMBER) only over a total order (… k)."""
    for (psql, part), (osql, order) in itertools.product(PARTS, ORDERS):
        total = osql.endswith(("k", "k DESC"))
        for (fsql, fn, args), (frsql, frame) in itertools.product(FRAMED, FRAMES):
            if frame is not None and frame[0] == "groups" and not order:
                continue
            offsets = [b[1] for b in frame[1:] if len(b) == 2 and b[0] != "unbounded"] if frame else []
            if frame is not None and frame[0] == "range" and offsets:
                if len(order) != 1:  # a RANGE offset is a distance along one key
                    continue
                if order[0][0] != COLS["v1"] and any(isinstance(x, Decimal) for x in offsets):
                    continue  # a bigint key takes an integer offset (Postgres' in_range)
            if not total and (fn not in _PEER_INVARIANT or frame is not None and frame[0] == "rows"):
                continue
            yield f"{fsql} OVER ({psql} {osql} {frsql})", ("window", fn, args, part, order, frame)
        for fsql, fn, args in RANKING + [("row_number()", "row_number", ())]:
            if order and (total or fn in _PEER_INVARIANT):
                yield f"{fsql} OVER ({psql} {osql})", ("window", fn, args, part, order, None)


CASES = list(_cases())


@pytest.fixture(scope="module")
def cells_table(postgres):
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS wcells")
        c.execute("CREATE TABLE wcells (k int, p int, v0 bigint, v1 float8)")
        with c.cursor() as cur:
            cur.executemany("INSERT INTO wcells VALUES (%s, %s, %s, %s)", [k + tuple(v) for k, v in CELLS])
    return postgres


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-12)
    return a == b and isinstance(a, Decimal) == isinstance(b, Decimal)  # numeric stays numeric


@pytest.mark.parametrize("sql, tree", CASES, ids=[c[0] for c in CASES])
def test_window_equals_postgres(cells_table, sql, tree):
    with psycopg.connect(cells_table.dsn, autocommit=True) as c:
        want = dict(c.execute(f"SELECT k, {sql} FROM wcells").fetchall())
    got = window_values(tree, CELLS)
    for (key, _), g in zip(CELLS, got):
        w = want[key[0]]
        assert _same(g, w), (key, g, w)
