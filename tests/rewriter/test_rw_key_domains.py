"""What public data decides of a group key's domain, at plan time: a date range cuts the
date parts taken of its column (rewriter.keyfilter), a conjunct over several keys keeps the
key tuples it is true of (keyfilter.tuples), and a key read from public lookup tables gets
the public query that gives its values (rewriter.lookup_domains: built here, applied by
:func:`apply` to rows as the backend returns them). The wire tests
(tests/e2e/test_e2e_key_domains.py) and the oracle's hand corpus check the rows against
DuckDB and Postgres; these pin the domains each rule keeps."""

from __future__ import annotations

import datetime as dt

import pytest

import rewriter
from config import parse_config
from rewriter.lookup_domains import apply, to_sql

NAMES = ["BRAZIL", "CHINA", "FRANCE", "GERMANY", "JAPAN"]
CONFIG = {
    "tiers": {"default": {"epsilon": 1, "budget": 10}},
    "roles": {"analyst": {"tier": "default"}},
    "server": {"auth": "trust"},
    "tables": {
        "sales": {
            "columns": {
                "d": {"type": "date", "lower": "1992-01-01", "upper": "1998-12-31"},
                "dn": {"type": "date", "lower": "1992-01-01", "upper": "1998-12-31", "nullable": False},
                "ts": {"type": "timestamp", "lower": "1992-01-01", "upper": "1998-12-31"},
                "g": {"type": "int", "domain": [0, 1, 2]},
                "s": {"type": "text", "domain": ["x", "y"]},
                "supp": {"type": "int"},
                "cust_nation": {"type": "int"},
            }
        },
        "supplier": {
            "public": True,
            "key": "s_suppkey",
            "columns": {"s_suppkey": {"type": "int"}, "s_nationkey": {"type": "int"}},
        },
        "nation": {
            "public": True,
            "key": "n_nationkey",
            "columns": {
                "n_nationkey": {"type": "int"},
                "n_name": {"type": "text", "domain": NAMES},
                "n_regionkey": {"type": "int"},
            },
        },
        "region": {
            "public": True,
            "key": "r_regionkey",
            "columns": {
                "r_regionkey": {"type": "int"},
                "r_name": {"type": "text", "domain": ["ASIA", "EUROPE"]},
            },
        },
    },
}


@pytest.fixture(scope="module")
def cfg():
    return parse_config(CONFIG)


def _plan(sql, cfg):
    return rewriter.build_plan(rewriter.parse(sql), cfg)


@pytest.mark.parametrize(
    "key, where, kept",
    [
        ("extract(year from d)", "d BETWEEN date '1995-01-01' AND date '1996-12-31'", (1995, 1996)),
        ("extract(year from d)", "d > date '1993-12-31' AND d < date '1996-01-01'", (1994, 1995)),
        ("extract(year from d)", "d >= date '1997-06-01'", (1997, 1998)),
        ("extract(year from d)", "d < date '1994-01-01' OR d IS NULL", (1992, 1993, None)),
        ("extract(year from d)", "NOT (d < date '1998-01-01')", (1998,)),
        ("extract(year from d)", "d IN (date '1993-05-05', date '1996-01-01')", (1993, 1996)),
        ("extract(year from d)", "d = date '2005-01-01'", ()),  # outside the bounds: no cell
        ("extract(month from d)", "d BETWEEN date '1995-11-15' AND date '1996-02-01'", (1, 2, 11, 12)),
        ("extract(year from dn)", "dn <> date '1995-01-01'", tuple(range(1992, 1999))),
        ("extract(year from ts)", "ts < timestamp '1994-01-01 00:00:00'", (1992, 1993)),
        ("extract(year from ts)", "ts <= timestamp '1994-01-01 00:00:00'", (1992, 1993, 1994)),
    ],
)
def test_a_date_range_cuts_its_date_parts(cfg, key, where, kept):
    p = _plan(f"SELECT {key} AS k, COUNT(*) FROM sales WHERE {where} GROUP BY 1", cfg)
    assert p.group_by[0].domain == kept
    assert p.key_filter == (p.group_by[0].column,)


def test_a_date_range_cuts_date_trunc(cfg):
    p = _plan(
        "SELECT date_trunc('quarter', d) AS q, COUNT(*) FROM sales "
        "WHERE d >= date '1995-02-10' AND d < date '1995-10-01' GROUP BY 1",
        cfg,
    )
    assert p.group_by[0].domain == (dt.date(1995, 1, 1), dt.date(1995, 4, 1), dt.date(1995, 7, 1))


@pytest.mark.parametrize(
    "where",
    [
        "d + 1 > date '1995-01-01'",  # not a comparison of the column with literals
        "d > date '1995-01-01' OR g = 1",  # reads another column
        "d = ts",
    ],
)
def test_what_is_not_understood_keeps_the_date_domain(cfg, where):
    try:
        p = _plan(f"SELECT extract(year from d) AS y, COUNT(*) FROM sales WHERE {where} GROUP BY 1", cfg)
    except rewriter.Refusal:
        return  # refused by the predicate rules: nothing released either
    assert p.group_by[0].domain == (1992, 1993, 1994, 1995, 1996, 1997, 1998, None)


def test_a_conjunct_over_two_keys_keeps_tuples(cfg):
    p = _plan(
        "SELECT g, s, COUNT(*) FROM sales WHERE (g = 0 AND s = 'x') OR (g = 2 AND s = 'y') GROUP BY g, s",
        cfg,
    )
    assert [g.domain for g in p.group_by] == [(0, 2), ("x", "y")]
    assert p.cells == [(0, "x"), (2, "y")] and p.n_cells == 2


def test_a_conjunct_over_a_derived_key_and_another_keeps_tuples(cfg):
    p = _plan(
        "SELECT extract(year from d) AS y, g, COUNT(*) FROM sales WHERE (extract(year from d) = 1995 "
        "AND g = 0) OR (extract(year from d) = 1996 AND g = 1) GROUP BY 1, 2",
        cfg,
    )
    assert p.cells == [(1995, 0), (1996, 1)]


def test_a_conjunct_over_two_keys_and_another_column_keeps_the_product(cfg):
    p = _plan("SELECT g, s, COUNT(*) FROM sales WHERE (g = 0 AND s = 'x') OR supp = 3 GROUP BY g, s", cfg)
    assert p.n_cells == 6 and not p.key_tuples


Q5 = (
    "SELECT n_name, COUNT(*) FROM sales, supplier, nation, region WHERE supp = s_suppkey "
    "AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey AND r_name = 'ASIA' GROUP BY n_name"
)


def test_a_lookup_key_gets_its_public_query(cfg):
    p = _plan(Q5, cfg)
    (look,) = p.lookups
    assert look.keys == (0,)
    sql = to_sql(look, "postgres")
    for part in ('FROM "supplier"', 'FROM "nation"', 'FROM "region"', "'ASIA'", "DISTINCT"):
        assert part in sql, part
    assert "sales" not in sql  # public tables only
    got = apply(p, [[("CHINA",), ("JAPAN",), ("ATLANTIS",)]])  # a value outside the domain: no cell
    assert got.group_by[0].domain == ("CHINA", "JAPAN") and got.lookups_done
    assert apply(p, [None]).group_by[0].domain == tuple(NAMES)  # not answered: as declared


def test_two_aliases_under_an_or_keep_pairs(cfg):
    sql = (
        "SELECT n1.n_name, n2.n_name, COUNT(*) FROM sales, supplier, nation n1, nation n2 "
        "WHERE supp = s_suppkey AND s_nationkey = n1.n_nationkey AND cust_nation = n2.n_nationkey "
        "AND n1.n_regionkey = n2.n_regionkey GROUP BY n1.n_name, n2.n_name"
    )
    p = _plan(sql, cfg)
    (look,) = p.lookups
    assert look.keys == (0, 1)
    pairs = [("CHINA", "JAPAN"), ("JAPAN", "CHINA"), ("CHINA", "CHINA"), ("JAPAN", "JAPAN")]
    got = apply(p, [pairs])
    assert sorted(got.cells) == sorted(pairs) and got.n_cells == 4


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT n.n_name, COUNT(*) FROM sales s LEFT JOIN nation n ON s.cust_nation = n.n_nationkey "
        "WHERE n.n_regionkey = 1 GROUP BY n.n_name",
        # a conjunct over a private column and a public one restricts nothing: no region read
        "SELECT n_name, COUNT(*) FROM sales, nation WHERE cust_nation = n_nationkey "
        "AND (n_regionkey = 1 OR g = 1) GROUP BY n_name",
    ],
)
def test_what_public_data_cannot_decide_is_not_asked(cfg, sql):
    """A LEFT lookup (its rows need not carry a nation) asks nothing; a conjunct that reads a
    private column is not in the public query."""
    p = _plan(sql, cfg)
    if "LEFT" in sql:
        assert not p.lookups
    assert all("n_regionkey" not in to_sql(x, "duckdb") for x in p.lookups)
