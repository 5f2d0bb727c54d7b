"""VAR/STDDEV and COUNT(DISTINCT …): the select-list rules and their measures.

``VAR_POP``, ``VAR_SAMP`` (= ``VARIANCE``), ``STDDEV_POP``, ``STDDEV_SAMP`` (=
``STDDEV``) of a bounded numeric column are one release of three measures: the
non-NULL count and the centred clamped moments Σ y, Σ y² with y = clamp(x, L, U)
- (L + U)/2 (in half units, 2y, for integer columns so the sums stay exact;
:mod:`mechanisms.variance` holds the law). ``COUNT(DISTINCT col)`` is allowed on
columns with a declared public domain (sensitivity 1 under add/remove: one row
changes the number of distinct values by at most 1).
"""

from __future__ import annotations

from typing import Literal, Protocol

from sqlglot import exp

from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .errors import Refusal
from .plan import ColumnType, Measure
from .scope import Ctx

VARIANCE_NODES = {
    exp.VariancePop: "var_pop",
    exp.Variance: "var_samp",
    exp.StddevPop: "stddev_pop",
    exp.Stddev: "stddev_samp",
    exp.StddevSamp: "stddev_samp",
}
VARIANCE_FUNCS = ("var_pop", "var_samp", "stddev_pop", "stddev_samp")
MAX_EXACT_WIDTH = 2**31  # integer moments in half units: (2·(U-L))² per row must fit a bigint


class Bounded(Protocol):
    """A column's type and clamping bounds: a declared column (config) or a measure."""

    @property
    def type(self) -> ColumnType | None: ...

    @property
    def lower(self) -> float | str | None: ...

    @property
    def upper(self) -> float | str | None: ...


def output_name(node: exp.Expression, func: str) -> str:
    """Postgres's column name for an unaliased aggregate: its function's name as written
    (``count`` for COUNT(DISTINCT …), ``stddev`` for STDDEV; VARIANCE/VAR_SAMP parse alike)."""
    if func == "count_distinct":
        return "count"
    return "stddev" if type(node) is exp.Stddev else func


def _bounds(spec: Bounded) -> tuple[float, float] | None:
    """``spec``'s numeric clamping bounds, or None (unbounded, or a date/time column)."""
    lo, hi = spec.lower, spec.upper
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        return lo, hi
    return None


def moment_type(spec: Bounded) -> Literal["int", "float"]:
    """ "int" when the centred moments of ``spec`` are computed exactly as integers."""
    bounds = _bounds(spec)
    if bounds is None:
        return "float"
    lo, hi = bounds
    exact = (
        spec.type == "int"
        and float(lo).is_integer()
        and float(hi).is_integer()
        and hi - lo < MAX_EXACT_WIDTH
        and max(abs(lo), abs(hi)) < 2**61
    )
    return "int" if exact else "float"


def distinct_column(node: exp.Count, ctx: Ctx) -> str:
    """The column of ``COUNT(DISTINCT col)``, or a refusal with what to write instead."""
    arg = node.this
    cols = arg.expressions if isinstance(arg, exp.Distinct) else []
    while len(cols) == 1 and isinstance(cols[0], exp.Paren):  # count(distinct("t"."c")), Power BI
        cols = [cols[0].this]
    if (
        len(cols) != 1
        or not isinstance(cols[0], exp.Column)
        or [k for k, v in arg.args.items() if v and k != "expressions"]
    ):
        raise Refusal(UNSUPPORTED, "COUNT(DISTINCT …) takes one declared column with a public domain.")
    name = ctx.column(cols[0]).node.name
    if name == ctx.table.privacy_unit:  # people: one per unit and cell (rewriter.unit)
        return name
    if ctx.table.columns[name].public_domain is None:
        raise Refusal(
            DENIED,
            f"COUNT(DISTINCT {name}) needs a public domain for {name}; declare one "
            f"in the config, or ask for COUNT(*) … GROUP BY a column with a public domain.",
        )
    return name


def measures(func: str, col: str, spec: Bounded) -> tuple[tuple[Measure, ...], ColumnType | None]:
    """(Measure, …) of a VAR/STDDEV or COUNT(DISTINCT) aggregate, and its Aggregate type."""
    if func == "count_distinct":
        return (Measure("count_distinct", col),), spec.type
    bounds = _bounds(spec)
    if bounds is None:
        raise Refusal(UNSUPPORTED, f"{func.upper()}({col}) needs a numeric column with declared bounds.")
    typ = moment_type(spec)
    return (
        Measure("count", col),
        Measure("csum", col, typ, *bounds),
        Measure("csumsq", col, typ, *bounds),
    ), typ


def moment_expr(
    kind: str, typ: str | None, clamped: exp.Expression, lower: float, upper: float
) -> exp.Expression:
    """SUM of the centred clamped value (``csum``) or of its square (``csumsq``)."""
    if typ == "int":
        y: exp.Expression = exp.Sub(
            this=exp.Mul(this=exp.Literal.number(2), expression=exp.Paren(this=clamped)),
            expression=exp.Literal.number(int(lower) + int(upper)),
        )
    else:
        mid = exp.Cast(
            this=exp.Literal.number(repr((float(lower) + float(upper)) / 2)), to=exp.DataType.build("double")
        )
        y = exp.Sub(this=exp.Paren(this=clamped), expression=mid)
    y = exp.Paren(this=y)
    if kind == "csumsq":
        y = exp.Mul(this=y, expression=y.copy())
    return exp.Sum(this=y)
