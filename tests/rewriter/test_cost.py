"""The per-row cost caps (rewriter/cost.py): each cap refuses just above its
limit with 54000 / 54001 and a hint, and admits the statement at its limit."""

from __future__ import annotations

import pytest
from rw_data import CONFIG

from config import parse_config
from rewriter import build_plan, parse
from rewriter.cost import check
from rewriter.errors import Refusal

Q = "SELECT COUNT(*) FROM pums WHERE "


def _cfg(**limits):
    return parse_config({**CONFIG, "server": {"auth": "trust", "limits": limits}})


def _refused(sql: str, config, params=None) -> Refusal:
    with pytest.raises(Refusal) as r:
        build_plan(parse(sql), config, params)
    assert r.value.hint and "[server.limits]" in r.value.hint or r.value.sqlstate == "54001"
    return r.value


def test_defaults_admit_ordinary_statements(config):
    lim = config.server.limits
    assert (lim.max_literal_chars, lim.max_pattern_chars, lim.max_pattern_wildcards) == (256, 128, 16)
    build_plan(parse(Q + "name LIKE '%" + "a" * 100 + "%' AND state IN ('ca', 'ny')"), config)
    build_plan(parse(Q + "age IN (" + ", ".join(map(str, range(500))) + ")"), config)


def test_literal_cap(config):
    build_plan(parse(Q + f"name = '{'x' * 256}'"), config)
    r = _refused(Q + f"name = '{'x' * 257}'", config)
    assert r.sqlstate == "54000" and "257 characters" in r.message
    # dollar quoting, E'' strings and long numbers are literals too
    assert _refused(Q + f"name = $${'x' * 300}$$", config).sqlstate == "54000"
    assert _refused(Q + f"name = E'{'x' * 300}'", config).sqlstate == "54000"
    assert _refused(Q + f"age = {'1' * 300}", config).sqlstate == "54000"


def test_a_huge_greatest_like_probe_behind_equalities_is_refused(config):
    """greatest(CAST(col AS text), '<300 KB>') LIKE '<150 KB>' behind equality filters."""
    sql = (
        Q + f"sex = 1 AND race = 2 AND greatest(CAST(age AS text), '{'z' * 300_000}') LIKE '%{'z%' * 75_000}'"
    )
    assert _refused(sql, config).sqlstate == "54000"


def test_parameters_are_capped(config):
    sql = Q + "name LIKE $1"
    build_plan(parse(sql), config, ["a" * 128])
    assert "LIKE pattern" in _refused(sql, config, ["a" * 129]).message
    assert _refused(Q + "name = $1", config, ["a" * 257]).sqlstate == "54000"


def test_pattern_caps(config):
    build_plan(parse(Q + f"name LIKE '{'a' * 128}'"), config)
    assert "LIKE pattern of 129" in _refused(Q + f"name LIKE '{'a' * 129}'", config).message
    build_plan(parse(Q + f"name ILIKE '{'%a' * 8}{'_' * 8}'"), config)  # 16 wildcards
    r = _refused(Q + f"name ILIKE '{'%a' * 8}{'_' * 9}'", config)
    assert "17 wildcards" in r.message
    # counted over the statement: many short '%______x%' patterns would each cost
    # the row's length times their wildcards (measured: ~1.3 ms per matching row)
    two = Q + f"name LIKE '%{'_' * 7}x' OR name LIKE '%{'_' * 7}y'"
    build_plan(parse(two), config)
    assert "together" in _refused(two + " OR name LIKE 'z%'", config).message
    build_plan(parse(Q + "name LIKE '" + "\\%" * 40 + "'"), config)  # escaped: not wildcards


def test_total_literal_cap(config):
    parts = " OR ".join(f"name = '{i:03d}{'x' * 200}'" for i in range(10))  # 2030 chars
    build_plan(parse(Q + parts), config)
    parts = " OR ".join(f"name = '{i:03d}{'x' * 200}'" for i in range(11))
    assert "together" in _refused(Q + parts, config).message


def test_node_depth_and_in_caps(config):
    small = _cfg(max_nodes=200, max_depth=20, max_in_list=10)
    build_plan(parse(Q + "age IN (" + ", ".join(map(str, range(10))) + ")"), small)
    assert "IN list has 11" in _refused(Q + "age IN (" + ", ".join(map(str, range(11))) + ")", small).message
    ors = " OR ".join(f"age = {i}" for i in range(100))
    assert "syntax nodes" in _refused(Q + ors, small).message
    deep = Q + "(" * 30 + "age = 1" + ")" * 30
    assert _refused(deep, small).sqlstate == "54001"
    # the default depth cap stops a deep tree before any recursive rule runs
    r = _refused(Q + "(" * 200 + "age = 1" + ")" * 200, config)
    assert r.sqlstate == "54001" and "nested too deeply" in r.message


def test_text_ops_cap(config):
    ok = Q + " OR ".join(f"lower(name) = 'x{i}'" for i in range(16))
    build_plan(parse(ok), config)
    r = _refused(ok + " OR upper(name) = 'y'", config)
    assert "more than 16 text operations" in r.message


def test_text_builders_are_bounded_from_the_parse(config):
    """repeat / lpad / || build texts longer than their inputs: refused (54000) when
    the bound from the parse exceeds the cap or cannot be given, before the function
    allow-list (which refuses them anyway) is consulted."""
    for sql in (
        Q + "name = repeat('ab', 200)",
        Q + "name = lpad(name, 100000)",
        Q + "name = repeat('a', age)",
        Q + "name = " + " || ".join([f"'{'y' * 100}'"] * 3),
    ):
        assert _refused(sql, config).sqlstate == "54000", sql
    check(parse(Q + "name = repeat('ab', 10)"), config)  # within the caps
    r = pytest.raises(Refusal, build_plan, parse(Q + "name = repeat('ab', 10)"), config)
    assert r.value.sqlstate == "42883"  # not allowed anyway


def test_per_record_and_extreme_go_through_the_caps(config):
    from rewriter.extreme import build_extreme_plan

    with pytest.raises(Refusal) as r:
        build_extreme_plan(parse(f"SELECT MAX(age) FROM pums WHERE name = '{'q' * 300}'"), config)
    assert r.value.sqlstate == "54000"


def test_local_planner_checks_too():
    from rewriter.local import plan_local

    cfg = parse_config(
        {
            "server": {"auth": "trust"},
            "tiers": {"t": {"epsilon": 1, "budget": 1}},
            "roles": {"a": {"tier": "t"}},
            "tables": {
                "tl": {
                    "mode": "local",
                    "columns": {"x": {"type": "int"}, "g": {"type": "text"}},
                    "local": {"columns": {"x": {"lo": 0, "hi": 20, "buckets": 20, "epsilon": 1.0}}},
                }
            },
        }
    )
    with pytest.raises(Refusal) as r:
        plan_local(parse(f"SELECT AVG(x) FROM tl WHERE g = '{'q' * 300}'"), cfg, [])
    assert r.value.sqlstate == "54000"


def test_caps_are_configurable():
    cfg = _cfg(max_literal_chars=1000, max_total_literal_chars=4000)
    build_plan(parse(Q + f"name = '{'x' * 900}'"), cfg)
    with pytest.raises(Exception):
        parse_config({**CONFIG, "server": {"auth": "trust", "limits": {"max_literal_chars": 2}}})
