"""Arithmetic, function and cast rules, made total.

* Integer operands are computed in float8 (``CAST(col AS DOUBLE)``), so ``+ - *``
  cannot overflow an integer type; ``/`` only by a non-zero literal; ``%`` only
  integer by a non-zero integer literal (taken as its absolute value, which gives
  the same result and avoids ``INT_MIN % -1``).
* PostgreSQL raises on float8 overflow *and* underflow, so each operand carries a
  bound on its non-zero magnitude (``T.mag``); where a product, quotient or sum
  could leave [1e-300, 1e300] the operand is first clamped to ±hi and values below
  lo are flushed to 0. Integer columns rarely need it; float columns do.
* Functions: a small allow-list of total ones; casts are in :mod:`rewriter.casts`.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from sqlglot import exp

from .errors import (DATATYPE_MISMATCH, FEATURE_NOT_SUPPORTED as UNSUPPORTED,
                     INSUFFICIENT_PRIVILEGE as DENIED, Refusal)
from .scope import NUMERIC, Ctx, T, literal
from .casts import cast
from .values import to_node

BIG, SMALL = 1e300, 1e-300
DOUBLE = exp.DataType.build("double")
ALLOWED_FUNCTIONS = "abs, lower, upper, length, coalesce, least, greatest, round, floor, ceil"
Check = Callable[[exp.Expression, Ctx], T]


def paren(node: exp.Expression) -> exp.Expression:
    """Parenthesise compound operands so the tree prints unambiguously."""
    atomic = (exp.Column, exp.Literal, exp.Boolean, exp.Null, exp.Func, exp.Paren,
              exp.Parameter, exp.Cast)
    if isinstance(node, atomic) and not isinstance(node, exp.Connector):
        return node
    return exp.Paren(this=node)


def _num(t: T, ctx: Ctx, what: str, want: str | None = "float") -> T:
    t = ctx.settle(t, want)
    if t.type not in NUMERIC and t.type is not None:
        raise Refusal(DATATYPE_MISMATCH, f"{what} needs numbers, not {t.type}.")
    return t


def _double(t: T) -> T:
    """Integer expressions enter arithmetic as float8 so they cannot overflow."""
    if t.type == "int" and not t.is_literal and t.param is None:
        return T(exp.Cast(this=t.node, to=DOUBLE.copy()), "float", t.mag)
    return t


def _window(t: T, lo: float, hi: float) -> T:
    """Clamp to ±hi and flush |x| < lo to 0 where ``t.mag`` does not already ensure it
    (one CASE, so NULL stays NULL and NaN becomes hi: never an error)."""
    if t.is_literal or t.param is not None:
        return t
    (mlo, mhi), x = t.mag, t.node
    ifs = []
    if mhi > hi:
        ifs += [exp.If(this=exp.GT(this=x.copy(), expression=to_node(hi)), true=to_node(hi)),
                exp.If(this=exp.LT(this=x.copy(), expression=to_node(-hi)), true=to_node(-hi))]
    if mlo < lo:
        ifs.append(exp.If(this=exp.LT(this=exp.Abs(this=x.copy()), expression=to_node(lo)),
                          true=to_node(0)))
    if not ifs:
        return t
    return T(exp.Case(ifs=ifs, default=x), t.type, (max(mlo, lo), min(mhi, hi)))


def _fold(value: float) -> T:
    if isinstance(value, float) and (not math.isfinite(value) or abs(value) > BIG):
        raise Refusal("22003", "a constant expression is out of range.")
    return literal(value)


def _binary(kind: type, a: T, b: T) -> exp.Expression:
    return kind(this=paren(a.node), expression=paren(b.node))


def add(kind: type, a: T, b: T) -> T:
    if a.is_literal and b.is_literal:
        if a.value is None or b.value is None:
            return literal(None)
        return _fold(a.value + b.value if kind is exp.Add else a.value - b.value)
    a, b = (_window(_double(x), 0.0, BIG) for x in (a, b))
    lo = min(a.mag[0], b.mag[0]) * 2.0**-53
    return T(_binary(kind, a, b), "float", (lo, a.mag[1] + b.mag[1]))


def mul(a: T, b: T) -> T:
    if a.is_literal and b.is_literal:
        return literal(None) if None in (a.value, b.value) else _fold(a.value * b.value)
    if a.is_literal:
        a, b = b, a
    a, b = _double(a), _double(b)
    if b.is_literal and b.value is not None:
        c = abs(b.value)
        if c:
            a = _window(a, SMALL / c, BIG / c)
    else:
        a, b = _window(a, 1e-150, 1e150), _window(b, 1e-150, 1e150)
    return T(_binary(exp.Mul, a, b), "float", (a.mag[0] * b.mag[0], a.mag[1] * b.mag[1]))


def div(a: T, b: T, ctx: Ctx) -> T:
    if not (b.is_literal or b.param) or (b.is_literal and not b.value):
        raise Refusal(DENIED, "division is only allowed by a non-zero numeric literal or "
                      "parameter (x / 0 or x / column could fail for some rows).")
    if b.value is None:
        return literal(None)
    if a.is_literal:
        return literal(None) if a.value is None else _fold(a.value / b.value)
    a, c = _double(a), abs(b.value) if b.is_literal else 1.0
    a = _window(a, SMALL * c, BIG * c)
    return T(_binary(exp.Div, a, b), "float", (a.mag[0] / c, a.mag[1] / c))


def _arith(node: exp.Binary, ctx: Ctx, check: Check) -> T:
    what = f"operator {node.key}"
    a = _num(check(node.this, ctx), ctx, what, None)
    b = _num(check(node.expression, ctx), ctx, what, a.type or "float")
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
    return replace(a, node=exp.Neg(this=paren(a.node)))


def _unary_num(node: exp.Func, ctx: Ctx, check: Check) -> T:
    """abs, floor, ceil, round(x[, n]) — computed in float8."""
    name = node.sql_name().lower()
    extra = [k for k, v in node.args.items() if k not in ("this", "decimals") and v]
    if extra or (node.args.get("decimals") and not isinstance(node, exp.Round)):
        raise Refusal(UNSUPPORTED, f"this form of {name}() is not supported.")
    a = _num(check(node.this, ctx), ctx, f"{name}()")
    if a.is_literal and a.value is not None:
        fn = {"abs": abs, "floor": math.floor, "ceil": math.ceil}.get(name, _round)
        if node.args.get("decimals") is None:
            return _fold(float(fn(a.value)))
    a = _double(a)
    if isinstance(node, exp.Abs):
        return replace(a, node=exp.Abs(this=a.node))
    if not isinstance(node, exp.Round) or node.args.get("decimals") is None:
        hi = a.mag[1] + 1
        return T(type(node)(this=a.node), "float", (1.0, hi))
    n = _num(check(node.args["decimals"], ctx), ctx, "round() digits", "int")
    if n.param is not None:
        return T(a.node, "float", a.mag)  # infer mode: the type is all that matters
    if not (n.is_literal and isinstance(n.value, int) and -15 <= n.value <= 15):
        raise Refusal(UNSUPPORTED, "round(x, n) needs a literal integer n between -15 and 15.")
    if a.is_literal:
        return _fold(_round(a.value * 10.0**n.value) / 10.0**n.value)
    scale = literal(10.0**n.value)
    scaled = mul(a, scale)
    rounded = T(exp.Round(this=scaled.node), "float", (1.0, scaled.mag[1] + 1))
    return div(rounded, scale, None)


def _round(v: float) -> float:
    """SQL round(): half away from zero."""
    return math.copysign(math.floor(abs(v) + 0.5), v)


def _text(node: exp.Func, ctx: Ctx, check: Check) -> T:
    """lower, upper (text → text) and length (text → int)."""
    name = node.sql_name().lower()
    if any(v for k, v in node.args.items() if k != "this"):
        raise Refusal(UNSUPPORTED, f"this form of {name}() is not supported.")
    a = ctx.settle(check(node.this, ctx), "text")
    if a.type not in ("text", None):
        raise Refusal(DATATYPE_MISMATCH, f"{name}() takes text, not {a.type}.")
    if isinstance(node, exp.Length):
        return T(exp.Length(this=a.node), "int", (1.0, 2.0**31))
    return T(type(node)(this=a.node), "text")


def common(ts: list[T], ctx: Ctx, what: str) -> tuple[list[T], str | None]:
    """Settle ``ts`` to one type (int+float → float; string literals convert)."""
    known = {t.type for t in ts if t.type and not (t.is_literal and t.type == "text")}
    if not known:
        known = {t.type for t in ts if t.type}
    target = ("float" if "float" in known else "int") if known <= set(NUMERIC) else None
    if len(known) == 1:
        target = known.pop()
    elif target is None and known:
        raise Refusal(DATATYPE_MISMATCH, f"{what} arguments have different types "
                      f"({', '.join(sorted(known))}).")
    ts = [ctx.settle(t, target) for t in ts]
    if len({t.type for t in ts if t.type} - ({"int"} if target == "float" else set())) > 1:
        raise Refusal(DATATYPE_MISMATCH, f"{what} arguments have different types.")
    return ts, target


def _variadic(node: exp.Func, ctx: Ctx, check: Check) -> T:
    """coalesce, least, greatest over one common type."""
    name = node.sql_name().lower()
    if any(v for k, v in node.args.items() if k not in ("this", "expressions", "ignore_nulls")):
        raise Refusal(UNSUPPORTED, f"this form of {name}() is not supported.")
    ts, target = common([check(e, ctx) for e in [node.this, *node.expressions]], ctx, name)
    kw = {} if isinstance(node, exp.Coalesce) else {"ignore_nulls": True}
    out = type(node)(this=ts[0].node, expressions=[t.node for t in ts[1:]], **kw)
    mag = (min(t.mag[0] for t in ts), max(t.mag[1] for t in ts))
    return T(out, target, mag)


RULES: dict[type, Callable[[exp.Expression, Ctx, Check], T]] = {
    exp.Add: _arith, exp.Sub: _arith, exp.Mul: _arith, exp.Div: _arith, exp.Mod: _arith,
    exp.Neg: _neg, exp.Abs: _unary_num, exp.Floor: _unary_num, exp.Ceil: _unary_num,
    exp.Round: _unary_num, exp.Lower: _text, exp.Upper: _text, exp.Length: _text,
    exp.Coalesce: _variadic, exp.Least: _variadic, exp.Greatest: _variadic, exp.Cast: cast,
}
