"""Text functions BI tools write in row predicates: ``trim``/``btrim``/``ltrim``/``rtrim``
and ``||``. Both are total (no row makes them raise) and their cost is capped by
:mod:`rewriter.cost` (trim counts as a text operation; ``||`` builds a text whose
length from the statement's own values is under the text-building cap).

``~`` and ``SIMILAR TO`` stay refused (a regular expression's cost grows with its
pattern; LIKE/ILIKE say what BI tools mean by "contains" / "starts with").
"""

from __future__ import annotations

from sqlglot import exp

from .args import understood
from .errors import DATATYPE_MISMATCH, Refusal
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .scope import Check, Ctx, Rule, T

_POSITIONS = ("LEADING", "TRAILING", "BOTH")


def _text(t: T, ctx: Ctx, what: str) -> T:
    t = ctx.settle(t, "text")
    if t.type not in ("text", None):
        raise Refusal(
            DATATYPE_MISMATCH,
            f"{what} takes text here, not {t.type}; compare a "
            f"{t.type} column with a value of its own type instead.",
        )
    return t


def _trim(node: exp.Trim, ctx: Ctx, check: Check) -> T:
    understood(node, frozenset({"this", "expression", "position"}))
    pos = node.args.get("position")
    pos = str(pos.this if isinstance(pos, exp.Expression) else pos).upper() if pos else None
    if pos is not None and pos not in _POSITIONS:
        raise Refusal(UNSUPPORTED, "trim() takes LEADING, TRAILING or BOTH.")
    a = _text(check(node.this, ctx), ctx, "trim()")
    out = exp.Trim(this=a.node)
    chars = node.args.get("expression")
    if chars is not None:
        c = _text(check(chars, ctx), ctx, "trim()")
        if not (c.is_literal or c.param):
            raise Refusal(UNSUPPORTED, "trim()'s characters must be a literal or a parameter.")
        out.set("expression", c.node)
    if pos in ("LEADING", "TRAILING"):
        out.set("position", pos)
    return T(out, "text")


def _concat(node: exp.DPipe, ctx: Ctx, check: Check) -> T:
    understood(node, frozenset({"this", "expression", "safe"}))
    a = _text(check(node.this, ctx), ctx, "||")
    b = _text(check(node.expression, ctx), ctx, "||")
    return T(exp.DPipe(this=a.node, expression=b.node, safe=True), "text")


def _substring(node: exp.Substring, ctx: Ctx, check: Check) -> T:
    """``substring(x FROM a FOR n)`` / ``substring(x, a, n)`` with integer literals a and n ≥ 0
    (a negative length raises in Postgres; a literal is checked here): the same characters on
    every backend (1-based; positions before the first count toward n, as Postgres)."""
    understood(node, frozenset({"this", "start", "length"}))
    a = _text(check(node.this, ctx), ctx, "substring()")
    start, length = node.args.get("start"), node.args.get("length")
    refusal = Refusal(
        UNSUPPORTED,
        "substring() takes integer literals: substring(col FROM 1 FOR 2), the length not negative.",
    )
    if start is None or length is None:
        raise refusal
    s, n = check(start, ctx), check(length, ctx)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (s.value, n.value)) or n.value < 0:
        raise refusal
    if s.value < 1:  # Postgres counts the positions before the first toward the length
        n_left = max(0, n.value + s.value - 1)
        return T(
            exp.Substring(this=a.node, start=exp.Literal.number(1), length=exp.Literal.number(n_left)), "text"
        )
    return T(exp.Substring(this=a.node, start=s.node, length=n.node), "text")


RULES: dict[type[exp.Expression], Rule] = {exp.Trim: _trim, exp.DPipe: _concat, exp.Substring: _substring}
