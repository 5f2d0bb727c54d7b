"""Fail closed on the AST for local (metric-LDP) tables: the local rules (private-column
weights, aggregates, percentiles, GROUP BY / ORDER BY) refuse a node carrying an argument
they do not interpret, naming the SQL construct (0A000)."""

from __future__ import annotations

import pytest
from sqlglot import exp

from config import parse_config
from rewriter import parse
from rewriter.args import ALLOWED, sql_name
from rewriter.errors import Refusal
from rewriter.local import plan_local

CFG = {
    "server": {"auth": "trust"},
    "tiers": {"t": {"epsilon": 1, "budget": 1}},
    "roles": {"a": {"tier": "t"}},
    "tables": {
        "tl": {
            "mode": "local",
            "columns": {
                "x": {"type": "int"},
                "y": {"type": "float"},
                "g": {"type": "int", "domain": [1, 2, 3]},
            },
            "local": {
                "estimator": "known_n",
                "columns": {
                    "x": {"lo": 0, "hi": 20, "buckets": 20, "epsilon": 1.0},
                    "y": {"lo": 0, "hi": 10, "buckets": 5, "epsilon": 1.0},
                },
            },
        }
    },
}

CASES = [
    ("SELECT COUNT(*) FROM tl WHERE x BETWEEN 3 AND 12", exp.Between),
    ("SELECT COUNT(*) FROM tl WHERE x > 3 AND x < 9", exp.GT),
    ("SELECT COUNT(*) FROM tl WHERE NOT x > 3", exp.Not),
    ("SELECT COUNT(*) FROM tl WHERE x IN (1, 2)", exp.In),
    ("SELECT SUM(CASE WHEN x < 5 THEN 2 ELSE x / 2 END) FROM tl", exp.Case),
    ("SELECT SUM(CASE WHEN x < 5 THEN 2 ELSE x / 2 END) FROM tl", exp.If),
    ("SELECT SUM(CASE WHEN x < 5 THEN 2 ELSE x / 2 END) FROM tl", exp.Div),
    ("SELECT SUM(x * 2) FROM tl", exp.Mul),
    ("SELECT SUM(y) FROM tl", exp.Sum),
    ("SELECT AVG(y) FROM tl", exp.Avg),
    ("SELECT g, COUNT(*) FROM tl GROUP BY g", exp.Group),
    ("SELECT g, COUNT(*) FROM tl GROUP BY g ORDER BY g", exp.Ordered),
    ("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY y) FROM tl", exp.WithinGroup),
    ("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY y) FROM tl", exp.PercentileDisc),
]


@pytest.fixture(scope="module")
def cfg():
    return parse_config(CFG)


@pytest.mark.parametrize("sql,kind", CASES, ids=[f"{k.__name__}" for _, k in CASES])
def test_local_rule_refuses_unknown_argument(cfg, sql, kind):
    plan_local(parse(sql), cfg, [])  # accepted as written
    for key in ["dpgate_unknown_arg"] + sorted(set(kind.arg_types) - ALLOWED[kind]):
        tree = parse(sql)
        node = next(n for n in tree.walk() if type(n) is kind)
        node.set(key, True)
        with pytest.raises(Refusal) as err:
            plan_local(tree, cfg, [])
        assert err.value.sqlstate == "0A000", (key, err.value.message)
        assert sql_name(node) in err.value.message, (key, err.value.message)
