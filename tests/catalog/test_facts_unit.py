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
