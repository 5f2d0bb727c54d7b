"""`dpgate init --privacy-unit TABLE[.COLUMN]`: the unit, references (declared foreign keys, or
name and value evidence stated as a guess), public lookup tables with their keys, NOT NULL,
bounds and contribution limits drawn ε-DP per unit; TPC-H parquet → init → check-config
--backend → serve answers TPC-H Q5 over the wire with no edit. Without the flag, init names the
table that looks like the people. A quoted glob over files of different schemas is one table per
file, and check-config --backend names a glob whose files differ."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import duckdb
import psycopg
import pytest

from bench import tpch
from config import load_config
from mechanisms import SeededSource
from proxy.cli import init as init_mod
from proxy.cli import init_bounds as ib
from proxy.cli import init_links, main
from support.pg import free_port

# TPC-H Q5 as the specification writes it (validation parameters: ASIA, 1994).
Q5 = """
select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue
from customer, orders, lineitem, supplier, nation, region
where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey
  and c_nationkey = s_nationkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey
  and r_name = 'ASIA' and o_orderdate >= date '1994-01-01'
  and o_orderdate < date '1994-01-01' + interval '1' year
group by n_name
order by revenue desc"""
TPCH = ("customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier")


@pytest.fixture(autouse=True)
def _seeded(monkeypatch):
    """init's DP draws from a fixed seed, so that each test sees one outcome of them."""
    monkeypatch.setattr(init_mod, "default_source", lambda: SeededSource(17))


def _init(capsys, *argv, code: int = 0) -> tuple[str, str, dict[str, str]]:
    assert main(["init", *argv]) == code
    cap = capsys.readouterr()
    return cap.out, cap.err, dict(re.findall(r"role (\w+): password (\S+) ", cap.err))


@pytest.fixture(scope="module")
def tpch_parquet(tmp_path_factory) -> Path:
    if tpch.tpchgen() is None:
        pytest.skip("tpchgen-cli not installed (pip install '.[test]')")
    out = tmp_path_factory.mktemp("tpch")
    subprocess.run([tpch.tpchgen(), "parquet", "-s", "0.01", "-o", str(out)], check=True, capture_output=True)
    return out


def _serve(cfg: Path, port: int):
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(cfg), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline, out = time.time() + 90, []
    while time.time() < deadline and not any("listening on" in x for x in out):
        line = proc.stdout.readline()
        if not line:
            break
        out.append(line)
    assert any("listening on" in x for x in out), "".join(out)
    return proc


def test_tpch_parquet_to_q5_over_the_wire(tpch_parquet, tmp_path, capsys):
    """The three commands of the issue on TPC-H SF 0.01 parquet, read through a quoted glob
    (eight files of eight schemas: one table each), with no edit to the proposed file."""
    cfg = tmp_path / "dpgate.toml"
    _, err, pw = _init(capsys, "--privacy-unit", "customer", str(tpch_parquet / "*.parquet"), "-o", str(cfg))
    assert "8 different schemas: one table per file" in err
    data = tomllib.loads(cfg.read_text())
    t = data["tables"]
    assert set(t) == set(TPCH)
    assert data["units"] == {"customer": {"table": "customer", "key": "c_custkey"}}
    assert t["orders"]["references"] == {"o_custkey": "customer"} and t["orders"]["key"] == "o_orderkey"
    assert t["lineitem"]["references"] == {
        "l_orderkey": "orders",
        "l_partkey": "part",
        "l_suppkey": "supplier",
    }
    assert t["customer"]["references"] == {"c_nationkey": "nation"}
    public = {n for n, x in t.items() if x.get("public")}
    assert public == {"nation", "region", "part", "supplier", "partsupp"}
    assert t["partsupp"]["key"] == ["ps_partkey", "ps_suppkey"] and t["nation"]["key"] == "n_nationkey"
    assert all(c.get("nullable") is False for x in t.values() for c in x["columns"].values())  # REQUIRED
    assert "domain" not in t["nation"]["columns"]["n_comment"]  # free text
    assert "domain" not in t["region"]["columns"]["r_comment"]
    assert len(t["nation"]["columns"]["n_name"]["domain"]) == 25
    assert t["customer"]["columns"]["c_nationkey"]["domain"] == list(range(25))  # nation's public keys
    assert "lower" not in t["orders"]["columns"]["o_custkey"]  # a key: no bounds
    text = cfg.read_text()
    assert "READ FROM THE PRIVATE DATA" not in "".join(
        x for x in text.splitlines() if x.startswith("# lower/upper")
    )  # bounds are DP, never the exact extremes
    assert "a GUESS (the names agree and every value is a key of orders)" in text
    for name in ("orders", "lineitem"):
        assert t[name]["max_rows_scope"] == "total" and 1 <= t[name]["max_rows_per_unit"] <= 100_000
    assert data["tiers"]["analysts"]["budget"] >= 100 * data["tiers"]["analysts"]["epsilon"]
    cfg_model = load_config(cfg)
    assert cfg_model.tables["lineitem"].unit == "customer" and cfg_model.tables["nation"].public
    assert main(["check-config", "--backend", str(cfg)]) == 0
    assert "matches the backend" in capsys.readouterr().out
    port = free_port()
    proc = _serve(cfg, port)
    try:
        with psycopg.connect(
            f"postgresql://analyst:{pw['analyst']}@127.0.0.1:{port}/dpgate",
            sslmode="disable",
            autocommit=True,
        ) as con:
            notices: list[str] = []
            con.add_notice_handler(lambda d: notices.append(d.message_primary))
            rows = con.execute(Q5).fetchall()
    finally:
        proc.terminate()
        proc.wait(30)
    nations = set(t["nation"]["columns"]["n_name"]["domain"])
    assert rows and all(r[0] in nations and isinstance(r[1], float) for r in rows)
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)  # ORDER BY revenue DESC
    assert any("ε charged 1" in n for n in notices), notices


def test_declared_keys_foreign_keys_and_not_null_in_a_duckdb_file(tmp_path, capsys):
    """A schema that declares its keys: references from duckdb_constraints(), said to be the
    schema's; NOT NULL from duckdb_columns(); a chain two references long; a table that
    reaches no unit is public with its key (a declared composite one, too)."""
    db = tmp_path / "shop.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE stores (store_id INTEGER PRIMARY KEY, city VARCHAR NOT NULL)")
    con.execute("CREATE TABLE clients (client_id INTEGER PRIMARY KEY, age INTEGER)")
    con.execute(
        "CREATE TABLE purchases (pid INTEGER PRIMARY KEY, buyer INTEGER NOT NULL REFERENCES clients(client_id), "
        "store INTEGER REFERENCES stores(store_id), amount DOUBLE)"
    )
    con.execute("CREATE TABLE lines (purchase INTEGER REFERENCES purchases(pid), qty INTEGER)")
    con.execute(
        "CREATE TABLE prices (store INTEGER, sku INTEGER, row_no INTEGER, price DOUBLE, PRIMARY KEY (store, sku))"
    )
    con.execute("INSERT INTO prices SELECT i % 10, i // 10, i, i FROM range(100) t(i)")
    con.execute("INSERT INTO stores SELECT i, 'c' || (i % 3) FROM range(10) t(i)")
    con.execute("INSERT INTO clients SELECT i, 18 + i % 60 FROM range(3000) t(i)")
    con.execute("INSERT INTO purchases SELECT i, i % 3000, i % 10, (i % 97) * 1.5 FROM range(9000) t(i)")
    con.execute("INSERT INTO lines SELECT i % 9000, 1 + i % 5 FROM range(20000) t(i)")
    con.close()
    cfg = tmp_path / "shop.toml"
    _init(capsys, str(db), "--privacy-unit", "clients", "-o", str(cfg))
    text = cfg.read_text()
    t = tomllib.loads(text)["tables"]
    assert t["purchases"]["references"] == {"buyer": "clients", "store": "stores"}
    assert t["lines"]["references"] == {"purchase": "purchases"}
    assert "buyer holds clients's key: the schema's FOREIGN KEY" in text and "GUESS" not in text
    assert t["stores"]["public"] is True and t["stores"]["key"] == "store_id"
    assert t["stores"]["columns"]["city"]["nullable"] is False
    assert t["purchases"]["columns"]["buyer"]["nullable"] is False
    assert "nullable" not in t["purchases"]["columns"]["amount"]
    assert 'key = "store_id"   # unique: the schema\'s PRIMARY KEY' in text
    assert t["prices"]["public"] is True and t["prices"]["key"] == [
        "store",
        "sku",
    ]  # a declared composite key
    cfg_model = load_config(cfg)
    assert cfg_model.tables["lines"].unit == "clients" and cfg_model.unit_chain("lines") == [
        ("lines", "purchase", "purchases", "pid")
    ]
    assert main(["check-config", "--backend", str(cfg)]) == 0


def test_postgres_foreign_keys_from_the_catalog(tmp_path, capsys, postgres):
    with psycopg.connect(postgres.dsn, autocommit=True) as con:
        con.execute("DROP SCHEMA IF EXISTS initfk CASCADE; CREATE SCHEMA initfk")
        con.execute("CREATE TABLE initfk.region (rid int PRIMARY KEY, name text NOT NULL)")
        con.execute("CREATE TABLE initfk.person (id int PRIMARY KEY, rid int REFERENCES initfk.region(rid))")
        con.execute(
            "CREATE TABLE initfk.visit (vid int PRIMARY KEY, who int NOT NULL REFERENCES initfk.person(id), "
            "cost float8)"
        )
        con.execute("INSERT INTO initfk.region SELECT i, 'r' || i FROM generate_series(0, 4) i")
        con.execute("INSERT INTO initfk.person SELECT i, i % 5 FROM generate_series(1, 400) i")
        con.execute("INSERT INTO initfk.visit SELECT i, 1 + i % 400, i % 50 FROM generate_series(1, 1200) i")
    cfg = tmp_path / "pg.toml"
    _init(capsys, "--dsn", postgres.dsn, "--schema", "initfk", "--privacy-unit", "person", "-o", str(cfg))
    text = cfg.read_text()
    t = tomllib.loads(text)["tables"]
    assert t["visit"]["references"] == {"who": "person"} and t["person"]["references"] == {"rid": "region"}
    assert "the schema's FOREIGN KEY" in text and "GUESS" not in text
    assert t["region"]["public"] is True and t["region"]["key"] == "rid"
    assert (
        t["visit"]["columns"]["who"]["nullable"] is False
        and t["region"]["columns"]["name"]["nullable"] is False
    )
    assert t["person"]["columns"]["rid"]["domain"] == [0, 1, 2, 3, 4]  # the public table's keys
    assert load_config(cfg).tables["visit"].unit == "person"
    assert main(["check-config", "--backend", str(cfg)]) == 0


_PG_TYPES = {
    "BIGINT": "bigint",
    "INTEGER": "int",
    "VARCHAR": "text",
    "DATE": "date",
    "DECIMAL(15,2)": "numeric(15,2)",
}
_PRIMARY = {
    "region": "r_regionkey",
    "nation": "n_nationkey",
    "part": "p_partkey",
    "supplier": "s_suppkey",
    "partsupp": "ps_partkey, ps_suppkey",
    "customer": "c_custkey",
    "orders": "o_orderkey",
    "lineitem": "l_orderkey, l_linenumber",
}
_FOREIGN = {
    "nation": {"n_regionkey": "region"},
    "supplier": {"s_nationkey": "nation"},
    "partsupp": {"ps_partkey": "part", "ps_suppkey": "supplier"},
    "customer": {"c_nationkey": "nation"},
    "orders": {"o_custkey": "customer"},
    "lineitem": {"l_orderkey": "orders", "l_partkey": "part", "l_suppkey": "supplier"},
}


def test_postgres_tpch_as_the_specification_declares_it(tpch_parquet, tmp_path, capsys, postgres):
    """TPC-H with its primary and foreign keys and NOT NULL columns (clause 1.4.2) in Postgres:
    init reads them from the catalog (no guesses), check-config --backend passes, and the
    served config answers Q5 over the wire."""
    duck = duckdb.connect()
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute("DROP SCHEMA IF EXISTS tpchfk CASCADE; CREATE SCHEMA tpchfk")
        for t in ("region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem"):
            src = f"read_parquet('{tpch_parquet / (t + '.parquet')}')"
            cols = [
                f"{n} {_PG_TYPES[ty]} NOT NULL"
                for n, ty, *_ in duck.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()
            ]
            c.execute(f"CREATE TABLE tpchfk.{t} ({', '.join(cols)}, PRIMARY KEY ({_PRIMARY[t]}))")
            with c.cursor().copy(f"COPY tpchfk.{t} FROM STDIN") as cp:
                for r in duck.execute(f"SELECT * FROM {src}").fetchall():
                    cp.write_row(r)
        for t, fks in _FOREIGN.items():
            for col, ref in fks.items():
                c.execute(f"ALTER TABLE tpchfk.{t} ADD FOREIGN KEY ({col}) REFERENCES tpchfk.{ref}")
    duck.close()
    cfg = tmp_path / "pg.toml"
    _, _, pw = _init(
        capsys, "--dsn", postgres.dsn, "--schema", "tpchfk", "--privacy-unit", "customer", "-o", str(cfg)
    )
    text = cfg.read_text()
    t = tomllib.loads(text)["tables"]
    assert "GUESS" not in text and t["lineitem"]["references"] == {
        "l_orderkey": "orders",
        "l_partkey": "part",
        "l_suppkey": "supplier",
    }
    assert t["partsupp"]["key"] == ["ps_partkey", "ps_suppkey"] and t["partsupp"]["public"] is True
    assert {n for n, x in t.items() if x.get("public")} == {
        "nation",
        "region",
        "part",
        "supplier",
        "partsupp",
    }
    assert all(c.get("nullable") is False for x in t.values() for c in x["columns"].values())
    assert main(["check-config", "--backend", str(cfg)]) == 0
    capsys.readouterr()
    port = free_port()
    proc = _serve(cfg, port)
    try:
        with psycopg.connect(
            f"postgresql://analyst:{pw['analyst']}@127.0.0.1:{port}/dpgate",
            sslmode="disable",
            autocommit=True,
        ) as con:
            rows = con.execute(Q5).fetchall()
    finally:
        proc.terminate()
        proc.wait(30)
    nations = set(t["nation"]["columns"]["n_name"]["domain"])
    assert rows and all(r[0] in nations for r in rows)


def _people_files(tmp_path) -> Path:
    d = tmp_path / "files"
    d.mkdir()
    con = duckdb.connect()
    con.execute(
        f"COPY (SELECT i AS member_id, (i % 4) AS tier FROM range(2000) t(i)) TO '{d / 'members.parquet'}'"
    )
    con.execute(
        f"COPY (SELECT i AS visit_id, i % 2000 AS member_id, (i % 40)::DOUBLE AS minutes FROM range(6000) t(i)) "
        f"TO '{d / 'visits.parquet'}'"
    )
    con.execute(f"COPY (SELECT i AS code, 'k' || i AS label FROM range(4) t(i)) TO '{d / 'codes.csv'}'")
    con.close()
    return d


def test_without_the_flag_init_names_the_people(tmp_path, capsys):
    d = _people_files(tmp_path)
    out, err, _ = _init(capsys, str(d / "members.parquet"), str(d / "visits.parquet"))
    assert "members looks like the people" in err and "--privacy-unit members" in err
    data = tomllib.loads(out)
    assert "units" not in data and not any(x.get("public") for x in data["tables"].values())
    assert data["tables"]["visits"]["references"] == {"member_id": "members"}
    assert "rerun with --privacy-unit members" in out
    assert "drawn with differential privacy" in out.split("[server]")[0]
    cfg = tmp_path / "rows.toml"
    cfg.write_text(out)
    assert load_config(cfg).tables["visits"].unit is None  # per row, references kept


def test_guessed_reference_needs_the_values_too(tmp_path, capsys):
    """Names alone are not evidence: a column named like the key whose values are not all
    keys of the table is no reference (and the unit then reaches only the tables it does)."""
    d = _people_files(tmp_path)
    con = duckdb.connect()
    con.execute(
        f"COPY (SELECT i AS note_id, 5000 + i AS member_id FROM range(50) t(i)) TO '{d / 'notes.parquet'}'"
    )
    con.close()
    files = [str(d / f) for f in ("members.parquet", "visits.parquet", "notes.parquet")]
    out, _, _ = _init(capsys, "--privacy-unit", "members", *files)
    t = tomllib.loads(out)["tables"]
    assert "references" not in t["notes"] and t["notes"]["public"] is True
    assert t["visits"]["references"] == {"member_id": "members"}
    assert "GUESS (the names agree and every value is a key of members)" in out


def test_a_lookup_table_keyed_by_any_unique_column(tmp_path, capsys):
    """A table that reaches no unit is public with a unique column as its key, whatever its
    name (codes.code); one with none is left out, said so."""
    d = _people_files(tmp_path)
    con = duckdb.connect()
    con.execute(f"COPY (SELECT i % 3 AS a FROM range(9) t(i)) TO '{d / 'dups.csv'}'")
    con.close()
    files = [str(d / f) for f in ("members.parquet", "visits.parquet", "codes.csv", "dups.csv")]
    out, _, _ = _init(capsys, "--privacy-unit", "members", *files)
    t = tomllib.loads(out)["tables"]
    assert t["codes"]["public"] is True and t["codes"]["key"] == "code"
    assert "dups" not in t and "# left out: table dups: it reaches no members" in out


def test_privacy_unit_mistakes_are_one_line(tmp_path, capsys):
    d = _people_files(tmp_path)
    files = [str(d / "members.parquet"), str(d / "visits.parquet")]
    _, err, _ = _init(capsys, "--privacy-unit", "people", *files, code=1)
    assert (
        err.strip().splitlines()[-1]
        == "dpgate: --privacy-unit people: no such table (tables: members, visits)"
    )
    _, err, _ = _init(capsys, "--privacy-unit", "members.tier", *files, code=1)
    assert "tier is not unique in members" in err.strip().splitlines()[-1]
    _, err, _ = _init(capsys, "--privacy-unit", "visits.member_id", *files, code=1)
    assert "member_id is not unique in visits" in err


def test_bounds_are_per_unit_not_per_row(tmp_path, capsys):
    """One member with 3000 rows of 10^6 minutes: per row that cell holds 3000 rows and would
    pass; per unit it holds one member and does not (w.p. >= 1 − β), so upper stays at the
    other members' 50."""
    d = _people_files(tmp_path)
    con = duckdb.connect()
    con.execute(
        f"COPY (SELECT i AS visit_id, CASE WHEN i < 3000 THEN 0 ELSE i % 2000 END AS member_id, "
        f"CASE WHEN i < 3000 THEN 1e6 ELSE (i % 40)::DOUBLE END AS minutes FROM range(9000) t(i)) "
        f"TO '{d / 'visits.parquet'}'"
    )
    con.close()
    files = [str(d / "members.parquet"), str(d / "visits.parquet")]
    per_unit, _, _ = _init(capsys, "--privacy-unit", "members", *files)
    per_row, _, _ = _init(capsys, *files)
    unit_cols = tomllib.loads(per_unit)["tables"]["visits"]["columns"]["minutes"]
    row_cols = tomllib.loads(per_row)["tables"]["visits"]["columns"]["minutes"]
    assert (unit_cols["lower"], unit_cols["upper"]) == (0.0, 50.0)
    assert row_cols["upper"] == 1e6
    assert "per members unit)" in per_unit and "per row)" in per_row


def test_glob_of_one_schema_is_one_table_and_check_config_names_a_mixed_glob(tmp_path, capsys):
    d = tmp_path / "parts"
    d.mkdir()
    con = duckdb.connect()
    for k in range(3):
        con.execute(
            f"COPY (SELECT {k} * 100 + i AS id, i % 3 AS g FROM range(100) t(i)) TO '{d / f'p{k}.parquet'}'"
        )
    con.execute(f"COPY (SELECT 1 AS other) TO '{tmp_path / 'odd.parquet'}'")
    con.close()
    out, _, _ = _init(capsys, str(d / "*.parquet"))
    t = tomllib.loads(out)["tables"]
    assert list(t) == ["parts"] and t["parts"]["source"] == f"read_parquet('{d}/*.parquet')"
    # a config whose glob also matches a file of another schema: check-config names both
    cfg = tmp_path / "mixed.toml"
    cfg.write_text(
        '[server]\nauth = "trust"\n[tiers.t]\nepsilon = 1\nbudget = 10\n[roles.a]\ntier = "t"\n'
        f'[tables.p]\nsource = "read_parquet(\'{tmp_path}/*/*.parquet\')"\n[tables.p.columns.id]\ntype = "int"\n'
        '[tables.s]\nsource = "(SELECT id FROM read_parquet(\'x.parquet\'))"\n[tables.s.columns.id]\ntype = "int"\n'
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "odd.parquet").rename(tmp_path / "sub" / "odd.parquet")
    assert main(["check-config", "--backend", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"tables.p: the backend cannot read read_parquet('{tmp_path}/*/*.parquet'): the files of" in err
    assert "has (id BIGINT, g BIGINT)" in err and "odd.parquet has (other INTEGER)" in err
    assert "tables.s: the backend has no relation" in err


def test_threshold_and_grid_are_public_constants():
    assert ib.CONTRIBUTION_GRID[0] == 1 and ib.CONTRIBUTION_GRID[-1] == 100_000
    assert list(ib.CONTRIBUTION_GRID) == sorted(set(ib.CONTRIBUTION_GRID))
    assert ib.threshold(0.05, 48) == math.ceil(
        math.log(48 * ib.BOUNDS_PER_FILE / 0.05) / 0.05
    )  # β = 5% per file


def test_the_people_by_name_or_by_the_longest_chain():
    r = init_links.Ref
    keys = {"user_events": "id", "users": "user_id"}
    assert init_links.suggest_unit({"user_events": 10, "users": 5}, keys, [], 50)[0] == "users"
    refs = [
        r("lines", "l_basket", "baskets", False),
        r("baskets", "b_shopper", "shoppers", False),
        r("shoppers", "s_region", "regions", False),  # a code table (5 rows): not the people
    ]
    rows = {"lines": 100, "baskets": 50, "shoppers": 20, "regions": 5}
    keys = {"baskets": "b_id", "shoppers": "s_id", "regions": "r_id"}
    t, why = init_links.suggest_unit(rows, keys, refs, 10)
    assert t == "shoppers" and why.endswith("lines → baskets → shoppers")


def test_auto_bounds_leave_the_choice_to_the_server(tpch_parquet, tmp_path, capsys):
    """--auto-bounds: the numeric bounds and contribution limits of the tables that reach the
    unit are written "auto" (dpgate chooses them, ε-DP, once per data version), dates are drawn
    by init, public tables keep their exact values, and [auto_bounds] pays for every choice."""
    cfg = tmp_path / "auto.toml"
    _init(
        capsys, "--privacy-unit", "customer", "--auto-bounds", str(tpch_parquet / "*.parquet"), "-o", str(cfg)
    )
    data = tomllib.loads(cfg.read_text())
    t = data["tables"]
    assert t["lineitem"]["max_rows_per_unit"] == "auto" and t["orders"]["max_groups_per_unit"] == "auto"
    li = t["lineitem"]["columns"]
    assert (li["l_extendedprice"]["lower"], li["l_extendedprice"]["upper"]) == ("auto", "auto")
    assert li["l_shipdate"]["lower"].startswith("19")  # a date: drawn by init
    assert t["customer"]["columns"]["c_acctbal"]["upper"] == "auto"
    assert isinstance(t["partsupp"]["columns"]["ps_supplycost"]["upper"], float)  # public: exact
    choices = sum(
        (c.get("lower") == "auto") + (c.get("upper") == "auto")
        for x in t.values()
        for c in x["columns"].values()
    ) + sum(
        (x.get("max_rows_per_unit") == "auto") + (x.get("max_groups_per_unit") == "auto") for x in t.values()
    )
    assert data["auto_bounds"]["budget"] == pytest.approx(0.1 * choices)
    assert main(["check-config", "--backend", str(cfg)]) == 0
