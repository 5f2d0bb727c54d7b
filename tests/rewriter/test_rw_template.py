"""Plan templates (rewriter/template.py): statements equal up to the integer
literals of their row comparisons share one plan, and a filled template is
exactly the full plan — same canonical text (release key), same backend SQL,
equal Plan — or no template is used at all."""

from __future__ import annotations

import random

import pytest

from proxy.pipeline.release import releases_of
from rewriter import build_plan, parse, to_sql, tokenize
from rewriter.errors import Refusal
from rewriter.template import Templates, mask


@pytest.fixture(scope="module")
def demo_config():
    import tomllib

    from config import parse_config
    from proxy.demo import demo_config_path

    data = tomllib.loads(demo_config_path().read_text())
    data["server"]["auth"] = "trust"
    return parse_config(data)


TEMPLATED = [
    "SELECT region, COUNT(*), AVG(income) FROM people WHERE age BETWEEN {a} AND {b} GROUP BY region",
    "SELECT COUNT(*), SUM(income) FROM people WHERE age > {a} AND age < {b}",
    "SELECT COUNT(*) FROM people WHERE age >= {a} OR income <= {b}",
]
NOT_TEMPLATED = [  # a value could change an ordering or a rule: planned in full
    "SELECT COUNT(*) FROM people WHERE age <> {a} AND age <> {b}",  # conjuncts sorted by text
    "SELECT COUNT(*) FROM people WHERE age = {a} OR age = {b}",  # OR chain sorted by text
    "SELECT COUNT(*) FROM people WHERE age + {a} > {b}",  # literal in arithmetic
    "SELECT region, COUNT(*) FROM people WHERE age > {a} GROUP BY region LIMIT {b}",  # LIMIT
    "SELECT COUNT(*) FROM people WHERE {a} < age AND age < {b}",  # literal as the subject
]


def _same(p1, p2, dialect="duckdb"):
    assert p1 == p2
    assert p1.canonical() == p2.canonical() and p1.fingerprint() == p2.fingerprint()
    assert to_sql(p1, dialect) == to_sql(p2, dialect)


@pytest.mark.parametrize("dialect", ["duckdb", "postgres"])
def test_filled_templates_equal_full_plans(demo_config, dialect):
    rng = random.Random(5)
    t = Templates()
    for q in TEMPLATED + NOT_TEMPLATED:
        for _ in range(25):
            a, b = rng.randrange(0, 100), rng.randrange(100, 10**9)
            sql = q.format(a=a, b=b)
            filled, full = t.plan(sql, demo_config, dialect), build_plan(parse(sql), demo_config)
            _same(filled, full, dialect)
            assert releases_of(filled, 0.7) == releases_of(full, 0.7)  # memo shared across fills
    assert t.filled == 24 * len(TEMPLATED)  # every statement after the first of each key


def test_templates_are_refused_where_values_matter(demo_config):
    t = Templates()
    for q in NOT_TEMPLATED:
        t.plan(q.format(a=1, b=2), demo_config, "duckdb")
        assert t.get(mask(tokenize(q.format(a=1, b=2)))[0]) is None


def test_masking_only_short_plain_integers():
    assert mask(tokenize("SELECT COUNT(*) FROM t WHERE a > 5"))[1] == [5]
    for sql in (
        "SELECT COUNT(*) FROM t WHERE a > 5.5",
        "SELECT COUNT(*) FROM t WHERE a > 1234567890",
        "SELECT COUNT(*) FROM t WHERE a > 05",
        "SELECT COUNT(*) FROM t WHERE a > $1",
        "SELECT COUNT(*) FROM t WHERE a > 1e3",
        "SELECT COUNT(*) FROM t",
    ):
        assert mask(tokenize(sql)) is None, sql
    k1 = mask(tokenize("SELECT COUNT(*) FROM t WHERE a > 5"))[0]
    assert k1 == mask(tokenize("SELECT COUNT(*) FROM t WHERE a > 77"))[0]
    assert k1 != mask(tokenize("SELECT COUNT(*) FROM t WHERE b > 5"))[0]
    assert k1 != mask(tokenize("SELECT COUNT(*) FROM t WHERE a >= 5"))[0]


def test_refusals_are_not_bypassed(demo_config):
    """A refused first statement leaves no template; a refused statement of a
    templated key is still refused (its shape, not its values, is refused)."""
    t = Templates()
    with pytest.raises(Refusal):
        t.plan("SELECT age FROM people WHERE age > 5", demo_config, "duckdb")
    with pytest.raises(Refusal):
        t.plan("SELECT age FROM people WHERE age > 6", demo_config, "duckdb")
    assert t.filled == 0


def test_repeated_values_are_planned_in_full(demo_config):
    t = Templates()
    q = "SELECT COUNT(*) FROM people WHERE age > {a} AND age < {b}"
    t.plan(q.format(a=10, b=20), demo_config, "duckdb")
    _same(
        t.plan(q.format(a=30, b=30), demo_config, "duckdb"),
        build_plan(parse(q.format(a=30, b=30)), demo_config),
    )
    assert t.filled == 0


def _params_sql(q: str) -> str:
    return q.format(a="$1", b="$2")


@pytest.mark.parametrize("untyped", [False, True], ids=["int", "text"])
def test_parameters_share_templates(demo_config, untyped):
    """A driver's statement with $1, $2 (values sent typed as integers, or untyped as their
    digits, as node-postgres and pgbench send them) plans exactly as the rewriter binds
    them, and shares a template where its literal twin would."""
    rng = random.Random(11)
    t = Templates()
    for q in TEMPLATED + NOT_TEMPLATED:
        sql = _params_sql(q)
        for _ in range(25):
            a, b = rng.randrange(0, 100), rng.randrange(100, 10**9)
            params = [str(a), str(b)] if untyped else [a, b]
            filled = t.plan(sql, demo_config, "postgres", list(params))
            full = build_plan(parse(sql), demo_config, list(params))
            _same(filled, full, "postgres")
            _same(
                filled, build_plan(parse(q.format(a=a, b=b)), demo_config), "postgres"
            )  # = the literal twin
    assert t.filled == 24 * len(TEMPLATED)


def test_parameters_planned_in_full_where_their_values_would_not_be_literals(demo_config):
    """A parameter compared with a text column stays a text value: no template stands for it."""
    t = Templates()
    sql = "SELECT COUNT(*) FROM people WHERE region = $1 AND age > $2"
    for v in ("1", "2", "3"):
        _same(t.plan(sql, demo_config, "duckdb", [v, 30]), build_plan(parse(sql), demo_config, [v, 30]))
    assert t.filled == 0


def test_masking_parameters():
    sql = "SELECT COUNT(*) FROM t WHERE a > $1 AND b < 7"
    assert mask(tokenize(sql)) is None  # no values: planned in full
    assert mask(tokenize(sql), [5])[1] == [5, 7]
    assert mask(tokenize(sql), ["5"])[1] == [5, 7]
    assert mask(tokenize(sql), [5])[0] != mask(tokenize(sql), ["5"])[0]  # typed and untyped: two keys
    for bad in (5.0, True, "05", "-3", "+3", " 3", "٣", "abc", 10**9, -1, None, [1]):
        assert mask(tokenize(sql), [bad]) is None, bad
    assert mask(tokenize("SELECT COUNT(*) FROM t WHERE a > $2"), [5]) is None  # no such parameter
