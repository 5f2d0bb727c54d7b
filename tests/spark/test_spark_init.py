"""``dpgate init --spark``: a commented config proposed from a Spark catalog,
through Spark Connect — tables, types, domains and bounds (marked as read from the private
data) — that loads as a dpgate config for the Spark backend."""

from __future__ import annotations

import argparse

import duckdb

from config import load_config
from proxy.cli.init import add_parser, cmd_init


def test_init_reads_a_spark_table(spark_connect, tmp_path, capsys):
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
        ["init", "--spark", spark_connect.remote, "--tables", "init_sales", "-o", str(out)]
    )
    assert cmd_init(args) == 0, capsys.readouterr().err
    text = out.read_text()
    assert 'kind = "spark"' in text and "READ FROM THE PRIVATE DATA" in text
    cfg = load_config(out)
    cols = cfg.tables["init_sales"].columns
    assert cols["region"].domain == [0, 1, 2] and cols["tag"].domain == ["x0", "x1", "x2", "x3"]
    assert (cols["amount"].lower, cols["amount"].upper) == (0.0, 49.9)
