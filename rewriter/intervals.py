"""SUM / AVG of arithmetic over bounded columns: ``SUM(age + 1)``,
``SUM(a + b)``, ``SUM(2 * x)``, ``AVG(x - 10)``, ``SUM(income / 1000.0)``.

The argument is an expression of ``+ − ×``, unary minus, parentheses, numeric literals and
declared numeric columns with bounds (``/`` by a non-zero literal when the result is a float:
``x / 10.0``; integer division differs between Postgres and DuckDB and is refused). Each
column is clamped to its declared [lower, upper] inside the scan — the same clamping as
SUM(col) — and the expression is then computed on the clamped values; its bounds follow by
interval arithmetic (Moore 1966: [a, b] + [c, d] = [a + c, b + d], [a, b] − [c, d] =
[a − d, b − c], [a, b]·[c, d] = [min, max of the four products]). One row adds a value in
those bounds, so the sum's sensitivity is max(|lower|, |upper|) as for a column: the
aggregate is released once, like SUM(col), and costs the same ε.

Integer expressions are computed in BIGINT (exact; the bounds are kept below 2^62 so no
intermediate can overflow), anything else in float8. NULL in any column makes the row's
value NULL, as in SQL (SUM skips it; AVG counts the non-NULL values).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

from sqlglot import exp

from .args import understood
from .errors import DATATYPE_MISMATCH, Refusal
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .scope import Ctx
from .unit import chosen
from .values import clamp_case, to_node

__all__ = ["Arith", "arith_argument", "wanted"]

INT_LIMIT = 2.0**62
MAX_BOUND = 1e290
DOUBLE = exp.DataType.build("double")
BIGINT = exp.DataType.build("bigint")
HINT = (
    "SUM/AVG take a declared numeric column with bounds, or + − × of such columns and numeric "
    "literals (and / by a non-zero decimal literal such as 10.0): SUM(age + 1), SUM(a + b), "
    "AVG(x - 10)."
)


class Arith(str):
    """An aggregate argument that is an expression: its text (Postgres spelling, lowercase —
    the name in labels, release keys and NOTICEs), the scan expression over clamped columns,
    its type and interval bounds. A ``str`` so it travels where a column name does."""

    expr: exp.Expression
    type: str
    # the interval's bounds; they shadow str.lower()/str.upper(), which are never called on an Arith
    lower: float  # type: ignore[assignment]
    upper: float  # type: ignore[assignment]

    def __new__(cls, text: str, expr: exp.Expression, type_: str, lower: float, upper: float) -> Arith:
        s = super().__new__(cls, text)
        s.expr, s.type, s.lower, s.upper = expr, type_, lower, upper
        return s

    def __reduce__(self) -> tuple[Callable[..., Arith], tuple[str, exp.Expression, str, float, float]]:
        return (Arith, (str(self), self.expr, self.type, self.lower, self.upper))


_OPS = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.Paren)


def wanted(node: exp.Expr) -> bool:
    """Whether an aggregate argument is arithmetic this module answers (else the caller's
    usual refusal)."""
    return isinstance(node, _OPS) and node.find(exp.Column) is not None


def _num(v: Decimal) -> float | int:
    return int(v) if v == v.to_integral_value() and abs(v) < 2**62 else float(v)


class _V:
    """A checked sub-expression: node over clamped columns, int or float, interval."""

    def __init__(
        self, node: exp.Expression, typ: str, lo: float, hi: float, literal: Decimal | None = None
    ) -> None:
        self.node, self.typ, self.lo, self.hi, self.literal = node, typ, lo, hi, literal


def _clamped(name: str, ctx: Ctx) -> _V:
    spec = ctx.table.columns[name]
    lo, hi = spec.lower, spec.upper
    if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):
        raise Refusal(DENIED, f"{name} needs numeric clamping bounds in the config.", hint=HINT)
    col: exp.Expression = exp.column(name, quoted=True)
    if (
        spec.type == "int"
        and float(lo).is_integer()
        and float(hi).is_integer()
        and max(abs(lo), abs(hi)) < INT_LIMIT
    ):
        lo_n, hi_n, typ, lo, hi = to_node(int(lo)), to_node(int(hi)), "int", int(lo), int(hi)
    else:
        col = exp.Cast(this=col, to=DOUBLE.copy())
        lo_n, hi_n = (exp.Cast(this=to_node(float(b)), to=DOUBLE.copy()) for b in (lo, hi))
        typ, lo, hi = "float", float(lo), float(hi)
    node = clamp_case(col, lo_n, hi_n)
    if typ == "int":
        node = exp.Cast(this=node, to=BIGINT.copy())
    return _V(node, typ, lo, hi)


def _check(node: exp.Expression, ctx: Ctx, func: str) -> _V:
    understood(node)
    if isinstance(node, exp.Paren):
        v = _check(node.this, ctx, func)
        return _V(exp.Paren(this=v.node), v.typ, v.lo, v.hi, v.literal)
    if isinstance(node, exp.Column):
        name = ctx.column(node).node.name
        spec = ctx.table.columns[name]
        if spec.type not in ("int", "float"):
            raise Refusal(
                DATATYPE_MISMATCH,
                f"{func.upper()} of an expression needs numeric columns; {name} is {spec.type}.",
                hint=HINT,
            )
        chosen(name, spec)
        if not spec.bounded:
            raise Refusal(
                DENIED,
                f"{func.upper()} over {name} needs clamping bounds; declare lower and "
                f"upper for column {name} in the config.",
                hint=HINT,
            )
        return _clamped(name, ctx)
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            d = Decimal(node.this)
        except InvalidOperation:
            raise Refusal(UNSUPPORTED, f"{node.sql('postgres')} is not a number.", hint=HINT) from None
        if not d.is_finite() or abs(d) > Decimal(MAX_BOUND):
            raise Refusal(UNSUPPORTED, f"literal {node.this} is too large here.", hint=HINT)
        n = _num(d)
        typ = "int" if node.is_int and isinstance(n, int) else "float"
        lit = to_node(n) if typ == "int" else exp.Cast(this=to_node(float(d)), to=DOUBLE.copy())
        return _V(lit, typ, n, n, d)
    if (
        isinstance(node, exp.Cast)
        and not node.to.expressions
        and (node.to.is_type("double", "float") or node.to.is_type("bigint", "int"))
    ):
        understood(node, frozenset({"this", "to"})), understood(node.to)
        v = _check(node.this, ctx, func)  # to double: a float expression; to an integer type:
        if node.to.is_type("double", "float"):  # only an integer one (computed in BIGINT already)
            return _V(exp.Cast(this=v.node, to=DOUBLE.copy()), "float", float(v.lo), float(v.hi), v.literal)
        if v.typ != "int":
            raise Refusal(
                UNSUPPORTED,
                f"{func.upper()}: a cast of a float expression to an integer rounds; "
                "write it without the cast.",
                hint=HINT,
            )
        return v
    if isinstance(node, exp.Neg):
        v = _check(node.this, ctx, func)
        return _V(
            exp.Neg(this=exp.Paren(this=v.node)),
            v.typ,
            -v.hi,
            -v.lo,
            None if v.literal is None else -v.literal,
        )
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        a, b = _check(node.this, ctx, func), _check(node.expression, ctx, func)
        typ = "int" if a.typ == b.typ == "int" else "float"
        if isinstance(node, exp.Add):
            lo, hi = a.lo + b.lo, a.hi + b.hi
        elif isinstance(node, exp.Sub):
            lo, hi = a.lo - b.hi, a.hi - b.lo
        else:
            ps = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
            lo, hi = min(ps), max(ps)
        _finite(lo, hi, node)
        x, y = (v.node if typ == v.typ else exp.Cast(this=v.node, to=DOUBLE.copy()) for v in (a, b))
        return _V(type(node)(this=exp.Paren(this=x), expression=exp.Paren(this=y)), typ, lo, hi)
    if isinstance(node, exp.Div):
        a, b = _check(node.this, ctx, func), _check(node.expression, ctx, func)
        if b.literal is None or b.literal == 0:
            raise Refusal(
                UNSUPPORTED,
                f"{func.upper()}: / only by a non-zero numeric literal ({node.sql('postgres')}).",
                hint=HINT,
            )
        if a.typ == "int" and b.typ == "int":
            raise Refusal(
                UNSUPPORTED,
                f"{func.upper()}({node.sql('postgres')}): integer division "
                f"truncates; write {node.this.sql('postgres')} / {b.literal}.0 for a "
                "fractional result.",
                hint=HINT,
            )
        k = float(b.literal)
        lo, hi = sorted((a.lo / k, a.hi / k))
        _finite(lo, hi, node)
        x = a.node if a.typ == "float" else exp.Cast(this=a.node, to=DOUBLE.copy())
        return _V(
            exp.Div(this=exp.Paren(this=x), expression=exp.Cast(this=to_node(k), to=DOUBLE.copy())),
            "float",
            lo,
            hi,
        )
    if isinstance(node, exp.Parameter):
        raise Refusal(
            UNSUPPORTED,
            f"{func.upper()}: a parameter inside the aggregate is not supported (its "
            "bounds and its release key would depend on the value); write the number.",
            hint=HINT,
        )
    raise Refusal(
        UNSUPPORTED,
        f"{func.upper()} of {node.sql('postgres')}: not an arithmetic expression dpgate bounds.",
        hint=HINT,
    )


def _finite(lo: float, hi: float, node: exp.Expression) -> None:
    """Every intermediate interval stays finite and below MAX_BOUND (an inf or NaN bound would
    be no sensitivity at all: refused, never passed on)."""
    if not all(math.isfinite(float(v)) and abs(float(v)) <= MAX_BOUND for v in (lo, hi)):
        raise Refusal(
            "54000", f"the bounds of {node.sql('postgres')} are too large to sum safely.", hint=HINT
        )


def arith_argument(node: exp.Expression, ctx: Ctx, func: str) -> Arith:
    """The :class:`Arith` of ``func(node)`` (func sum or avg), or a refusal with a hint."""
    v = _check(node, ctx, func)
    lo, hi = v.lo, v.hi
    if v.typ == "int" and max(abs(lo), abs(hi)) >= INT_LIMIT:
        raise Refusal(
            "54000",
            f"{func.upper()}({node.sql('postgres')}): the bounds [{lo}, {hi}] are too "
            "large for exact integer sums; cast a column to double precision.",
            hint=HINT,
        )
    if max(abs(float(lo)), abs(float(hi))) > MAX_BOUND:
        raise Refusal(
            "54000", f"the bounds of {node.sql('postgres')} are too large to sum safely.", hint=HINT
        )
    if v.literal is not None:
        raise Refusal(UNSUPPORTED, f"{func.upper()} of a constant is a scaled COUNT(*).", hint=HINT)
    bare = node.copy()
    for c in list(bare.find_all(exp.Column)):  # the resolved names: one text per question
        c.replace(exp.column(ctx.column(c).node.name))
    text = bare.sql("postgres").lower()
    return Arith(
        text, v.node, v.typ, lo if v.typ == "int" else float(lo), hi if v.typ == "int" else float(hi)
    )
