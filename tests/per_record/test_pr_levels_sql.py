"""SQL (rewriter.per_record_sql, from the plain numbers the proxy passes) and Python
(mechanisms.per_record) agree on E, levels and buckets, boundary values included
(spec 11.3, 12.2), run in DuckDB in-memory; and the one-scan SQL shape returns the numpy
histogram."""

import duckdb
import numpy as np
import pytest

from mechanisms.per_record import (
    LevelHistogram,
    Levels,
    ValueBuckets,
    inverse_function,
    log_function,
    sqrt_function,
)
from proxy.pipeline.per_record_policy import bucket_edges, level_bounds, privacy_numbers
from rewriter.per_record_sql import (
    bucket_sql,
    clamp_sql,
    level_scan_sql,
    level_sql,
    max_values_sql,
    privacy_sql,
)
from support.levels import boundary_budgets, boundary_values

FUNCS = {
    "inverse": inverse_function(1e4, 10**12, 100.0),
    "inverse_ex52": inverse_function(1e4, 1_280_000_000, 4.096),
    "sqrt": sqrt_function(8.0, 10**12, 100.0),
    "log_e": log_function(500.0, 10**12, 100.0),
    "log_2": log_function(500.0, 10**12, 100.0, base=2),
    "log_10": log_function(500.0, 10**12, 100.0, base=10),
    "inverse_scaled": inverse_function(1e4, 10**12, 100.0).scaled(0.3),
}


@pytest.fixture(scope="module")
def con():
    c = duckdb.connect()
    yield c
    c.close()


def test_example_5_2_and_table_levels():
    assert Levels.for_function(FUNCS["inverse_ex52"]).L == 19  # spec 3.4: eps_max/eps_min = 2^19
    assert Levels.for_function(FUNCS["inverse"]).L == 34  # spec 10.3 derived values
    assert Levels.for_function(FUNCS["sqrt"]).L == 24
    assert Levels.for_function(FUNCS["log_e"]).L == 17
    assert Levels.for_function(FUNCS["log_2"]).L == 19
    assert Levels.for_function(FUNCS["log_10"]).L == 13
    assert Levels(0.5, 0.5).L == 1  # constant E: plain Laplace


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_level_sql_matches_python_on_boundary_budgets(con, name):
    lv = Levels.for_function(FUNCS[name])
    e = boundary_budgets(lv)
    sql = f"SELECT {level_sql('e', level_bounds(lv))} FROM (SELECT unnest(?::DOUBLE[]) AS e, generate_subscripts(?::DOUBLE[], 1) AS i) ORDER BY i"
    got = np.array([r[0] for r in con.execute(sql, [e.tolist(), e.tolist()]).fetchall()])
    want = lv.level(e)
    np.testing.assert_array_equal(got, want)
    # the closed first interval and the rounding toward the lower budget
    assert lv.level(lv.eps_min) == 1 and lv.level(lv.hi[0]) == 1
    assert lv.level(np.nextafter(lv.hi[0], np.inf)) == min(2, lv.L)
    assert np.all(lv.lo[want - 1] <= e)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_privacy_function_sql_matches_numpy_bitwise(con, name):
    pf = FUNCS[name]
    lv = Levels.for_function(pf)
    vals = boundary_values(pf)
    con.execute("CREATE OR REPLACE TEMP TABLE bv (i INTEGER, v BIGINT)")
    con.executemany(
        "INSERT INTO bv VALUES (?, ?)", [(i, v) for i, v in enumerate(vals)] + [(len(vals), None)]
    )
    rows = con.execute(
        f"SELECT e, {level_sql('e', level_bounds(lv))} FROM (SELECT i, {privacy_sql(privacy_numbers(pf), 'v')} AS e FROM bv) ORDER BY i"
    ).fetchall()
    e_sql = np.array([r[0] for r in rows])
    e_py = pf(np.array(vals + [np.nan], dtype=float))
    assert e_py[-1] == pf.eps_min  # NULL -> eps_min (spec 11.19)
    np.testing.assert_array_equal(e_sql, e_py)  # bit-for-bit
    np.testing.assert_array_equal([r[1] for r in rows], lv.level(e_py))
    assert np.all((e_py >= pf.eps_min) & (e_py <= pf.eps_max))


def test_value_buckets_sql_matches_python(con):
    vb = ValueBuckets(10**12)
    assert vb.B == 40 and vb.tau[-1] == 10**12
    v = sorted({0, 1, 2, 3, 10**12 - 1, 10**12} | {(1 << j) + d for j in range(41) for d in (-1, 0, 1)})
    got = [
        r[0]
        for r in con.execute(
            f"SELECT {bucket_sql('v', bucket_edges(vb))} FROM (SELECT unnest(?::BIGINT[]) AS v, generate_subscripts(?::BIGINT[], 1) AS i) ORDER BY i",
            [v, v],
        ).fetchall()
    ]
    want = vb.bucket(np.array(v))
    np.testing.assert_array_equal(got, want)
    for x, b in zip(v, want):  # bucket b holds (2^(b-1), 2^b] (b = 0: v <= 1)
        assert (x <= 1) if b == 0 else ((1 << (b - 1)) < x <= (1 << b) or b == vb.B)


def test_one_scan_sql_returns_the_numpy_histogram(con):
    pf = inverse_function(1e4, 10**12, 100.0)
    lv, vb = Levels.for_function(pf), ValueBuckets(pf.U)
    rng = np.random.default_rng(3)
    x = np.concatenate([np.rint(np.abs(rng.normal(5e4, 5e4, 3000))), [0, 1, 10**12, 3 * 10**12, -7]]).astype(
        np.int64
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE t AS SELECT * FROM (SELECT unnest(?::BIGINT[]) AS v)", [x.tolist()]
    )
    con.execute("INSERT INTO t VALUES (NULL)")
    h = LevelHistogram.from_rows(
        con.execute(
            level_scan_sql("t", "v", privacy_numbers(pf), pf.U, level_bounds(lv), bucket_edges(vb))
        ).fetchall(),
        lv.L,
        vb.B,
    )
    lvl, v = lv.level(pf(x)), np.clip(x, 0, pf.U)
    want = np.zeros((lv.L, vb.B + 1), dtype=np.int64)
    np.add.at(want, (lvl - 1, vb.bucket(v)), 1)
    np.testing.assert_array_equal(h.cnt, want)
    assert sum(h.level_sums()) == int(v.sum())
    c_all = LevelHistogram.from_rows(
        con.execute(
            level_scan_sql("t", "v", privacy_numbers(pf), pf.U, level_bounds(lv), keep_nulls=True)
        ).fetchall(),
        lv.L,
    )
    assert c_all.level_counts()[0] == want[0].sum() + 1  # the NULL row counts at eps_min
    rows = con.execute(
        max_values_sql("t", "v", privacy_numbers(pf), pf.U, level_bounds(lv), ell=20)
    ).fetchall()
    assert sum(c for _, c in rows) == int((lvl >= 20).sum())


def test_clamp_sql_for_a_custom_expression(con):
    """A configured E that is not one of the shortcuts is clamped to [eps_min, eps_max];
    NULL -> eps_min (spec 12.1, 11.19)."""
    expr = clamp_sql("100.0 / v", 0.01, 4.0)
    got = [
        r[0]
        for r in con.execute(
            f"SELECT {expr} FROM (SELECT unnest([1, 50, 1000000, NULL]::DOUBLE[]) AS v, unnest([1, 2, 3, 4]) AS i) ORDER BY i"
        ).fetchall()
    ]
    assert got == [4.0, 2.0, 0.01, 0.01]
