"""Per-record levels on Spark (Chen et al. 2025 spec 11.3 / 12.2): the float-exact SQL of
the privacy functions, the level CASE and the value buckets — written as Postgres text and
transpiled for Spark (``rewriter.emit.from_postgres``, as the per-record scan is) — agree
with Python bit for bit on every boundary: each level bound, its neighbours one ulp either
side (``nextafter``), the values where E crosses a bound (V-1, V, V+1), and NULL.

``log`` is not among them: Spark's LN (Java's) differs from Python's (C's, correctly rounded)
by an ulp on a few of these values (1–3 of ~60 per base), enough to move a record across a
level bound, so ``function = 'log'`` is refused on Spark at config load
(tests/spark/test_spark_config.py)."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.per_record import Levels, ValueBuckets, inverse_function, sqrt_function
from proxy.pipeline.per_record_policy import bucket_edges, level_bounds, privacy_numbers
from rewriter.emit import from_postgres
from rewriter.per_record_sql import bucket_sql, level_sql, privacy_sql
from support.levels import boundary_budgets, boundary_values

FUNCS = {
    "inverse": inverse_function(1e4, 10**12, 100.0),
    "inverse_ex52": inverse_function(1e4, 1_280_000_000, 4.096),
    "sqrt": sqrt_function(8.0, 10**12, 100.0),
    "inverse_scaled": inverse_function(1e4, 10**12, 100.0).scaled(0.3),
}


@pytest.fixture(scope="module")
def spark(spark_connect):
    return spark_connect.session()


def _rows(spark, view: str, data: list, schema: str, select: str) -> list:
    spark.createDataFrame(data, schema).createOrReplaceTempView(view)
    sql = from_postgres(f"SELECT {select} FROM {view} ORDER BY i", "spark")
    return [tuple(r) for r in spark.sql(sql).collect()]


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_levels_and_privacy_function_bitwise(spark, name):
    pf = FUNCS[name]
    lv = Levels.for_function(pf)
    e = boundary_budgets(lv)
    got = _rows(
        spark,
        "eb",
        [(i, float(x)) for i, x in enumerate(e)],
        "i int, e double",
        f"{level_sql('e', level_bounds(lv))} AS lvl",
    )
    np.testing.assert_array_equal([r[0] for r in got], lv.level(e))
    vals = boundary_values(pf)
    rows = _rows(
        spark,
        "bv",
        [(i, v) for i, v in enumerate(vals)] + [(len(vals), None)],
        "i int, v bigint",
        f"i, {privacy_sql(privacy_numbers(pf), 'v')} AS e",
    )
    e_sql = np.array([r[1] for r in rows], dtype=float)
    e_py = pf(np.array(vals + [np.nan], dtype=float))
    np.testing.assert_array_equal(e_sql, e_py)  # bit for bit, NULL -> eps_min
    lv_rows = _rows(
        spark,
        "ev",
        [(i, float(x)) for i, x in enumerate(e_py)],
        "i int, e double",
        f"{level_sql('e', level_bounds(lv))} AS lvl",
    )
    np.testing.assert_array_equal([r[0] for r in lv_rows], lv.level(e_py))


def test_value_buckets(spark):
    vb = ValueBuckets(10**12)
    v = sorted({0, 1, 2, 3, 10**12 - 1, 10**12} | {(1 << j) + d for j in range(41) for d in (-1, 0, 1)})
    got = _rows(
        spark, "vb", list(enumerate(v)), "i int, v bigint", f"{bucket_sql('v', bucket_edges(vb))} AS b"
    )
    np.testing.assert_array_equal([r[0] for r in got], vb.bucket(np.array(v)))
