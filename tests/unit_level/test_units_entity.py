"""A privacy unit is an entity (``[units.customer]``), not a column name: TPC-H (SF 0.01, made by
tpchgen-cli) on DuckDB and Postgres, through the wire.

* customer ⋈ orders ⋈ lineitem, whose customer columns are named c_custkey and o_custkey, is
  one person's data: each table reaches the unit through its references (orders.o_custkey →
  customer, lineitem.l_orderkey → orders), so Q5 (six tables, comma joins) and Q9 (partsupp
  looked up by its composite key) as the specification writes them are answered.
* Exact before noise: with bounds that bind nothing, the rewrite's cells equal the backend's own
  answer to the analyst's SQL (the join reads exactly the analyst's rows).
* The released COUNTs are within the geometric mechanism's tail bound of the true counts:
  P(|X| > t) ≤ 2·e^(−t/b) with b = k/ε, k = G·R (max_groups_per_unit × max_rows_per_unit,
  bounds that bind nothing in this data), t = b·ln(2/β) at β = 1e-9 per cell.
* The old spellings (``privacy_unit = "o_custkey"``, ``"orders.o_custkey"``) are answered, and keep
  their meaning: tables whose unit columns have different names and no reference between them
  are different people.
* Refused, naming the path: a private table joined off its path, tables of different units, a
  composite key looked up by one of its columns.
"""

from __future__ import annotations

import math

import duckdb
import psycopg
import pytest
import sqlglot
from sqlglot import exp

import rewriter
from bench import tpch
from bench.tpch_queries import QUERIES
from config import parse_config
from mechanisms.partition_selection import TruncatedGeometricSelection
from rewriter.errors import Refusal
from support.bound import duck_rows, pg_execute
from support.service import Service, ask, make_config
from support.tpch_data import MONEY, PUBLIC, TABLES, UNITS, generate, load_duckdb, load_postgres

from .engines import engine

pytestmark = pytest.mark.skipif(
    tpch.tpchgen() is None, reason="tpchgen-cli not installed (pip install '.[test]')"
)

SCHEMA = "tpch_units"
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
G, R = 5, 60  # bind nothing at SF 0.01: ≤ 52 lineitems per customer and priority
EPS = 100.0  # the `half` role's tier here: a small noise scale b = G·R/ε = 3


@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("tpch"))


def _declared(con) -> dict:
    """Each table's declared columns from the data's own types (DuckDB's view of the parquet)."""
    out: dict = {}
    for t in TABLES:
        cols = {}
        for name, typ, *_ in con.execute(f"DESCRIBE {SCHEMA}.{t}").fetchall():
            if typ.startswith("DECIMAL"):
                lo, hi = MONEY.get(name, (0, 1e6))
                cols[name] = {"type": "float", "lower": lo, "upper": hi}
            elif typ == "DATE":
                cols[name] = {"type": "date", "lower": "1992-01-01", "upper": "1998-12-31"}
            else:
                cols[name] = {"type": {"BIGINT": "int", "INTEGER": "int", "VARCHAR": "text"}[typ]}
        out[t] = cols
    out["orders"]["o_orderpriority"]["domain"] = PRIORITIES
    return out


def _tables(columns: dict, g: int, r: int) -> dict:
    """The unit declared once; each private table reaches it through its references; the
    dimension tables public with their keys; and the same data under the old spellings."""
    bounds = {"max_groups_per_unit": g, "max_rows_per_unit": r}
    t = {n: {"source": f"{SCHEMA}.{n}", "columns": columns[n]} for n in TABLES}
    for n, key in PUBLIC.items():
        t[n].update(public=True, key=key)
    t["customer"].update(bounds)
    t["orders"].update(key="o_orderkey", references={"o_custkey": "customer"}, **bounds)
    t["lineitem"].update(references={"l_orderkey": "orders"}, **bounds)
    old = {  # the old spellings over the same rows: a unit column, and a referenced table's column
        "o_old": {**t["orders"], "privacy_unit": "o_custkey", "references": {}},
        "l_old": {**t["lineitem"], "privacy_unit": "o_old.o_custkey", "references": {"l_orderkey": "o_old"}},
        "c_old": {**t["customer"], "privacy_unit": "c_custkey", "key": "c_custkey"},
    }
    return {**t, **old}


def _config(columns: dict, g: int = G, r: int = R):
    data = make_config(extra_roles=False)
    data.update(demo=False, units=UNITS, tables=_tables(columns, g, r))
    data["server"]["auth"] = "trust"
    data["roles"] = {"analyst": {"tier": "default"}}
    return parse_config(data)


@pytest.fixture(scope="module")
def duck(parquet):
    con = duckdb.connect()
    load_duckdb(con, parquet, SCHEMA)
    yield con
    con.close()


@pytest.fixture(scope="module")
def columns(duck):
    return _declared(duck)


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def backend(request, duck, parquet, tmp_path_factory):
    """(dialect, run the backend's SQL, the service's backend config) for each backend."""
    if request.param == "duckdb":
        path = tmp_path_factory.mktemp("duck") / "tpch.duckdb"
        with duckdb.connect(str(path)) as con:
            load_duckdb(con, parquet, SCHEMA)
        yield "duckdb", lambda q: duck_rows(duck, q), {"kind": "duckdb", "path": str(path)}
        return
    dsn = request.getfixturevalue("postgres").dsn
    load_postgres(dsn, duck, SCHEMA)
    with psycopg.connect(dsn, autocommit=True) as con:
        yield (
            "postgres",
            lambda q: pg_execute(con, q).fetchall(),
            {"kind": "postgres", "dsn": dsn, "pool_size": 2},
        )
        con.execute(f"DROP SCHEMA {SCHEMA} CASCADE")  # the shared test Postgres: leave it as found


@pytest.fixture(scope="module")
def svc(backend, columns, tmp_path_factory):
    half = {"epsilon": EPS, "budget": 10_000.0, "period": "day", "delta": 1e-6, "delta_budget": 1e-3}
    data = make_config(backend[2], tiers={"half": half})
    data["tiers"]["default"].update(budget=1000.0, delta=1e-6, delta_budget=1e-3)
    data["roles"] = {r: data["roles"][r] for r in ("analyst", "half")}
    data.update(demo=False, units=UNITS, tables=_tables(columns, G, R))
    s = Service(data, tmp_path_factory.mktemp("state")).start()  # the demo rows as every test loads them
    yield s
    s.close()


BY_PRIORITY = (
    "select o_orderpriority, count(*) as n from customer, orders, lineitem "
    "where c_custkey = o_custkey and l_orderkey = o_orderkey and c_mktsegment = 'BUILDING' "
    "group by o_orderpriority order by o_orderpriority"
)
TWICE = (  # a public table under two aliases, outputs unaliased: both named n_name, as in Postgres
    "select n1.n_name, n2.n_name, count(*) from lineitem, supplier, orders, customer, nation n1, nation n2 "
    "where s_suppkey = l_suppkey and o_orderkey = l_orderkey and c_custkey = o_custkey "
    "and s_nationkey = n1.n_nationkey and c_nationkey = n2.n_nationkey and n2.n_regionkey = 1 "
    "group by n1.n_name, n2.n_name"
)
PEOPLE = [  # another table's unit column is the unit: COUNT(DISTINCT) of it counts customers
    "select c_mktsegment, count(distinct c_custkey) from customer, orders where c_custkey = o_custkey "
    "and o_orderstatus = 'F' group by c_mktsegment",
    "select o_orderpriority, count(distinct o_custkey), count(*) from lineitem, orders "
    "where l_orderkey = o_orderkey group by o_orderpriority",
]
LEFT = (  # LEFT lookups along the path, each ON in parentheses
    "select c.c_mktsegment, count(*), sum(l.l_quantity) from lineitem l left join orders o "
    "on (l.l_orderkey = o.o_orderkey) left join customer c on (o.o_custkey = c.c_custkey) "
    "left join partsupp ps on (l.l_partkey = ps.ps_partkey) and (l.l_suppkey = ps.ps_suppkey) "
    "where ps.ps_availqty > 5000 group by c.c_mktsegment"
)
EXACT = [QUERIES[5], QUERIES[7], QUERIES[9], BY_PRIORITY, TWICE, *PEOPLE, LEFT]


def _qualified(sql: str) -> str:
    """The analyst's SQL on the backend's own tables (schema-qualified in the parse)."""
    tree = sqlglot.parse_one(sql, read="postgres")
    for t in tree.find_all(exp.Table):
        if t.name in TABLES and not t.args.get("db"):
            t.set("db", exp.to_identifier(SCHEMA))
    return tree.sql("postgres")


def _cells(rows, k: int, order: list[int] | None = None) -> dict:
    """{keys: [values]} of the nonzero cells; ``order``: where each key of the plan is in a row."""
    at = order or list(range(k))
    return {tuple(r[i] for i in at): [float(v) for v in r[k:]] for r in rows if any(v for v in r[k:])}


@pytest.mark.parametrize(
    "sql",
    EXACT,
    ids=["q5", "q7", "q9", "by_priority", "nation_twice", "people_direct", "people_by_reference", "left"],
)
def test_the_join_reads_the_analysts_rows(backend, columns, sql):
    """With bounds that bind nothing, the bounded scan's cells are the analyst's own answer."""
    dialect, run, _ = backend
    plan = rewriter.build_plan(rewriter.parse(sql), _config(columns, 1000, 100_000))
    assert plan.unit is not None and plan.unit.name == "customer"
    k = len(plan.group_by)
    got = _cells(run(rewriter.to_sql(plan, dialect, "ab")), k)
    order = [o.index for o in plan.outputs if o.source == "group"]  # the SELECT's keys, in order
    want = _cells(run(_qualified(sql)), k, [order.index(g) for g in range(k)])
    assert want and got.keys() == want.keys()
    for key, values in want.items():
        assert got[key] == pytest.approx(values, rel=1e-9), key


def test_q5_as_written_is_answered(svc):
    """Q5 (six tables, comma joins): every nation whose customers make its release certain
    (the truncated geometric's keep probability is 1 at n distinct customers) is released, and
    no other row."""
    rows, notes = ask(svc, QUERIES[5], role="half")
    raw = dict(svc._call(svc.gw.backend.fetch(_qualified(QUERIES[5]))))
    people = QUERIES[5].replace(
        "sum(l_extendedprice * (1 - l_discount)) as revenue", "count(distinct c_custkey) as revenue"
    )
    n = dict(svc._call(svc.gw.backend.fetch(_qualified(people))))
    selection = TruncatedGeometricSelection(EPS / 2, 5e-7, k=G)  # half of ε and δ select the keys
    certain = {k for k in raw if selection.keep_probability(n[k]) == 1}
    assert certain and certain <= {r[0] for r in rows} <= set(raw)
    assert "privacy unit: customer" in notes[-1]


@pytest.mark.parametrize("n,keys", [(7, 3), (9, 2)])
def test_q7_and_q9_as_written_are_answered(svc, n, keys):
    """Q7: nation read twice (n1 for the supplier, n2 for the customer); Q9: partsupp looked up
    by its composite key (ps_partkey, ps_suppkey); each with a derived table. The released keys
    are the SQL's, and the output columns are named as the SQL names them."""
    with psycopg.connect(svc.dsn("half"), autocommit=True) as c:
        cur = c.execute(QUERIES[n])
        rows, names = cur.fetchall(), [d.name for d in cur.description]
    raw_cur = _qualified(QUERIES[n])
    raw = {tuple(r[:keys]) for r in svc._call(svc.gw.backend.fetch(raw_cur))}
    assert rows and {tuple(r[:keys]) for r in rows} <= raw
    want = {7: ["supp_nation", "cust_nation", "l_year", "revenue"], 9: ["nation", "o_year", "sum_profit"]}
    assert names == want[n]


def test_counts_are_within_the_noise_bound(svc):
    rows, notes = ask(svc, BY_PRIORITY, role="half")
    truth = dict(svc._call(svc.gw.backend.fetch(_qualified(BY_PRIORITY))))
    b = G * R / EPS  # the geometric mechanism's scale at ε/k, k = G·R
    assert [r[0] for r in rows] == PRIORITIES and "privacy unit: customer" in notes[-1]
    for key, n in rows:
        assert abs(n - truth[key]) <= b * math.log(2 / 1e-9), key


def test_the_old_spellings_are_answered(svc):
    sql = (
        "select o_orderpriority, count(*) from l_old, o_old where l_orderkey = o_orderkey "
        "group by o_orderpriority"
    )
    rows, notes = ask(svc, sql, role="half")
    assert [r[0] for r in rows] == PRIORITIES and "privacy unit: o_old.o_custkey" in notes[-1]


REFUSED = [
    (
        "select count(*) from orders o join customer c on o.o_orderkey = c.c_custkey",
        "o_custkey = customer.c_custkey",
    ),
    (
        "select count(*) from lineitem l, customer c where l.l_orderkey = c.c_custkey",
        "lineitem.l_orderkey = orders.o_orderkey AND orders.o_custkey = customer.c_custkey",
    ),
    (
        "select count(*) from customer c, o_old o where c.c_custkey = o.o_custkey",
        "tables of different people",
    ),  # the old spelling, no reference: another unit
    ("select count(*) from c_old c, o_old o where c.c_custkey = o.o_custkey", "tables of different people"),
    (
        "select count(*) from lineitem l, partsupp ps where l.l_partkey = ps.ps_partkey",
        "key ps_partkey, ps_suppkey",
    ),
]


def test_grouping_by_another_tables_unit_column_is_grouping_by_the_unit(svc):
    with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
        ask(
            svc,
            "select o_custkey, count(*) from lineitem, orders where l_orderkey = o_orderkey group by o_custkey",
        )
    assert "GROUP BY the privacy unit (customer)" in str(e.value)


@pytest.mark.parametrize("sql,words", REFUSED)
def test_joins_off_the_path_are_refused_naming_it(svc, sql, words):
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
        ask(svc, sql)
    assert words in str(e.value) and e.value.diag.message_hint


CHAIN = {
    "people": {"columns": {"pid": {"type": "int"}, "region": {"type": "text", "domain": ["n", "s"]}}},
    "baskets": {
        "columns": {"bid": {"type": "int"}, "owner": {"type": "int"}},
        "key": "bid",
        "references": {"owner": "people"},
    },
    "lines": {
        "columns": {"lid": {"type": "int"}, "basket": {"type": "int"}},
        "key": "lid",
        "references": {"basket": "baskets"},
    },
    "refunds": {
        "columns": {
            "line": {"type": "int"},
            "amount": {"type": "int", "lower": 0, "upper": 100},
            "kind": {"type": "text", "domain": ["a", "b"]},
        },
        "references": {"line": "lines"},
        "max_groups_per_unit": 2,
        "max_rows_per_unit": 1000,
    },
}
CHAIN_SQL = [
    "SELECT kind, COUNT(*), SUM(amount) FROM refunds GROUP BY kind",
    "SELECT region, COUNT(*), SUM(amount) FROM refunds, lines, baskets, people "
    "WHERE line = lid AND basket = bid AND owner = pid GROUP BY region",
]


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def chain_db(request):
    with engine(request, "units_chain") as e:
        e.run(
            "CREATE TABLE people AS SELECT i AS pid, CASE WHEN i % 3 = 0 THEN 'n' ELSE 's' END AS region "
            f"FROM {e.series(200)}"
        )
        e.run(f"CREATE TABLE baskets AS SELECT i AS bid, i % 200 AS owner FROM {e.series(600)}")
        e.run(f"CREATE TABLE lines AS SELECT i AS lid, i % 600 AS basket FROM {e.series(2000)}")
        e.run(
            "CREATE TABLE refunds AS SELECT i % 2000 AS line, i % 97 AS amount, "
            f"CASE WHEN i % 5 = 0 THEN 'a' ELSE 'b' END AS kind FROM {e.series(3000)}"
        )
        yield e.dialect, e.run


@pytest.mark.parametrize("sql", CHAIN_SQL)
def test_a_chain_of_three_references_reads_the_analysts_rows(chain_db, sql):
    """refunds → lines → baskets → people: the unit is read through three references in one
    scan, and bounds that bind nothing leave the analyst's own answer."""
    dialect, run = chain_db
    data = make_config(extra_roles=False)
    data["server"]["auth"] = "trust"
    data["roles"] = {"analyst": {"tier": "default"}}
    data.update(demo=False, units={"person": {"table": "people", "key": "pid"}}, tables=CHAIN)
    cfg = parse_config(data)
    assert cfg.tables["refunds"].privacy_unit == "lines.baskets.owner"
    plan = rewriter.build_plan(rewriter.parse(sql), cfg)
    assert plan.unit is not None and plan.unit.name == "person"
    k = len(plan.group_by)
    got = _cells(rewriter.complete(plan, run(rewriter.to_sql(plan, dialect, "ab"))), k)
    assert got == _cells(run(sql), k)


HISTOGRAMS = [  # per-customer counts over tables whose customer columns have different names
    "select n, count(*) from (select o_custkey, count(*) as n from lineitem, orders "
    "where l_orderkey = o_orderkey group by o_custkey) t group by n",
    "select n, count(*) from (select c_custkey, count(*) as n from customer, orders "
    "where c_custkey = o_custkey group by c_custkey) t group by n",
    "select n, count(*) from (select c.c_custkey, count(o.o_orderkey) as n from customer c "
    "left join orders o on c.c_custkey = o.o_custkey group by c.c_custkey) t group by n",
]


@pytest.mark.parametrize("sql", HISTOGRAMS, ids=["lines_per_customer", "orders_per_customer", "with_zero"])
def test_per_unit_histograms_across_tables_of_one_unit(backend, columns, sql):
    """A subquery grouped by another table's customer column is grouped by the unit: one row per
    customer, the outer histogram exact before noise with a cap (R = 200) above every count."""
    dialect, run, _ = backend
    plan = rewriter.build_plan(rewriter.parse(sql), _config(columns, 1, 200))
    got = {n: c for n, c in run(rewriter.to_sql(plan, dialect, "ab")) if c}
    assert got == dict(run(_qualified(sql)))


def test_an_unqualified_column_of_two_aliases_is_ambiguous(columns):
    """nation n1 and nation n2 both have n_name: unqualified, it is ambiguous (42702), as in Postgres."""
    sql = TWICE.replace("select n1.n_name, n2.n_name,", "select n_name,").replace(
        "group by n1.n_name, n2.n_name", "group by n_name"
    )
    with pytest.raises(Refusal) as e:
        rewriter.build_plan(rewriter.parse(sql), _config(columns))
    assert e.value.sqlstate == "42702" and "n_name is ambiguous" in e.value.message
