"""Plan rules for local tables (rewriter.local) without a server: the one-scan SQL equals
the numpy reference estimators for both estimators, the edge-bucket policy, linear
(CASE) weights, refusals, and layout validation."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from config import parse_config
from mechanisms import SeededSource
from mechanisms.metric_ldp import estimate_numpy, report_columns
from proxy.ingest.ldp_load import Encoder, ensure_duckdb, write_duckdb
from proxy.ingest.ldp_specs import group_spec
from proxy.pipeline.local import local_answer, local_guarantees
from proxy.pipeline.local_bind import bind, scan, weights_of
from rewriter import parse
from rewriter.errors import Refusal
from rewriter.local import layout, plan_local


def cfg_with(local_over=None, estimator="known_n"):
    local = {
        "estimator": estimator,
        "joint": [["x", "y"]],
        "columns": {
            "x": {"lo": 0, "hi": 20, "buckets": 20, "epsilon": 1.0},
            "y": {"lo": 0, "hi": 10, "buckets": 5, "epsilon": 1.0},
            "z": {"lo": 0, "hi": 100, "buckets": 10, "epsilon": 1.0},
        },
    }
    local.update(local_over or {})
    return parse_config(
        {
            "server": {"auth": "trust"},
            "tiers": {"t": {"epsilon": 1, "budget": 1}},
            "roles": {"a": {"tier": "t"}},
            "tables": {
                "tl": {
                    "mode": "local",
                    "columns": {
                        "x": {"type": "int"},
                        "y": {"type": "float"},
                        "z": {"type": "int"},
                        "g": {"type": "int", "domain": [1, 2, 3]},
                        "w": {"type": "float"},
                    },
                    "local": local,
                }
            },
        }
    )


def plan(cfg, sql, params=None):
    return plan_local(parse(sql), cfg, params or [])


def weights(cfg, sql, col="x"):
    p = plan(cfg, sql)
    return weights_of(p.private[col], p.layout)


def test_edge_policy_int_and_float():
    cfg = cfg_with()
    assert np.array_equal(
        weights(cfg, "SELECT COUNT(*) FROM tl WHERE x BETWEEN 3 AND 5"), [0, 0, 0, 1, 1, 1] + [0] * 14
    )
    assert np.array_equal(
        weights(cfg, "SELECT COUNT(*) FROM tl WHERE x > 17 OR x < 1"), [1] + [0] * 17 + [1, 1]
    )
    # y: 5 buckets of width 2; y <= 5 covers buckets 1, 2 and half of 3
    assert np.allclose(weights(cfg, "SELECT COUNT(*) FROM tl WHERE y <= 5", "y"), [1, 1, 0.5, 0, 0])
    assert np.allclose(weights(cfg, "SELECT COUNT(*) FROM tl WHERE NOT (y < 4)", "y"), [0, 0, 1, 1, 1])
    # z: int column, buckets of 10 integers; z < 15 covers bucket 1 and 5 of bucket 2's integers
    assert np.allclose(weights(cfg, "SELECT COUNT(*) FROM tl WHERE z < 15", "z"), [1, 0.5] + [0] * 8)
    assert np.array_equal(
        weights(cfg, "SELECT COUNT(*) FROM tl WHERE x IN (2, 4) AND x <> 4"), [0, 0, 1] + [0] * 17
    )
    # parameters bind like literals
    p = plan(cfg, "SELECT COUNT(*) FROM tl WHERE x BETWEEN $1 AND $2", [3, 5])
    assert np.array_equal(weights_of(p.private["x"], p.layout), [0, 0, 0, 1, 1, 1] + [0] * 14)


def test_linear_weights_case_and_value():
    cfg = cfg_with()
    p = plan(cfg, "SELECT SUM(CASE WHEN x < 5 THEN 2 ELSE x / 2 END) FROM tl WHERE x >= 3")
    w = bind(p)[0].query.weights[0]
    expect = np.array([(2 if v < 5 else v / 2) * (v >= 3) for v in range(20)], float)
    assert np.allclose(w, expect)
    p = plan(cfg, "SELECT AVG(y) FROM tl")
    assert np.allclose(bind(p)[0].query.weights[1], [1, 3, 5, 7, 9])  # bucket midpoints


@pytest.mark.parametrize("estimator", ["paper", "known_n"])
def test_sql_equals_reference(estimator):
    cfg = cfg_with(estimator=estimator)
    lay = layout("tl", cfg.tables["tl"])
    rng = np.random.default_rng(3)
    n = 4000
    raw = {
        "x": rng.integers(0, 20, n),
        "y": rng.uniform(0, 10, n),
        "z": rng.integers(0, 100, n),
        "g": rng.integers(1, 4, n),
        "w": rng.uniform(0, 3, n),
    }
    con = duckdb.connect()
    ensure_duckdb(con, lay)
    data = Encoder(lay, SeededSource(4)).encode(raw, n)
    write_duckdb(con, lay, data)
    rep = np.stack([data[c].astype(int) for c, t in lay.report_schema() if c.startswith("g0_")], axis=1)
    for sql, row_w in [
        ("SELECT COUNT(*) FROM tl WHERE x BETWEEN 3 AND 12 AND y < 6", None),
        ("SELECT SUM(w) FROM tl WHERE x >= 10", raw["w"]),
        ("SELECT SUM(x) FROM tl WHERE y > 2", None),
    ]:
        p = plan(cfg, sql)
        (val,), _ = local_answer(p, con.execute(scan(p, "duckdb")[0]).fetchall())
        ref = estimate_numpy(rep, group_spec(lay.groups[0]), bind(p)[0].query, estimator, row_w)
        assert val[0] == pytest.approx(ref, rel=1e-9) if isinstance(val[0], float) else val[0] == round(ref)
    p = plan(
        cfg,
        "SELECT g, COUNT(*), percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM tl "
        "GROUP BY g ORDER BY g DESC LIMIT 2",
    )
    rows, notice = local_answer(p, con.execute(scan(p, "duckdb")[0]).fetchall())
    assert [r[0] for r in rows] == [3, 2] and all(0 <= r[2] <= 19 for r in rows)
    assert "rank error" in notice and "max over rows" in notice


@pytest.mark.parametrize(
    "sql, state",
    [
        ("SELECT COUNT(*) FROM tl WHERE x < 3 AND z > 50", "0A000"),  # different groups
        ("SELECT SUM(z) FROM tl WHERE x < 3", "0A000"),
        ("SELECT COUNT(*) FROM tl WHERE y = 2", "0A000"),  # equality on a float
        ("SELECT COUNT(*) FROM tl WHERE x < y", "0A000"),
        ("SELECT x, COUNT(*) FROM tl GROUP BY x", "0A000"),
        ("SELECT MIN(x) FROM tl", "0A000"),
        ("SELECT COUNT(*) FROM tl WHERE x IS NULL", "0A000"),
        ("SELECT percentile_disc(1.5) WITHIN GROUP (ORDER BY x) FROM tl", "22003"),
        ("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY g) FROM tl", "0A000"),
        ("SELECT x FROM tl", "42501"),
        ("SELECT COUNT(*) FROM tl WHERE x < 'a'", "42804"),
        ("SELECT COUNT(*) FROM tl WHERE nope < 3", "42703"),
        ("SELECT COUNT(*) FROM tl GROUP BY w", "42501"),
    ],
)
def test_refusals(sql, state):
    with pytest.raises(Refusal) as e:
        plan(cfg_with(), sql)
    assert e.value.sqlstate == state
    assert e.value.hint is None or "Allowed" in e.value.hint


def test_public_only_is_exact_and_public_predicates_pass_through():
    cfg = cfg_with()
    p = plan(cfg, "SELECT COUNT(*), SUM(w) FROM tl WHERE g IN (1, 2) AND w > 0.5")
    assert all(a.kind == "exact" for a in p.aggs)
    sql, _ = scan(p, "postgres")
    assert '"g" IN (1, 2)' in sql and '"w" > 0.5' in sql and "tl_reports" in sql


@pytest.mark.parametrize(
    "over, msg",
    [
        ({"joint": [["x", "y"], ["y", "z"]]}, "two groups"),
        ({"joint": [["x", "g"]]}, "not a private column"),
        ({"weight": "y"}, "private weight"),
    ],
)
def test_layout_validation(over, msg):
    cfg = cfg_with(over)
    with pytest.raises(ValueError, match=msg):
        layout("tl", cfg.tables["tl"])


def test_describe_guarantee_line():
    from proxy.pipeline.local import describe_guarantee

    cfg = cfg_with()
    line = describe_guarantee("tl", cfg.tables["tl"])
    assert "E(x,x') = 1·|Δbucket(x)| + 1·|Δbucket(y)| + 1·|Δbucket(z)|" in line
    assert "tl_reports" in line and "(x, y); (z)" in line


@pytest.mark.parametrize(
    "vals,typ,dom",
    [
        (np.array([3, 7, -2]), "int", None),
        (np.array([3.0, 7.0, -2.0]), "int", None),
        (np.array([1, 2]), "float", None),
        (np.array([0.5, 2.25]), "float", None),
        (np.array([1, 2, 1]), "int", [1, 2]),
        (np.array([1.0, 2.0]), "int", [1, 2, 3]),
    ],
)
def test_numeric_columns_convert_at_once_like_value_by_value(vals, typ, dom):
    from proxy.ingest.ldp_load import _public_numeric
    from proxy.ingest.values import public_value

    fast = _public_numeric(vals, typ, dom)
    slow = [public_value(v.item(), typ, "c", dom) for v in vals]
    assert fast == slow and [type(v) for v in fast] == [type(v) for v in slow]


@pytest.mark.parametrize(
    "vals,typ,dom",
    [
        (np.array([1.5]), "int", None),
        (np.array([np.nan]), "float", None),
        (np.array([np.inf]), "int", None),
        (np.array([1e30]), "int", None),
        (np.array([4]), "int", [1, 2]),
        (np.array(["1"], dtype=object), "int", None),
        ([1, 2], "int", None),
        (np.array([True]), "bool", None),
    ],
)
def test_numeric_columns_fall_back_to_the_checked_path(vals, typ, dom):
    """Anything the value-by-value path might refuse or convert differently goes there
    (so its error names the value): a fraction for an int, NaN/inf, a huge float,
    a value outside the domain, non-numeric arrays, plain lists."""
    from proxy.ingest.ldp_load import _public_numeric

    assert _public_numeric(vals, typ, dom) is None


def test_rewriter_report_columns_are_the_mechanisms():
    """The rewriter's plain layout names the report columns exactly as
    mechanisms.metric_ldp.report_columns does for the GroupSpec the proxy builds."""
    lay = layout("tl", cfg_with().tables["tl"])
    for g in lay.groups:
        assert report_columns(group_spec(g)) == g.report_columns()
        assert [c for cols in g.dim_columns() for c in cols] == [c for c, _ in g.report_columns()]


def test_invalid_dimension_is_a_layout_error_at_start():
    """A dimension the mechanism refuses (ε too small for the 32-bit flip threshold, spec 1.5)
    is refused when the service starts (local_guarantees), naming the table."""
    cfg = cfg_with(
        {
            "columns": {
                "x": {"lo": 0, "hi": 20, "buckets": 20, "epsilon": 1e-12},
                "y": {"lo": 0, "hi": 10, "buckets": 5, "epsilon": 1.0},
                "z": {"lo": 0, "hi": 100, "buckets": 10, "epsilon": 1.0},
            }
        }
    )
    with pytest.raises(ValueError, match=r"tables\.tl\.local: epsilon 1e-12 too small"):
        local_guarantees(cfg)
