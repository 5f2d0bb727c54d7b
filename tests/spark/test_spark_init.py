"""``dpgate init --spark``: a commented config proposed from a Spark catalog,
through Spark Connect — tables, types, domains and bounds (marked as read from the private
data) — that loads as a dpgate config for the Spark backend."""

from __future__ import annotations

import argparse

import duckdb

from config import load_config
from mechanisms import SeededSource
from proxy.cli import init as init_mod
from proxy.cli.init import add_parser, cmd_init


def test_init_reads_a_spark_table(spark_connect, tmp_path, capsys, monkeypatch):
    path = tmp_path / "sales.parquet"
    con = duckdb.connect()
    con.execute(
        f"COPY (SELECT i % 3 AS region, CAST(i AS DOUBLE) / 10 AS amount, 'x' || (i % 4) AS tag "
        f"FROM range(0, 500) t(i)) TO '{path}' (FORMAT parquet)"
    )
    s = spark_connect.session()
    s.sql("DROP TABLE IF EXISTS init_sales")
    s.sql(f"CREATE TABLE init_sales USING parquet LOCATION '{path}'")
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    out = tmp_path / "dpgate.toml"
    args = parser.parse_args(
        ["init", "--spark", spark_connect.remote, "--tables", "init_sales", "--exact-bounds", "-o", str(out)]
    )
    assert cmd_init(args) == 0, capsys.readouterr().err
    text = out.read_text()
    assert 'kind = "spark"' in text and "READ FROM THE PRIVATE DATA" in text
    cfg = load_config(out)
    cols = cfg.tables["init_sales"].columns
    assert cols["region"].domain == [0, 1, 2] and cols["tag"].domain == ["x0", "x1", "x2", "x3"]
    assert (cols["amount"].lower, cols["amount"].upper) == (0.0, 49.9)
    # the default: ε-DP bounds, init's SQL transpiled to Spark's (500 rows: (20, 50] holds 300
    # > t = 138 at ε/2 = 0.05, every cell above none)
    monkeypatch.setattr(init_mod, "default_source", lambda: SeededSource(3))
    out2 = tmp_path / "dp.toml"
    args = parser.parse_args(
        ["init", "--spark", spark_connect.remote, "--tables", "init_sales", "-o", str(out2)]
    )
    assert cmd_init(args) == 0, capsys.readouterr().err
    cols = load_config(out2).tables["init_sales"].columns
    assert (cols["amount"].lower, cols["amount"].upper) == (0.0, 50.0)
