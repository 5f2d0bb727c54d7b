"""Per-row cost bound: the first rewriter pass, on the parsed statement.

A statement's scan time must not depend strongly on a few rows: an expensive
predicate behind cheap equality filters would otherwise turn the response time
into an exact count of the rows that pass them. So before any other
rule runs, the statement's *query-controlled* work per row is bounded:

* every literal (and every text parameter value) has at most
  ``max_literal_chars`` characters, and all literals together at most
  ``max_total_literal_chars``;
* a LIKE / ILIKE pattern has at most ``max_pattern_chars`` characters, and all
  patterns of the statement together at most ``max_pattern_wildcards``
  unescaped ``%`` / ``_`` (a pattern like ``%_____x%`` costs the length of the
  row's text times its wildcards: summed over the statement, not per pattern);
* at most ``max_text_ops`` operations whose cost grows with the length of their
  text (lower, upper, length, greatest, least, coalesce, LIKE, ILIKE, trim);
* the statement has at most ``max_nodes`` syntax nodes, ``max_depth`` levels of
  nesting (54001; a chain ``a OR b OR …`` is one level) and ``max_in_list``
  values in one IN list;
* no expression builds a text longer than ``max_literal_chars`` out of the
  statement's own values (string concatenation, ``repeat``, ``lpad`` /
  ``rpad``, ``greatest`` / ``least`` / ``coalesce`` over long operands): the
  length of every text a function computes is bounded from the parse.

Each row therefore costs at most a constant number of operations on operands
of bounded size (the columns' own values aside, which the query does not
choose): the scan's time is O(rows scanned), and a matching row adds at most a
constant the caps fix (README "What a statement costs"). The caps are
``[server.limits]`` settings. SQL only: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlglot import exp

from config import Config, Limits

from .errors import Refusal

PROGRAM_LIMIT = "54000"  # program_limit_exceeded
TOO_COMPLEX = "54001"  # statement_too_complex (nesting)
_STRINGS = (exp.Literal, exp.RawString, exp.National, exp.ByteString, exp.HexString, exp.BitString)
_TEXT_OPS = (
    exp.Lower,
    exp.Upper,
    exp.Length,
    exp.Greatest,
    exp.Least,
    exp.Coalesce,
    exp.Like,
    exp.ILike,
    exp.Trim,
)
_BUILDERS = (exp.DPipe, exp.Concat, exp.ConcatWs, exp.Repeat, exp.Pad)  # text longer than their inputs


def check(expr: exp.Expr, config: Config, params: list[Any] | None = None) -> None:
    """Refuse (54000 / 54001, with a hint) a statement whose per-row work exceeds the caps."""
    lim = config.server.limits
    _size(expr, lim)
    total = wild = ops = 0
    for node in expr.walk():
        if isinstance(node, _TEXT_OPS):
            ops += 1
            if ops > lim.max_text_ops:
                raise _limit(
                    f"the statement has more than {lim.max_text_ops} text operations "
                    "(lower, upper, length, greatest, least, coalesce, LIKE, ILIKE).",
                    "Use fewer text functions and patterns; compare columns with values directly.",
                )
        if isinstance(node, _STRINGS):
            text = str(node.this)
            total += len(text)
            _literal(len(text), lim)
            if total > lim.max_total_literal_chars:
                raise _limit(
                    f"the statement's literals are too long together (more than "
                    f"{lim.max_total_literal_chars} characters).",
                    "Use fewer or shorter values.",
                )
        elif isinstance(node, (exp.In, exp.Array)) and len(node.expressions) > lim.max_in_list:
            raise _limit(
                f"an IN list has {len(node.expressions)} values; at most {lim.max_in_list} are allowed.",
                "Use BETWEEN for ranges, or split the list.",
            )
        elif isinstance(node, (exp.Like, exp.ILike)):
            wild += _pattern(_value(node.expression, params), lim)
            if wild > lim.max_pattern_wildcards:
                raise _limit(
                    f"the statement's LIKE patterns have {wild} wildcards (% or _) together; "
                    f"at most {lim.max_pattern_wildcards} are allowed.",
                    "Use fewer wildcards.",
                )
        elif isinstance(node, _BUILDERS):
            n = text_bound(node, params)
            if n is None or n > lim.max_literal_chars:
                size = "an unbounded text" if n is None else f"a text of about {n} characters"
                raise _limit(
                    f"{node.key}() would build {size} from the statement's values; at "
                    f"most {lim.max_literal_chars} characters are allowed.",
                    "Compare columns with short values directly.",
                )
    for p in params or ():
        if isinstance(p, (list, tuple)):  # an array parameter: = ANY($n) is an IN list
            if len(p) > lim.max_in_list:
                raise _limit(
                    f"an array parameter has {len(p)} values; at most {lim.max_in_list} are allowed.",
                    "Use BETWEEN for ranges, or split the list.",
                )
            for v in p:
                if isinstance(v, (str, bytes)):
                    _literal(len(v), lim)
        elif isinstance(p, (str, bytes)):
            _literal(len(p), lim)


def _size(expr: exp.Expr, lim: Limits) -> None:
    """Node count and nesting depth, without recursion (a deep tree must not recurse)."""
    nodes = 0
    stack: list[tuple[exp.Expr, int]] = [(expr, 1)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > lim.max_nodes:
            raise _limit(
                f"the statement is too large (more than {lim.max_nodes} syntax nodes).",
                "Split it into smaller statements, or use IN (…) / BETWEEN instead of long OR chains.",
            )
        if depth > lim.max_depth:
            raise Refusal(
                TOO_COMPLEX,
                f"the statement is nested too deeply (more than {lim.max_depth} levels).",
                hint="Flatten the expression (AND/OR lists need no parentheses).",
            )
        for child in node.iter_expressions():  # an AND / OR chain is one level (a list)
            flat = isinstance(node, exp.Connector) and type(child) is type(node)
            stack.append((child, depth if flat else depth + 1))


def text_bound(node: exp.Expr, params: list[Any] | None = None) -> int | None:
    """An upper bound on the length of the text ``node`` computes from the statement's
    own values (columns count 0: their length is the data's, not the query's);
    None when it cannot be bounded from the parse (e.g. ``repeat(x, col)``)."""
    if isinstance(node, _STRINGS):
        return len(str(node.this))
    if isinstance(node, exp.Parameter):
        v = _value(node, params)
        return len(v) if isinstance(v, str) else 0
    if isinstance(node, (exp.Column, exp.Null, exp.Boolean)):
        return 0
    kids = [k for k in node.iter_expressions()]
    if isinstance(node, (exp.DPipe, exp.Concat, exp.ConcatWs)):
        return _sum(text_bound(k, params) for k in kids)
    if isinstance(node, exp.Repeat):
        times = _int(node.args.get("times"))
        base = text_bound(node.this, params)
        return None if times is None or base is None else base * max(times, 0)
    if isinstance(node, exp.Pad):
        width = _int(node.expression)
        return None if width is None else max(width, text_bound(node.this, params) or 0)
    return _max(text_bound(k, params) for k in kids)  # lower, greatest, coalesce, cast, …


def _max(bounds: Iterable[int | None]) -> int | None:
    out = 0
    for b in bounds:
        if b is None:
            return None
        out = max(out, b)
    return out


def _sum(bounds: Iterable[int | None]) -> int | None:
    total = 0
    for b in bounds:
        if b is None:
            return None
        total += b
    return total


def _int(node: object) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return int(str(node.this))
        except ValueError:
            return None
    return None


def _value(node: exp.Expr, params: list[Any] | None) -> str | None:
    """A LIKE pattern's text: the literal, or the bound parameter's value (else None)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, _STRINGS):
        return str(node.this)
    if isinstance(node, exp.Parameter) and params:
        n = _int(node.this)
        if n is not None and 1 <= n <= len(params) and isinstance(params[n - 1], str):
            value: str = params[n - 1]
            return value
    return None


def _literal(n: int, lim: Limits) -> None:
    if n > lim.max_literal_chars:
        raise _limit(
            f"a literal or parameter of {n} characters is too long; at most "
            f"{lim.max_literal_chars} are allowed.",
            "Compare with shorter values.",
        )


def _pattern(pat: str | None, lim: Limits) -> int:
    """Check one pattern's length; its number of unescaped wildcards."""
    if pat is None:
        return 0
    if len(pat) > lim.max_pattern_chars:
        raise _limit(
            f"a LIKE pattern of {len(pat)} characters is too long; at most "
            f"{lim.max_pattern_chars} are allowed.",
            "Use a shorter pattern.",
        )
    wild, i = 0, 0
    while i < len(pat):
        if pat[i] == "\\":
            i += 2
            continue
        wild += pat[i] in "%_"
        i += 1
    return wild


def _limit(message: str, hint: str) -> Refusal:
    return Refusal(PROGRAM_LIMIT, message, hint=hint + " (caps: [server.limits] in the config)")
