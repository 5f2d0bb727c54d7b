"""A WHERE conjunct restricts a derived key's domain (rewriter.keyfilter): on the key's own
expression (compared on the checked parse tree), or — for a CASE key — on the one column
its conditions compare with literals; anything else leaves the domain whole (every label
released, the empty ones at a noisy 0). The oracle (tests/oracle, hand corpus) checks the
rows against DuckDB and Postgres; these pin the domain each rule keeps."""

from __future__ import annotations

import random

import pytest
from rw_data import CONFIG

import rewriter
from config import parse_config

BAND = "CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'mid' ELSE 'old' END"


@pytest.fixture(scope="module")
def cfg():
    return parse_config(CONFIG)


def _domain(sql, cfg):
    p = rewriter.build_plan(rewriter.parse(sql), cfg)
    return p.group_by[0].domain, p.key_filter


@pytest.mark.parametrize(
    "where, kept",
    [
        ("age < 30", ("young",)),
        ("age >= 30", ("mid", "old")),
        ("age BETWEEN 25 AND 35", ("young", "mid")),
        ("age = 60", ("old",)),
        ("age > 1000", ("old",)),  # beyond the declared bounds: still the ELSE's
        ("age IN (10, 70)", ("young", "old")),
        ("NOT (age < 30) AND age < 60", ("mid",)),
        ("age IS NULL", ("old",)),  # NULL takes the ELSE
        ("age < 30 OR age IS NULL", ("young", "old")),
        ("age <> 45", ("young", "mid", "old")),
        ("age < -1", ("young",)),  # a literal under unary minus cuts at -1
        ("age BETWEEN -5 AND -2 OR age > 70", ("young", "old")),
    ],
)
def test_case_key_restricted_by_its_column(cfg, where, kept):
    dom, touched = _domain(f"SELECT {BAND} AS band, COUNT(*) FROM pums WHERE {where} GROUP BY band", cfg)
    assert dom == kept and touched


@pytest.mark.parametrize(
    "where",
    [
        "age + 1 < 30",  # arithmetic on the column: not cut into pieces
        "abs(age) < 30",  # a function
        "income < 30",  # another column
        "age < income",  # two columns
    ],
)
def test_case_key_left_whole_when_not_understood(cfg, where):
    dom, touched = _domain(f"SELECT {BAND} AS band, COUNT(*) FROM pums WHERE {where} GROUP BY band", cfg)
    assert dom == ("young", "mid", "old") and not touched


def test_case_without_else_keeps_null_only_when_a_row_can_reach_it(cfg):
    case = "CASE WHEN age < 30 THEN 'young' END"
    assert _domain(f"SELECT {case}, COUNT(*) FROM pums WHERE age < 20 GROUP BY 1", cfg)[0] == ("young",)
    assert _domain(f"SELECT {case}, COUNT(*) FROM pums WHERE age > 20 GROUP BY 1", cfg)[0] == ("young", None)


def test_like_against_a_text_case_is_left_whole(cfg):
    case = "CASE WHEN state = 'ca' THEN 'west' ELSE 'east' END"
    assert _domain(f"SELECT {case}, COUNT(*) FROM pums WHERE state = 'ny' GROUP BY 1", cfg)[0] == ("east",)
    dom, touched = _domain(f"SELECT {case}, COUNT(*) FROM pums WHERE state LIKE 'c%' GROUP BY 1", cfg)
    assert dom == ("west", "east") and not touched


def test_bin_and_boolean_keys_restricted_by_their_own_expression(cfg):
    dom, _ = _domain(
        "SELECT floor(age / 10) * 10 AS b, COUNT(*) FROM pums WHERE floor(age / 10) * 10 >= 80 GROUP BY 1",
        cfg,
    )
    assert dom == (80, 90, 100)
    dom, _ = _domain("SELECT age > 50, COUNT(*) FROM pums WHERE age > 50 GROUP BY 1", cfg)
    assert dom == (True,)
    dom, touched = _domain(
        "SELECT floor(age / 10) * 10 AS b, COUNT(*) FROM pums WHERE age >= 80 GROUP BY 1", cfg
    )
    assert None in dom and 0 in dom and not touched  # the column, not the key: left whole


def _random_case(rnd):
    """A CASE over income (float) with 1-3 branches of comparisons with literals, and a WHERE
    of comparisons, BETWEEN, IN and IS NULL joined by AND/OR/NOT."""
    lits = [-50, -1, 0, 0.5, 1, 7, 30, 99.5, 100, 1000]

    def atom():
        k = rnd.randrange(6)
        v = rnd.choice(lits)
        if k == 0:
            return f"income {rnd.choice(['<', '<=', '>', '>=', '=', '<>'])} {v}"
        if k == 1:
            lo, hi = sorted(rnd.sample(lits, 2))
            return f"income BETWEEN {lo} AND {hi}"
        if k == 2:
            return f"income IN ({', '.join(str(x) for x in rnd.sample(lits, 3))})"
        if k == 3:
            return "income IS NULL" if rnd.random() < 0.5 else "income IS NOT NULL"
        if k == 4:
            return f"NOT ({atom()})"
        return f"({atom()} {rnd.choice(['AND', 'OR'])} {atom()})"

    branches = " ".join(f"WHEN {atom()} THEN 'l{j}'" for j in range(rnd.randint(1, 3)))
    default = " ELSE 'other'" if rnd.random() < 0.7 else ""
    return f"CASE {branches}{default} END", atom()


def test_case_restriction_never_drops_a_label_a_row_can_have(cfg, duck):
    """Soundness, against DuckDB itself: for 300 random CASE keys and WHERE conjuncts, every
    label some income value gives with the WHERE true — integers and halves from -60 to 1010,
    ±Infinity, NaN and NULL — is in the restricted domain (fixed seed)."""
    rnd = random.Random(20261128)
    values = [x / 2 for x in range(-120, 2021)] + [float("inf"), float("-inf"), float("nan"), None]
    duck.execute("CREATE TEMP TABLE vals (income DOUBLE)")
    duck.executemany("INSERT INTO vals VALUES (?)", [(v,) for v in values])
    restricted = 0
    for _ in range(300):
        case, where = _random_case(rnd)
        dom, touched = _domain(f"SELECT {case} AS k, COUNT(*) FROM pums WHERE {where} GROUP BY 1", cfg)
        have = {r[0] for r in duck.execute(f"SELECT DISTINCT {case} FROM vals WHERE {where}").fetchall()}
        assert have <= set(dom), (case, where, dom, have)
        restricted += bool(touched)
    duck.execute("DROP TABLE vals")
    assert restricted > 250  # the rule applies to nearly all of them


def test_text_case_restriction_never_drops_a_label_a_row_can_have(cfg, duck):
    """The same over a text column: =, <>, IN, IS NULL; values the literals, others, '' and NULL."""
    rnd = random.Random(20261129)
    lits = ["ca", "ny", "tx", "zz"]

    def atom():
        k = rnd.randrange(5)
        if k == 0:
            return f"state {rnd.choice(['=', '<>'])} '{rnd.choice(lits)}'"
        if k == 1:
            return f"state IN ({', '.join(repr(x) for x in rnd.sample(lits, 2))})"
        if k == 2:
            return "state IS NULL" if rnd.random() < 0.5 else "state IS NOT NULL"
        if k == 3:
            return f"NOT ({atom()})"
        return f"({atom()} {rnd.choice(['AND', 'OR'])} {atom()})"

    duck.execute("CREATE TEMP TABLE tvals (state TEXT)")
    duck.executemany("INSERT INTO tvals VALUES (?)", [(v,) for v in [*lits, "CA", "", "other", None]])
    restricted = 0
    for _ in range(200):
        case = (
            "CASE "
            + " ".join(f"WHEN {atom()} THEN 'l{j}'" for j in range(rnd.randint(1, 3)))
            + " ELSE 'e' END"
        )
        where = atom()
        dom, touched = _domain(f"SELECT {case} AS k, COUNT(*) FROM pums WHERE {where} GROUP BY 1", cfg)
        have = {r[0] for r in duck.execute(f"SELECT DISTINCT {case} FROM tvals WHERE {where}").fetchall()}
        assert have <= set(dom), (case, where, dom, have)
        restricted += bool(touched)
    duck.execute("DROP TABLE tvals")
    assert restricted > 150
