"""What the NOTICE says of a release, after its common head (``kind.notice_head``): the 95%
half-width of each released value, the mechanism, the consistency post-processing, what the
sparse vector, a ladder or dpgate's clock contributed, and what one guarantee protects (a row,
or a person: the privacy unit). Before the head, when the answer is mostly noise, one warning
line (:func:`warning_line`, the rules of :mod:`mechanisms.snr`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mechanisms.mean.bias import clamp_bias
from mechanisms.snr import Signal, additive, judge, mean_rule
from mechanisms.variance import VARIANCE_FUNCS
from rewriter.plan import Plan
from rewriter.unit import describe, factor

from ..stores.answer import ColumnarAnswer, cell_count
from ..wire.api import ColumnRows
from .common import fmt
from .errorbars import interval_text
from .postexpr import window_text
from .release import contributions_sq, measurement_for, release_groups, zcdp_measurement_for
from .rows import aligned, consistent_ranges, kept_cells

WARNING = "dpgate WARNING: mostly noise"
"""How the warning line begins (the NOTICE's first line when it has one)."""


Law = Callable[[int, Any], "tuple[Any, float] | None"]
"""A release's law where the answer's own names do not give it: (the primary aggregate's index,
its aggregate) → (its measurement, the statement's ε over the measurement's), or None."""


def warning_line(parts: Sequence[tuple[str, Signal | None]]) -> str:
    """The one-line warning of a release whose answer is mostly noise: per noisy aggregate
    (``(label, signal)``), the reason by its mechanism's rule and where it would be useful;
    empty when no part is mostly noise."""
    noisy = [
        f"{label}: {sig.reason()}" + (f"; {u}" if (u := sig.useful()) else "")
        for label, sig in parts
        if sig is not None and sig.noise
    ]
    return f"{WARNING} — {' | '.join(noisy)}" if noisy else ""


def _column(answer: dict, j: int) -> list:
    """Released value column ``j`` (a columnar answer's without making its rows)."""
    if isinstance(answer, ColumnarAnswer) and answer.columns is not None:
        return answer.column_list(1)(j)
    return [v[j] for v in answer["values"]]


def cell_signals(
    plan: Plan,
    answer: dict,
    epsilon: float,
    rows: Sequence[tuple] | None = None,
    law: Law | None = None,
    groups: list[tuple[int, list[int]]] | None = None,
) -> list[tuple[str, Signal | None]]:
    """Each released aggregate's signal (:func:`mechanisms.snr.judge`) over the cells of a
    central answer released at the statement's ``epsilon``: its mechanism rebuilt from the plan
    at the share it ran at (public), judged on the released values of the rows the statement
    returns (``rows``' column of an aggregate the select list shows, when a HAVING, outer WHERE,
    LIMIT or OFFSET keeps a subset; else the cells the HAVING / outer WHERE keeps,
    :func:`.rows.kept_cells`) and the stated half-width. A
    SUM/COUNT answered by an AVG's release (the same draw) is judged by the additive rule
    alone (its law is the AVG's, not a geometric's). ``law``: each release's mechanism where
    another one ran (a ladder's level, :data:`Law`); by default the one the answer names;
    ``groups``: the releases (primary, members) where they are not :func:`.release.release_groups`'s."""
    answer = aligned(plan, answer)
    kept = kept_cells(plan, answer)
    subset = kept is not None or plan.limit is not None or bool(plan.offset)
    shown = {o.index: k for k, o in enumerate(plan.outputs) if o.source == "aggregate"}
    out: list[tuple[str, Signal | None]] = []

    def column(j: int) -> list:  # the released values of the rows the statement returns
        if rows is not None and subset and j in shown:
            return _row_column(rows, shown[j])
        values = _column(answer, j)
        return values if kept is None else [v for v, k in zip(values, kept) if k]

    for i, members, m, hw, scale in _releases(plan, answer, epsilon, law, groups):
        a, values = plan.aggregates[i], column(i)
        sig = judge(m, values, hw, epsilon_scale=scale) if m is not None else None
        # another mechanism's values, its law not given: the rule at its stated half-width
        out.append((a.label, sig if sig is not None else _rule_only(a, values, hw)))
        hws = answer["half_width"]
        out.extend((plan.aggregates[j].label, additive(column(j), hws[j])) for j in members)
    return out


def _rule_only(a, values: list, hw: float) -> Signal | None:
    """The rule of an aggregate's kind at its stated half-width, without its mechanism's law
    (no useful group or ε named)."""
    if a.func == "avg":
        return (
            mean_rule(values, hw, a.lower, a.upper) if a.lower is not None and a.upper is not None else None
        )
    return additive(values, hw)


def _row_column(rows: Sequence[tuple], k: int) -> list:
    """Column ``k`` of the statement's rows (rows given as columns: that column)."""
    if isinstance(rows, ColumnRows):
        return rows.columns[k]
    return [r[k] for r in rows]


def _releases(
    plan: Plan,
    answer: dict,
    epsilon: float = 0.0,
    law: Law | None = None,
    groups: list[tuple[int, list[int]]] | None = None,
):
    """(primary aggregate, members, its measurement, stated half-width, ε scale) of each
    release of a central answer; the measurement rebuilt from the plan at the share it ran at
    (public: the answer records it) — on a zCDP tier the discrete Gaussian at its ρ share, the
    scale then the statement's ρ over the share (equal shares: the number of releases) —, or
    given by ``law``; None where another mechanism ran whose law is not given."""
    hws, shares = answer.get("half_width") or [], answer.get("epsilon") or []
    names = answer.get("mechanism") or []
    if not isinstance(shares, list) or not len(plan.aggregates) == len(shares) == len(hws) == len(names):
        return
    groups = release_groups(plan) if groups is None else groups
    for i, members in groups:
        if not shares[i]:
            continue
        share = float(shares[i])
        if law is not None:
            got = law(i, plan.aggregates[i])
            m, scale = got if got is not None else (None, 0.0)
            yield i, members, m, float(hws[i]), scale
            continue
        gaussian = str(names[i]).startswith("discrete_gaussian")
        try:
            m = (
                zcdp_measurement_for(plan.aggregates[i], share, contributions_sq(plan), factor(plan))
                if gaussian
                else measurement_for(plan.aggregates[i], share)
            )
        except ValueError:  # an aggregate another kind's mechanism released (MAX/MIN)
            continue
        scale = len(groups) if gaussian else epsilon / share  # a zCDP statement's ρ is split equally
        yield i, members, m if names[i] == m.name else None, float(hws[i]), scale


def rank_warning(
    plan: Plan,
    parts: Sequence[tuple[int, str, str, Any, Any]],
    answer: dict,
    epsilon: float,
    cells: tuple[Plan, dict] | None = None,
    row_counts: dict[str, list] | None = None,
) -> str:
    """The warning line of a MAX/MIN/quantile release whose groups' row counts were released
    with it (a COUNT(x) of the part's column, else COUNT(*), in the same statement, else the
    row check's count of the column, ``row_counts``: :mod:`.rowcheck`; noisy values,
    post-processing). ``parts``: (aggregate index, label, column, mechanism, q) of
    each rank-error release; judged by :func:`mechanisms.snr.judge` at the statement's
    ``epsilon``; ``cells``: the statement's COUNT/SUM/AVG cells (their plan and answer), judged
    as a central release's. Empty when no count was released or no group is mostly noise."""
    aggs = plan.aggregates
    out: list[tuple[str, Signal | None]] = []
    for index, label, column, m, q in parts:
        j = next(
            (
                j
                for want in (column, None)
                for j, a in enumerate(aggs)
                if a.func == "count" and a.column == want and a.filter is None
            ),
            None,
        )
        if j is not None:
            n_hats = _column(answer, j)
        elif row_counts is not None and column in row_counts:
            n_hats = row_counts[column]
        else:
            continue
        scale = epsilon / float(m.epsilon)
        out.append(
            (
                label,
                judge(m, _column(answer, index), 0.0, n_hats=n_hats, epsilon_scale=scale, q=q),
            )
        )
    if cells is not None:
        out.extend(cell_signals(*cells, epsilon))
    return warning_line(out)


def cells_warning(
    plan: Plan, answer: dict, epsilon: float, rows: Sequence[tuple] | None = None, law: Law | None = None
) -> str:
    """The warning line of a central answer and the statement's ``rows`` made from it (empty
    when none is mostly noise); ``law`` as :func:`cell_signals`'s."""
    return warning_line(cell_signals(plan, answer, epsilon, rows, law))


def selection_warning(plan: Plan, answer: dict, epsilon: float, rows: Sequence[tuple] | None = None) -> str:
    """The warning line of a sparse-vector answer (HAVING / top-c, Liu et al.): the values of
    the keys that passed, each output aggregate released by its own mechanism at its own share
    of ε (noise independent of the selection's, so a released value's law is that
    measurement's alone), judged as a central release's. Keys released alone carry no value:
    nothing to judge."""
    hws, shares, names = (
        answer.get("half_width") or [],
        answer.get("epsilon") or [],
        answer.get("mechanism") or [],
    )
    # the output aggregates (released with a half-width), in the answer's order
    released = [j for j, h in enumerate(hws) if h and float(h) > 0]
    if not released or len(shares) != len(released) + 1 or len(names) != len(shares):
        return ""
    eps, mech = [0.0] * len(hws), [""] * len(hws)
    for pos, j in enumerate(released):
        eps[j], mech[j] = float(shares[pos + 1]), names[pos + 1]
    answer = aligned(plan, dict(answer, epsilon=eps, mechanism=mech))
    each: list[tuple[int, list[int]]] = [(i, []) for i, e in enumerate(answer["epsilon"]) if e]
    return warning_line(cell_signals(plan, answer, epsilon, rows, groups=each))


def stated_warning(plan: Plan, answer: dict, rows: Sequence[tuple] | None = None) -> str:
    """The warning line of an answer no one mechanism measured (derived from earlier releases:
    sums of their noisy cells, ratios): each aggregate by its kind's rule at the half-width
    the NOTICE states for it (no useful size or ε: no one law gives them)."""
    n = len(plan.aggregates)
    if len(answer.get("half_width") or []) != n:
        return ""
    stated = dict(answer, epsilon=[1.0] * n, mechanism=answer.get("mechanism") or [""] * n)
    each: list[tuple[int, list[int]]] = [(i, []) for i in range(n)]
    return warning_line(cell_signals(plan, stated, 0.0, rows, law=lambda i, a: None, groups=each))


def avg_bias_text(plan: Plan, answer: dict) -> str:
    """Where a consistent AVG's clamp biases it by more than a tenth of its half-width h
    (:func:`mechanisms.mean.bias.clamp_bias`: a true AVG within t·h of a bound): the groups
    whose released (unclamped) value lies there, the bias at most β(0)·h toward the middle,
    and ``consistent = false`` for the unclamped value. Post-processing of released values."""
    if not getattr(plan, "consistent", True):
        return ""
    answer = aligned(plan, answer)
    texts = []
    for i, _, m, h, _ in _releases(plan, answer):
        a = plan.aggregates[i]
        if a.func != "avg" or m is None or (law := clamp_bias(m)) is None or law.within is None:
            continue
        lo, hi = float(a.lower), float(a.upper)
        near = [
            v
            for v in _column(answer, i)
            if v is not None and min(float(v) - lo, hi - float(v)) < law.within * h
        ]
        if near:
            texts.append(
                f"{a.label}: {len(near)} group(s) within {law.within:.3g}·h ({fmt(law.within * h)}) of a bound, "
                f"where the clamp biases the value toward the middle by up to {law.at_bound:.3g}·h "
                f"({fmt(law.at_bound * h)}; first order, h the 95% half-width)"
            )
    return "; " + "; ".join(texts) if texts else ""


def notice_body(plan: Plan, answer: dict) -> str:
    """The NOTICE after its common head (``kind.notice_head``): 95% half-width per output
    column, mechanism, and what the sparse vector / ladder / clock contributed."""
    answer = aligned(plan, answer)
    hw, shown = [], set()
    for o in plan.outputs:
        if o.source == "aggregate":
            h = answer["half_width"][o.index]
            func = plan.aggregates[o.index].func
            avg = func == "avg" or func in VARIANCE_FUNCS
            hw.append(
                f"{o.name} ±{fmt(h)}"
                + (" (a bound)" if func in VARIANCE_FUNCS else "")
                + (" (max over rows)" if avg and cell_count(answer) > 1 else "")
            )
            shown.add(o.index)
    if (
        any(o.source == "expr" for o in plan.outputs)
        or getattr(plan, "row_filter", None) is not None
        or any(item.tree is not None for item in plan.order_by)
    ):
        for i, a in enumerate(plan.aggregates):  # released values the expressions were computed from
            if i not in shown and i < len(answer["half_width"]):
                hw.append(f"{a.label} ±{fmt(answer['half_width'][i])}")
    mech = ", ".join(sorted(set(answer["mechanism"])))
    clamped = consistency_text(plan) + avg_bias_text(plan, answer)
    svt = ""
    if "svt" in answer:
        s = answer["svt"]
        svt = (
            f"; sparse vector: {s['selected']} of {s['candidates']} keys passed the threshold "
            f"{s['threshold']:g}{' (default; per-group thresholds)' if s.get('per_key') else ''} (c = {s['c']}, {s['passes']} pass(es)); the list may be incomplete"
        )
        if s["values_epsilon"]:
            svt += f"; values of the returned keys cost a separate ε {s['values_epsilon']:g}"
        else:
            svt += "; keys only, no values released"
    if "ladder" in answer:  # multi-tier ladder (Wang et al. 2026): which level this tier got
        svt += ladder_notice(answer["ladder"])
    svt += window_text([o.post for o in plan.outputs if o.source == "expr"] + [i.tree for i in plan.order_by])
    svt += interval_text(plan, answer)
    if plan.clock:  # now() / current_date: dpgate's clock, not the backend's
        svt += f"; now() = {plan.clock} UTC, evaluated by dpgate when planned"
    return f"95% half-width: {', '.join(hw) or 'n/a'}; mechanism: {mech}{svt}{clamped}; {unit_text(plan)}"


def consistency_text(plan: Plan) -> str:
    """The NOTICE's statement of the consistency post-processing (empty when none applies)."""
    parts = []
    for a, r in zip(plan.aggregates, consistent_ranges(plan)):
        if r is None:
            continue
        lo, hi = r
        what = (
            f"clamped to [{lo:g}, {hi:g}]"
            if lo is not None and hi is not None
            else f"clamped to ≥ {lo:g}"
            if lo is not None
            else f"clamped to ≤ {hi:g}"
        )
        parts.append(f"{a.label} {what}")
    if not parts:
        return ""
    return (
        f"; consistent values: {', '.join(parts)} (post-processing, no ε; biased near the bound: "
        "`consistent = false` on the table returns the raw noisy values)"
    )


def unit_text(plan: Plan) -> str:
    """What one guarantee protects: a row, or a person (privacy unit) with the bounds
    that made it so (NOTICE and EXPLAIN)."""
    u = plan.unit
    if getattr(plan, "per_unit", ""):  # a per-unit histogram (rewriter.histogram): one row per unit
        return plan.per_unit
    if u is None:
        return "privacy unit: row (each row is protected; declare privacy_unit for per-person guarantees)"
    k = factor(plan)
    return (
        f"privacy unit: {u.name} (ε per {u.name}, all its rows; {describe(u)} — rows beyond are left out; "
        f"mechanisms run at ε/{k})"
    )


def ladder_notice(info: dict) -> str:
    """The NOTICE fragment for an answer served from a ladder."""
    levels = ", ".join(f"{e:g}" for e in info["levels"])
    lvl = info["level"]
    how = ""
    if info.get("served") in ("root", "nearest_lower"):
        how = f" (nearest level ≤ your ε {info['tier_epsilon']:g})"
    return (
        f"; ladder {info['name']}: tier {info['tier']} gets level ε {lvl:g}{how} of {{{levels}}}; "
        f"all tiers share one noise chain, so tiers pooling answers learn at most their highest level"
    )


def domain_notice(plan: Plan) -> str:
    keys = ", ".join(o.name for o in plan.outputs if o.source == "group")
    return (
        f"dpgate: these are the {plan.n_cells} values of the public domain of {keys}, derived "
        "from the config (declared domains and bounds); no data was read and nothing was "
        "charged (ε = 0). Values that occur in no row are listed too."
    )
