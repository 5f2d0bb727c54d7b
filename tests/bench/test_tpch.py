"""``python -m bench.tpch`` (TPC-H as the acceptance suite) on the --quick scale (SF 0.01: the smallest at which
tpchgen-cli keeps partsupp's key unique).

* The data: the eight tables in DuckDB with the specification's primary and foreign keys, which
  ``dpgate init`` reads.
* The config: ``dpgate init``'s, with the customer unit (``init --privacy-unit`` or the
  declarations the bench adds), valid for dpgate, and differing from ``init``'s only in the
  budget (and this run's port and state directory); its TOML text reads back as the same dict.
* The result shape: a released key row outside the exact answer is a row the SQL excludes when
  the SQL rules it out for any data (Q5: nations outside ASIA; Q7: years outside 1995–1996), and
  an empty cell when it does not (Q1: ``('A', 'O')``); the relative-error rule; ORDER BY over
  the released values.
* The whole --quick path over the wire: one row per query, answered or refused with a SQLSTATE,
  and one HEADLINE line.
tpchgen-cli is in the ``test`` extra; the tests skip with one line if it is missing.
"""

from __future__ import annotations

import copy
import tomllib

import duckdb
import pytest

from bench import tpch, tpch_keys, tpch_queries
from config import parse_config

pytestmark = pytest.mark.skipif(
    tpch.tpchgen() is None, reason="tpchgen-cli not installed (pip install '.[test]')"
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("tpch")
    tpch.generate(0.01, d / "pq", tpch.ALL_TABLES)
    tpch.load_declared(d / "pq", d / "t.duckdb")
    return d


@pytest.fixture(scope="module")
def con(data):
    c = duckdb.connect(str(data / "t.duckdb"), read_only=True)
    yield c
    c.close()


def test_the_tables_carry_the_specifications_keys(con):
    got = {
        (t, kind, tuple(cols))
        for t, kind, cols in con.execute(
            "SELECT table_name, constraint_type, constraint_column_names FROM duckdb_constraints() "
            "WHERE constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY')"
        ).fetchall()
    }
    for t, key in tpch.PRIMARY.items():
        assert (t, "PRIMARY KEY", key) in got
        for col in tpch.FOREIGN.get(t, {}):
            assert (t, "FOREIGN KEY", (col,)) in got
    assert {r[0] for r in con.execute("SHOW TABLES").fetchall()} == set(tpch.ALL_TABLES)


def test_the_config_is_inits_with_only_the_budget_raised(data, con, tmp_path):
    cfg, password, command = tpch.run_init(data / "t.duckdb", tmp_path / "init.toml")
    assert password and command.startswith("dpgate init")
    init = copy.deepcopy(cfg)
    by_init = "units" in cfg or any("references" in t for t in cfg["tables"].values())
    if not by_init:
        cfg = tpch.propose_units(cfg, tpch.unit_rows(con))
    proposed = copy.deepcopy(cfg)
    cfg = tpch.raise_budget(cfg, 5433, tmp_path / "state")
    assert tomllib.loads(tpch.toml_text(cfg)) == cfg
    parsed = parse_config(tomllib.loads(tpch.toml_text(cfg)))
    for t in tpch.PUBLIC:
        assert parsed.tables[t].public, t
    assert parsed.tables["partsupp"].key_columns == ("ps_partkey", "ps_suppkey")
    for t in ("customer", "orders", "lineitem"):
        assert parsed.tables[t].unit is not None, t
    assert all(tier.budget >= 1e6 for tier in parsed.tiers.values())
    # everything else as proposed: the tiers' other fields, roles, tables, backend
    for name, tier in proposed["tiers"].items():
        assert {k: v for k, v in cfg["tiers"][name].items() if k != "budget"} == {
            k: v for k, v in tier.items() if k != "budget"
        }
    for key in ("roles", "tables", "backend"):
        assert cfg[key] == proposed[key]
    assert {k: v for k, v in cfg["server"].items() if k not in ("port", "state_dir")} == {
        k: v for k, v in init["server"].items() if k not in ("port", "state_dir")
    }


def _possible(con, n, asked):
    cols = {}
    for t, c in con.execute("SELECT table_name, column_name FROM information_schema.columns").fetchall():
        cols.setdefault(t, set()).add(c)
    got = tpch_keys.possible_keys(con, tpch.query_sql(n), tpch.KEYS[n], set(tpch.PUBLIC), cols, asked)
    return got if got is None else {tuple(tpch.norm(v) for v in k) for k in got}


def test_the_keys_the_sql_can_produce(con):
    nations = [r[0] for r in con.execute("SELECT n_name FROM nation").fetchall()]
    asia = {
        r[0]
        for r in con.execute(
            "SELECT n_name FROM nation JOIN region ON n_regionkey = r_regionkey WHERE r_name = 'ASIA'"
        ).fetchall()
    }
    assert {k[0] for k in _possible(con, 5, [(n,) for n in nations])} == asia and len(asia) == 5
    flags = [(f, s) for f in "ANR" for s in "FO"]
    assert ("A", "O") in _possible(con, 1, flags)  # an empty cell: the SQL keeps it
    assert _possible(con, 1, [("A", None)]) == set()  # l_linestatus is NOT NULL
    years = [
        (a, b, y)
        for a in ("FRANCE", "GERMANY", "PERU")
        for b in ("FRANCE", "GERMANY")
        for y in range(1992, 1999)
    ]
    assert _possible(con, 7, years) == {
        (a, b, float(y)) for a, b in (("FRANCE", "GERMANY"), ("GERMANY", "FRANCE")) for y in (1995, 1996)
    }
    # a year the data holds no order in is an empty cell (the SQL keeps it): Q9 has no date filter
    assert _possible(con, 9, [("PERU", 1700), ("PERU", 1995)]) == {("PERU", 1700.0), ("PERU", 1995.0)}
    assert _possible(con, 8, [(1700,), (1995,)]) == {(1995.0,)}  # Q8: o_orderdate between 1995 and 1996
    modes = [(m,) for m in ("AIR", "MAIL", "SHIP", "TRUCK")]
    assert _possible(con, 12, modes) == {("MAIL",), ("SHIP",)}
    assert _possible(con, 13, [(1,)]) is None  # c_count is an aggregate: any value
    # Q3's keys are private columns as they are: their values come from the asked rows
    ((early, late),) = con.execute("SELECT min(o_orderdate), max(o_orderdate) FROM orders").fetchall()
    asked = [(1, early, 0), (1, late, 0)]
    assert _possible(con, 3, asked) == {(1.0, early.isoformat(), 0.0)}  # o_orderdate < date '1995-03-15'


def test_shape_tells_excluded_rows_from_empty_cells(con):
    cols, rows, _ = tpch.exact(con, 5)
    released = [(n, float(v) * 1.1) for n, v in rows] + [("FRANCE", 10.0)]
    sh = tpch.shape(5, cols, released, cols, rows, lambda extra: _possible(con, 5, extra))
    assert sh.same_columns and sh.excluded == [("FRANCE",)] and sh.empty == [] and sh.missing == 0
    assert sh.rel_error == pytest.approx(0.1)
    cols1, rows1, _ = tpch.exact(con, 1)
    extra = ("A", "O", *rows1[0][2:])
    sh1 = tpch.shape(1, cols1, [*rows1, extra], cols1, rows1, lambda extra: _possible(con, 1, extra))
    assert sh1.excluded == [] and sh1.empty == [("A", "O")] and sh1.rel_error == 0
    sh2 = tpch.shape(1, cols1, rows1[:1], cols1, rows1, lambda extra: _possible(con, 1, extra))
    assert sh2.missing == len(rows1) - 1 >= 2 and sh2.rel_error == 1  # a missing row's cells count 1


def test_order_by_is_checked_on_the_released_values():
    cols = ["n_name", "revenue"]
    assert tpch.in_order(5, cols, [("B", 3.0), ("A", 2.0), ("C", 2.0)])
    assert not tpch.in_order(5, cols, [("B", 1.0), ("A", 2.0)])
    assert tpch.in_order(6, ["revenue"], [(1.0,)]) is None  # no ORDER BY


def test_the_quick_path_over_the_wire(capsys, tmp_path):
    res = tpch.run(0.01, others=False, work=tmp_path)
    assert [r["n"] for r in res["rows"]] == sorted(tpch_queries.QUERIES)
    for r in res["rows"]:
        got = r["got"]
        assert got.answered or (len(got.sqlstate) == 5 and got.message), r["n"]
        assert (r["shape"] is not None) == got.answered
    tpch.report(res)
    out = capsys.readouterr().out
    heads = [ln for ln in out.splitlines() if ln.startswith("HEADLINE: answered ")]
    assert len(heads) == 1 and heads[0].endswith(("PASS", "MISS"))
    assert sum(ln.startswith("Q") for ln in out.splitlines()) == 23  # the header and 22 rows
