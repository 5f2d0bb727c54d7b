"""The released cells are the SQL's rows: a group key's domain is cut by what public data
decides, through the wire on DuckDB and Postgres, over a small TPC-H-like schema made here
(customer → orders → lineitem private, reaching the unit customer; supplier, nation and
region public lookups).

* A key read from a public lookup table (``n_name``) takes only the values the public tables
  give it under the WHERE's conjuncts over their columns (TPC-H Q5: ``n_regionkey =
  r_regionkey AND r_name = 'ASIA'`` through supplier → nation → region): ASIA's nations that
  have a supplier, never the others, nor a declared value no nation row has.
* Keys read together (one nation table under two aliases, an OR over both: Q7) keep the
  pairs the public tables give, not their product.
* A range on a date column cuts the keys derived from it (``extract(year …)``,
  ``date_trunc``) to the values the range can produce, NULL only where the range admits NULL.
* What public data cannot decide (a conjunct that reads a private column) keeps the domain:
  the empty cell is released, never a row of the SQL dropped.

Each test checks both directions against the backend's own answer to the analyst's SQL:
every non-empty row of the SQL is a released key (the cells are a superset), and every
released key is one the statement can return given the public tables (stated per query).
"""

from __future__ import annotations

import datetime as dt
import random
import shutil

import duckdb
import psycopg
import pytest

from support.service import Service, ask, make_config

REGIONS = [(0, "ASIA"), (1, "EUROPE"), (2, "AMERICA")]
NATIONS = [
    (0, "CHINA", 0),
    (1, "JAPAN", 0),
    (2, "INDIA", 0),
    (3, "FRANCE", 1),
    (4, "GERMANY", 1),
    (5, "BRAZIL", 2),
]
NAMES = sorted([n for _, n, _ in NATIONS] + ["ATLANTIS"])  # declared: one value no nation row has
SUPPLIERS = [(1, 0), (2, 1), (3, 3), (4, 4), (5, 5), (6, 3)]  # INDIA has no supplier
LOW, HIGH = "1992-01-01", "1998-12-31"
DATABASE = "dpgate_key_domains"


def _rows() -> dict[str, list[tuple]]:
    rnd = random.Random(7)
    customers = [(c, rnd.choice(NATIONS)[0]) for c in range(1, 61)]
    orders, items = [], []
    for o in range(1, 241):
        day = dt.date(1992, 1, 1) + dt.timedelta(days=rnd.randrange(7 * 365))
        orders.append((o, rnd.randrange(1, 61), day))
        for _ in range(rnd.randrange(1, 4)):
            ship = day + dt.timedelta(days=rnd.randrange(1, 60))
            items.append((o, rnd.choice(SUPPLIERS)[0], ship, rnd.randrange(1, 50)))
    orders.append((241, 1, dt.date(1990, 6, 1)))  # outside the declared bounds: no cell, never a NULL one
    return {
        "region": REGIONS,
        "nation": NATIONS,
        "supplier": SUPPLIERS,
        "customer": customers,
        "orders": orders,
        "lineitem": items,
    }


DDL = {
    "region": "r_regionkey integer, r_name text",
    "nation": "n_nationkey integer, n_name text, n_regionkey integer",
    "supplier": "s_suppkey integer, s_nationkey integer",
    "customer": "c_custkey integer, c_nationkey integer",
    "orders": "o_orderkey integer, o_custkey integer, o_orderdate date",
    "lineitem": "l_orderkey integer, l_suppkey integer, l_shipdate date, l_quantity integer",
}


def _tables() -> dict:
    def cols(**kw):
        return {c: spec for c, spec in kw.items()}

    date = {"type": "date", "lower": LOW, "upper": HIGH, "nullable": False}
    keyed = {"type": "int", "nullable": False}
    bounds = {"max_groups_per_unit": 50, "max_rows_per_unit": 100}
    return {
        "region": {
            "source": "region",
            "public": True,
            "key": "r_regionkey",
            "columns": cols(r_regionkey=keyed, r_name={"type": "text", "domain": [n for _, n in REGIONS]}),
        },
        "nation": {
            "source": "nation",
            "public": True,
            "key": "n_nationkey",
            "columns": cols(n_nationkey=keyed, n_name={"type": "text", "domain": NAMES}, n_regionkey=keyed),
        },
        "supplier": {
            "source": "supplier",
            "public": True,
            "key": "s_suppkey",
            "columns": cols(s_suppkey=keyed, s_nationkey=keyed),
        },
        "customer": {
            "source": "customer",
            "columns": cols(c_custkey=keyed, c_nationkey=keyed),
            **bounds,
        },
        "orders": {
            "source": "orders",
            "key": "o_orderkey",
            "references": {"o_custkey": "customer"},
            "columns": cols(o_orderkey=keyed, o_custkey=keyed, o_orderdate=date),
            **bounds,
        },
        "lineitem": {
            "source": "lineitem",
            "references": {"l_orderkey": "orders"},
            "columns": cols(
                l_orderkey=keyed,
                l_suppkey=keyed,
                l_shipdate=date,
                l_quantity={"type": "int", "lower": 0, "upper": 50},
            ),
            **bounds,
        },
    }


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def backend(request, tmp_path_factory):
    """(run the backend's SQL, the service's backend config)."""
    data = _rows()
    if request.param == "duckdb":
        path = tmp_path_factory.mktemp("duck") / "keys.duckdb"
        with duckdb.connect(str(path)) as con:
            for t, ddl in DDL.items():
                con.execute(f"CREATE TABLE {t} ({ddl})")
                if data[t]:
                    con.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' * len(data[t][0]))})", data[t])
        ref = path.with_name("reference.duckdb")  # the backend's own answers, from a copy
        shutil.copy(path, ref)
        con = duckdb.connect(str(ref), read_only=True)
        yield (lambda q: con.execute(q).fetchall()), {"kind": "duckdb", "path": str(path)}
        con.close()
        return
    server = request.getfixturevalue("postgres").dsn
    with psycopg.connect(server, autocommit=True) as con:  # its own database: the service loads
        con.execute(f"DROP DATABASE IF EXISTS {DATABASE}")  # the demo's tables where it serves
        con.execute(f"CREATE DATABASE {DATABASE}")
    dsn = server.rsplit("/", 1)[0] + f"/{DATABASE}"
    with psycopg.connect(dsn, autocommit=True) as con:
        for t, ddl in DDL.items():
            con.execute(f"CREATE TABLE {t} ({ddl})")
            with con.cursor().copy(f"COPY {t} FROM STDIN") as cp:
                for row in data[t]:
                    cp.write_row(row)
        yield (lambda q: con.execute(q).fetchall()), {"kind": "postgres", "dsn": dsn, "pool_size": 2}


@pytest.fixture(scope="module")
def svc(backend, tmp_path_factory):
    data = make_config(backend[1])
    data["tiers"]["default"].update(budget=1000.0, epsilon=1.0)
    data["roles"] = {"analyst": data["roles"]["analyst"]}
    data.update(demo=False, units={"customer": {"table": "customer", "key": "c_custkey"}}, tables=_tables())
    s = Service(data, tmp_path_factory.mktemp("state"), people_rows=10, trips_rows=10).start()
    yield s
    s.close()


def _check(svc, run, sql: str, k: int, possible: set) -> set:
    """The released keys (first ``k`` columns); asserted: a superset of the SQL's non-empty
    rows and a subset of ``possible`` (the keys the statement can return given the public
    tables). Returns them."""
    rows, _ = ask(svc, sql)
    released = [tuple(r[:k]) for r in rows]
    assert len(released) == len(set(released)), released
    truth = {tuple(r[:k]) for r in run(sql) if r[k]}
    assert truth <= set(released), (sql, truth - set(released))
    assert set(released) <= possible, (sql, set(released) - possible)
    return set(released)


Q5 = (
    "select n_name, count(*) as n from customer, orders, lineitem, supplier, nation, region "
    "where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey "
    "and s_nationkey = n_nationkey and n_regionkey = r_regionkey and r_name = 'ASIA' "
    "and o_orderdate >= date '1994-01-01' and o_orderdate < date '1994-01-01' + interval '1' year "
    "group by n_name order by n desc"
)


def test_q5_releases_the_nations_of_the_region(svc, backend):
    """ASIA's nations that have a supplier (CHINA, JAPAN); INDIA (no supplier), the other
    regions' nations and ATLANTIS (declared, in no row) are no cells."""
    got = _check(svc, backend[0], Q5, 1, {("CHINA",), ("JAPAN",)})
    assert got == {("CHINA",), ("JAPAN",)}
    lines = [r[0] for r in ask(svc, "EXPLAIN " + Q5)[0]]
    assert any("group key n_name, public domain of 2 value(s)" in line for line in lines), lines
    assert any("keys: n_name read from public tables" in line for line in lines), lines


Q7 = (
    "select supp_nation, cust_nation, l_year, sum(volume) as revenue from ("
    "select n1.n_name as supp_nation, n2.n_name as cust_nation, extract(year from l_shipdate) as l_year, "
    "l_quantity as volume from supplier, lineitem, orders, customer, nation n1, nation n2 "
    "where s_suppkey = l_suppkey and o_orderkey = l_orderkey and c_custkey = o_custkey "
    "and s_nationkey = n1.n_nationkey and c_nationkey = n2.n_nationkey "
    "and ((n1.n_name = 'FRANCE' and n2.n_name = 'GERMANY') or (n1.n_name = 'GERMANY' and n2.n_name = 'FRANCE')) "
    "and l_shipdate between date '1995-01-01' and date '1996-12-31') as shipping "
    "group by supp_nation, cust_nation, l_year order by supp_nation, cust_nation, l_year"
)


def test_q7_releases_the_pairs_and_years_the_where_admits(svc, backend):
    want = {(a, b, y) for a, b in (("FRANCE", "GERMANY"), ("GERMANY", "FRANCE")) for y in (1995, 1996)}
    assert _check(svc, backend[0], Q7, 3, want) == want


def test_a_date_range_cuts_its_date_parts(svc, backend):
    """extract(year …) and date_trunc('quarter', …) of a column compared with a range: the
    values the range can produce (a strict bound on a date column ends the day before), no
    NULL (the column is NOT NULL, and a range is never true of NULL)."""
    years = (
        "select extract(year from o_orderdate) as y, count(*) from orders "
        "where o_orderdate > date '1993-12-31' and o_orderdate < date '1996-01-01' group by 1"
    )
    assert _check(svc, backend[0], years, 1, {(1994,), (1995,)}) == {(1994,), (1995,)}
    quarters = (
        "select date_trunc('quarter', o_orderdate) as q, count(*) from orders "
        "where o_orderdate between date '1995-02-10' and date '1995-07-01' group by 1"
    )
    rows, _ = ask(svc, quarters)
    got = {str(r[0])[:10] for r in rows}
    assert got == {"1995-01-01", "1995-04-01", "1995-07-01"}
    truth = {str(r[0])[:10] for r in backend[0](quarters) if r[1]}
    assert truth <= got


def test_a_date_outside_the_bounds_is_no_null_cell(svc, backend):
    """An order dated before the declared lower bound reaches no cell: the years are the
    bounds' years, and no NULL key (the column is NOT NULL)."""
    rows, _ = ask(svc, "select extract(year from o_orderdate) as y, count(*) from orders group by 1")
    assert {r[0] for r in rows} == set(range(1992, 1999))


def test_what_public_data_cannot_decide_keeps_the_domain(svc, backend):
    """``c_nationkey = s_nationkey`` reads a private column: it restricts nothing, so every
    nation a supplier is in is a cell (the empty ones too); the public join still excludes
    INDIA (no supplier) and ATLANTIS (no nation row)."""
    sql = (
        "select n_name, count(*) from customer, orders, lineitem, supplier, nation "
        "where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey "
        "and s_nationkey = n_nationkey and c_nationkey = s_nationkey group by n_name"
    )
    with_supplier = {(n,) for k, n, _ in NATIONS if any(s == k for _, s in SUPPLIERS)}
    assert _check(svc, backend[0], sql, 1, with_supplier) == with_supplier


def test_max_by_a_lookup_key_releases_the_region_s_nations(svc, backend):
    """MAX (its own release kind) is cut alike: ASIA's nations with a supplier."""
    sql = (
        "select n_name, max(l_quantity) from lineitem, supplier, nation, region "
        "where l_suppkey = s_suppkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey "
        "and r_name = 'ASIA' group by n_name"
    )
    assert _check(svc, backend[0], sql, 1, {("CHINA",), ("JAPAN",)}) == {("CHINA",), ("JAPAN",)}
