"""config/examples/spark.toml loads, local tables are accepted on Spark (their
reports are stored in Spark: test_spark_local.py), and what Spark cannot serve is refused at
config load with a hint: the demo loader, and the per-record ``log`` function (Spark's LN is
not Python's to the ulp: test_spark_levels.py). No Spark server needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import ConfigError, load_config, parse_config
from support.service import make_config

EXAMPLE = Path(__file__).parents[2] / "config" / "examples" / "spark.toml"


def test_example_loads():
    cfg = load_config(EXAMPLE)
    assert cfg.backend.kind == "spark" and cfg.backend.remote == "sc://127.0.0.1:15002"
    assert cfg.source_of("pums") == "pums" and not cfg.demo


def test_local_table_accepted_on_spark():
    data = make_config({"kind": "spark", "remote": "sc://h:15002"})
    data["demo"] = False
    cfg = parse_config(data)
    assert cfg.tables["trips"].mode == "local" and cfg.backend.kind == "spark"


def test_demo_refused_on_spark():
    data = make_config({"kind": "spark", "remote": "sc://h:15002"})
    del data["tables"]["trips"]
    with pytest.raises((ValueError, ConfigError), match="demo = true .* DuckDB or Postgres"):
        parse_config(data)


def test_log_privacy_function_refused_on_spark():
    data = make_config({"kind": "spark", "remote": "sc://h:15002"})
    data["demo"] = False
    del data["tables"]["trips"]
    for role in data["roles"].values():
        role.pop("insert", None)
    parse_config(data)  # inverse (the demo's accounts): accepted
    data["tables"]["accounts"]["privacy"]["function"] = "log"
    with pytest.raises((ValueError, ConfigError), match="function = 'log' needs a correctly rounded LN"):
        parse_config(data)
    data["backend"] = {"kind": "duckdb"}
    parse_config(data)  # log on DuckDB: accepted
