"""Privacy units as entities (`[units.X]`): each private table's unit is derived through its chain of
references, the old spellings keep their meaning, and every mistake is one line naming the field."""

from __future__ import annotations

import copy

import pytest

from config import ConfigError, parse_config

INT = {"type": "int"}
BASE = {
    "server": {"auth": "trust"},
    "tiers": {"d": {"epsilon": 1, "budget": 10}},
    "roles": {"a": {"tier": "d"}},
}
TPCH = {
    **BASE,
    "units": {"customer": {"table": "customer", "key": "c_custkey"}},
    "tables": {
        "customer": {"columns": {"c_custkey": INT, "c_nationkey": INT}},
        "orders": {
            "columns": {"o_orderkey": INT, "o_custkey": INT},
            "key": "o_orderkey",
            "references": {"o_custkey": "customer"},
        },
        "lineitem": {
            "columns": {"l_orderkey": INT, "l_partkey": INT, "l_suppkey": INT},
            "references": {"l_orderkey": "orders"},
        },
        "partsupp": {
            "public": True,
            "columns": {"ps_partkey": INT, "ps_suppkey": INT},
            "key": ["ps_partkey", "ps_suppkey"],
        },
        "nation": {"public": True, "columns": {"n_nationkey": INT}, "key": "n_nationkey"},
    },
}


def _edit(**tables):
    d = copy.deepcopy(TPCH)
    for name, spec in tables.items():
        if spec is None:
            del d["tables"][name]
        else:
            d["tables"][name] = {**d["tables"].get(name, {}), **spec}
    return d


def _error(data) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(data, "my.toml")
    msg = str(e.value)
    assert msg.startswith("my.toml: ") and "\n" not in msg
    return msg


def test_each_table_reaches_the_unit_through_its_references():
    cfg = parse_config(TPCH)
    t = cfg.tables
    assert (t["customer"].unit, t["customer"].privacy_unit, t["customer"].key) == (
        "customer",
        "c_custkey",
        "c_custkey",
    )  # the unit's table: its key is the unit's key
    assert (t["orders"].unit, t["orders"].privacy_unit) == ("customer", "o_custkey")
    assert (t["lineitem"].unit, t["lineitem"].privacy_unit) == ("customer", "orders.o_custkey")
    assert t["nation"].unit is None and t["partsupp"].unit is None
    assert cfg.unit_chain("lineitem") == [("lineitem", "l_orderkey", "orders", "o_orderkey")]
    assert cfg.unit_chain("orders") == []


def test_a_chain_longer_than_one_reference():
    d = _edit(
        lineitem={"columns": {"l_id": INT, "l_orderkey": INT}, "key": "l_id"},
        shipment={"columns": {"s_line": INT}, "references": {"s_line": "lineitem"}},
    )
    cfg = parse_config(d)
    assert cfg.tables["shipment"].privacy_unit == "lineitem.orders.o_custkey"
    assert cfg.tables["shipment"].unit == "customer"
    assert [s[:3] for s in cfg.unit_chain("shipment")] == [
        ("shipment", "s_line", "lineitem"),
        ("lineitem", "l_orderkey", "orders"),
    ]


def test_naming_the_unit_requires_reaching_it():
    cfg = parse_config(_edit(lineitem={"privacy_unit": "customer"}))
    assert cfg.tables["lineitem"].privacy_unit == "orders.o_custkey"
    msg = _error(_edit(lineitem={"privacy_unit": "customer", "references": {}}))
    assert "tables.lineitem.privacy_unit" in msg and "does not reach unit 'customer'" in msg
    assert "references.<column> = 'customer'" in msg


def test_the_old_spellings_keep_working():
    d = copy.deepcopy(BASE)
    d["tables"] = {
        "people": {"columns": {"person_id": INT}, "privacy_unit": "person_id", "key": "person_id"},
        "visits": {
            "columns": {"visit_id": INT, "person_id": INT},
            "privacy_unit": "person_id",
            "key": "visit_id",
        },
        "items": {
            "columns": {"visit_id": INT},
            "privacy_unit": "visits.person_id",
            "references": {"visit_id": "visits"},
        },
        "loose": {"columns": {"x": INT}},  # no unit declared anywhere: per row, as before
    }
    t = parse_config(d).tables
    assert t["people"].unit == t["visits"].unit == t["items"].unit == "column person_id"
    assert t["items"].privacy_unit == "visits.person_id" and t["loose"].unit is None


def test_an_old_spelling_that_references_a_table_of_people_is_that_unit():
    d = copy.deepcopy(BASE)
    d["tables"] = {
        "customer": {"columns": {"c_custkey": INT}, "privacy_unit": "c_custkey", "key": "c_custkey"},
        "orders": {
            "columns": {"o_orderkey": INT, "o_custkey": INT},
            "privacy_unit": "o_custkey",
            "references": {"o_custkey": "customer"},
        },
    }
    t = parse_config(d).tables
    assert t["orders"].unit == t["customer"].unit == "column c_custkey"


def test_unit_declaration_errors_name_the_field():
    for unit, field in [
        ({"table": "nope", "key": "c_custkey"}, "units.customer.table"),
        ({"table": "nation", "key": "n_nationkey"}, "units.customer.table"),
        ({"table": "customer", "key": "nope"}, "units.customer.key"),
    ]:
        d = copy.deepcopy(TPCH)
        d["units"]["customer"] = unit
        assert field in _error(d)
    d = _edit(customer={"key": "c_nationkey"})
    assert "units.customer.key" in _error(d) and "differs" in _error(d)
    d = copy.deepcopy(TPCH)
    d["units"]["Bad"] = {"table": "orders", "key": "o_orderkey"}
    assert "units.Bad" in _error(d)
    d = copy.deepcopy(TPCH)
    d["units"]["again"] = {"table": "customer", "key": "c_custkey"}
    assert "already the table of unit" in _error(d)


def test_table_unit_errors_name_the_field():
    msg = _error(_edit(orders={"privacy_unit": "custmer"}))
    assert "tables.orders.privacy_unit" in msg and "neither a declared unit" in msg
    msg = _error(_edit(customer={"privacy_unit": "c_nationkey"}))
    assert "tables.customer.privacy_unit" in msg and "table of unit 'customer'" in msg
    msg = _error(_edit(stray={"columns": {"x": INT}}))  # units declared: a private table must reach one
    assert "tables.stray" in msg and "reaches no privacy unit" in msg and "public = true" in msg


def test_two_units_or_two_paths_must_be_chosen_between():
    d = _edit(
        supplier={"columns": {"s_suppkey": INT}},
        lineitem={"references": {"l_orderkey": "orders", "l_suppkey": "supplier"}},
    )
    d["units"]["supplier"] = {"table": "supplier", "key": "s_suppkey"}
    assert "reach the units 'customer', 'supplier'" in _error(d)
    d["tables"]["lineitem"]["privacy_unit"] = "supplier"
    assert parse_config(d).tables["lineitem"].privacy_unit == "l_suppkey"
    d = _edit(transfers={"columns": {"a": INT, "b": INT}, "references": {"a": "customer", "b": "customer"}})
    assert "several paths reach unit 'customer'" in _error(d)
    d["tables"]["transfers"]["privacy_unit"] = "a"
    assert parse_config(d).tables["transfers"].unit == "customer"


def test_a_cycle_of_references_does_not_hang():
    d = _edit(
        a={"columns": {"id": INT, "b": INT}, "key": "id", "references": {"b": "b"}},
        b={
            "columns": {"id": INT, "a": INT, "c": INT},
            "key": "id",
            "references": {"a": "a", "c": "customer"},
        },
    )
    t = parse_config(d).tables
    assert t["a"].privacy_unit == "b.c" and t["b"].privacy_unit == "c" and t["a"].unit == "customer"


def test_composite_keys():
    t = parse_config(TPCH).tables
    assert t["partsupp"].key_columns == ("ps_partkey", "ps_suppkey") and t["nation"].key_columns == (
        "n_nationkey",
    )
    assert parse_config(_edit(nation={"key": ["n_nationkey"]})).tables["nation"].key == "n_nationkey"
    assert "tables.partsupp.key" in _error(_edit(partsupp={"key": []}))
    assert "tables.partsupp.key" in _error(_edit(partsupp={"key": ["ps_partkey", "ps_partkey"]}))
    assert "'nope' is not a declared column" in _error(_edit(partsupp={"key": ["ps_partkey", "nope"]}))
    msg = _error(_edit(orders={"key": ["o_orderkey", "o_custkey"]}))
    assert "tables.orders" in msg and "composite key" in msg
    msg = _error(_edit(lineitem={"references": {"l_orderkey": "orders", "l_partkey": "partsupp"}}))
    assert "tables.lineitem.references.l_partkey" in msg and "composite key" in msg
