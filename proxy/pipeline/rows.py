"""The statement's rows from a released answer, as Postgres would compute them over the
released cells: the released values made consistent (clamped to their public range), HAVING
and an outer WHERE, the select list, ORDER BY, OFFSET and LIMIT (:func:`answer_rows`), and the
rows' column types (:func:`output_types`).

All of it is post-processing of released values: it may run any number of times on a stored
answer at no privacy cost, and the stored answer keeps the measurement as released.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence

from mechanisms.variance import VARIANCE_FUNCS
from rewriter.plan import Plan
from rewriter.postprocess import aggregates_in

from ..stores.answer import ColumnarAnswer
from ..wire.api import ColumnRows
from .errorbars import interval_nodes, with_intervals
from .postexpr import evaluate, has_over_rows, post_process, rollup, with_over_rows, with_windows

TYPE_OIDS = {
    "int": 20,
    "float": 701,
    "text": 25,
    "bool": 16,
    "numeric": 1700,
    "int4": 23,
    "date": 1082,
    "timestamp": 1114,
}


def output_types(plan: Plan) -> list[int]:
    oids = []
    for o in plan.outputs:
        if o.source == "group":
            oids.append(TYPE_OIDS[plan.group_by[o.index].type])
        elif o.post or o.source == "expr":
            oids.append(TYPE_OIDS[o.type])
        else:
            a = plan.aggregates[o.index]
            oids.append(
                20 if a.func in ("count", "count_distinct") or (a.func == "sum" and a.type == "int") else 701
            )
    return oids


def _time_key(v, typ: str):
    """A date/timestamp group value of a stored answer (ISO text) as the value sent."""
    if v is None or typ not in ("date", "timestamp"):
        return v
    return datetime.date.fromisoformat(v) if typ == "date" else datetime.datetime.fromisoformat(v)


def _order(rows: Sequence[tuple], i: int, desc: bool, nulls_first: bool | None) -> list[tuple]:
    """One stable sort pass; Postgres puts NULLs last for ASC, first for DESC."""
    nf = desc if nulls_first is None else nulls_first
    nulls = [r for r in rows if r[i] is None]
    rest = sorted((r for r in rows if r[i] is not None), key=lambda r: r[i], reverse=desc)
    return nulls + rest if nf else rest + nulls


def _cell(o, key, vals):
    if o.source == "group":
        return _time_key(key[o.index], o.type)
    if o.source == "expr":  # an expression over released values (post-processing)
        return evaluate(o.post, key, vals)
    return post_process(vals[o.index], o.post) if o.post else vals[o.index]


def _plain_rows(plan: Plan, key_column, value_column) -> ColumnRows | None:
    """The rows column by column when every output is a key or an aggregate as released (no
    date/time key to convert, no post-processing): what :func:`_cell` gives, without a call
    per value, so a large answer's rows cost a few list operations per column. ``key_column(i)`` / ``value_column(j)``: the
    answer's key ``i`` / aggregate ``j`` of every cell. None otherwise."""
    cols = []
    for o in plan.outputs:
        if o.source == "group" and o.type not in ("date", "timestamp"):
            cols.append(key_column(o.index))
        elif o.source == "aggregate" and not o.post:
            cols.append(value_column(o.index))
        else:
            return None
    return ColumnRows(cols) if cols else None  # rows made only if something reads them


def aligned(plan: Plan, answer: dict) -> dict:
    """``answer`` with its aggregates in ``plan``'s order: two spellings of one measurement
    (same canonical text) may list the same aggregates in another order."""
    labels, mine = answer.get("labels"), [a.label for a in plan.aggregates]
    if not labels or labels == mine or sorted(labels) != sorted(mine) or len(set(mine)) != len(mine):
        return answer
    where = [labels.index(lab) for lab in mine]
    out = dict(answer, labels=mine, values=[[v[i] for i in where] for v in answer["values"]])
    for k in ("half_width", "mechanism", "epsilon"):
        if isinstance(answer.get(k), list) and len(answer[k]) == len(labels):
            out[k] = [answer[k][i] for i in where]
    return out


def consistent_ranges(plan: Plan) -> list[tuple | None]:
    """Per aggregate, the public range its released value is clamped to, or None: a COUNT
    ≥ 0, a SUM of a column bounded below by ≥ 0 (above by ≤ 0) ≥ 0 (≤ 0), an AVG within
    its column's bounds, a VAR/STDDEV ≥ 0. Nothing when the table says ``consistent = false``."""
    out: list[tuple | None] = []
    for a in plan.aggregates:
        r: tuple | None = None  # (low or None, high or None)
        if not getattr(plan, "consistent", True):
            pass
        elif a.func in ("count", "count_distinct") or a.func in VARIANCE_FUNCS:
            r = (0, None)
        elif a.func == "sum" and a.lower is not None and a.lower >= 0:
            r = (0, None)
        elif a.func == "sum" and a.upper is not None and a.upper <= 0:
            r = (None, 0)
        elif a.func == "avg" and a.lower is not None and a.upper is not None:
            r = (a.lower, a.upper)
        out.append(r)
    return out


def _clamp(v, r):
    if v is None or r is None:
        return v
    lo, hi = r
    if lo is not None and v < lo:
        return type(v)(lo)
    if hi is not None and v > hi:
        return type(v)(hi)
    return v


def _consistent_column(col: list, r) -> list:
    return col if r is None else [_clamp(v, r) for v in col]


def answer_rows(plan: Plan, answer: dict) -> Sequence[tuple]:
    """The statement's rows from a released answer, as Postgres would compute them over the
    released cells: the released values made consistent (:func:`consistent_ranges`), then
    HAVING / an outer WHERE (``row_filter``), the select list, ORDER BY (an output, or an
    expression not selected), OFFSET and LIMIT. Post-processing: free; the stored answer
    keeps the measurement as released."""
    answer = aligned(plan, answer)
    keep = _row_filter(plan, answer)
    hidden = [item.tree for item in plan.order_by if item.tree is not None]
    ranges = consistent_ranges(plan)
    posts = [o.post if o.source == "expr" else None for o in plan.outputs]
    totals = has_over_rows([keep, *posts, *hidden])  # a scalar subquery over these same rows
    bars = interval_nodes([keep, *posts, *hidden])  # dp_interval_low/high: over every released cell
    if keep is None and not hidden and not totals and not bars:
        if isinstance(answer, ColumnarAnswer) and answer.columns is not None:
            key_column, raw_column = answer.column_list(0), answer.column_list(1)
        else:
            keys, values = answer["keys"], answer["values"]
            key_column = lambda i: [key[i] for key in keys]  # noqa: E731
            raw_column = lambda j: [vals[j] for vals in values]  # noqa: E731
        value_column = lambda j: _consistent_column(raw_column(j), ranges[j])  # noqa: E731
        if (plain := _plain_rows(plan, key_column, value_column)) is not None:
            return _arranged(plan, plain)
    cells = [
        (key, [_clamp(v, r) for v, r in zip(vals, ranges)] if any(ranges) else vals)
        for key, vals in zip(answer["keys"], answer["values"])
    ]
    outputs = plan.outputs
    if bars:  # the error bars of released values, read as more values of each cell
        trees, cells = with_intervals(plan, answer, [keep, *posts, *hidden], cells, ranges)
        keep, posts, hidden = trees[0], trees[1 : 1 + len(posts)], trees[1 + len(posts) :]
        outputs = tuple(o if t is None else dataclasses.replace(o, post=t) for o, t in zip(outputs, posts))
    if totals:  # its value over every released row, before the outer WHERE: a constant
        keep, *rest = with_over_rows([keep, *posts, *hidden], cells)
        outputs = tuple(o if t is None else dataclasses.replace(o, post=t) for o, t in zip(outputs, rest))
        hidden = rest[len(outputs) :]
    cells = [
        (key, vals) for key, vals in cells if keep is None or evaluate(keep, key, vals) is True
    ]  # HAVING / outer WHERE
    if any(o.source == "expr" for o in outputs) or hidden:  # window functions: over these cells
        trees, cells = with_windows([o.post if o.source == "expr" else None for o in outputs] + hidden, cells)
        n = len(outputs)
        outputs = tuple(o if t is None else dataclasses.replace(o, post=t) for o, t in zip(outputs, trees))
        hidden = trees[n:]
    if plan.outputs and plan.outputs[0].source == "expr" and plan.outputs[0].post[0] == "rollup":
        rows = [tuple(rollup(o.post, cells) for o in outputs)]  # COUNT/SUM/… of released rows
    else:
        rows = [
            tuple(_cell(o, key, vals) for o in outputs) + tuple(evaluate(t, key, vals) for t in hidden)
            for key, vals in cells
        ]
    arranged = _arranged(plan, rows)
    n = len(plan.outputs)
    return [r[:n] for r in arranged] if hidden else arranged


def kept_cells(plan: Plan, answer: dict) -> list[bool] | None:
    """Per released cell, whether the statement's HAVING / outer WHERE keeps its row (on the
    consistent values, as :func:`answer_rows` reads them); None when there is no such filter,
    or it reads a value over all the rows (a scalar subquery over them). Error bars in the
    filter (``dp_interval_low/high``) are read as :func:`answer_rows` reads them."""
    answer = aligned(plan, answer)
    keep = _row_filter(plan, answer)
    if keep is None or has_over_rows([keep]):
        return None
    ranges = consistent_ranges(plan)
    cells = [
        (key, [_clamp(v, r) for v, r in zip(vals, ranges)])
        for key, vals in zip(answer["keys"], answer["values"])
    ]
    if interval_nodes([keep]):
        (keep,), cells = with_intervals(plan, answer, [keep], cells, ranges)
    return [evaluate(keep, key, vals) is True for key, vals in cells]


def _row_filter(plan: Plan, answer: dict):
    """The filter on released rows: HAVING and an outer WHERE. Over a sparse-vector answer
    (the sparse vector technique, Liu et al.) it is applied where the values it reads were released with the keys; a key
    released alone passed the HAVING as the sparse vector decided it."""
    keep = getattr(plan, "row_filter", None)
    if keep is None or "svt" not in answer:
        return keep
    released = {o.index for o in plan.outputs if o.source == "aggregate"}
    return keep if aggregates_in(keep) <= released else None


def _arranged(plan: Plan, rows: Sequence[tuple]) -> Sequence[tuple]:
    """``rows`` in ``plan``'s ORDER BY, top-c ranking, OFFSET and LIMIT."""
    n = len(plan.outputs)
    j = sum(item.tree is not None for item in plan.order_by)  # sort keys not selected: after the outputs
    for item in reversed(plan.order_by):
        if item.tree is not None:
            j -= 1
        rows = _order(rows, item.output if item.tree is None else n + j, item.desc, item.nulls_first)
    sel = plan.selection
    if sel is not None and sel.kind == "top":  # rank by the released (noisy) value, if any
        ranked = [
            i for i, o in enumerate(plan.outputs) if o.source == "aggregate" and o.index == sel.aggregate
        ]
        if ranked:
            rows = _order(rows, ranked[0], True, False)
    start = plan.offset or 0
    end = None if plan.limit is None else start + plan.limit
    return rows if start == 0 and end is None else rows[start:end]
