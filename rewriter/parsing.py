"""Parsing: one PostgreSQL statement to a sqlglot tree, with the statement's
size bounded before the parser runs (the compiled parser holds the GIL, so its
work must be bounded, not merely moved to a thread)."""

from __future__ import annotations

import threading

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.parser import Parser
from sqlglot.tokenizer_core import Token
from sqlglot.tokens import Tokenizer

from .errors import SYNTAX_ERROR, Refusal
from .lru import LRU
from .spellings import normalize

MAX_TOKENS = 40_000
"""Statements with more tokens are refused (54000) before parsing: parsing costs
time linear in the tokens and holds the interpreter while it runs (40,000 tokens:
an INSERT of a few thousand rows)."""


_LOCAL = threading.local()
_MEMO_CHARS = 4096  # statements' tokens are kept (``tokenize``) up to this length …
_MEMO_SIZE = 64  # … for this many recent texts, process-wide: routing (on the event loop) and
#                  planning (on a worker thread) of one statement read one tokenisation
_MEMO: LRU[str, tuple[list[Token] | None]] = LRU(_MEMO_SIZE)  # (tokens,): None if it does not tokenize


def _postgres() -> tuple[Tokenizer, Parser]:
    """This thread's (tokenizer, parser) for the postgres dialect: what
    ``sqlglot.parse(sql, read="postgres")`` builds per call, built once (they
    are stateful, hence one pair per thread)."""
    pair: tuple[Tokenizer, Parser] | None = getattr(_LOCAL, "pair", None)
    if pair is None:
        dialect = Postgres()
        pair = _LOCAL.pair = (dialect.tokenizer(), dialect.parser())
    return pair


def parse(sql: str) -> exp.Expression:
    """Parse one PostgreSQL statement; syntax errors become Refusal 42601."""
    tokens: list[Token] = []
    try:
        tokenizer, parser = _postgres()
        tokens = tokenize(sql) or tokenizer.tokenize(sql)  # (again: a text that does not tokenize raises)
        if len(tokens) > MAX_TOKENS:
            raise Refusal(
                "54000",
                f"statement too complex: {len(tokens)} tokens, the limit is {MAX_TOKENS}.",
                hint="Split it, or use fewer terms (an IN list or BETWEEN instead of many ORs).",
            )
        exprs = [e for e in parser.parse(tokens, sql) if e is not None]
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        where = f" at line {err.get('line')}, column {err.get('col')}" if err.get("line") else ""
        desc = err.get("description") or str(e).splitlines()[0]
        top = len(tokens) > 2 and tokens[0].text.upper() == "SELECT" and tokens[1].text.upper() == "TOP"
        raise Refusal(
            SYNTAX_ERROR,
            f"syntax error{where}: {desc}",
            hint="SELECT TOP n is T-SQL; write LIMIT n at the end (or FETCH FIRST n ROWS ONLY)."
            if top
            else None,
        ) from None
    except SqlglotError as e:
        raise Refusal(SYNTAX_ERROR, f"syntax error: {str(e).splitlines()[0]}", hint=None) from None
    if len(exprs) != 1:
        raise Refusal(SYNTAX_ERROR, f"expected one statement, got {len(exprs)}.", hint=None)
    tree = exprs[0]
    if not isinstance(tree, exp.Expression):  # every statement node is an Expression
        raise Refusal(SYNTAX_ERROR, f"unexpected statement {type(tree).__name__}.", hint=None)
    return normalize(_tsql_statistics(_complete(tree)))


def _complete(tree: exp.Expression) -> exp.Expression:
    """``tree`` if every node carries the arguments its type requires; sqlglot builds some
    functions without checking their arity (``floor()``, ``date_trunc()``), and a rule
    that reads a missing argument would fail with an internal error, not refuse."""
    for node in tree.walk():
        for k, required in node.arg_types.items():
            if required and node.args.get(k) is None:
                name = f"{node.sql_name().lower()}()" if isinstance(node, exp.Func) else "this clause"
                raise Refusal(
                    SYNTAX_ERROR,
                    f"{name} is missing an argument.",
                    hint="Write it with all its arguments, as in PostgreSQL.",
                )
    return tree


#: T-SQL's variance spellings (SmartNoise SQL's PUMS queries use them; Postgres has no function
#: of these names): VAR is the sample variance, VARP the population one (STDEV parses as STDDEV).
_TSQL_STATS: dict[str, type[exp.Expression]] = {
    "var": exp.Variance,
    "varp": exp.VariancePop,
    "stdevp": exp.StddevPop,
}


def _tsql_statistics(tree: exp.Expression) -> exp.Expression:
    for node in list(tree.find_all(exp.Anonymous)):
        cls = _TSQL_STATS.get(node.name.lower())
        if (
            cls is not None
            and len(node.expressions) == 1
            and set(k for k, v in node.args.items() if v) <= {"this", "expressions"}
        ):
            new: exp.Expression = cls(this=node.expressions[0])
            if node is tree:
                return new
            node.replace(new)
    return tree


def tokenize(sql: str) -> list[Token] | None:
    """The postgres tokens of ``sql`` (None if it does not tokenize: ``parse`` reports that).
    Recent statements' tokens are kept: routing, the plan template's key and the parse of one
    statement read one tokenisation. Callers must not modify the list."""
    hit = _MEMO.get(sql)
    if hit is not None:
        return hit[0]
    tokens: list[Token] | None
    try:
        tokens = _postgres()[0].tokenize(sql)
    except SqlglotError:
        tokens = None
    if len(sql) <= _MEMO_CHARS:
        _MEMO.put(sql, (tokens,))
    return tokens
