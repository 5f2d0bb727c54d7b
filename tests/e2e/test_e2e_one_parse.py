"""One parse per statement: routing parses a statement once and hands the tree to its planner
(``Statement.tree``), for a DP SELECT, a Describe (extended protocol) and an EXPLAIN alike
(MAX/MIN included: their planner is named by the route, not found by a failed plan), and
the plan template's key and the parse read routing's one tokenisation. Counted by wrapping
sqlglot's own ``Parser.parse`` and ``Tokenizer.tokenize``, whoever calls them."""

from __future__ import annotations

import itertools

import pytest
from sqlglot import parser as sqlglot_parser
from sqlglot import tokens as sqlglot_tokens

from proxy.pipeline.orchestrator import Connection

_FRESH = itertools.count(17)  # a literal no other statement of the module used: nothing cached


@pytest.fixture()
def counted(monkeypatch):
    """The texts sqlglot parsed and tokenised while the test ran."""
    seen: dict[str, list[str]] = {"parse": [], "tokenize": []}
    parse, tokenize = sqlglot_parser.Parser.parse, sqlglot_tokens.Tokenizer.tokenize

    def counting_parse(self, raw_tokens, sql=None):
        seen["parse"].append(sql)
        return parse(self, raw_tokens, sql)

    def counting_tokenize(self, sql):
        seen["tokenize"].append(sql)
        return tokenize(self, sql)

    monkeypatch.setattr(sqlglot_parser.Parser, "parse", counting_parse)
    monkeypatch.setattr(sqlglot_tokens.Tokenizer, "tokenize", counting_tokenize)
    return seen


def _fresh(template: str) -> str:
    return template.format(n=next(_FRESH) * 1000 + 7)


@pytest.mark.parametrize(
    "template",
    [
        "SELECT sex, COUNT(*) FROM pums WHERE income > {n} GROUP BY sex",
        "SELECT AVG(age) FROM pums WHERE income BETWEEN 1 AND {n} AND sex = 2",
        "SELECT MAX(age) FROM pums WHERE income < {n}",
    ],
)
def test_a_dp_select_is_parsed_once(duck_service, counted, template):
    sql = _fresh(template)
    conn = Connection(duck_service.gw, "analyst", "demo", {})
    res = duck_service._call(conn.execute(sql, []))
    assert res.rows
    assert counted["parse"].count(sql) == 1, counted["parse"]
    assert counted["tokenize"].count(sql) == 1, counted["tokenize"]


@pytest.mark.parametrize(
    "template",
    [
        "SELECT race, SUM(income) FROM pums WHERE age > $1 AND income < {n} GROUP BY race",
        "SELECT COUNT(*) FROM pums WHERE income < {n}",
        "SELECT MAX(income) FROM pums WHERE age > $1 AND income < {n}",
    ],
)
def test_describe_parses_once(duck_service, counted, template):
    sql = _fresh(template)
    conn = Connection(duck_service.gw, "analyst", "demo", {})
    desc = duck_service._call(conn.describe(sql, [0] * sql.count("$")))
    assert desc.columns
    assert counted["parse"].count(sql) == 1, counted["parse"]
    assert counted["tokenize"].count(sql) == 1, counted["tokenize"]


@pytest.mark.parametrize(
    "template",
    [
        "SELECT sex, COUNT(*) FROM pums WHERE income > {n} GROUP BY sex",
        "SELECT MIN(income) FROM pums WHERE age < {n}",
    ],
)
def test_explain_parses_the_explained_statement_once(duck_service, counted, template):
    body = _fresh(template)
    conn = Connection(duck_service.gw, "analyst", "demo", {})
    res = duck_service._call(conn.execute("EXPLAIN " + body, []))
    assert any("backend SQL" in r[0] for r in res.rows)
    assert counted["parse"].count(body) == 1, counted["parse"]
    assert counted["tokenize"].count(body) == 1, counted["tokenize"]


def test_a_repeat_is_not_parsed_again(duck_service, counted):
    """A statement's route and plan are kept by its text: running it again parses nothing (its
    release is served from the ledger)."""
    sql = _fresh("SELECT sex, COUNT(*) FROM pums WHERE income > {n} GROUP BY sex")
    conn = Connection(duck_service.gw, "analyst", "demo", {})
    first = duck_service._call(conn.execute(sql, []))
    parsed, tokenised = list(counted["parse"]), list(counted["tokenize"])
    again = duck_service._call(conn.execute(sql, []))
    assert again.rows == first.rows and "repeat" in again.notices[0]
    assert (counted["parse"], counted["tokenize"]) == (parsed, tokenised)
