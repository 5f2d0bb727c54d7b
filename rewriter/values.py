"""Plan-time values: parse literals, convert parameters and literals to a column
type, and turn Python values back into normalised sqlglot literals.

Every literal in a plan goes through :func:`to_node`, so ``30``, ``30.0`` and a
bound ``$1 = 30`` all produce the same SQL text (and the same canonical form).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from sqlglot import exp

from .args import understood
from .errors import INVALID_PARAMETER, Refusal
from .plan import ColumnType

MAX_LITERAL = 1e300  # larger literals are refused (they could overflow a float8)
NUMERIC_OUT_OF_RANGE = "22003"
_TRUE = {"t", "true", "yes", "y", "on", "1"}
_FALSE = {"f", "false", "no", "n", "off", "0"}


def natural_type(value: Any) -> ColumnType | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, (float, Decimal)):
        return "float"
    return "text"


def _finite(v: float | int, what: str) -> float | int:
    if isinstance(v, float) and not math.isfinite(v) or abs(v) > MAX_LITERAL:
        raise Refusal(
            NUMERIC_OUT_OF_RANGE,
            f"{what} {v!r} is out of range; numbers must lie within ±{MAX_LITERAL:g}.",
            hint="Use a smaller number.",
        )
    return v


_PG_SPACE = " \t\n\r\v\f"
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_FLOAT_WORDS = {"nan", "inf", "infinity"}  # parsed, then refused by _finite (22003)


def number(text: str) -> int | float:
    """A SQL numeric literal as a Python int (integral) or float, in Postgres's syntax only:
    Python's ``int('41_0')`` is 410 and ``float`` takes digit separators and non-ASCII
    digits, which Postgres refuses."""
    t = text.strip(_PG_SPACE)
    if _INT_TEXT.fullmatch(t) and len(t) <= 320:  # longer: a float (inf), refused below
        v: int | float = int(t)
    elif _FLOAT_TEXT.fullmatch(t) or t.lower().lstrip("+-") in _FLOAT_WORDS:
        v = float(t)
    else:
        raise Refusal("42601", f"invalid numeric literal {text!r}", hint=None)
    return _finite(v, "numeric literal")


def coerce(value: Any, type_: ColumnType | None, what: str = "value") -> Any:
    """Convert ``value`` to ``type_`` (None: keep its natural type) or refuse 22023.

    Numbers stay ints when integral (``30.0`` → 30) so equal values render equally.
    """
    if value is None or type_ is None:
        return _norm(value)
    try:
        if type_ == "text":
            if isinstance(value, (bool, int, float, Decimal)):
                raise ValueError
            return str(value)
        if type_ == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
            raise ValueError
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, str):
            value = number(value)
        if isinstance(value, Decimal):
            value = float(value)
        if not isinstance(value, (int, float)):
            raise ValueError
        v = _norm(_finite(value, what))
        if type_ == "int" and not isinstance(v, int):
            raise ValueError
        return v
    except (ValueError, ArithmeticError, Refusal):
        raise Refusal(
            INVALID_PARAMETER, f"{what} {value!r} is not a valid {type_}.", hint=f"Give a {type_} value."
        ) from None


def _norm(v: Any) -> Any:
    if isinstance(v, Decimal):
        v = float(v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**63:
        return int(v)
    return v


def to_node(value: Any) -> exp.Expression:
    """A normalised sqlglot literal for a plan-time value."""
    value = _norm(value)
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float)):
        text = str(value) if isinstance(value, int) else repr(value)
        lit = exp.Literal.number(text.lstrip("-"))
        return exp.Neg(this=lit) if value < 0 else lit
    return exp.Literal.string(str(value))


def literal_value(node: exp.Expression) -> tuple[bool, Any]:
    """(True, value) if ``node`` is a plain literal (after unary minus), else (False, None)."""
    if isinstance(node, exp.Paren):
        return literal_value(node.this)
    if isinstance(node, exp.Null):
        return True, None
    if isinstance(node, exp.Boolean):
        return True, node.this
    if isinstance(node, exp.Literal):
        understood(node)
        return True, node.this if node.is_string else number(node.this)
    if isinstance(node, exp.Neg):
        ok, v = literal_value(node.this)
        if ok and isinstance(v, (int, float)) and not isinstance(v, bool):
            return True, _norm(-v)
    return False, None


def clamp_case(col: exp.Expression, lo: exp.Expression, hi: exp.Expression) -> exp.Expression:
    """``col`` clamped to [lo, hi] in one CASE: ``CASE WHEN col < lo THEN lo WHEN col > hi
    THEN hi ELSE col END``. NULL stays NULL (no comparison holds, and the ELSE is NULL), NaN
    clamps to hi and ±Infinity to its bound (NaN sorts above every number on DuckDB,
    Postgres and Spark). This form costs a SUM no more than the in-range test
    first (``CASE WHEN col BETWEEN lo AND hi THEN col …``; ``bench.rewrite`` compares them).
    Not LEAST/GREATEST: Postgres' GREATEST(NULL, lo) is lo, not NULL (and on DuckDB they
    cost more than either CASE)."""
    below = exp.If(this=exp.LT(this=col.copy(), expression=lo.copy()), true=lo.copy())
    above = exp.If(this=exp.GT(this=col.copy(), expression=hi.copy()), true=hi.copy())
    return exp.Case(ifs=[below, above], default=col.copy())
