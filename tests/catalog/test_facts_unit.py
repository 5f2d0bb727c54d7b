"""The column and table comments (\\d+, information_schema, pg_description)
state the privacy unit, partition selection, keys, references and public tables."""

from __future__ import annotations

import tomllib

from config import parse_config
from proxy.catalog.facts import column_comment, table_comment
from proxy.demo import demo_config_path


def _cfg():
    raw = tomllib.loads(demo_config_path().read_text())
    raw["server"] = {"auth": "trust"}
    for r in raw["roles"].values():
        r.pop("scram", None)
    return parse_config(raw)


def test_unit_selection_keys_and_public_tables_are_described():
    t = _cfg().tables
    p = t["purchases"]
    assert "privacy unit" in column_comment(p, "customer_id", p.columns["customer_id"])
    assert "partition selection" in column_comment(p, "city", p.columns["city"])
    assert "per customer_id" in table_comment(p) and "10 group(s) × 10 row(s)" in table_comment(p)
    s = t["stores"]
    assert "public table" in table_comment(s) and "key" in column_comment(
        s, "store_id", s.columns["store_id"]
    )
    i = t["order_items"]
    assert "references orders" in column_comment(i, "order_id", i.columns["order_id"])
    assert "per orders.customer_id" in table_comment(i)
    assert "per row" in table_comment(t["pums"])


def test_a_declared_unit_and_its_path_are_described():
    """[units.customer]: each table names the unit, the path that reaches it, and a public
    table's composite key."""
    i = {"type": "int"}
    cfg = parse_config(
        {
            "server": {"auth": "trust"},
            "tiers": {"d": {"epsilon": 1, "budget": 10}},
            "roles": {"a": {"tier": "d"}},
            "units": {"customer": {"table": "customer", "key": "c_custkey"}},
            "tables": {
                "customer": {"columns": {"c_custkey": i}},
                "orders": {
                    "columns": {"o_orderkey": i, "o_custkey": i},
                    "key": "o_orderkey",
                    "references": {"o_custkey": "customer"},
                },
                "lineitem": {"columns": {"l_orderkey": i}, "references": {"l_orderkey": "orders"}},
                "partsupp": {
                    "public": True,
                    "columns": {"ps_partkey": i, "ps_suppkey": i},
                    "key": ["ps_partkey", "ps_suppkey"],
                },
            },
        }
    )
    t = cfg.tables
    assert "per customer (" in table_comment(t["orders"])
    assert "per customer (" in table_comment(
        t["lineitem"]
    ) and "reached by l_orderkey → orders.o_custkey" in table_comment(t["lineitem"])
    o = t["orders"]
    assert "privacy unit (customer)" in column_comment(o, "o_custkey", o.columns["o_custkey"])
    li = t["lineitem"]
    assert "the path to privacy unit customer" in column_comment(li, "l_orderkey", li.columns["l_orderkey"])
    ps = t["partsupp"]
    assert "joinable on its key ps_partkey, ps_suppkey" in table_comment(ps)
    assert "key (with ps_suppkey)" in column_comment(ps, "ps_partkey", ps.columns["ps_partkey"])
