"""What the NOTICE says of a release, after its common head (``kind.notice_head``): the 95%
half-width of each released value, the mechanism, the consistency post-processing, what the
sparse vector, a ladder or dpgate's clock contributed, and what one guarantee protects (a row,
or a person: the privacy unit)."""

from __future__ import annotations

from mechanisms.variance import VARIANCE_FUNCS
from rewriter.plan import Plan
from rewriter.unit import describe, factor

from ..stores.answer import cell_count
from .common import fmt
from .errorbars import interval_text
from .postexpr import window_text
from .rows import aligned, consistent_ranges


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
    clamped = consistency_text(plan)
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
