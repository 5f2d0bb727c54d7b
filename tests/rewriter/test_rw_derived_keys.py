"""Derived group keys with public domains and dates: the domains follow from
the config alone, the emitted SQL is one scan that answers every cell, and it returns the
same rows on DuckDB and Postgres as a reference computed in Python from the same rows."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

import pytest
from rw_data import CONFIG, ROWS

import rewriter
from config import parse_config
from rewriter import dates
from rewriter.errors import Refusal

COLS = ["age", "sex", "educ", "race", "income", "married", "name", "state", "big", "flag", "hours", "score"]
D = dt.date
TS = dt.datetime

TIME_CONFIG = {
    **CONFIG,
    "tables": {
        "ev": {
            "columns": {
                "ts": {"type": "timestamp", "lower": "2025-01-01", "upper": "2025-12-31 23:59:59"},
                "d": {"type": "date", "lower": "2025-01-01", "upper": "2025-06-30", "nullable": False},
                "amount": {"type": "float", "lower": 0, "upper": 100},
            }
        }
    },
}
EV_ROWS = [(TS(2025, m, 3 + m, m), D(2025, m % 6 + 1, 2 * m), float(m)) for m in range(1, 13)] + [
    (None, D(2025, 1, 1), 1.0),
    (TS(2024, 12, 31, 23), D(2025, 6, 30), 5.0),  # below the bounds
    (TS(2026, 1, 1), D(2025, 3, 3), 7.0),
]


@pytest.fixture(scope="module")
def tconfig():
    return parse_config(TIME_CONFIG)


def plan(sql, cfg):
    return rewriter.build_plan(rewriter.parse(sql), cfg)


def ref(key, rows=ROWS, cols=COLS, where=lambda r: True):
    """COUNT(*) per derived key value over the rows (Python reference)."""
    out = {}
    for row in rows:
        r = dict(zip(cols, row))
        if where(r):
            k = key(r)
            out[k] = out.get(k, 0) + 1
    return out


def run(con, sql):
    return [tuple(r) for r in con.execute(sql).fetchall()]


def _bin(r, w):
    return None if r["age"] is None else math.floor(r["age"] / w) * w


KEY_CASES = [
    (
        "SELECT floor(age / 10) * 10 AS b, COUNT(*) FROM pums GROUP BY 1",
        lambda r: None if r["age"] is None else float(math.trunc(r["age"] / 10) * 10),
    ),
    (
        "SELECT age / 10 * 10 AS b, COUNT(*) FROM pums GROUP BY age / 10 * 10",
        lambda r: None if r["age"] is None else math.trunc(r["age"] / 10) * 10,
    ),
    (
        "SELECT age - age % 25 AS b, COUNT(*) FROM pums GROUP BY b",
        lambda r: None if r["age"] is None else r["age"] - int(math.fmod(r["age"], 25)),
    ),
    (
        "SELECT floor((hours - 10) / 5) * 5 + 10 AS b, COUNT(*) FROM pums GROUP BY b",
        lambda r: (
            None
            if r["hours"] is None
            else "out"
            if not math.isfinite(r["hours"])
            else math.floor((r["hours"] - 10) / 5) * 5 + 10.0
        ),
    ),
    (
        "SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' END AS g, COUNT(*) "
        "FROM pums GROUP BY g",
        lambda r: None if r["age"] is None or r["age"] >= 60 else ("young" if r["age"] < 30 else "middle"),
    ),
    (
        "SELECT CASE state WHEN 'ca' THEN 1 WHEN 'ny' THEN 2 ELSE 0 END, COUNT(*) FROM pums GROUP BY 1",
        lambda r: {"ca": 1, "ny": 2}.get(r["state"], 0),
    ),
    (
        "SELECT age > 50 AS old, COUNT(*) FROM pums GROUP BY old",
        lambda r: None if r["age"] is None else r["age"] > 50,
    ),
    (
        "SELECT width_bucket(income, 0, 500000, 4) AS b, COUNT(*) FROM pums GROUP BY b",
        lambda r: (
            None
            if r["income"] is None
            else 0
            if r["income"] < 0
            else 5
            if r["income"] >= 500000
            else math.floor(r["income"] / 500000 * 4) + 1
        ),
    ),
    (
        "SELECT width_bucket(hours, 10, 60, 5) AS b, COUNT(*) FROM pums GROUP BY b",  # NaN, ±inf: total
        lambda r: (
            None
            if r["hours"] is None
            else 6
            if math.isnan(r["hours"]) or r["hours"] >= 60
            else 0
            if r["hours"] < 10
            else math.floor((r["hours"] - 10) / 50 * 5) + 1
        ),
    ),
]


@pytest.mark.parametrize("sql,key", KEY_CASES, ids=[c[0][:50] for c in KEY_CASES])
def test_derived_key_sql_equals_reference(config, duck, pg, sql, key):
    p = plan(sql, config)
    (g,) = p.group_by
    assert g.expr is not None
    want = ref(key)
    got_duck = rewriter.complete(p, run(duck, rewriter.to_sql(p, "duckdb")))
    got_pg = rewriter.complete(p, run(pg, rewriter.to_sql(p, "postgres")))
    assert [r[0] for r in got_duck] == [c[0] for c in p.cells]  # every cell, in order
    assert got_duck == got_pg
    for k, n in got_duck:
        assert n == want.get(k, 0), (k, n, want)
    in_domain = sum(n for k, n in want.items() if k in set(g.domain))
    assert sum(n for _, n in got_duck) == in_domain  # out-of-domain rows: no cell


def test_bin_domains_come_from_the_bounds(config):
    g = plan("SELECT floor(age / 10) * 10, COUNT(*) FROM pums GROUP BY 1", config).group_by[0]
    assert g.type == "float" and g.domain == tuple(float(v) for v in range(0, 101, 10)) + (None,)
    g = plan("SELECT age / 10 * 10, COUNT(*) FROM pums GROUP BY 1", config).group_by[0]
    assert g.type == "int" and g.domain == tuple(range(0, 101, 10)) + (None,)
    g = plan("SELECT floor(hours / 2.5) * 2.5, COUNT(*) FROM pums GROUP BY 1", config).group_by[0]
    assert g.domain == tuple(2.5 * k for k in range(4, 25)) + (None,)  # hours in [10, 60]
    g = plan("SELECT width_bucket(age, 0, 100, 10), COUNT(*) FROM pums GROUP BY 1", config).group_by[0]
    assert g.domain == tuple(range(12)) + (None,)


def test_case_and_boolean_domains(config):
    g = plan(
        "SELECT CASE WHEN age < 30 THEN 'a' ELSE 'b' END, COUNT(*) FROM pums GROUP BY 1", config
    ).group_by[0]
    assert g.type == "text" and set(g.domain) == {"a", "b"}  # ELSE: no NULL
    g = plan("SELECT CASE WHEN age < 30 THEN 'a' END, COUNT(*) FROM pums GROUP BY 1", config).group_by[0]
    assert set(g.domain) == {"a", None}
    g = plan("SELECT COUNT(*) FROM pums GROUP BY age IS NULL", config).group_by[0]
    assert g.domain == (False, True)  # never NULL


def test_one_scan_and_the_key_in_select_and_group_by(config):
    p = plan(
        "SELECT CASE WHEN age < 30 THEN 'a' ELSE 'b' END AS g, COUNT(*), SUM(age) FROM pums "
        "GROUP BY CASE WHEN age < 30 THEN 'a' ELSE 'b' END ORDER BY g",
        config,
    )
    assert len(p.group_by) == 1 and p.outputs[0].source == "group"
    sql = rewriter.to_sql(p, "postgres")
    assert sql.count('FROM "pums"') == 1


REFUSED = [
    ("SELECT hours * 2, COUNT(*) FROM pums GROUP BY 1", "floor((x - a) / w) * w"),
    ("SELECT income * 2, COUNT(*) FROM pums GROUP BY 1", "width_bucket(x, lo, hi, n)"),
    ("SELECT COUNT(*) FROM pums GROUP BY floor(hours) + floor(income)", "exactly one column"),
    ("SELECT CASE WHEN age < 30 THEN name END, COUNT(*) FROM pums GROUP BY 1", "THEN 'label'"),
    ("SELECT COUNT(*) FROM pums GROUP BY sex + 1", "declare lower and upper"),
    ("SELECT COUNT(*) FROM pums GROUP BY lower(name)", "CASE WHEN"),
    ("SELECT floor(age / 10) * 10 FROM pums", "not in GROUP BY"),
]


@pytest.mark.parametrize("sql,hint", REFUSED, ids=[c[0][:50] for c in REFUSED])
def test_refusals_say_what_to_write(config, sql, hint):
    with pytest.raises(Refusal) as e:
        plan(sql, config)
    assert hint in str(e.value) and "raw row" not in str(e.value)


def test_distinct_and_group_by_without_aggregates_are_the_domain(config):
    for sql in (
        "SELECT DISTINCT state FROM pums",
        "SELECT state FROM pums GROUP BY state",
        "SELECT DISTINCT age / 10 * 10 FROM pums",
    ):
        p = plan(sql, config)
        assert not p.aggregates and not p.measures and len(p.group_by) == 1


# ------------------------------------------------------------------------- dates


@pytest.fixture(scope="module")
def ev_duck(duck):
    duck.execute("CREATE TABLE ev (ts timestamp, d date, amount double)")
    duck.executemany("INSERT INTO ev VALUES (?, ?, ?)", EV_ROWS)
    yield duck
    duck.execute("DROP TABLE ev")


@pytest.fixture(scope="module")
def ev_pg(pg):
    pg.execute("CREATE TABLE ev (ts timestamp, d date, amount double precision)")
    with pg.cursor() as cur:
        cur.executemany("INSERT INTO ev VALUES (%s, %s, %s)", EV_ROWS)
    yield pg
    pg.execute("DROP TABLE ev")


EV_COLS = ["ts", "d", "amount"]
DATE_CASES = [
    (
        "SELECT date_trunc('month', ts) AS m, COUNT(*) FROM ev GROUP BY 1",
        lambda r: r["ts"] and dates.trunc(r["ts"], "month"),
    ),
    (
        "SELECT CAST(date_trunc('week', d) AS date), COUNT(*) FROM ev GROUP BY 1",
        lambda r: dates.trunc(r["d"], "week"),
    ),
    (
        "SELECT date_trunc('quarter', d), COUNT(*) FROM ev GROUP BY 1",
        lambda r: dates.trunc(r["d"], "quarter"),
    ),
    ("SELECT extract(month from ts), COUNT(*) FROM ev GROUP BY 1", lambda r: r["ts"] and r["ts"].month),
    ("SELECT extract(dow from d), COUNT(*) FROM ev GROUP BY 1", lambda r: (r["d"].weekday() + 1) % 7),
    ("SELECT extract(hour from ts), COUNT(*) FROM ev GROUP BY 1", lambda r: r["ts"] and r["ts"].hour),
    ("SELECT extract(year from ts), COUNT(*) FROM ev GROUP BY 1", lambda r: r["ts"] and r["ts"].year),
    ("SELECT CAST(ts AS date) AS day, COUNT(*) FROM ev GROUP BY day", lambda r: r["ts"] and r["ts"].date()),
    (
        "SELECT CAST(date_trunc('MONTH', CAST(ev.ts AS TIMESTAMP)) AS TIMESTAMP), COUNT(*) FROM ev "
        "GROUP BY 1",
        lambda r: r["ts"] and dates.trunc(r["ts"], "month"),
    ),  # Tableau
    (
        "SELECT date_part('dow', ts), COUNT(*) FROM ev GROUP BY 1",
        lambda r: r["ts"] and (r["ts"].weekday() + 1) % 7,
    ),  # Power BI
]


@pytest.mark.parametrize("sql,key", DATE_CASES, ids=[c[0][:50] for c in DATE_CASES])
def test_date_keys_equal_reference_on_both_backends(tconfig, ev_duck, ev_pg, sql, key):
    p = plan(sql, tconfig)
    want = ref(key, EV_ROWS, EV_COLS)
    got_duck = rewriter.complete(p, run(ev_duck, rewriter.to_sql(p, "duckdb")))
    got_pg = rewriter.complete(p, run(ev_pg, rewriter.to_sql(p, "postgres")))
    assert got_duck == got_pg
    assert [r[0] for r in got_duck] == [c[0] for c in p.cells]
    for k, n in got_duck:
        assert n == want.get(k, 0), (k, n)


def test_date_domains_from_the_bounds(tconfig):
    g = plan("SELECT date_trunc('month', ts), COUNT(*) FROM ev GROUP BY 1", tconfig).group_by[0]
    assert g.type == "timestamp" and g.domain == tuple(TS(2025, m, 1) for m in range(1, 13)) + (None,)
    g = plan("SELECT date_trunc('month', d), COUNT(*) FROM ev GROUP BY 1", tconfig).group_by[0]
    assert g.type == "date" and g.domain == tuple(D(2025, m, 1) for m in range(1, 7))
    g = plan("SELECT date_trunc('week', d), COUNT(*) FROM ev GROUP BY 1", tconfig).group_by[0]
    assert g.domain[0] == D(2024, 12, 30) and g.domain[-1] == D(2025, 6, 30)  # Mondays
    g = plan("SELECT extract(quarter from d), COUNT(*) FROM ev GROUP BY 1", tconfig).group_by[0]
    assert g.domain == (1, 2)


FILTERS = [
    (
        "SELECT COUNT(*) FROM ev WHERE ts >= '2025-03-01' AND ts < DATE '2025-07-01'",
        lambda r: r["ts"] is not None and TS(2025, 3, 1) <= r["ts"] < TS(2025, 7, 1),
    ),
    (
        "SELECT COUNT(*) FROM ev WHERE d BETWEEN '2025-02-01' AND '2025-04-30'",
        lambda r: D(2025, 2, 1) <= r["d"] <= D(2025, 4, 30),
    ),
    (
        "SELECT COUNT(*) FROM ev WHERE ts < TIMESTAMP '2025-06-01 12:00:00' - INTERVAL '1 month'",
        lambda r: r["ts"] is not None and r["ts"] < TS(2025, 5, 1, 12),
    ),
    ("SELECT COUNT(*) FROM ev WHERE d > DATE '2025-03-31' + 1", lambda r: r["d"] > D(2025, 4, 1)),
]


@pytest.mark.parametrize("sql,pred", FILTERS, ids=[c[0][:60] for c in FILTERS])
def test_date_filters(tconfig, ev_duck, ev_pg, sql, pred):
    p = plan(sql, tconfig)
    want = sum(ref(lambda r: 0, EV_ROWS, EV_COLS, pred).values())
    assert rewriter.complete(p, run(ev_duck, rewriter.to_sql(p, "duckdb"))) == [(want,)]
    assert rewriter.complete(p, run(ev_pg, rewriter.to_sql(p, "postgres"))) == [(want,)]


PART_FILTERS = [  # (statement, key, row predicate, the key's cells the WHERE keeps)
    (
        "SELECT extract(month from ts), COUNT(*) FROM ev WHERE extract(month from ts) BETWEEN 3 AND 5 GROUP BY 1",
        lambda r: r["ts"] and r["ts"].month,
        lambda r: r["ts"] is not None and 3 <= r["ts"].month <= 5,
        (3, 4, 5),
    ),
    (
        "SELECT extract(month from ts), COUNT(*) FROM ev WHERE extract(quarter from d) = 1 GROUP BY 1",
        lambda r: r["ts"] and r["ts"].month,
        lambda r: r["d"].month <= 3,
        tuple(range(1, 13)) + (None,),
    ),
    (
        "SELECT COUNT(*) FROM ev WHERE extract(dow from d) = 1",
        lambda r: 0,
        lambda r: r["d"].weekday() == 0,
        None,
    ),
]


@pytest.mark.parametrize("sql,key,pred,cells", PART_FILTERS, ids=[c[0][:70] for c in PART_FILTERS])
def test_date_part_in_where_filters_and_restricts_its_key(tconfig, ev_duck, ev_pg, sql, key, pred, cells):
    """extract(…) in a WHERE is the group key's own checked expression: the rows it keeps,
    and — on the key of the same expression — the cells (rewriter.keyfilter)."""
    p = plan(sql, tconfig)
    want = ref(key, EV_ROWS, EV_COLS, pred)
    got = rewriter.complete(p, run(ev_duck, rewriter.to_sql(p, "duckdb")))
    assert got == rewriter.complete(p, run(ev_pg, rewriter.to_sql(p, "postgres")))
    if cells is None:
        assert got == [(sum(want.values()),)]
    else:
        assert tuple(r[0] for r in got) == cells and all(n == want.get(k, 0) for k, n in got)


def test_now_is_evaluated_by_dpgate(tconfig):
    p = plan("SELECT COUNT(*) FROM ev WHERE ts > now() - INTERVAL '7 days'", tconfig)
    sql = rewriter.to_sql(p, "postgres")
    assert "CURRENT_TIMESTAMP" not in sql.upper() and "NOW(" not in sql.upper()
    assert p.clock  # not cached by its text
    assert set(vars(p)) == {f.name for f in dataclasses.fields(p)}  # a declared field, like the rest
    today = dt.datetime.now(dt.UTC).date()
    p = plan("SELECT COUNT(*) FROM ev WHERE d <= current_date", tconfig)
    assert today.isoformat() in p.where.sql("postgres") or (
        today - dt.timedelta(days=1)
    ).isoformat() in p.where.sql("postgres")  # midnight


def test_month_shift_clamps_like_postgres():
    assert dates.shift(D(2025, 3, 31), -1, "month") == D(2025, 2, 28)
    assert dates.shift(TS(2024, 2, 29, 5), 1, "year") == TS(2025, 2, 28, 5)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM ev WHERE ts + INTERVAL '1 day' > now()",
        "SELECT COUNT(*) FROM ev WHERE d > 'yesterday'",
        "SELECT date_trunc('minute', ts), COUNT(*) FROM ev GROUP BY 1",
        "SELECT extract(hour from d), COUNT(*) FROM ev GROUP BY 1",
        "SELECT COUNT(*) FROM ev GROUP BY ts",
        "SELECT to_char(ts, 'YYYY-MM'), COUNT(*) FROM ev GROUP BY 1",
        "SELECT floor(extract(epoch from ts) / 86400), COUNT(*) FROM ev GROUP BY 1",
    ],
)
def test_date_refusals(tconfig, sql):
    with pytest.raises(Refusal) as e:
        plan(sql, tconfig)
    assert "raw row" not in str(e.value)
    if "GROUP BY ts" in sql:
        assert "date_trunc('month', ts)" in str(e.value)
    if "to_char" in sql or "epoch" in sql:
        assert "date_trunc('day' | 'week' | 'month'" in str(e.value)


def test_config_time_bounds_are_checked():
    bad = {
        **TIME_CONFIG,
        "tables": {
            "ev": {"columns": {"ts": {"type": "timestamp", "lower": "2025-13-01", "upper": "2025-12-31"}}}
        },
    }
    with pytest.raises(Exception):
        parse_config(bad)
    bad["tables"]["ev"]["columns"]["ts"] = {"type": "int", "lower": "2025-01-01", "upper": "2025-12-31"}
    with pytest.raises(Exception):
        parse_config(bad)


def test_per_record_tables_refuse_derived_keys():
    from rewriter.per_record import build_pr_plan

    cfg = parse_config(
        {
            **CONFIG,
            "tables": {
                "acc": {
                    "privacy": {
                        "function": "inverse",
                        "column": "balance",
                        "alpha": 1000.0,
                        "eps_min": 1e-6,
                        "eps_max": 1.0,
                        "value_bound": 1e9,
                    },
                    "columns": {
                        "balance": {"type": "int", "lower": 0, "upper": 1000000000},
                        "branch": {"type": "int", "domain_range": [1, 5]},
                    },
                }
            },
        }
    )
    build_pr_plan(rewriter.parse("SELECT branch, COUNT(*) FROM acc GROUP BY branch"), cfg)
    with pytest.raises(Refusal) as e:
        build_pr_plan(
            rewriter.parse("SELECT CASE WHEN branch < 3 THEN 'a' ELSE 'b' END, COUNT(*) FROM acc GROUP BY 1"),
            cfg,
        )
    assert "central tables" in str(e.value)


def test_wide_integer_columns_and_round_bins():
    cfg = parse_config(
        {
            **CONFIG,
            "tables": {
                "acc": {
                    "columns": {
                        "balance": {"type": "int", "lower": 0, "upper": 1000000000, "nullable": False},
                        "x": {"type": "float", "lower": -2, "upper": 2},
                    }
                }
            },
        }
    )
    g = plan("SELECT balance / 1000000 * 1000000, COUNT(*) FROM acc GROUP BY 1", cfg).group_by[0]
    assert g.type == "int" and g.domain == tuple(range(0, 1000000001, 1000000))
    g = plan(
        "SELECT floor(CAST(balance AS double precision) / 1e8) AS b, COUNT(*) FROM acc GROUP BY b", cfg
    ).group_by[0]
    assert g.domain == tuple(float(k) for k in range(11))
    g = plan("SELECT round(x), COUNT(*) FROM acc GROUP BY 1", cfg).group_by[0]
    assert g.domain == (-2.0, -1.0, 0.0, 1.0, 2.0, None)  # round half to even (float8)
    with pytest.raises(Refusal) as e:
        plan("SELECT balance * 3, COUNT(*) FROM acc GROUP BY 1", cfg)
    assert "too many values" in str(e.value)
