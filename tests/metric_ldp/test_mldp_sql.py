"""The ONE-aggregate SQL estimators (rewriter.local_sql, printed from the affine terms the proxy
computes with mechanisms.metric_ldp) evaluated in DuckDB equal the numpy reference estimators."""

from __future__ import annotations

import numpy as np
import pytest
import sqlglot
from mldp_testutil import duck_table

from mechanisms.metric_ldp import (
    DimSpec,
    GroupSpec,
    Query,
    estimate_numpy,
    linear_query,
    perturb,
    perturb_buckets,
    prefix_estimates_numpy,
    private_weight_sum_query,
    range_query,
    report_columns,
    value_range_query,
    variance_estimate_numpy,
)
from mechanisms.rng import SeededSource
from proxy.pipeline.local_bind import estimate_text, quantile_text, variance_text

N = 3000
SPEC3 = GroupSpec(
    (DimSpec(0, 100, 10, 1.0, "age"), DimSpec(-5, 5, 4, 0.5, "t"), DimSpec(0, 1, 1, 2.0, "flag"))
)


@pytest.fixture(scope="module")
def data3():
    rng = np.random.default_rng(1)
    vals = np.stack([rng.uniform(0, 100, N), rng.normal(0, 3, N), rng.uniform(0, 1, N)], axis=1)
    rep = perturb(vals, SPEC3, SeededSource(2))
    g = rng.integers(0, 3, N)  # a public GROUP BY column
    w = rng.uniform(0, 4, N)  # a public weight column
    return rep, duck_table(rep, SPEC3, {"grp": g, "w": w}), g, w


def _queries(spec):
    rng = np.random.default_rng(9)
    qs = [
        range_query(spec, {}),
        range_query(spec, {0: (1, 4)}),
        range_query(spec, {0: (3, 10)}),
        range_query(spec, {0: (2, 7), 1: (2, 3)}),
        range_query(spec, {0: (5, 5), 1: (1, 4), 2: (1, 1)}),
        range_query(spec, {0: (6, 2)}),  # empty
        value_range_query(spec, {0: (17.5, 62.0), 1: (None, 0.3)}, policy="interpolate"),
        linear_query(spec, {0: rng.normal(size=10), 1: rng.uniform(size=4)}, scale=0.5),
    ]
    return qs


@pytest.mark.parametrize("estimator", ["paper", "known_n"])
def test_sql_equals_numpy(data3, estimator):
    rep, con, _, _ = data3
    for q in _queries(SPEC3):
        sql = estimate_text(SPEC3, q, estimator)
        got = con.execute(f"SELECT {sql} FROM r").fetchone()[0]
        ref = estimate_numpy(rep, SPEC3, q, estimator)
        assert got == pytest.approx(ref, rel=1e-9, abs=1e-7)
        vs = con.execute(f"SELECT {variance_text(SPEC3, q, estimator)} FROM r").fetchone()[0]
        assert vs == pytest.approx(variance_estimate_numpy(rep, SPEC3, q, estimator), rel=1e-9, abs=1e-6)


def test_sql_groupby_and_public_row_weight(data3):
    rep, con, g, w = data3
    q = range_query(SPEC3, {0: (2, 7), 1: (2, 4)})
    sql = estimate_text(SPEC3, q, "known_n", row_weight="w")
    rows = dict(con.execute(f"SELECT grp, {sql} FROM r WHERE grp <> 1 GROUP BY grp").fetchall())
    assert set(rows) == {0, 2}
    for k in (0, 2):
        ref = estimate_numpy(rep[g == k], SPEC3, q, "known_n", row_weights=w[g == k])
        assert rows[k] == pytest.approx(ref, rel=1e-9)
    # an empty group (WHERE false) gives 0, not NULL
    assert con.execute(f"SELECT {sql} FROM r WHERE grp = 99").fetchone()[0] == 0


def test_sql_is_plain_and_parses_in_postgres_dialect():
    q = range_query(SPEC3, {0: (2, 7), 1: (2, 3)})
    for est in ("paper", "known_n"):
        for sql in (estimate_text(SPEC3, q, est), variance_text(SPEC3, q, est)):
            tree = sqlglot.parse_one(f"SELECT {sql} FROM r", read="postgres")
            cols = {c.name for c in tree.find_all(sqlglot.exp.Column)}
            assert cols <= {n for n, _ in report_columns(SPEC3)}
            assert {type(f).__name__ for f in tree.find_all(sqlglot.exp.Func)} <= {"Sum", "Coalesce", "Count"}


def test_quantile_prefixes_in_one_query(data3):
    rep, con, _, _ = data3
    for est in ("paper", "known_n"):
        row = con.execute("SELECT " + ", ".join(quantile_text(SPEC3, 0, est)) + " FROM r").fetchone()
        assert np.allclose(row, prefix_estimates_numpy(rep, SPEC3, 0, est), rtol=1e-9, atol=1e-7)


@pytest.mark.parametrize("mech", ["M3", "M2"])
def test_sql_laplace_mechanisms(mech):
    spec = GroupSpec((DimSpec(0, 8, 8, 1.0),), mechanism=mech, sensitive={1, 2} if mech == "M2" else None)
    x = np.random.default_rng(4).integers(1, 9, 2000)
    rep = perturb_buckets(x, spec, SeededSource(6))
    con = duck_table(rep, spec)
    assert [t for _, t in report_columns(spec)] == ["BIGINT"] * (7 if mech == "M3" else 8)
    for q in (
        range_query(spec, {0: (3, 6)}),
        range_query(spec, {0: (1, 8)}),
        linear_query(spec, {0: np.arange(8.0)}),
    ):
        got = con.execute(f"SELECT {estimate_text(spec, q)} FROM r").fetchone()[0]
        assert got == pytest.approx(estimate_numpy(rep, spec, q), rel=1e-9)


def test_sql_private_weight_dimension():
    spec = GroupSpec((DimSpec(0, 10, 5, 1.0), DimSpec(0, 20.0, 2, 1.0, "amount", kind="weight")))
    rng = np.random.default_rng(8)
    vals = np.stack([rng.uniform(0, 10, 1000), rng.uniform(0, 20, 1000)], axis=1)
    rep = perturb(vals, spec, SeededSource(9))
    q = private_weight_sum_query(spec, range_query(spec, {0: (2, 4)}))
    assert q.scale == 20.0 and np.array_equal(q.weights[1], [0.0, 1.0])
    con = duck_table(rep, spec)
    got = con.execute(f"SELECT {estimate_text(spec, q, 'known_n')} FROM r").fetchone()[0]
    assert got == pytest.approx(estimate_numpy(rep, spec, q, "known_n"), rel=1e-9)
    with pytest.raises(ValueError):
        private_weight_sum_query(spec, Query((None, np.array([1.0, 1.0]))))
