"""bench.user_level's speed table (``bench/user_level_speed.py``) on a tiny TPC-H (SF 0.001),
on DuckDB: every statement is timed raw and bounded, the other plan of the bounded scan beside
it where the source is one table (and only there), and the table closes with one HEADLINE line
with PASS or MISS. The bounded scan and the other plan give the same cells (the dialect's
choice is a matter of speed only). No timing is asserted."""

from __future__ import annotations

import duckdb
import pytest

import rewriter
from bench import tpch, user_level
from bench import user_level_speed as speed

pytestmark = pytest.mark.skipif(
    tpch.tpchgen() is None, reason="tpchgen-cli not installed (pip install '.[test]')"
)

SF = 0.001


def test_speed_table_and_headline(capsys):
    rows = speed.measure(SF, "duckdb", 1, user_level)
    assert [s.name for s, _ in rows] == [s.name for s in speed.SPEEDS]
    for s, t in rows:
        assert t["raw"] > 0 and t["dp"] > 0 and t["dp/raw"] > 0
        assert ("other" in t) == ("JOIN" not in s.sql() and s.table == "orders"), s.name
    speed.report({SF: rows}, "duckdb", 1)
    heads = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("HEADLINE:")]
    assert len(heads) == 1 and heads[0].rstrip().endswith(("PASS", "MISS"))


def test_headline_judges_each_goal_and_prints_the_floor(capsys):
    """Each goal is printed with its ratio and its own verdict; the small-key goal with its
    floor (the per-unit count alone, timed in the same rounds) and, on a file held read-only, the
    scan that computes the heavy units itself; without an SF 1 run, MISS."""
    rows = speed.measure(SF, "duckdb", 1, user_level)
    for s, t in rows:
        assert ("floor" in t) == (s.goal == "small"), s.name
        kept = not s.source  # one table (orders), or Q1's lookup (lineitem)
        assert ("unkept" in t) == ("kept" in t) == kept, s.name  # the kept heavy units
    speed.report({1.0: rows, 0.1: rows}, "duckdb", 1)
    head = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("HEADLINE:"))
    for goal in ("[1] small key", "[2] SF 1 ratio", "[3] FK path", "[4] bounded scan"):
        verdict = head.split(goal, 1)[1].split(":", 1)[1].split("(", 1)[0].strip()
        assert verdict in ("PASS", "MISS", "not measured"), (goal, head)
    assert "the per-unit count alone" in head and "the heavy units computed by the scan" in head
    speed.report({0.1: rows}, "duckdb", 1)
    assert capsys.readouterr().out.rstrip().endswith("MISS")


def test_every_plan_gives_the_same_cells():
    """The dialect's plan, the other one and the scan served from the file held read-only (its
    heavy units kept: :func:`bench.user_level_speed.served_scan`) give the same cells."""
    con = duckdb.connect(str(speed.data(SF)), read_only=True)
    cfg = speed.config(con, user_level)
    for s in speed.SPEEDS:
        plan = rewriter.build_plan(rewriter.parse(s.sql()), cfg)
        one = sorted(user_level._rows(con, rewriter.to_sql(plan, "duckdb", speed.SALT)), key=repr)
        for sql in (
            rewriter.to_sql(plan, speed.other_plan("duckdb"), speed.SALT),
            speed.served_scan(con, plan, speed.SALT),
        ):
            other = sorted(user_level._rows(con, sql), key=repr)
            assert len(one) == len(other), s.name
            for a, b in zip(one, other):
                assert all(
                    x == y if not isinstance(x, float) else abs(x - y) <= 1e-9 * max(1.0, abs(x))
                    for x, y in zip(a, b)
                ), (s.name, a, b)
    con.close()
