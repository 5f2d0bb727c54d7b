"""Row-predicate rules: type the WHERE clause and rebuild it as a total expression.

:func:`check` dispatches on the node type and returns a :class:`~rewriter.scope.T`
whose node is a *fresh* tree over unqualified, quoted declared columns, with
parameters bound, literals normalised, commutative AND/OR chains sorted and
explicit parentheses, so equal predicates print equally (see ``Plan.canonical``).
Anything whose evaluation could raise an error for some row is refused or made
total (see :mod:`rewriter.arith`), so an error never reveals that a row exists.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from . import arith, dates, text
from .args import ALLOWED, sql_name, understood
from .arith import paren
from .arrays import ArrayLiteralError, parse_array_literal
from .errors import DATATYPE_MISMATCH, GROUPING_ERROR, UNDEFINED_FUNCTION, Refusal
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .scope import NUMERIC, Ctx, T, literal
from .values import coerce, literal_value

_CMP = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)
_FLIP: dict[type[exp.Expression], type[exp.Expression]] = {
    exp.GT: exp.LT,
    exp.LT: exp.GT,
    exp.GTE: exp.LTE,
    exp.LTE: exp.GTE,
}
ESCAPE = "\\"


def where(node: exp.Expr, ctx: Ctx) -> exp.Expression:
    """The checked WHERE predicate (must be boolean)."""
    return boolean(check(node, ctx), ctx, "WHERE").node


def check(node: exp.Expr, ctx: Ctx) -> T:
    if not isinstance(node, exp.Expression):  # every node sqlglot builds is one
        raise Refusal(UNSUPPORTED, f"{sql_name(node)} is not supported in a row predicate.")
    if isinstance(node, exp.Exists) or (isinstance(node, exp.In) and node.args.get("query") is not None):
        if ctx.semijoin is None:
            raise Refusal(
                DENIED, "subqueries are not allowed here; use a single SELECT over one declared table."
            )
        return ctx.semijoin(node, ctx, check)  # a semi-join (rewriter.semijoin)
    if type(node) in ALLOWED:
        understood(node)  # a set argument no rule interprets is a refusal, never dropped
    if isinstance(node, exp.Paren):
        return check(node.this, ctx)
    ok, value = literal_value(node)
    if ok:
        t = literal(value)
        return replace(t, type="float", numeric=True) if _decimal(node) else t
    if node.args.get("negate") and isinstance(node, (exp.Is, exp.Like, exp.ILike)):
        # IS NOT / NOT LIKE / NOT ILIKE: the negation is rebuilt explicitly over the
        # positive form, so it can never be dropped
        positive = node.copy()
        positive.set("negate", None)
        return T(exp.Not(this=paren(check(positive, ctx).node)), "bool")
    if isinstance(node, exp.Column):
        return ctx.column(node)
    if isinstance(node, exp.Parameter):
        return ctx.param(node)
    if isinstance(node, (exp.And, exp.Or)):
        return _connective(node, ctx)
    if isinstance(node, exp.Not):
        return T(exp.Not(this=paren(boolean(check(node.this, ctx), ctx, "NOT").node)), "bool")
    if isinstance(node, exp.EQ) and isinstance(node.expression, exp.Any):
        return _any(node, ctx)
    if isinstance(node, exp.NEQ) and _all_call(node.expression):
        return _not_any(node, ctx)
    if isinstance(node, (exp.Any, exp.All)) or (
        isinstance(node, _CMP) and isinstance(node.expression, (exp.Any, exp.All))
    ):
        raise Refusal(
            UNSUPPORTED,
            "only col = ANY($1) (an array parameter) or col = ANY(ARRAY[…]) is "
            "supported; write col IN (…) or col NOT IN (…).",
        )
    if isinstance(node, _CMP):
        return _compare(type(node), check(node.this, ctx), check(node.expression, ctx), ctx)
    if isinstance(node, exp.Between):
        return _between(node, ctx)
    if isinstance(node, exp.In):
        return _in(node, ctx)
    if isinstance(node, (exp.Like, exp.ILike)):
        return _like(node, ctx)
    if isinstance(node, exp.Is):
        return _is(node, ctx)
    if isinstance(node, exp.AggFunc):
        raise Refusal(GROUPING_ERROR, "aggregate functions are not allowed in WHERE.")
    if isinstance(node, (exp.Escape, exp.SimilarTo, exp.RegexpLike, exp.RegexpILike)):
        raise Refusal(
            UNSUPPORTED,
            f"{sql_name(node)} is not supported (a regular expression's "
            "cost grows with its pattern); use LIKE/ILIKE with a literal pattern (backslash "
            "escapes): col LIKE '%text%' for contains, 'text%' for starts with.",
        )
    if isinstance(node, exp.Extract) and ctx.date_part is not None:
        return ctx.date_part(node, ctx)  # extract(year from ts): the group key's own expression
    timed = dates.rule(node, ctx, check)  # date/timestamp literals, now(), date ± interval
    if timed is not None:
        return timed
    rule = arith.RULES.get(type(node)) or text.RULES.get(type(node))
    if rule is not None:
        return rule(node, ctx, check)
    if isinstance(node, exp.Func) and not isinstance(node, (exp.Case, exp.If)):
        name = node.sql_name() if not isinstance(node, exp.Anonymous) else node.name
        raise Refusal(
            UNDEFINED_FUNCTION,
            f"function {name.lower()}() is not allowed; allowed functions: {arith.ALLOWED_FUNCTIONS}.",
        )
    raise Refusal(
        UNSUPPORTED,
        f"{sql_name(node)} is not supported in a row "
        "predicate; use comparisons, BETWEEN, IN, LIKE, IS NULL, AND/OR/NOT, "
        "arithmetic and allowed functions.",
    )


def boolean(t: T, ctx: Ctx, where_: str) -> T:
    t = ctx.settle(t, "bool")
    if t.type not in ("bool", None):
        raise Refusal(DATATYPE_MISMATCH, f"argument of {where_} must be boolean, not {t.type}.")
    return t


def _connective(node: exp.And | exp.Or, ctx: Ctx) -> T:
    kind = type(node)
    checked = [boolean(check(p, ctx), ctx, sql_name(node)).node for p in node.flatten() if p is not node]
    parts = sorted({p.sql("postgres"): p for p in checked}.items())
    items = [p if isinstance(p, kind) else paren(p) for _, p in parts]
    out = items[0]
    for item in items[1:]:
        out = kind(this=out, expression=item)
    return T(out, "bool")


def comparable(a: T, b: T, ctx: Ctx, what: str) -> tuple[T, T]:
    """Settle pending sides to the other side's type and check the types match."""
    if a.pending and not b.pending:
        a = ctx.settle(a, b.type)
    b = ctx.settle(b, a.type)
    a = ctx.settle(a, b.type)
    ok = (
        a.type is None
        or b.type is None
        or a.type == b.type
        or (a.type in NUMERIC and b.type in NUMERIC)
        or {a.type, b.type} <= {"date", "timestamp"}
    )
    if not ok:
        raise Refusal(
            DATATYPE_MISMATCH,
            f"cannot compare {a.type} with {b.type} in {what}; compare columns with values of the same type.",
        )
    return a, b


def _compare(kind: type[exp.Expression], a: T, b: T, ctx: Ctx) -> T:
    a, b = comparable(a, b, ctx, "a comparison")
    if (a.is_literal or a.param) and not (b.is_literal or b.param):
        a, b, kind = b, a, _FLIP.get(kind, kind)
    return T(kind(this=paren(a.node), expression=paren(b.node)), "bool")


def _between(node: exp.Between, ctx: Ctx) -> T:
    x = check(node.this, ctx)
    x, lo = comparable(x, check(node.args["low"], ctx), ctx, "BETWEEN")
    x, hi = comparable(x, check(node.args["high"], ctx), ctx, "BETWEEN")
    out: exp.Expression = exp.Between(this=paren(x.node), low=paren(lo.node), high=paren(hi.node))
    if node.args.get("symmetric"):
        # Postgres's own reading: (x BETWEEN a AND b) OR (x BETWEEN b AND a), NULLs included
        swapped = exp.Between(
            this=paren(x.node.copy()), low=paren(hi.node.copy()), high=paren(lo.node.copy())
        )
        out = exp.Or(this=exp.Paren(this=out), expression=exp.Paren(this=swapped))
    return T(out, "bool")


def _in(node: exp.In, ctx: Ctx) -> T:
    if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
        raise Refusal(DENIED, "IN takes a list of literal values here, not a subquery.")
    x = check(node.this, ctx)
    items: list[T] = []
    for item in node.expressions:
        t = check(item, ctx)
        if not (t.is_literal or t.param):
            raise Refusal(UNSUPPORTED, "IN (…) takes literal values or parameters only.")
        x, t = comparable(x, t, ctx, "IN")
        items.append(t)
    nodes = sorted({t.node.sql("postgres"): t.node for t in items}.items())
    return T(exp.In(this=paren(x.node), expressions=[n for _, n in nodes]), "bool")


def _any(node: exp.EQ, ctx: Ctx) -> T:
    """``x = ANY($n)`` with a list parameter (psycopg sends a Python list so), or ``x = ANY(ARRAY[…])``:
    the same as ``x IN (…)`` with the array's elements (same caps; an empty array is false)."""
    understood(node.expression, frozenset({"this"}))
    arg = node.expression.this
    while isinstance(arg, exp.Paren):
        arg = arg.this
    if isinstance(arg, exp.Array):
        understood(arg, frozenset({"expressions", "value_constructor"}))
        return _in(exp.In(this=node.this, expressions=list(arg.expressions)), ctx)
    text = arg
    if isinstance(arg, exp.Cast) and arg.to.is_type(exp.DataType.Type.ARRAY):
        understood(arg, frozenset({"this", "to"}))
        text = arg.this
    if isinstance(text, exp.Literal) and text.is_string:  # '{1,2,3}': PostgreSQL's array literal text
        try:
            elements = parse_array_literal(text.this)
        except ArrayLiteralError as e:
            raise Refusal("22P02", str(e), hint="Write an array as '{a,b,c}' or ARRAY[a, b, c].") from None
        if not elements:
            return T(exp.false(), "bool")  # x = ANY('{}') is false, even for a NULL x
        return _in(
            exp.In(
                this=node.this,
                expressions=[exp.null() if v is None else exp.Literal.string(v) for v in elements],
            ),
            ctx,
        )
    if not isinstance(arg, exp.Parameter):
        raise Refusal(
            UNSUPPORTED,
            "= ANY(…) takes an array parameter ($1), ARRAY[…] of values or an "
            "array literal '{…}'; write col IN (…) instead.",
        )
    x = check(node.this, ctx)
    n = ctx.param_number(arg)
    if x.type is None:
        raise Refusal(
            UNSUPPORTED, "the left side of = ANY($n) must be a column or an expression of known type."
        )
    params = ctx.params
    if params is None:  # infer mode
        ctx.types[n] = ctx.types.get(n) or f"{x.type}[]"
        return T(exp.EQ(this=paren(x.node), expression=exp.Any(this=arg.copy())), "bool")
    if n > len(params):
        raise Refusal(
            "08P01",
            f"the statement uses ${n} but only {len(params)} parameter(s) were supplied.",
            hint=None,
        )
    values = params[n - 1]
    if not isinstance(values, (list, tuple)):
        raise Refusal(
            DATATYPE_MISMATCH, f"= ANY(${n}) takes an array parameter (a list); for one value write = ${n}."
        )
    if not values:
        return T(exp.false(), "bool")  # x = ANY('{}') is false, even for a NULL x
    items = [literal(coerce(v, x.type, f"element of ${n}")) for v in values]
    nodes = sorted({t.node.sql("postgres"): t.node for t in items}.items())
    return T(exp.In(this=paren(x.node), expressions=[v for _, v in nodes]), "bool")


def _all_call(node: exp.Expression) -> bool:
    """``ALL(…)`` as the parser gives it on the right of ``<>`` (a call named ALL)."""
    return isinstance(node, exp.Anonymous) and node.name.upper() == "ALL" and len(node.expressions) == 1


def _not_any(node: exp.NEQ, ctx: Ctx) -> T:
    """``x <> ALL(a)`` is ``NOT (x = ANY(a))`` (SQL's quantified comparison: true when x differs
    from every element; NULL when an element is NULL and none equals x), read as ``= ANY``
    is; over an empty array it is true, even for a NULL x."""
    understood(node.expression, frozenset({"this", "expressions"}))
    t = _any(exp.EQ(this=node.this, expression=exp.Any(this=node.expression.expressions[0])), ctx)
    if isinstance(t.node, exp.Boolean) and not t.node.this:  # x = ANY('{}') is false
        return T(exp.true(), "bool")
    return T(exp.Not(this=paren(t.node)), "bool")


def _like(node: exp.Like | exp.ILike, ctx: Ctx) -> T:
    x = ctx.settle(check(node.this, ctx), "text")
    pat = ctx.settle(check(node.expression, ctx), "text")
    if x.type not in ("text", None) or pat.type not in ("text", None):
        raise Refusal(DATATYPE_MISMATCH, "LIKE/ILIKE compare text with a text pattern.")
    if not (pat.is_literal or pat.param):
        raise Refusal(UNSUPPORTED, "LIKE/ILIKE patterns must be literals or parameters.")
    if pat.is_literal and pat.value is not None:
        trailing = len(pat.value) - len(pat.value.rstrip(ESCAPE))
        if trailing % 2:
            raise Refusal(
                "22025",
                "a LIKE pattern must not end with the escape character (backslash).",
                hint="Escape it as \\\\ or remove it.",
            )
    like = type(node)(this=paren(x.node), expression=pat.node)
    return T(exp.Escape(this=like, expression=exp.Literal.string(ESCAPE)), "bool")


def _decimal(node: exp.Expression) -> bool:
    """A numeric literal spelled with a point or exponent (``2.0``, ``1e3``): Postgres types
    it numeric, not integer, so ``age / 2.0`` divides exactly while ``age / 2`` truncates."""
    while isinstance(node, (exp.Paren, exp.Neg)):
        node = node.this
    return isinstance(node, exp.Literal) and not node.is_string and not node.is_int


def _is(node: exp.Is, ctx: Ctx) -> T:
    x = check(node.this, ctx)
    rhs = node.expression
    if isinstance(rhs, exp.Null):
        x = ctx.settle(x, None)
    elif isinstance(rhs, exp.Boolean):
        x = boolean(x, ctx, "IS TRUE/FALSE")
    else:
        raise Refusal(UNSUPPORTED, "IS takes NULL, TRUE or FALSE.")
    return T(exp.Is(this=paren(x.node), expression=rhs.copy()), "bool")
