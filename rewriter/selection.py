"""Threshold and top-c shapes, answered by the sparse vector technique (Liu et al.; SVT spec §7.1):

    SELECT g FROM t GROUP BY g HAVING COUNT(*) > T          (also >=, COUNT(col), SUM(col))
    SELECT g FROM t GROUP BY g ORDER BY COUNT(*) DESC LIMIT c   (T from HAVING or
                                                    SET dpgate.topc_threshold = T)

The plan gets a :class:`~rewriter.plan.Selection`; the thresholded aggregate is
added to the plan's aggregates if the select list does not ask for it. Only the
keys that pass are released (and, if the select list asks for aggregate values,
noisy values of those keys at a separate ε).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from sqlglot import exp

from . import intervals, predicate
from .aggregates import Filtered, aggregate
from .args import understood
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .errors import Refusal
from .plan import Aggregate, GroupKey, Measure, Output, Selection
from .scope import Ctx

Op = Literal[">", ">=", "<", "<="]
_OPS: dict[type[exp.Expression], Op] = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_FLIP: dict[Op, Op] = {">": "<", ">=": "<=", "<": ">", "<=": ">="}
PerKey = tuple[str, str, tuple[tuple[Any, float], ...], float]  # ("per_key", column, pairs, default)
MAX_KEYS = 100  # keys a HAVING without LIMIT may return (the c of SVT)


def split_having(select: exp.Select) -> exp.Expression | None:
    """Detach HAVING so the plain-shape rules can run; returns its predicate."""
    having = select.args.get("having")
    if having is None:
        return None
    select.set("having", None)
    pred: exp.Expression = having.this
    return pred


def top_order(select: exp.Select) -> exp.Expression | None:
    """The aggregate of ``ORDER BY <aggregate> DESC`` with a LIMIT (the top-c shape)."""
    order = select.args.get("order")
    if order is None or select.args.get("limit") is None or not select.args.get("group"):
        return None
    first = order.expressions[0]
    node = first.this
    if (
        isinstance(node, exp.AggFunc)
        and isinstance(node, exp.Expression)
        and first.args.get("desc")
        and len(order.expressions) == 1
    ):
        return node  # the ORDER BY stays: it is also a sort of the released values
    return None


def _threshold_aggregate(node: exp.Expression, ctx: Ctx) -> tuple[str, str | None]:
    func, col = aggregate(node, ctx)
    if isinstance(col, Filtered):  # agg FILTER (WHERE …): not a column's COUNT or SUM
        raise Refusal(
            UNSUPPORTED, "the sparse vector technique thresholds COUNT or SUM of one declared column."
        )
    if func not in ("count", "sum"):
        raise Refusal(UNSUPPORTED, f"a threshold on {func.upper()} is not supported; use COUNT or SUM.")
    return func, col


def _having(pred: exp.Expression, ctx: Ctx) -> tuple[exp.Expression, Literal[">", ">="], float | PerKey]:
    while isinstance(pred, exp.Paren):
        pred = pred.this
    op = _OPS.get(type(pred))
    if op is not None:
        understood(pred)
    if op is None:
        raise Refusal(
            UNSUPPORTED,
            "HAVING takes one comparison of an aggregate with a public "
            "threshold, e.g. HAVING COUNT(*) > 100.",
        )
    left, right = pred.this, pred.expression
    if isinstance(right, exp.AggFunc) and not isinstance(left, exp.AggFunc):
        left, right, op = right, left, _FLIP[op]
    if not isinstance(left, exp.AggFunc) or not isinstance(left, exp.Expression):
        raise Refusal(UNSUPPORTED, "HAVING compares COUNT(…) or SUM(…) with a number.")
    if op == "<" or op == "<=":
        raise Refusal(
            UNSUPPORTED,
            "HAVING … < T is not supported: the sparse vector technique "
            "finds keys ABOVE a threshold; use > or >=.",
        )
    if isinstance(right, exp.Case):
        return left, op, _per_key(right, ctx)
    t = ctx.settle(predicate.check(right, ctx), "float")
    if not t.is_literal or not isinstance(t.value, (int, float)) or isinstance(t.value, bool):
        if ctx.infer and t.param is not None:
            return left, op, 0.0
        raise Refusal(
            DENIED,
            "the HAVING threshold must be a public number (a literal or a "
            "parameter), not an expression over the data.",
        )
    return left, op, float(t.value)


def _number(node: exp.Expression, ctx: Ctx) -> float:
    t = ctx.settle(predicate.check(node, ctx), "float")
    if not t.is_literal or not isinstance(t.value, (int, float)) or isinstance(t.value, bool):
        raise Refusal(DENIED, "per-group thresholds must be public numbers (literals).")
    return float(t.value)


def _per_key(case: exp.Case, ctx: Ctx) -> PerKey:
    """``CASE g WHEN v THEN T … ELSE T0 END``: public thresholds per value of group key g."""
    col = understood(case).this
    if not isinstance(col, exp.Column) or case.args.get("default") is None:
        raise Refusal(
            UNSUPPORTED,
            "per-group thresholds take the form CASE <group column> WHEN "
            "<value> THEN <number> … ELSE <number> END.",
        )
    name = ctx.column(col).node.name
    spec = ctx.table.columns[name]
    pairs: list[tuple[Any, float]] = []
    for w in case.args.get("ifs") or []:
        understood(w)
        key = ctx.settle(predicate.check(w.this, ctx), spec.type)
        if not key.is_literal:
            raise Refusal(UNSUPPORTED, "per-group threshold keys must be literals.")
        pairs.append((key.value, _number(w.args["true"], ctx)))
    return ("per_key", name, tuple(pairs), _number(case.args["default"], ctx))


def plan_selection(
    having: exp.Expression | None,
    top: exp.Expression | None,
    ctx: Ctx,
    groups: Sequence[GroupKey],
    measures: Sequence[Measure],
    aggregates: Sequence[Aggregate],
    outputs: Sequence[Output],
    limit: int | None,
) -> tuple[tuple[Measure, ...], tuple[Aggregate, ...], Selection]:
    """(measures, aggregates, Selection) for a HAVING / top-c statement."""
    if not groups:
        raise Refusal(UNSUPPORTED, "HAVING and top-c need GROUP BY a column with a public domain.")
    threshold: float | PerKey | None = None
    op: Literal[">", ">="] = ">"
    node = top
    if having is not None:
        node_h, op, threshold = _having(having, ctx)
        if top is not None and _threshold_aggregate(top, ctx) != _threshold_aggregate(node_h, ctx):
            raise Refusal(UNSUPPORTED, "ORDER BY … DESC LIMIT must rank by the same aggregate as HAVING.")
        node = node_h
    if node is None:
        raise Refusal(UNSUPPORTED, "HAVING or ORDER BY <aggregate> DESC LIMIT c is needed here.")
    func, col = _threshold_aggregate(node, ctx)
    spec = ctx.table.columns.get(col) if col is not None and not isinstance(col, intervals.Arith) else None
    if col is not None and spec is None:  # SUM(a + b): answered from the released cells
        raise Refusal(
            UNSUPPORTED, "the sparse vector technique thresholds COUNT or SUM of one declared column."
        )
    ms, ags = list(measures), list(aggregates)
    same = next(
        (
            i
            for i, a in enumerate(aggregates)  # the HAVING filter's (or select list's) own
            if a.func == func and a.column == col and a.filter is None
        ),
        None,
    )
    if func == "count":
        meas = Measure("count_rows") if col is None else Measure("count", col)
        agg = Aggregate("count", col, spec.type if spec else None, None, None, ())
    else:
        lo, hi = (spec.lower, spec.upper) if spec is not None else (None, None)
        if spec is None or not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):
            raise Refusal(UNSUPPORTED, "the sparse vector technique thresholds SUM of a bounded column.")
        meas = Measure("sum", col, spec.type, lo, hi)
        agg = Aggregate("sum", col, spec.type, lo, hi, ())
    if same is not None:
        agg = ags[same]
    else:
        if meas not in ms:
            ms.append(meas)
        agg = Aggregate(agg.func, agg.column, agg.type, agg.lower, agg.upper, (ms.index(meas),))
        if agg not in ags:
            ags.append(agg)
    c = limit if limit is not None else None
    per_key: tuple[tuple[Any, float], ...] = ()
    if isinstance(threshold, tuple):  # CASE g WHEN … THEN T … ELSE T0 END
        _, col, pairs, default = threshold
        if [g.column for g in groups] != [col]:
            raise Refusal(UNSUPPORTED, "per-group thresholds need GROUP BY exactly the CASE column.")
        per_key, threshold = pairs, default
    sel = Selection(
        kind="top" if top is not None else "having",
        aggregate=ags.index(agg),
        op=op,
        threshold=threshold,
        c=c,
        values=any(o.source == "aggregate" for o in outputs),
        per_key=per_key,
    )
    return tuple(ms), tuple(ags), sel
