"""Spark differential oracle: every statement the rewriter accepts from the
oracle's grammar (``tests/oracle/grammar.py``: WHERE with NOT/AND/OR/IS NULL/BETWEEN/IN/LIKE,
CASE, negation, integer division, COUNT/SUM/AVG and SUM/AVG of arithmetic, GROUP BY over
public domains with empty groups, derived keys) runs as its one scan on Spark and on DuckDB
over the same fixture with NULLs, NaN and ±Infinity (``tests/oracle/fixture.py``, copied to
Parquet), and the completed cells (``rewriter.complete``) are equal: integers exactly, floats
within the summation-order bound |Δ| ≤ (n−1)·u·Σ|xᵢ| (u = 2⁻⁵³, n ≤ 60 rows, |xᵢ| ≤ 3000:
far below the 1e-9 relative / 1e-9 absolute tolerance used).

Fixed seed (derandomized); DPGATE_SPARK_ORACLE_EXAMPLES sets the number of generated
plain statements (default 120; half as many with derived keys, whose scans are larger):
about 60 s on a local[2] server.
"""

from __future__ import annotations

import math
import os
import sys
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings

import rewriter
from config import parse_config
from rewriter.errors import Refusal

sys.path.insert(0, str(Path(__file__).parents[1] / "oracle"))

from fixture import CONFIG, TABLE, create_sql, rows
from grammar import derived_statement, statement

EXAMPLES = int(os.environ.get("DPGATE_SPARK_ORACLE_EXAMPLES", "120"))

#: statements Spark reads differently from Postgres unless the emitter spells them for it
FIXED = [
    "SELECT AVG(-f) FROM fx WHERE b",  # Spark read `fx WHERE (b)` as an alias
    "SELECT COUNT(*) FROM fx WHERE (b)",
    "SELECT g, SUM(i) FROM fx WHERE b GROUP BY g",
    "SELECT COUNT(*) FROM fx WHERE NOT b",
    "SELECT s, COUNT(f), AVG(f) FROM fx WHERE b IS NULL GROUP BY s",
    "SELECT b, COUNT(*) FROM fx WHERE i BETWEEN 0 AND 10 OR f IN (0.5, 2.5) GROUP BY b",
    "SELECT g, VAR_SAMP(f), STDDEV(i) FROM fx GROUP BY g",
    "SELECT VAR_POP(i), AVG(i) FROM fx WHERE NOT (i IS NULL OR b)",
    "SELECT i / 3 * 3 AS k, COUNT(*) FROM fx GROUP BY 1",
    "SELECT COUNT(*), SUM(i + 1) FROM fx WHERE i / 3 = 1",
    "SELECT CASE WHEN f > 0 THEN 'pos' WHEN f < 0 THEN 'neg' END AS k, COUNT(*) FROM fx GROUP BY 1",
    "SELECT width_bucket(f, -1.5, 2.5, 4) AS k, SUM(f) FROM fx GROUP BY 1",
    "SELECT COUNT(*) FROM fx WHERE -i < -3 AND t LIKE 'a%'",
    "SELECT g, s, COUNT(*) FROM fx WHERE s IN ('x', 'X') GROUP BY g, s",
    "SELECT SUM(CAST(i AS DOUBLE PRECISION) * 3), AVG(i - 10) FROM fx WHERE f <> f OR f IS NULL",
    "SELECT COUNT(*) FROM fx WHERE floor(f) > 2 OR ceil(f) < -2",  # Spark's FLOOR is a BIGINT: NaN/Inf overflow
    "SELECT COUNT(*) FROM fx WHERE round(f) > 1",  # round via TRUNC, on ±Infinity and NaN
    "SELECT COUNT(*) FROM fx WHERE NULL OR (b AND NULL)",  # Spark refuses a VOID filter
    "SELECT floor(f) AS k, COUNT(*) FROM fx GROUP BY 1",
]


@pytest.fixture(scope="module")
def engines(spark_connect, tmp_path_factory):
    path = tmp_path_factory.mktemp("fx") / "fx.parquet"
    duck = duckdb.connect()
    duck.execute(create_sql())
    duck.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)", rows())
    duck.execute(f"COPY {TABLE} TO '{path}' (FORMAT parquet)")
    spark = spark_connect.session()
    spark.sql(f"DROP TABLE IF EXISTS {TABLE}")
    spark.sql(f"CREATE TABLE {TABLE} USING parquet LOCATION '{path}'")
    yield duck, spark, parse_config(CONFIG)
    duck.close()


def _value(v):
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def _same(a, b) -> bool:
    a, b = _value(a), _value(b)
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b and type(a) is type(b)


class SparkOracle:
    def __init__(self, duck, spark, config):
        self.duck, self.spark, self.config = duck, spark, config
        self.stats = {"accepted": 0, "refused": 0}

    def check(self, sql: str) -> None:
        try:
            plan = rewriter.build_plan(rewriter.parse(sql), self.config)
        except Refusal:
            self.stats["refused"] += 1
            return
        # a plan whose keys are chosen by partition selection has no public cells: its scan's
        # rows (one per key the data has) are compared in key order instead
        fill = (
            (lambda rows: sorted(rows, key=repr))
            if plan.selected
            else (lambda rows: rewriter.complete(plan, rows))
        )
        want = fill(self.duck.execute(rewriter.to_sql(plan, "duckdb")).fetchall())
        spark_sql = rewriter.to_sql(plan, "spark")
        try:
            got = fill([tuple(r) for r in self.spark.sql(spark_sql).collect()])
        except Exception as e:
            raise AssertionError(f"Spark failed: {sql}\n{spark_sql}\n{str(e).splitlines()[0]}") from None
        self.stats["accepted"] += 1
        assert len(got) == len(want), (sql, got, want)
        for g, w in zip(got, want):
            assert len(g) == len(w) and all(_same(a, b) for a, b in zip(g, w)), (
                f"{sql}\nspark {g} != duckdb {w}\nSpark SQL: {spark_sql}"
            )


@pytest.mark.parametrize("sql", FIXED)
def test_fixed_statements(engines, sql):
    oracle = SparkOracle(*engines)
    oracle.check(sql)
    assert oracle.stats["accepted"] == 1, sql  # every fixed statement is accepted


@pytest.mark.parametrize(
    "grammar, n", [(statement, EXAMPLES), (derived_statement, EXAMPLES // 2)], ids=["plain", "derived_keys"]
)
def test_generated_statements(engines, grammar, n):
    oracle = SparkOracle(*engines)

    @settings(
        max_examples=n,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(grammar())
    def run(case):
        oracle.check(case[0])

    run()
    print(f"\nspark oracle {grammar.__name__}: {oracle.stats}")
    assert oracle.stats["accepted"] >= n // 3, oracle.stats
