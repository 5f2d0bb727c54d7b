"""Error bars in the rows: ``dp_interval_low(agg[, level])`` / ``dp_interval_high(…)`` per
released cell, from the same release (post-processing: free).

A select item, HAVING or ORDER BY may read the interval of an aggregate the statement
releases (:mod:`rewriter.postprocess` plans it as ``("interval", side, i, level, j)``: side
"low" or "high", aggregate ``i``, confidence ``level``, and ``j`` the index of the count
released with an AVG, which its interval reads, else -1). Before the row filter, each such
node is computed for every cell from the stored answer — the released values and each
aggregate's mechanism and ε — by :mod:`mechanisms.errorbars`, and read as one more value
of the cell (as window functions are, :func:`.postexpr.with_windows`). A value made
consistent (a COUNT at ≥ 0, an AVG within its bounds) gets both ends clamped into the same
range, which keeps the interval covering (:func:`mechanisms.errorbars.consistent`).

The interval covers the value the mechanism measured: rows kept by contribution
bounding, values clamped to the declared bounds. The mechanism is rebuilt from the plan and the
answer's ε (or ρ) and must give the half-widths the release recorded; where no law does (a
derived or foreign answer), the interval is NULL, and the NOTICE says so — never a guess.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from mechanisms import GeometricCount, LaplaceSum
from mechanisms.errorbars import consistent, interval
from mechanisms.gaussian_stats import GaussianMean
from mechanisms.mean import LaplaceTransformedMean
from mechanisms.variance import VARIANCE_FUNCS
from rewriter.plan import Plan
from rewriter.unit import factor

from .release import contributions_sq, measurement_for, release_groups, zcdp_measurement_for

__all__ = ["interval_nodes", "interval_text", "with_intervals", "INTERVAL_NOTE"]

INTERVAL_NOTE = (
    "intervals cover the value as measured: rows kept by contribution bounding, values "
    "clamped to the column's bounds"
)


def _found(t: Any, out: list) -> None:
    if not isinstance(t, tuple):
        return
    if t[:1] == ("interval",) and len(t) == 5:
        if t not in out:
            out.append(t)
        return
    for x in t:
        _found(x, out)


def interval_nodes(trees: Sequence[Any]) -> list[tuple]:
    """The distinct interval nodes the resolved ``trees`` read."""
    out: list[tuple] = []
    for t in trees:
        _found(t, out)
    return out


def _substituted(t: Any, slots: dict) -> Any:
    if not isinstance(t, tuple):
        return t
    if t in slots:
        return slots[t]
    return tuple(_substituted(x, slots) for x in t)


def _column(values: list, j: int) -> list:
    return [vals[j] for vals in values]


def _member_of(plan: Plan, j: int) -> int | None:
    """The primary aggregate of the release ``j`` is a member of (an AVG's SUM/COUNT, a
    VAR's COUNT), else None."""
    for i, members in release_groups(plan):
        if j in members:
            return i
    return None


LADDER_PREFIX = "multitier_"  # a ladder's mechanisms (proxy.pipeline.multitier's names)


def _ladder_measurement(a, share: float):
    """The marginal law of a ladder level's release at ε ``share`` (:mod:`.multitier`'s slots)."""
    integer = a.type == "int"
    if a.func == "count":
        return GeometricCount(share)
    if a.lower is None or a.upper is None:
        return None
    if a.func == "sum":
        return LaplaceSum(share, a.lower, a.upper, integer=integer)
    if a.func == "avg":
        return LaplaceTransformedMean(share, a.lower, a.upper, integer=integer)
    return None


def _measurement(plan: Plan, answer: dict, i: int):
    """The measurement that released aggregate ``i`` (its release's primary's), rebuilt from
    the plan and the answer's ε and checked against the answer's recorded half-widths
    (:func:`_agrees`), or None where the answer does not say how it was measured (a per-record
    release, a law this module does not rebuild). A ladder's level is released with the
    marginal law of its ε share (multi-tier release, Wang et al. 2026), recorded as
    ``interval_epsilon``."""
    return _rebuilt(plan, answer, i)


def _rebuilt(plan: Plan, answer: dict, i: int):
    eps, mechs = answer.get("epsilon"), answer.get("mechanism")
    aggs = plan.aggregates
    if not isinstance(eps, list) or not isinstance(mechs, list):
        return None
    if "svt" in answer:  # the selected keys' values: each selected aggregate its own release
        out = sorted({o.index for o in plan.outputs if o.source == "aggregate"})
        if i not in out or len(eps) != 1 + len(out) or aggs[i].func not in ("count", "sum"):
            return None
        m = measurement_for(aggs[i], eps[1 + out.index(i)])
        return m if m.name == mechs[1 + out.index(i)] and _agrees(plan, answer, i, m) else None
    if len(eps) != len(aggs):
        return None
    primary = _member_of(plan, i)
    a = aggs[primary if primary is not None else i]
    name = str(mechs[i])
    if name.startswith(LADDER_PREFIX):
        shares = answer.get("interval_epsilon")
        if not isinstance(shares, list) or len(shares) != len(aggs):
            return None
        m = _ladder_measurement(a, float(shares[i]))
        return m if m is not None and LADDER_PREFIX + m.name == name and _agrees(plan, answer, i, m) else None
    for m in _candidates(plan, a, eps[i]):
        if m.name == name and _agrees(plan, answer, i, m):
            return m
    return None


def _candidates(plan: Plan, a, share: float) -> Iterator:
    """The laws a release of ``a`` at ``share`` may have used: a pure tier's mechanism at ε
    ``share``, or a zCDP tier's at ρ ``share`` (the discrete Gaussian for COUNT/SUM, a pure
    mechanism at ε = √(2ρ) over the unit's factor otherwise); :func:`_agrees` tells which."""
    yield measurement_for(a, share)
    yield zcdp_measurement_for(a, share, contributions_sq(plan), factor(plan))


def _avg_part(m, func: str):
    """The SUM or COUNT measurement an AVG is made of, where it has them as measurements of
    their own (a zCDP tier's :class:`~mechanisms.gaussian_stats.GaussianMean`); else None."""
    if isinstance(m, GaussianMean) and func in ("sum", "count"):
        return m.sum if func == "sum" else m.count
    return None


def _agrees(plan: Plan, answer: dict, i: int, m) -> bool:
    """Whether ``m`` is the law the release used: a data-independent 95% half-width of its
    release group (a COUNT's or SUM's; an AVG's or VAR's COUNT) equals the one recorded. A VAR's
    interval reads its recorded bound, whatever ε."""
    hws, aggs = answer.get("half_width"), plan.aggregates
    if not isinstance(hws, list) or len(hws) != len(aggs):
        return False
    primary = _member_of(plan, i)
    top = primary if primary is not None else i
    group = [top] + next((ms for p, ms in release_groups(plan) if p == top), [])
    if aggs[i].func in VARIANCE_FUNCS:
        return True
    for j in group:
        f = aggs[j].func
        if aggs[top].func in VARIANCE_FUNCS and f == "count":
            want = m.count_measurement.half_width()
        elif aggs[top].func == "avg" and f in ("count", "sum"):
            part = _avg_part(m, f)
            want = (
                part.half_width()
                if part is not None
                else m.count_half_width()
                if f == "count"
                else m.sum_half_width()
            )
        elif j == top and f in ("count", "count_distinct", "sum"):
            want = m.half_width()
        else:
            continue
        got = hws[j]
        return isinstance(got, (int, float)) and (
            got == 0 or math.isclose(float(got), float(want), rel_tol=1e-9)
        )
    return False


def _bounds(plan: Plan, answer: dict, i: int, level: float, values: list):
    """(lows, highs) of aggregate ``i`` over the cells, or None where the answer does not say
    how it was measured."""
    aggs = plan.aggregates
    a = aggs[i]
    col = _column(values, i)
    m = _measurement(plan, answer, i)
    if m is None or any(v is None for v in col):
        return None
    primary = _member_of(plan, i)
    arr = np.asarray(col)
    if a.func in VARIANCE_FUNCS:  # the release's 95% bound (Bonferroni box): covers any level ≤ 95%
        cap = m.cap_of(a.func)
        hw = answer.get("half_width", [None] * len(aggs))[i]
        if level > 0.95 or hw is None:
            return np.zeros(len(col)), np.full(len(col), cap)
        f = arr.astype(np.float64)
        return np.clip(f - hw, 0.0, cap), np.clip(f + hw, 0.0, cap)
    if primary is not None and aggs[primary].func in VARIANCE_FUNCS:  # COUNT(x) of a VAR release
        return interval(m.count_measurement, arr, level)
    if primary is not None and (part := _avg_part(m, a.func)) is not None:  # a zCDP AVG's own SUM/COUNT
        return interval(part, arr, level)
    if primary is not None:  # a SUM / COUNT released with an AVG (the same draw)
        hw = m.sum_half_width(level) if a.func == "sum" else m.count_half_width(level)
        if a.func == "count" or (a.func == "sum" and m.integer):
            k = int(np.ceil(hw + (0.5 if a.func == "sum" else 0.0)))  # an integer SUM is rounded
            return np.asarray([v - k for v in col], dtype=object), np.asarray(
                [v + k for v in col], dtype=object
            )
        return arr.astype(np.float64) - hw, arr.astype(np.float64) + hw
    if a.func == "avg":
        j = next(
            (
                k
                for k, b in enumerate(aggs)
                if b.func == "count"
                and b.column == a.column
                and b.filter == a.filter
                and _member_of(plan, k) == i
            ),
            None,
        )
        if j is None:
            return None
        return interval(
            m, arr.astype(np.float64), level, n_hat=np.asarray(_column(values, j), dtype=np.float64)
        )
    return interval(m, arr, level)


def _safe_bounds(plan: Plan, answer: dict, i: int, level: float, values: list):
    """:func:`_bounds`, or None for a measurement :mod:`mechanisms.errorbars` has no interval of
    (the release is charged and answered: its error bars are NULL, never an error)."""
    try:
        return _bounds(plan, answer, i, level, values)
    except (TypeError, AttributeError):
        return None


def interval_text(plan: Plan, answer: dict) -> str:
    """The NOTICE's statement of the error bars a statement reads (empty when none)."""
    trees: list[Any] = [o.post for o in plan.outputs if o.source == "expr"]
    trees += [item.tree for item in plan.order_by] + [getattr(plan, "row_filter", None)]
    found = interval_nodes(trees)
    if not found:
        return ""
    levels = ", ".join(f"{lv:.4g}" for lv in sorted({n[3] for n in found}))
    missing = sorted({plan.aggregates[n[2]].label for n in found if _measurement(plan, answer, n[2]) is None})
    text = (
        f"; error bars (dp_interval_low/high) at {levels}: post-processing of this release, no ε; "
        + INTERVAL_NOTE
    )
    if missing:
        text += f"; NULL for {', '.join(missing)} (this release's law is not one they are computed from)"
    return text


def _value(x: Any, typ_int: bool) -> Any:
    if x is None:
        return None
    if typ_int:
        return int(x)
    return float(x)


def with_intervals(plan: Plan, answer: dict, trees: list, cells: list, ranges: list) -> tuple[list, list]:
    """(trees, cells) with every interval node of ``trees`` computed over all released cells
        (``cells``: (key, values) pairs in the answer's order, before any filter) and read as one
        more value of each cell (an ``("agg", j)`` node); ``ranges``: each aggregate's consistent range
    (:func:`.rows.consistent_ranges`). Unchanged when no tree reads one."""
    found = interval_nodes(trees)
    if not found:
        return trees, cells
    values = answer["values"]
    width = len(cells[0][1]) if cells else 0
    cache: dict[tuple[int, float], Any] = {}
    columns = []
    for _, side, i, level, _ in found:
        if (i, level) not in cache:
            got = _safe_bounds(plan, answer, i, level, values) if values else None
            if got is not None:
                r = ranges[i]
                got = consistent(np.asarray(got[0]), np.asarray(got[1]), *(r or (None, None)))
            cache[(i, level)] = got
        got = cache[(i, level)]
        a = plan.aggregates[i]
        is_int = a.func in ("count", "count_distinct") or (a.func == "sum" and a.type == "int")
        if got is None:
            columns.append([None] * len(cells))
        else:
            col = got[0] if side == "low" else got[1]
            columns.append([_value(x, is_int) for x in np.asarray(col).tolist()])
    slots = {node: ("agg", width + j) for j, node in enumerate(found)}
    cells = [(key, list(vals) + [col[c] for col in columns]) for c, (key, vals) in enumerate(cells)]
    return [_substituted(t, slots) for t in trees], cells
