"""Per-record policies other than the demo's: validation at load (validate_policy), a
custom SQL expression E (framework sum, count, max; the extension is refused for it),
sum_method, and the exact tier-ε scaling of the mechanisms (E_q = w × E)."""

from __future__ import annotations

import copy
from fractions import Fraction

import numpy as np
import psycopg
import pytest

from config import parse_config
from mechanisms import SeededSource
from mechanisms.per_record import (
    ExtensionSum,
    FrameworkMax,
    FrameworkSum,
    Levels,
    PrDPCount,
    inverse_function,
)
from proxy.demo import accounts as demo_accounts
from proxy.pipeline.per_record import validate_policy
from proxy.pipeline.per_record_policy import validate_config

ACCOUNTS = {
    "balance": {"type": "int", "lower": 0, "upper": 1_000_000_000},
    "branch": {"type": "int", "domain_range": [1, 5]},
    "kind": {"type": "text", "domain": ["checking", "savings"]},
    "rate": {"type": "float", "lower": 0, "upper": 1},
}


def _table(privacy: dict, columns=ACCOUNTS):
    from config.models import Table

    return Table.model_validate({"source": "accounts", "columns": columns, "privacy": privacy})


def _pol(**kw):
    base = {
        "function": "inverse",
        "column": "balance",
        "alpha": 1000.0,
        "eps_min": 1e-6,
        "eps_max": 1.0,
        "value_bound": 1e9,
    }
    base.update(kw)
    return base


@pytest.mark.parametrize(
    "privacy, expect",
    [
        (_pol(), None),
        (_pol(function="sqrt", alpha=8.0, eps_min=2e-4), None),
        (_pol(function="log", alpha=500.0, eps_min=0.002, eps_max=100.0), None),
        (
            _pol(
                function="CASE WHEN kind = 'savings' THEN 0.05 ELSE 0.2 END",
                column=None,
                alpha=None,
                eps_min=0.01,
                eps_max=0.5,
            ),
            None,
        ),
        (_pol(function="least(1.0, greatest(0.001, 2 - rate))", column=None), None),
        (_pol(eps_min=2e-6), "above E(value_bound)"),  # clamp would raise budgets
        (_pol(value_bound=1.5), "whole number"),
        (_pol(column="kind"), "needs a numeric column"),
        (_pol(function="1000.0 / balance", column=None), "division is only allowed"),
        (_pol(function="secret * 2", column=None), "not declared"),
        (_pol(function="random()", column=None), "not allowed"),
        (_pol(function="(SELECT 1)", column=None), "not a query"),
        (_pol(function="max(balance)", column=None), "per row"),
        (_pol(function="kind", column=None), "numeric"),
        (_pol(function="1 +", column=None), "does not parse"),
        (
            _pol(
                function="CASE WHEN kind = 'savings' THEN 0.05 ELSE 0.2 END",
                column=None,
                sum_method="extension",
            ),
            "monotone",
        ),
        (_pol(eps_min=1e-60, eps_max=1e60, alpha=1e60), "doublings"),
    ],
)
def test_validate_policy(privacy, expect):
    problems = validate_policy("t", _table(privacy))
    if expect is None:
        assert problems == []
    else:
        assert problems and expect in " ".join(problems), problems
        assert problems[0].startswith("tables.t.privacy")


def test_demo_config_is_valid():
    from support.service import make_config

    assert validate_config(parse_config(make_config())) == []


@pytest.mark.parametrize("w", [1.0, 0.5, 0.1, 2.0])
def test_weight_scales_every_budget_exactly(w):
    """E_q = w × E: levels assigned by E, every level's loss exactly w × (its loss at w = 1)."""
    pf = inverse_function(1000.0, 10**9, 1.0, eps_min=1e-6)
    lv = Levels.for_function(pf)
    e = pf(np.array([0, 1000, 5000, 123456, 10**7, 10**9]))
    for make in (
        lambda x: PrDPCount(lv, 0.1, weight=x),
        lambda x: FrameworkSum(lv, pf.U, 0.1, weight=x),
        lambda x: FrameworkMax(lv, pf.U, 0.1, weight=x),
    ):
        one, m = make(1.0), make(w)
        assert m.weight == Fraction(w)
        np.testing.assert_allclose(m.record_epsilon(e), w * one.record_epsilon(e), rtol=1e-15)
        assert np.all(m.record_epsilon(e) <= w * e * (1 + 1e-15))
    ext1, ext = ExtensionSum(pf, 0.1, weight=1.0), ExtensionSum(pf, 0.1, weight=w)
    v = np.array([0, 999, 1000, 5000, 123456, 10**7, 10**9])
    np.testing.assert_allclose(ext.record_epsilon(v), w * ext1.record_epsilon(v), rtol=1e-15)
    rel = PrDPCount(lv, 0.1, weight=w).release([0] * (lv.L - 1) + [500], SeededSource(1))
    assert rel.eps_tau == w * lv.lo[rel.ell - 1]
    with pytest.raises(ValueError):
        PrDPCount(lv, 0.1, weight=0)


# -- a custom-expression table through the wire (DuckDB) ---------------------------


@pytest.fixture(scope="module")
def custom(tmp_path_factory):
    from support.service import Service, make_config

    data = make_config({"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "d.duckdb")})
    cols = copy.deepcopy(data["tables"]["accounts"]["columns"])
    data["tables"]["accounts_pdp"] = {  # a PDP-like per-kind budget (spec 1.7) as a SQL expression
        "source": "accounts",
        "columns": cols,
        "privacy": {
            "function": "CASE WHEN kind = 'savings' THEN 0.05 ELSE 0.2 END",
            "eps_min": 0.01,
            "eps_max": 0.5,
            "value_bound": 1e9,
        },
    }
    ext_cols = copy.deepcopy(cols)
    ext_cols["branch"].update(lower=1, upper=5)
    data["tables"]["accounts_ext"] = {  # the inverse shortcut, the extension forced
        "source": "accounts",
        "columns": ext_cols,
        "privacy": {
            "function": "inverse",
            "column": "balance",
            "alpha": 1000.0,
            "eps_min": 1e-6,
            "eps_max": 1.0,
            "value_bound": 1e9,
            "sum_method": "extension",
        },
    }
    svc = Service(data, tmp_path_factory.mktemp("state"), people_rows=1000, source=SeededSource(3)).start()
    demo_accounts.load_duckdb(svc.gw.backend)
    yield svc
    svc.close()


def _run(svc, sql, role="analyst"):
    notes = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        rows = c.execute(sql).fetchall()
    return rows, notes


def test_custom_expression_count_and_framework_sum(custom):
    bal, branch, kind = demo_accounts.accounts_numpy()
    ((n,),) = _run(custom, "SELECT COUNT(*) FROM accounts_pdp WHERE branch = 1")[0]
    assert abs(n - int((branch == 1).sum())) <= 0.02 * (branch == 1).sum()
    rows, notes = _run(custom, "SELECT kind, SUM(balance) FROM accounts_pdp GROUP BY kind")
    assert (
        "prdp_sum_framework" in notes[0]
        and "min(value, τ)" in notes[0]
        and "no value is above 2τ" in notes[0]
    )
    assert "CASE WHEN kind = 'savings' THEN 0.05 ELSE 0.2 END" in notes[0]
    for k, s in rows:
        true = int(bal[kind == k].sum())
        assert abs(s - true) <= 0.25 * true, (k, s, true)  # clipped at τ, but sensible
    rows, notes = _run(custom, "SELECT MAX(balance) FROM accounts_pdp WHERE kind = 'checking'")
    assert "prdp_max_framework" in notes[0]
    assert int((bal[kind == "checking"] > rows[0][0]).sum()) <= 0.25 * (kind == "checking").sum()


def test_forced_extension_is_refused_where_unsound(custom):
    rows, notes = _run(custom, "SELECT SUM(balance) FROM accounts_ext")
    assert "prdp_sum_extension" in notes[0]
    before = custom.gw.ledger.spent("analyst", "day")
    with pytest.raises(psycopg.Error) as e:
        _run(custom, "SELECT SUM(branch) FROM accounts_ext")
    assert e.value.sqlstate == "0A000" and "sum extension" in str(e.value)
    assert custom.gw.ledger.spent("analyst", "day") == before


# -- float columns: NaN / ±inf / huge values never reach a level or a sum ------------

FLOATY = {"x": {"type": "float", "lower": 0, "upper": 1e6}, "g": {"type": "int", "domain": [1, 2]}}
FLOAT_ROWS = [
    (1.4, 1),
    (2.6, 1),
    (999.0, 2),
    (4e5, 2),
    (7e5, 1),
    (3e6, 2),
    (-3.0, 1),
    (None, 2),
    ("NaN", 1),
    ("Infinity", 2),
    ("-Infinity", 1),
    (1e300, 2),
]


def _floaty_cfg():
    from support.service import make_config

    data = make_config()
    data["tables"] = {
        "floaty": {
            "columns": FLOATY,
            "privacy": {
                "function": "inverse",
                "column": "x",
                "alpha": 10.0,
                "eps_min": 1e-5,
                "eps_max": 1.0,
                "value_bound": 1e6,
            },
        }
    }
    data["roles"]["producer"]["insert"] = []  # the demo's grant names trips, not declared here
    return parse_config(data)


def _floaty_expected(func):
    """Python mirror: NaN/±inf/|x| > 2^53 are treated as NULL (ε_min, level 1; skipped by SUM)."""
    from proxy.pipeline.per_record_policy import compile_policy

    pol = compile_policy("floaty", _floaty_cfg().tables["floaty"])
    hist = {}
    for x, g in FLOAT_ROWS:
        v = float(x) if x is not None else None
        ok = v is not None and np.isfinite(v) and abs(v) <= 2.0**53
        if func == "sum" and not ok:
            continue
        q = float(np.round(v)) if ok else np.nan
        lvl = int(pol.levels.level(pol.pf(q)))
        c, s = hist.get((g, lvl), (0, 0))
        hist[(g, lvl)] = (c + 1, s + (int(min(max(q, 0), pol.U)) if func == "sum" else 0))
    return pol, hist


@pytest.mark.parametrize("func", ["count", "sum"])
def test_float_column_guards_on_both_backends(postgres, func):
    import duckdb

    from rewriter import parse
    from rewriter.per_record import build_pr_plan, scan_sql

    cfg = _floaty_cfg()
    pol, want = _floaty_expected(func)
    prp = build_pr_plan(
        parse(f"SELECT g, {'COUNT(*)' if func == 'count' else 'SUM(x)'} FROM floaty GROUP BY g"), cfg
    )
    results = {}
    con = duckdb.connect()
    con.execute("CREATE TABLE floaty (x DOUBLE, g INTEGER)")
    con.executemany("INSERT INTO floaty VALUES (CAST(? AS DOUBLE), ?)", FLOAT_ROWS)
    results["duckdb"] = con.execute(scan_sql(prp, pol.sql, cfg, "duckdb", with_sum=func == "sum")).fetchall()
    with psycopg.connect(postgres.dsn, autocommit=True) as pg:
        pg.execute("DROP TABLE IF EXISTS floaty")
        pg.execute("CREATE TABLE floaty (x DOUBLE PRECISION, g INTEGER)")
        with pg.cursor() as cur:
            cur.executemany(
                "INSERT INTO floaty VALUES (CAST(%s AS DOUBLE PRECISION), %s)",
                [(None if x is None else str(x), g) for x, g in FLOAT_ROWS],
            )
        results["postgres"] = pg.execute(
            scan_sql(prp, pol.sql, cfg, "postgres", with_sum=func == "sum")
        ).fetchall()
    for backend, rows in results.items():
        got = {(int(r[0]), int(r[1])): (int(r[2]), int(r[3]) if func == "sum" else 0) for r in rows}
        assert got == want, backend
