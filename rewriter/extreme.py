"""MAX / MIN on a central table: validation and the one backend scan.

The statement is validated as the same statement with MAX/MIN read as SUM (WHERE,
GROUP BY over public domains, ORDER BY, LIMIT, display steps: the rules of every
central statement; the column must be numeric with declared bounds). One MAX or MIN
per statement — it is its own release. The scan is a histogram over the column's
public grid (:class:`mechanisms.extreme.ExtremeGrid`, passed in as lower/step/U):

    SELECT k1, …, CAST(FLOOR((clamp(col) − lower) / step) AS BIGINT) AS v, COUNT(*) AS n
    FROM t WHERE (pred) AND col IS NOT NULL GROUP BY k1, …, v

Its rows never leave the proxy; the mechanism turns each group's histogram into one value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from config import Config

from . import build_plan, param_types
from .emit import DOUBLE, group_key_sql
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED, Refusal
from .per_record import substitute_extremes
from .plan import Plan
from .values import to_node

__all__ = ["ExtremePlan", "build_extreme_plan", "extreme_param_types", "histogram_sql", "ALLOWED"]

ALLOWED = ("Allowed: SELECT [group columns,] one MAX(col) or MIN(col) of a numeric column with declared "
           "bounds FROM one declared table [WHERE row predicate] [GROUP BY columns with a declared "
           "domain] [ORDER BY outputs] [LIMIT n].")


@dataclass(frozen=True)
class ExtremePlan:
    """A validated MAX/MIN statement: the central plan (planned as SUM) and the aggregate asked for."""

    plan: Plan
    func: Literal["max", "min"]
    column: str

    def canonical(self) -> str:
        return f"extreme:{self.func}({self.column});{self.plan.canonical()}"

    @property
    def cells(self) -> list[tuple]:
        return self.plan.cells


def _refuse(msg: str) -> Refusal:
    return Refusal(UNSUPPORTED, msg, hint=ALLOWED)


def build_extreme_plan(expr: exp.Expression, config: Config, params: list | None = None) -> ExtremePlan:
    sub, found = substitute_extremes(expr)
    kinds = [f for f, _ in found]
    try:
        plan = build_plan(sub, config, params)
    except Refusal as r:
        ext = next((f for f in ("max", "min") if f in kinds), None)
        if ext is not None and len(kinds) == 1:          # the message names what was asked
            r.message = r.message.replace("SUM(", f"{ext.upper()}(").replace("SUM takes", f"{ext.upper()} takes")
        raise
    if plan.selection is not None:
        raise _refuse("HAVING and top-c are not available with MAX/MIN; ask for the value per group.")
    if plan.row_filter is not None or any(o.source == "expr" for o in plan.outputs):
        raise _refuse("MAX and MIN are answered alone (ROUND/CAST over them allowed); compute "
                      "expressions over them in the client.")
    if len(found) != 1 or kinds[0] not in ("max", "min") or len(plan.aggregates) != 1:
        raise _refuse("MAX and MIN are answered one per statement (each is its own release); ask for "
                      "the other aggregates in a separate statement.")
    return ExtremePlan(plan, kinds[0], plan.aggregates[0].column)


def extreme_param_types(expr: exp.Expression, config: Config):
    return param_types(substitute_extremes(expr)[0], config)


def histogram_sql(xp: ExtremePlan, lower: float, step: float, U: int, integral_step: bool,
                  dialect: str) -> str:
    """The one scan: per group key and grid index, the number of rows (see module doc)."""
    plan = xp.plan
    col = exp.column(xp.column, quoted=True)
    if integral_step:          # an int column on step 1: exact integer arithmetic
        lo, hi = int(lower), int(lower) + int(U)
        lo_n, hi_n = to_node(lo), to_node(hi)
        x = col
    else:
        lo_n, hi_n = (exp.Cast(this=to_node(float(b)), to=DOUBLE.copy()) for b in (lower, lower + step * U))
        x = exp.Cast(this=col, to=DOUBLE.copy())
    clamped = exp.Case(ifs=[exp.If(this=exp.LT(this=x.copy(), expression=lo_n), true=lo_n.copy()),
                            exp.If(this=exp.GT(this=x.copy(), expression=hi_n), true=hi_n.copy())],
                       default=x.copy())
    offset = exp.Sub(this=exp.Paren(this=clamped), expression=lo_n.copy())
    if not integral_step:
        offset = exp.Floor(this=exp.Div(this=exp.Paren(this=offset),
                                        expression=exp.Cast(this=to_node(float(step)), to=DOUBLE.copy())))
    v = exp.Cast(this=offset, to=exp.DataType.build("bigint"))
    keys = [group_key_sql(g) for g in plan.group_by]
    q = exp.select(*[k.as_(f"k{i + 1}") for i, k in enumerate(keys)], v.as_("v"),
                   exp.Count(this=exp.Star()).as_("n")).from_(exp.to_table(plan.source))
    cond = exp.Not(this=exp.Is(this=col.copy(), expression=exp.Null()))
    q = q.where(exp.and_(exp.Paren(this=plan.where.copy()), cond) if plan.where is not None else cond)
    q = q.group_by(*[k.copy() for k in keys], v.copy())
    return q.sql(dialect=dialect, identify=True)
