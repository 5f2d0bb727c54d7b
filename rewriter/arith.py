"""Arithmetic, function and cast rules, made total.

* Integer operands are computed in float8 (``CAST(col AS DOUBLE)``), so ``+ - *``
  cannot overflow an integer type; the result keeps Postgres's type (int op int is
  int, ``T.f8`` marks it), so ``/`` of two integers truncates toward zero as in
  Postgres (``TRUNC(x / n)``; exact for |x| < 2**53). ``/`` only by a non-zero literal;
  ``%`` only integer by a non-zero integer literal (taken as its absolute value, which
  gives the same result and avoids ``INT_MIN % -1``).
* PostgreSQL raises on float8 overflow *and* underflow, so each operand carries a
  bound on its non-zero magnitude (``T.mag``); where a product, quotient or sum
  could leave [1e-300, 1e300] the operand is first clamped to ±hi and values below
  lo are flushed to 0. Integer columns rarely need it; float columns do.
* Functions: a small allow-list of total ones; casts are in :mod:`rewriter.casts`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from typing import Any, Literal

from sqlglot import exp

from .args import func_name, sql_name
from .casts import cast
from .errors import DATATYPE_MISMATCH, Refusal
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .plan import ColumnType
from .scope import NUMERIC, Check, Ctx, Rule, T, literal
from .values import to_node

BIG, SMALL = 1e300, 1e-300
DOUBLE = exp.DataType.build("double")
ALLOWED_FUNCTIONS = (
    "abs, lower, upper, length, trim, btrim, ltrim, rtrim, coalesce, least, greatest, "
    "round, floor, ceil; || on text"
)


def paren(node: exp.Expression) -> exp.Expression:
    """Parenthesise compound operands so the tree prints unambiguously."""
    atomic = (exp.Column, exp.Literal, exp.Boolean, exp.Null, exp.Func, exp.Paren, exp.Parameter, exp.Cast)
    if isinstance(node, atomic) and not isinstance(node, exp.Connector):
        return node
    return exp.Paren(this=node)


def _num(t: T, ctx: Ctx, what: str, want: ColumnType | None = "float") -> T:
    t = ctx.settle(t, want)
    if t.type not in NUMERIC and t.type is not None:
        raise Refusal(DATATYPE_MISMATCH, f"{what} needs numbers, not {t.type}.")
    return t


def _double(t: T) -> T:
    """Integer expressions enter arithmetic as float8 so they cannot overflow (their SQL
    type stays int; ``f8`` says the node is float8)."""
    if t.type == "int" and not t.is_literal and t.param is None and not t.f8:
        return T(exp.Cast(this=t.node, to=DOUBLE.copy()), "int", t.mag, f8=True)
    return t


def _type(a: T, b: T) -> Literal["int", "float"]:
    """Postgres's result type of ``a op b`` (+ - * /): int only for two integers."""
    return "int" if a.type == "int" and b.type == "int" else "float"


def _kind(t: T) -> str:
    """Postgres's number kind: int, numeric (exact decimal) or float8."""
    return "int" if t.type == "int" else ("numeric" if t.numeric or t.type is None else "float8")


def _numeric(a: T, b: T, op: str) -> bool:
    """True when Postgres computes ``a op b`` as numeric (no float8 operand, a numeric
    one). dpgate computes in float8, which is exact only for literals that binary floating
    point represents exactly (2.5, 0.25, not 0.1): others are refused."""
    kinds = {_kind(a), _kind(b)}
    if "float8" in kinds or "numeric" not in kinds:
        return False
    for t in (a, b):
        if t.approx:
            raise Refusal(
                UNSUPPORTED,
                f"arithmetic ({op}) on a decimal quotient such as x / 10.0 "
                "is computed exactly (numeric) by Postgres, which dpgate does not do; "
                "compare or round the quotient itself, or write CAST(x AS double "
                "precision) for floating point.",
            )
        if t.is_literal and t.value is not None and not _exact(t.value):
            raise Refusal(
                UNSUPPORTED,
                f"{op} with {t.value!r} and an integer or decimal is "
                "computed exactly (numeric) by Postgres, which dpgate does not do; write "
                "CAST(x AS double precision) for floating point, or use a literal "
                "such as 0.5 or 0.25 that binary floating point represents exactly.",
            )
    return True


def _exact(v: float) -> bool:
    # integral values are treated as integers are (float8, exact below 2**53)
    return isinstance(v, int) or v.is_integer() or Decimal(repr(v)) == Decimal(v)


def _numeric_kinds(a: T, b: T) -> bool:
    """Whether Postgres computes ``a op b`` as numeric: no float8 operand, a numeric one."""
    kinds = {_kind(a), _kind(b)}
    return "float8" not in kinds and "numeric" in kinds


def _decimal(v: int | float) -> Decimal:
    """A numeric literal's decimal value: dpgate reads a literal as the double nearest its
    text (:func:`rewriter.values.number`), whose shortest round-trip text is the literal's
    own for up to 15 significant digits (``0.06``, not 0.059999999999999997779…)."""
    return Decimal(v) if isinstance(v, int) else Decimal(repr(v))


def _exact_constant(exact: Decimal, typ: ColumnType) -> T:
    """Constant arithmetic of decimal literals (``0.06 - 0.01``, ``1 + 10``), folded here
    exactly in decimal as Postgres's numeric (and DuckDB's and Spark's DECIMAL) compute it,
    so no backend computes it: the statement carries the result as a decimal literal, the
    same on every backend. Its plan-time value is the double nearest the exact result; a
    result that no literal of at most 17 significant digits round-trips (a product with
    more digits than a double holds) is refused: write the result instead."""
    t = _fold(int(exact) if typ == "int" else float(exact), typ)
    if typ != "int" and _decimal(t.value) != exact:
        raise Refusal(
            UNSUPPORTED,
            "this constant expression is computed exactly (numeric) by "
            "Postgres and has no exact floating-point value; write its result instead.",
        )
    return replace(t, numeric=True) if typ != "int" else t


def _inf(sign: str = "") -> exp.Expression:
    return exp.Cast(this=exp.Literal.string(f"{sign}Infinity"), to=DOUBLE.copy())


def _window(t: T, lo: float, hi: float) -> T:
    """Clamp finite values to ±hi and flush |x| < lo to 0 where ``t.mag`` does not already
    ensure it (one CASE, so NULL stays NULL). ±Infinity and NaN pass unchanged: an
    operation with an infinite or NaN operand never raises, and clamping them would
    change answers (``f = i + f`` is true for f = Infinity, as in Postgres)."""
    if t.is_literal or t.param is not None:
        return t
    (mlo, mhi), x = t.mag, t.node
    ifs: list[exp.Expression] = []
    if mhi > hi:
        above = exp.And(
            this=exp.GT(this=x.copy(), expression=to_node(hi)),
            expression=exp.LT(this=x.copy(), expression=_inf()),
        )
        below = exp.And(
            this=exp.LT(this=x.copy(), expression=to_node(-hi)),
            expression=exp.GT(this=x.copy(), expression=_inf("-")),
        )
        ifs += [exp.If(this=above, true=to_node(hi)), exp.If(this=below, true=to_node(-hi))]
    if mlo < lo:
        ifs.append(exp.If(this=exp.LT(this=exp.Abs(this=x.copy()), expression=to_node(lo)), true=to_node(0)))
    if not ifs:
        return t
    return replace(t, node=exp.Case(ifs=ifs, default=x), mag=(max(mlo, lo), min(mhi, hi)))


def _fold(value: float, typ: ColumnType | None = None) -> T:
    if isinstance(value, float) and (not math.isfinite(value) or abs(value) > BIG):
        raise Refusal("22003", "a constant expression is out of range.")
    t = literal(value)
    return replace(t, type="float") if typ == "float" and t.type == "int" else t


def _binary(kind: type[exp.Expression], a: T, b: T) -> exp.Expression:
    return kind(this=paren(a.node), expression=paren(b.node))


def add(kind: type[exp.Expression], a: T, b: T) -> T:
    if a.is_literal and b.is_literal:
        if a.value is None or b.value is None:
            return literal(None)
        if _numeric_kinds(a, b):
            x, y = _decimal(a.value), _decimal(b.value)
            return _exact_constant(x + y if kind is exp.Add else x - y, _type(a, b))
        return _fold(a.value + b.value if kind is exp.Add else a.value - b.value, _type(a, b))
    num = _numeric(a, b, "+" if kind is exp.Add else "-")
    a, b = (_window(_double(x), 0.0, BIG) for x in (a, b))
    lo = min(a.mag[0], b.mag[0]) * 2.0**-53
    return T(_binary(kind, a, b), _type(a, b), (lo, a.mag[1] + b.mag[1]), f8=True, numeric=num)


def mul(a: T, b: T, num: bool | None = None) -> T:
    if a.is_literal and b.is_literal:
        if None in (a.value, b.value):
            return literal(None)
        if num is not False and _numeric_kinds(a, b):
            return _exact_constant(_decimal(a.value) * _decimal(b.value), _type(a, b))
        return _fold(a.value * b.value, _type(a, b))
    num = _numeric(a, b, "*") if num is None else num
    typ = _type(a, b)
    if a.is_literal:
        a, b = b, a
    a, b = _double(a), _double(b)
    if b.is_literal and b.value is not None:
        c = abs(b.value)
        if c:
            a = _window(a, SMALL / c, BIG / c)
    else:
        a, b = _window(a, 1e-150, 1e150), _window(b, 1e-150, 1e150)
    return T(_binary(exp.Mul, a, b), typ, (a.mag[0] * b.mag[0], a.mag[1] * b.mag[1]), f8=True, numeric=num)


def div(a: T, b: T, ctx: Ctx | None) -> T:
    """``a / b``; ``ctx`` None: a quotient dpgate builds itself (no numeric check)."""
    if not (b.is_literal or b.param) or (b.is_literal and not b.value):
        raise Refusal(
            DENIED,
            "division is only allowed by a non-zero numeric literal or "
            "parameter (x / 0 or x / column could fail for some rows).",
        )
    if b.value is None:
        return literal(None)
    typ = _type(a, b)
    num = ctx is not None and _numeric(a, b, "/")
    approx = num and b.is_literal and not _power_of_two(b.value)
    if approx and not _decimal_divisor(b.value):
        raise Refusal(
            UNSUPPORTED,
            f"division by {b.value!r} is computed exactly (numeric) by "
            "Postgres, which dpgate does not do; divide by an integer (integer "
            "division), by a power of two or ten such as 2.0, 0.5 or 10.0, or write "
            "CAST(x AS double precision) / … for floating point.",
        )
    if a.is_literal:
        if a.value is None:
            return literal(None)
        if typ == "int":  # Postgres: integer division truncates toward zero
            q = abs(a.value) // abs(b.value)
            return literal(q if (a.value < 0) == (b.value < 0) else -q)
        t = _fold(a.value / b.value, "float")
        if approx:
            raise Refusal(
                UNSUPPORTED,
                "this constant quotient is computed exactly (numeric) by "
                "Postgres and has no exact floating-point value; write its result.",
            )
        return replace(t, numeric=True) if num else t
    a, c = _double(a), abs(b.value) if b.is_literal else 1.0
    a = _window(a, SMALL * c, BIG * c)
    if typ == "int" and b.is_literal:
        q = exp.Anonymous(this="TRUNC", expressions=[_binary(exp.Div, a, b)])
        return T(q, "int", (1.0, a.mag[1] / c), f8=True)
    return T(
        _binary(exp.Div, a, b), "float", (a.mag[0] / c, a.mag[1] / c), f8=True, numeric=num, approx=approx
    )


def _power_of_two(v: float) -> bool:
    m, e = math.frexp(abs(v))
    return m == 0.5 and -10 <= e <= 12


def _decimal_divisor(v: float) -> bool:
    """An integer 2**a * 5**b up to 10**6: the quotient is a short terminating decimal,
    exact in Postgres's numeric, and its nearest double compares and rounds the same."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int) or not 0 < abs(v) <= 10**6:
        return False
    v = abs(v)
    for p in (2, 5):
        while v % p == 0:
            v //= p
    return v == 1


def _arith(node: exp.Expression, ctx: Ctx, check: Check) -> T:
    what = f"operator {sql_name(node)}"
    a, b = check(node.this, ctx), check(node.expression, ctx)
    if a.pending and not b.pending:  # $1 + 1: an untyped parameter takes the other side's type (as
        b = _num(b, ctx, what, None)  # Postgres resolves unknown + integer), in Describe and Execute alike
        a = _num(a, ctx, what, b.type or "float")
    else:
        a = _num(a, ctx, what, None)
        b = _num(b, ctx, what, a.type or "float")
        a = _num(a, ctx, what, b.type or "float")
    if isinstance(node, (exp.Add, exp.Sub)):
        return add(type(node), a, b)
    if isinstance(node, exp.Mul):
        return mul(a, b)
    if isinstance(node, exp.Div):
        return div(a, b, ctx)
    return _mod(a, b)


def _mod(a: T, b: T) -> T:
    if a.type not in ("int", None) or b.type not in ("int", None):
        raise Refusal(UNSUPPORTED, "% is only allowed on integers, by a non-zero integer literal.")
    if a.f8:
        raise Refusal(
            UNSUPPORTED, "% is only allowed on an integer column or literal, not on the result of arithmetic."
        )
    if not (b.is_literal or b.param) or (b.is_literal and not b.value):
        raise Refusal(DENIED, "% is only allowed by a non-zero integer literal or parameter.")
    if b.value is None or (a.is_literal and a.value is None):
        return literal(None)
    if a.is_literal:
        return literal(int(math.fmod(a.value, b.value)))
    b = literal(abs(b.value)) if b.is_literal else b
    return T(_binary(exp.Mod, a, b), "int", (1.0, min(a.mag[1], b.mag[1])))


def _neg(node: exp.Neg, ctx: Ctx, check: Check) -> T:
    a = _double(_num(check(node.this, ctx), ctx, "unary minus"))
    if a.is_literal:  # -(NULL), -(1 + 2): folded (Postgres cannot type "- NULL")
        return a if a.value is None else replace(a, node=to_node(-a.value), value=-a.value)
    return replace(a, node=exp.Neg(this=paren(a.node)))


def _unary_num(node: exp.Expression, ctx: Ctx, check: Check) -> T:
    """abs, floor, ceil, round(x[, n]) — computed in float8."""
    name = func_name(node)
    extra = [k for k, v in node.args.items() if k not in ("this", "decimals") and v]
    if extra or (node.args.get("decimals") and not isinstance(node, exp.Round)):
        raise Refusal(UNSUPPORTED, f"this form of {name}() is not supported.")
    a = _num(check(node.this, ctx), ctx, f"{name}()")
    if a.approx and node.args.get("decimals") is not None:
        raise Refusal(
            UNSUPPORTED,
            "round(x / 10.0, n) of a decimal quotient is computed exactly "
            "(numeric) by Postgres, which dpgate does not do; round(x / 10.0) or "
            "CAST(x AS double precision) / 10 are supported.",
        )
    even = _kind(a) == "float8"  # Postgres: round(float8) is rint, round(numeric) is not
    if a.is_literal and a.value is not None:
        rnd = round if even else _round
        fns: dict[str, Callable[[float], float]] = {"abs": abs, "floor": math.floor, "ceil": math.ceil}
        fn = fns.get(name, rnd)
        if node.args.get("decimals") is None:
            return replace(_fold(float(fn(a.value))), numeric=a.numeric)
    if a.is_literal and a.value is None:  # round(NULL): a typed NULL (Postgres cannot pick trunc(unknown))
        a = replace(a, node=exp.Cast(this=exp.Null(), to=exp.DataType.build("double")))
    a = _double(a)
    if isinstance(node, exp.Abs):
        return replace(a, node=exp.Abs(this=a.node))
    if isinstance(node, exp.Round) and node.args.get("decimals") is None:
        return T(round_node(a.node, even), "float", (1.0, a.mag[1] + 1), numeric=a.numeric)
    if not isinstance(node, exp.Round) or node.args.get("decimals") is None:
        hi = a.mag[1] + 1
        return T(type(node)(this=a.node), "float", (1.0, hi), numeric=a.numeric)
    n = _num(check(node.args["decimals"], ctx), ctx, "round() digits", "int")
    if n.param is not None:
        return T(a.node, "float", a.mag)  # infer mode: the type is all that matters
    if not (n.is_literal and isinstance(n.value, int) and -15 <= n.value <= 15):
        raise Refusal(UNSUPPORTED, "round(x, n) needs a literal integer n between -15 and 15.")
    if a.is_literal:
        if a.value is None:
            return literal(None)
        return _fold(_round(a.value * 10.0**n.value) / 10.0**n.value)
    scale = literal(10.0**n.value)
    scaled = mul(a, scale, False)
    rounded = T(round_node(scaled.node, False), "float", (1.0, scaled.mag[1] + 1))
    return replace(div(rounded, scale, None), numeric=a.numeric or a.type == "int")


MAX_ROUND_NODES = 400


def round_node(x: exp.Expression, even: bool) -> exp.Expression:
    """Postgres's round(x) in both dialects: half away from zero (numeric), or half to
    even (float8, C's rint; DuckDB's own ROUND rounds half away), exact for every float8:
    ``x - TRUNC(x)`` is exact, and NaN / ±Infinity pass through."""
    if sum(1 for _ in x.walk()) > MAX_ROUND_NODES:
        raise Refusal("54001", "the argument of round() is too complex.", hint="Simplify it.")

    def trunc(e: exp.Expression) -> exp.Expression:
        return exp.Anonymous(this="TRUNC", expressions=[e.copy()])

    frac = exp.Abs(this=exp.Paren(this=exp.Sub(this=x.copy(), expression=trunc(x))))
    half = to_node(0.5)
    if even:
        odd = exp.NEQ(
            this=exp.Sub(
                this=trunc(x),
                expression=exp.Mul(
                    this=to_node(2), expression=trunc(exp.Div(this=trunc(x), expression=to_node(2)))
                ),
            ),
            expression=to_node(0),
        )
        cond: exp.Expression = exp.Or(
            this=exp.GT(this=frac, expression=half),
            expression=exp.Paren(
                this=exp.And(this=exp.EQ(this=frac.copy(), expression=half.copy()), expression=odd)
            ),
        )
    else:
        cond = exp.GTE(this=frac, expression=half)
    up = exp.Add(this=trunc(x), expression=exp.Anonymous(this="SIGN", expressions=[x.copy()]))
    return exp.Paren(this=exp.Case(ifs=[exp.If(this=cond, true=up)], default=trunc(x)))


def _round(v: float) -> float:
    """SQL round(): half away from zero."""
    return math.copysign(math.floor(abs(v) + 0.5), v)


def _text(node: exp.Expression, ctx: Ctx, check: Check) -> T:
    """lower, upper (text → text) and length (text → int)."""
    name = func_name(node)
    if any(v for k, v in node.args.items() if k != "this"):
        raise Refusal(UNSUPPORTED, f"this form of {name}() is not supported.")
    a = ctx.settle(check(node.this, ctx), "text")
    if a.type not in ("text", None):
        raise Refusal(DATATYPE_MISMATCH, f"{name}() takes text, not {a.type}.")
    if isinstance(node, exp.Length):
        return T(exp.Length(this=a.node), "int", (1.0, 2.0**31))
    return T(type(node)(this=a.node), "text")


def common(ts: list[T], ctx: Ctx, what: str) -> tuple[list[T], ColumnType | None]:
    """Settle ``ts`` to one type (int+float → float; string literals convert)."""
    known: set[ColumnType] = {t.type for t in ts if t.type and not (t.is_literal and t.type == "text")}
    if not known:
        known = {t.type for t in ts if t.type}
    target: ColumnType | None = (
        ("float" if "float" in known else "int") if known and known <= set(NUMERIC) else None
    )
    if len(known) == 1:
        target = known.pop()
    elif target is None and known:
        raise Refusal(
            DATATYPE_MISMATCH, f"{what} arguments have different types ({', '.join(sorted(known))})."
        )
    ts = [ctx.settle(t, target) for t in ts]
    if len({t.type for t in ts if t.type} - ({"int"} if target == "float" else set())) > 1:
        raise Refusal(DATATYPE_MISMATCH, f"{what} arguments have different types.")
    return ts, target


def _variadic(node: exp.Expression, ctx: Ctx, check: Check) -> T:
    """coalesce, least, greatest over one common type."""
    name = func_name(node)
    if any(v for k, v in node.args.items() if k not in ("this", "expressions", "ignore_nulls")):
        raise Refusal(UNSUPPORTED, f"this form of {name}() is not supported.")
    ts, target = common([check(e, ctx) for e in [node.this, *node.expressions]], ctx, name)
    if all(t.is_literal for t in ts):  # folded: coalesce(NULL, NULL) has no type in SQL
        vals = [t.value for t in ts if t.value is not None]
        picks: dict[str, Callable[[list[Any]], Any]] = {
            "coalesce": lambda v: v[0],
            "least": min,
            "greatest": max,
        }
        pick = picks[name]
        t = literal(pick(vals) if vals else None)
        kinds = {_kind(x) for x in ts if x.type is not None}
        return replace(
            t, type=(target or t.type) if vals else None, numeric="numeric" in kinds and "float8" not in kinds
        )
    kw = {} if isinstance(node, exp.Coalesce) else {"ignore_nulls": True}
    out = type(node)(this=ts[0].node, expressions=[t.node for t in ts[1:]], **kw)
    mag = (min(t.mag[0] for t in ts), max(t.mag[1] for t in ts))
    kinds = {_kind(t) for t in ts if t.type is not None}
    return T(out, target, mag, f8=any(t.f8 for t in ts), numeric="numeric" in kinds and "float8" not in kinds)


RULES: dict[type[exp.Expression], Rule] = {
    exp.Add: _arith,
    exp.Sub: _arith,
    exp.Mul: _arith,
    exp.Div: _arith,
    exp.Mod: _arith,
    exp.Neg: _neg,
    exp.Abs: _unary_num,
    exp.Floor: _unary_num,
    exp.Ceil: _unary_num,
    exp.Round: _unary_num,
    exp.Lower: _text,
    exp.Upper: _text,
    exp.Length: _text,
    exp.Coalesce: _variadic,
    exp.Least: _variadic,
    exp.Greatest: _variadic,
    exp.Cast: cast,
}
