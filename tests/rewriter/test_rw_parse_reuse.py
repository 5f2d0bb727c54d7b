"""`rewriter.parse` reuses one tokenizer/parser pair per thread: it must give what
`sqlglot.parse(sql, read="postgres")` gives, on every thread, with errors intact."""

from __future__ import annotations

import threading

import pytest
import sqlglot

from rewriter import parse
from rewriter.errors import Refusal

STATEMENTS = [
    f"SELECT sex, COUNT(*), AVG(age) FROM pums WHERE age BETWEEN {i} AND {i + 7} "
    f"AND educ IN ({i % 16}, {(i * 7) % 16}) GROUP BY sex ORDER BY 2 DESC LIMIT {1 + i % 3}"
    for i in range(200)
]


def test_same_tree_as_sqlglot_parse():
    for sql in STATEMENTS[:50] + ["SELECT 1", "SELECT 'a''b', $1, -2.5e3 FROM t"]:
        assert parse(sql) == sqlglot.parse_one(sql, read="postgres")


def test_threads_do_not_share_parser_state():
    errors: list = []

    def work(k: int) -> None:
        try:
            for sql in STATEMENTS[k::4] * 3:
                assert parse(sql).sql("postgres") == sqlglot.parse_one(sql, read="postgres").sql("postgres")
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_syntax_errors_still_refused_and_parser_reusable():
    with pytest.raises(Refusal) as e:
        parse("SELECT FROM WHERE (")
    assert e.value.sqlstate == "42601"
    with pytest.raises(Refusal):
        parse("SELECT 'unterminated")
    assert parse("SELECT 2") == sqlglot.parse_one("SELECT 2", read="postgres")


def test_canonical_where_matches_sqlglot_generation():
    """The plan's canonical text (release-store key) uses a reused generator; it must
    equal what `Expression.sql(dialect="postgres", normalize=True)` writes."""
    from sqlglot import exp

    from rewriter.plan import _canonical_where

    for sql in STATEMENTS[:30] + ["SELECT 1 FROM t WHERE NOT (a LIKE 'x%' OR b IS NULL) AND c <> 3"]:
        where = sqlglot.parse_one(sql, read="postgres").args["where"].this
        parts = list(where.flatten()) if isinstance(where, exp.And) else [where]
        expected = " AND ".join(sorted(c.sql(dialect="postgres", normalize=True) for c in parts))
        assert _canonical_where(where) == expected


@pytest.mark.parametrize("dialect", ["duckdb", "postgres"])
def test_backend_sql_matches_sqlglot_generation(dialect):
    """to_sql fills the cached skeleton with the predicate from a reused generator:
    the result equals generating the statement around a parenthesised predicate."""
    import dataclasses

    from sqlglot import exp

    from config import parse_config
    from rewriter import build_plan, to_sql
    from rewriter.emit import build
    from support.service import make_config

    cfg = parse_config(make_config())
    for sql in STATEMENTS[:20]:
        plan = build_plan(parse(sql), cfg)
        whole = build(dataclasses.replace(plan, where=exp.Paren(this=plan.where.copy())))
        assert to_sql(plan, dialect) == whole.sql(dialect=dialect, identify=True)
