"""Cast rules: literal casts are converted at plan time; column casts only where they
cannot fail for any row (int → float, anything → text, bool → int; int → int is a
no-op, so a narrowing cast cannot overflow). text → number and float → int are refused.
"""

from __future__ import annotations

from sqlglot import exp

from .args import type_name, understood
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .errors import Refusal
from .plan import ColumnType
from .scope import Check, Ctx, T, literal
from .values import coerce

DOUBLE = exp.DataType.build("double")


_CAST_TYPES: dict[ColumnType, set[str]] = {
    "int": {"INT", "BIGINT", "SMALLINT", "TINYINT"},
    "float": {"DOUBLE", "FLOAT"},
    "text": {"TEXT", "VARCHAR", "CHAR", "NCHAR", "NVARCHAR"},
    "bool": {"BOOLEAN"},
}


def cast(node: exp.Cast, ctx: Ctx, check: Check) -> T:
    to = understood(node.to)
    target = next((k for k, v in _CAST_TYPES.items() if type_name(to) in v), None)
    if target is None or to.expressions:
        raise Refusal(
            UNSUPPORTED,
            f"cast to {to.sql('postgres')} is not supported; cast to "
            "integer, double precision, text or boolean.",
        )
    a = check(node.this, ctx)
    if a.pending:
        return ctx.settle(a, target)
    if a.is_literal:
        v = a.value
        if target == "text" and v is not None and not isinstance(v, str):
            if a.type == "float":
                raise Refusal(
                    UNSUPPORTED,
                    "casting a non-integer number literal to text is not "
                    "supported (its text depends on how Postgres types it); write the "
                    "text literal itself.",
                )
            return literal(str(v).lower() if isinstance(v, bool) else str(v))
        return literal(coerce(v, target, "cast of"))
    if a.type == target or a.type is None:
        return a
    if (a.type, target) == ("int", "float"):
        return T(exp.Cast(this=a.node, to=DOUBLE.copy()), "float", a.mag)
    if (a.type, target) == ("bool", "int"):
        return T(exp.Cast(this=a.node, to=exp.DataType.build("int")), "int", (1.0, 1.0))
    if target == "text":
        if a.f8:
            raise Refusal(
                UNSUPPORTED,
                "casting the result of arithmetic to text is not supported; "
                "compare it with a number instead.",
            )
        return T(exp.Cast(this=a.node, to=exp.DataType.build("text")), "text")
    raise Refusal(
        DENIED,
        f"casting {a.type} to {target} could fail for some rows and is not "
        "allowed; compare with values of the column's type instead.",
    )
