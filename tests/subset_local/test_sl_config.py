"""Config and layout of categorical Subset columns in local tables (multi-tier spec §10 "LDP
categorical columns"): one-line errors naming the file and the field; the stored layout (d bits
per tier level, never the raw value); a ladder change after ingestion keeps the stored levels."""

from __future__ import annotations

import copy

import pytest

from config import ConfigError, load_config, parse_config
from proxy.ingest.ldp_specs import guarantee
from rewriter.local import layout
from rewriter.local_subset import resolve_stored

DOMAIN = ["a", "b", "c", "d", "e"]
BASE = {
    "server": {"auth": "trust"},
    "tiers": {
        "bronze": {"epsilon": 0.1, "budget": 5, "ladder": "market"},
        "silver": {"epsilon": 0.5, "budget": 5, "ladder": "market"},
        "gold": {"epsilon": 2.0, "budget": 5, "ladder": "market"},
        "plain": {"epsilon": 1.0, "budget": 5},
    },
    "roles": {"r": {"tier": "plain"}},
    "tables": {
        "t": {
            "mode": "local",
            "columns": {
                "c": {"type": "text", "domain": DOMAIN},
                "g": {"type": "int", "domain": [1, 2]},
                "x": {"type": "int"},
            },
            "local": {
                "columns": {"x": {"lo": 0, "hi": 10, "buckets": 10, "epsilon": 1.0}},
                "categories": {"c": {"ladder": "market"}},
            },
        }
    },
}


def cfg_with(**edits) -> dict:
    data = copy.deepcopy(BASE)
    t = data["tables"]["t"]
    for path, value in edits.items():
        node = t
        *head, last = path.split("__")
        for k in head:
            node = node[k]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return data


def error_of(data) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(data, "market.toml")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("market.toml: ")
    return msg


@pytest.mark.parametrize(
    "edit, field, words",
    [
        (
            {"local__categories__c": {"ladder": "nope"}},
            "tables.t.local.categories.c.ladder",
            "no tier has ladder = 'nope' (ladders: market)",
        ),
        (
            {"local__categories__c": {"ladder": "market", "variant": 3}},
            "tables.t.local.categories.c.variant",
            "1 or 2",
        ),
        (
            {"local__categories__c": {"ladder": "market", "k": 2}},
            "tables.t.local.categories.c.k",
            "Extra inputs",
        ),
        (
            {"local__categories__zz": {"ladder": "market"}},
            "tables.t",
            "local.categories.zz is not a declared column",
        ),
        ({"columns__c": {"type": "text"}}, "tables.t", "needs columns.c.domain"),
        ({"columns__c": {"type": "text", "domain": ["only"]}}, "tables.t", "has 1 domain values"),
        ({"columns__c": {"type": "int", "domain_range": [0, 128]}}, "tables.t", "has 129 domain values"),
        ({"local__categories__x": {"ladder": "market"}}, "tables.t", "local.categories.x is also a metric"),
        ({"local__columns": None, "local__categories": None}, "tables.t", "needs a private column"),
    ],
)
def test_config_errors_name_the_field(edit, field, words):
    msg = error_of(cfg_with(**edit))
    assert msg.startswith(f"market.toml: {field}: ") and words in msg, msg


def test_error_from_a_file_names_the_file(tmp_path):
    f = tmp_path / "dp.toml"
    f.write_text(
        '[server]\nauth = "trust"\n[tiers.t]\nepsilon = 1\nbudget = 1\n[roles.r]\ntier = "t"\n'
        '[tables.t]\nmode = "local"\n[tables.t.columns]\nc = { type = "text", domain = ["a", "b"] }\n'
        '[tables.t.local.categories]\nc = { ladder = "market" }\n'
    )
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert str(e.value) == (
        f"{f}: tables.t.local.categories.c.ladder: no tier has ladder = 'market' (ladders: none)"
    )


def test_layout_stores_bits_per_level_and_keeps_the_category_private():
    cfg = parse_config(BASE)
    lay = layout("t", cfg.tables["t"], cfg.tiers)
    assert lay.public == ("g",)  # c is neither public nor a metric dimension
    (cat,) = lay.categories
    assert cat.d == 5 and cat.levels == (2.0, 0.5, 0.1) and cat.ladder_name == "market"
    schema = dict(lay.report_schema())
    bits = [c for c in schema if c.startswith("c_")]
    assert len(bits) == 3 * 5 and {schema[c] for c in bits} == {"SMALLINT"}
    assert "c" not in schema and "x" not in schema
    assert cat.columns(0.5) == [f"c_v2_e0p5_{j}" for j in range(5)]
    assert "[c differs]" in guarantee(lay)
    with pytest.raises(ValueError, match="needs the config's tiers"):
        layout("t", cfg.tables["t"])


def test_long_names_refused_for_postgres():
    data = cfg_with(columns__c=None, local__categories__c=None)
    name = "c" * 56
    data["tables"]["t"]["columns"][name] = {"type": "text", "domain": DOMAIN}
    data["tables"]["t"]["local"]["categories"] = {name: {"ladder": "market"}}
    cfg = parse_config(data)
    with pytest.raises(ValueError, match="longer than 63 bytes"):
        layout("t", cfg.tables["t"], cfg.tiers)


def test_ladder_changed_after_ingestion_keeps_the_stored_levels():
    cfg = parse_config(BASE)
    before = layout("t", cfg.tables["t"], cfg.tiers)
    have = [c for c, _ in before.report_schema()]
    data = copy.deepcopy(BASE)
    data["tiers"]["copper"] = {"epsilon": 0.3, "budget": 5, "ladder": "market"}
    cfg2 = parse_config(data)
    after = layout("t", cfg2.tables["t"], cfg2.tiers)
    assert after.categories[0].levels == (2.0, 0.5, 0.3, 0.1)
    stored = resolve_stored(after, have)
    cat = stored.categories[0]
    assert cat.levels == (2.0, 0.5, 0.1)  # the program the rows went through
    assert [c for c, _ in stored.report_schema()] == have
    assert cat.stored_level(0.3) == 0.1 and cat.stored_level(5.0) == 2.0
    assert cat.stored_level(0.05) is None  # never a higher level
    assert resolve_stored(before, have) is before
