"""Config validation: errors are one line naming the file and the field."""

from __future__ import annotations

import pytest

from config import ConfigError, load_config, parse_config
from proxy.demo import demo_config_path

BASE = {
    "server": {"auth": "trust"},
    "tiers": {"d": {"epsilon": 1, "budget": 10}},
    "roles": {"a": {"tier": "d"}},
    "tables": {"t": {"columns": {"age": {"type": "int", "lower": 0, "upper": 100}}}},
}


def _with(path: str, value):
    import copy

    d = copy.deepcopy(BASE)
    cur = d
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur.setdefault(k, {})
    cur[keys[-1]] = value
    return d


@pytest.mark.parametrize(
    "path,value,field",
    [
        ("tables.t.columns.age.lower", "x", "tables.t.columns.age.lower"),
        ("tables.t.columns.age.upper", -5, "tables.t.columns.age"),
        ("roles.a.tier", "nope", "roles.a.tier"),
        ("tiers.d.epsilon", 0, "tiers.d.epsilon"),
        ("tiers.d.budget", 0.5, "tiers.d"),
        ("server.port", 70000, "server.port"),
        ("server.bogus", 1, "server.bogus"),
        ("tables.t.columns.age.domain", [1, 1], "tables.t.columns.age"),
        ("backend.kind", "postgres", "backend"),
        ("roles.a.scram", "plaintext", "roles.a.scram"),
        ("ledger.kind", "postgres", "ledger"),
        ("ledger.kind", "mysql", "ledger.kind"),
        ("ledger.schema", "Bad-Name", "ledger.schema"),
    ],
)
def test_errors_name_the_field(path, value, field):
    with pytest.raises(ConfigError) as e:
        parse_config(_with(path, value), "my.toml")
    msg = str(e.value)
    assert msg.startswith("my.toml: ") and field in msg and "\n" not in msg


def test_scram_required_for_scram_auth():
    d = _with("server.auth", "scram")
    with pytest.raises(ConfigError, match="roles.a.scram"):
        parse_config(d, "f.toml")


def test_trust_only_on_loopback():
    with pytest.raises(ConfigError, match="loopback"):
        parse_config(_with("server.host", "0.0.0.0"), "f.toml")


def test_load_file_errors(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[server\n")
    with pytest.raises(ConfigError, match="bad.toml: invalid TOML"):
        load_config(p)
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "missing.toml")


def test_demo_config_parses_with_verifiers():
    import tomllib

    data = tomllib.loads(demo_config_path().read_text())
    for spec in data["roles"].values():
        spec["scram"] = "SCRAM-SHA-256$4096:c2FsdA==$a2V5:a2V5"
    cfg = parse_config(data)
    assert set(cfg.tables) >= {"pums", "people"}
    assert cfg.tables["pums"].columns["educ"].public_domain == tuple(range(1, 17))


def test_ledger_section():
    cfg = parse_config(_with("ledger", {"kind": "postgres", "dsn": "postgresql://x@h/db", "schema": "dp"}))
    assert (cfg.ledger.kind, cfg.ledger.dsn, cfg.ledger.db_schema) == (
        "postgres",
        "postgresql://x@h/db",
        "dp",
    )
    assert parse_config(BASE).ledger.kind == "sqlite"


def test_the_heavy_lane_setting():
    assert parse_config(BASE).server.heavy_lane == "idle"
    assert parse_config(_with("server.heavy_lane", "off"), "t.toml").server.heavy_lane == "off"
    with pytest.raises(ConfigError, match=r"t.toml: server.heavy_lane"):
        parse_config(_with("server.heavy_lane", "sometimes"), "t.toml")


def test_domains_are_made_once_per_config():
    col = (
        parse_config(_with("tables.t", {"columns": {"g": {"type": "int", "domain_range": [1, 9]}}}))
        .tables["t"]
        .columns["g"]
    )
    assert col.public_domain is col.public_domain and col.public_domain == tuple(range(1, 10))


def test_duckdb_threads_apply_to_the_embedded_engine_only():
    data = _with("backend", {"kind": "postgres", "dsn": "postgresql://x", "threads": 2})
    with pytest.raises(ConfigError, match="threads applies to kind = 'duckdb'"):
        parse_config(data, "t.toml")
    with pytest.raises(ConfigError, match="backend.threads"):
        parse_config(_with("backend.threads", 0), "t.toml")
    assert parse_config(_with("backend.threads", 3), "t.toml").backend.threads == 3


def test_kept_rows_apply_to_the_embedded_engine_only():
    """``[backend] kept_rows``: the heavy units' rows a DuckDB file held read-only may copy (default a
    million, 0: none); another backend keeps nothing, so setting it there is a config error."""
    assert parse_config(_with("backend.kept_rows", 0), "t.toml").backend.kept_rows == 0
    assert parse_config(BASE, "t.toml").backend.kept_rows == 2_000_000
    with pytest.raises(ConfigError, match="backend.kept_rows"):
        parse_config(_with("backend.kept_rows", -1), "t.toml")
    data = _with("backend", {"kind": "postgres", "dsn": "postgresql://x", "kept_rows": 10})
    with pytest.raises(ConfigError, match="kept_rows applies to kind = 'duckdb'"):
        parse_config(data, "t.toml")


def test_an_attached_file_is_not_named_like_dpgate_s_own_catalog():
    """The DuckDB backend attaches its in-memory catalog of kept relations as ``__dpgate_kept``."""
    with pytest.raises(ConfigError, match="__dpgate"):
        parse_config(_with("backend.attach", {"__dpgate_kept": "/data/x.duckdb"}), "t.toml")


def test_a_budget_beyond_the_ledger_is_a_config_error_naming_file_and_field():
    """The ledger keeps nano-ε in 64-bit integers: a budget it cannot store is refused when the
    file is read, not by an OverflowError on every statement."""
    with pytest.raises(ConfigError) as e:
        parse_config(_with("tiers.d.budget", 1e12), "my.toml")
    assert str(e.value).startswith("my.toml: tiers.d.budget: ") and "ledger can store" in str(e.value)
    with pytest.raises(ConfigError, match=r"my.toml: tiers.d.epsilon: .*charged as 0"):
        parse_config(_with("tiers.d.epsilon", 1e-12), "my.toml")


def test_the_largest_storable_budget_is_charged(tmp_path):
    from config.models import LEDGER_MAX_EPSILON
    from proxy.stores.ledger import Ledger

    cfg = parse_config(_with("tiers.d.budget", LEDGER_MAX_EPSILON), "my.toml")
    led = Ledger(tmp_path / "l.sqlite3")
    try:
        res = led.reserve(role="a", epsilon=100.0, budget=cfg.tiers["d"].budget, period="never")
        led.cancel(res)
        res = led.reserve(role="a", epsilon=100.0, budget=cfg.tiers["d"].budget, period="never")
        assert res.epsilon_nano == 100 * 10**9
    finally:
        led.close()
