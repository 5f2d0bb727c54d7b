"""Sums over fixed-point columns clamped and summed in the column's own type.

A ``float`` column may be stored as a fixed-point DECIMAL (TPC-H's prices are
``DECIMAL(15,2)``). The scan's SUM clamps every value to the declared bounds; in double
precision that costs a conversion of every row (``CAST(x AS DOUBLE)``) and a floating-point
sum, about 1.4× what the analyst's own SUM of the decimal costs on DuckDB. Where the backend
says how the column is stored (:func:`fixed_point`), the clamp compares the column with the
bounds written as decimals of its scale, and the sum is of decimals: exact integer
arithmetic on the scaled values (a 64-bit value per row into a 128-bit sum), read as a
double once per cell.

The clamped values are the same numbers as in double precision: the bounds are used only
where the decimal of the column's scale is exactly the declared bound (0, 800000, 12.5 at
scale 2; not 0.1, whose double is not a decimal), so a value is clamped to the same bound
either way; the sum is then the exact sum of those values, rounded once (the double sum
rounds each addition: within (n − 1)·u·Σ|x| of it, u = 2⁻⁵³ — Higham, *Accuracy and
Stability of Numerical Algorithms*, §4.2). The sensitivity the noise is calibrated to is
the bounds' width either way. A column of more than 18 digits is left in double precision:
its values need not fit 64 bits, and a 128-bit sum of them could overflow (an error that
would depend on the data); of at most 18, a sum overflows only past 10²⁰ rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal

from sqlglot import exp

from .plan import Measure, Plan

WIDTH_MAX = 18  # digits of a DECIMAL whose values fit 64 bits (a 128-bit sum of them cannot overflow)


def fixed_point(plan: Plan, decimals: Mapping[str, tuple[int, int]]) -> Plan:
    """``plan`` with each SUM over a ``float`` column the backend stores as ``DECIMAL(w, s)``
    (``decimals``: column → (w, s), for the plan's source) marked to clamp and sum in it
    (:attr:`Measure.scale`) where :func:`scale_for` allows and the plan reads the source's own
    columns (:func:`reads_source`); ``plan`` itself if none is."""
    if not decimals or not reads_source(plan):
        return plan
    key = tuple(sorted(decimals.items()))
    fixed = plan.memo.fixed.get(key)
    if fixed is None:  # once per plan and column types: the new plan keeps its own SQL (memo)
        measures = tuple(
            dataclasses.replace(m, scale=s) if (s := scale_for(m, decimals)) is not None else m
            for m in plan.measures
        )
        fixed = plan if measures == plan.measures else dataclasses.replace(plan, measures=measures)
        plan.memo.fixed[key] = fixed
    return fixed


def reads_source(plan: Plan) -> bool:
    """Whether ``plan``'s columns are its source's own (one table, or the table with its unit
    looked up), so the source's column types are theirs. A join or a per-unit relation may name
    a column like one of the source's and hold another type: a FLOAT compared with a DECIMAL
    bound is compared in single precision, where the bound may round past the declared one."""
    return plan.relation is None or (plan.unit_lookup is not None and not plan.per_unit)


def scale_for(m: Measure, decimals: Mapping[str, tuple[int, int]]) -> int | None:
    """The scale ``m`` is clamped and summed at, or None: a SUM of one declared ``float``
    column stored as a DECIMAL of at most :data:`WIDTH_MAX` digits whose bounds are exact
    decimals of its scale and fit in :data:`WIDTH_MAX` digits."""
    if m.kind != "sum" or m.type != "float" or type(m.column) is not str or m.scale is not None:
        return None  # not one declared column (an Arith is a str too: an expression's text)
    stored = decimals.get(str.lower(m.column))
    if stored is None or m.lower is None or m.upper is None:
        return None
    width, scale = stored
    if not (0 <= scale <= width <= WIDTH_MAX):
        return None
    if all(_exact(b, scale) is not None for b in (m.lower, m.upper)):
        return scale
    return None


def bound(value: float, scale: int) -> exp.Expression:
    """The bound ``value`` as a DECIMAL(18, ``scale``) (exact: :func:`scale_for` allowed it)."""
    text = _exact(value, scale)
    if text is None:
        raise ValueError(f"{value!r} is not a decimal of scale {scale}")
    return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build(f"DECIMAL({WIDTH_MAX}, {scale})"))


def _exact(value: float, scale: int) -> str | None:
    """``value`` written with ``scale`` decimals if that is exactly its double and it has at
    most :data:`WIDTH_MAX` digits, else None."""
    try:
        d = Decimal(float(value))  # the double's exact value
    except (TypeError, ValueError):
        return None
    if not d.is_finite():
        return None
    q = d.quantize(Decimal(1).scaleb(-scale))
    if q != d or len(q.as_tuple().digits) > WIDTH_MAX:
        return None
    return format(q, "f")
