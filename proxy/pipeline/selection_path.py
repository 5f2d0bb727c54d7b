"""Which release answers a HAVING or top-c statement, and why (said in EXPLAIN); and whether
the role's tier reads consistent values.

The rows are always the SQL's rows over released values: HAVING is a filter and ORDER BY
… LIMIT a sort of the released cells (:func:`.rows.answer_rows`, post-processing).
What varies is what is released:

* **the cells**: every cell of the public key domain noised at the statement's ε (the
  central release), then HAVING / ORDER BY / LIMIT evaluated on those values;
* **the sparse vector** (Liu et al., SVT with exponential noise): only the keys whose noisy
  value passes the threshold, at most c of them, and (when the select list asks for
  values) their values at a separate share of ε; a row whose released value contradicts
  the HAVING is still filtered out.

Over a key set that is not public (partition selection) the sparse vector runs over the
selected keys when there is a threshold. Over a public domain the path with the lower
noise on the thresholded value wins: the cells' noise variance at their ε share against
the sparse vector's comparison variance (SVT spec, Eq. 51: Var(N₁) + Var(N₂) at the optimal
split, monotone exponential noise, cutoff c) at its ε. With one aggregate the cells win
(2/ε² against at least 8/ε²); the sparse vector wins when many aggregates share ε and c is
small. A top-c without a threshold (no HAVING, no ``SET dpgate.topc_threshold``) is a sort
of the released cells: ``ORDER BY COUNT(*) DESC LIMIT c`` is ``ORDER BY 2 DESC LIMIT c``.
"""

from __future__ import annotations

import dataclasses
import math

from mechanisms.accounting import share_of, unit_epsilon
from mechanisms.svt.gamma import comparison_variance
from rewriter.plan import Plan, Selection
from rewriter.unit import factor

from ..wire.api import SqlError
from .release import MAX_SELECTED, measurement_for, split_epsilon

__all__ = ["choose", "for_tier"]


def _with(plan: Plan, selection, **post) -> Plan:
    """``plan`` with another selection (and ``post``: post-processing fields), keeping the memos
    beside its fields that do not depend on them (its clock reading, its cells, its releases);
    the canonical text is computed anew."""
    out = dataclasses.replace(plan, selection=selection, **post)
    out.memo.domain, out.memo.releases = plan.memo.domain, plan.memo.releases
    return out


def _selection(plan: Plan) -> Selection:
    """``plan``'s HAVING / top-c selection; asked of a plan without one: an internal error
    raised before anything runs."""
    if plan.selection is None:
        raise SqlError(
            "XX000", "internal error: a selection path for a plan without a selection; nothing was run"
        )
    return plan.selection


def _threshold(plan: Plan, settings: dict) -> float | None:
    sel = _selection(plan)
    if sel.threshold is not None:
        return sel.threshold
    raw = settings.get("dpgate.topc_threshold")
    if raw in (None, ""):
        return None
    try:
        t = float(raw)
        if not math.isfinite(t):  # NaN / ±inf: not a threshold
            raise ValueError(raw)
    except ValueError:
        raise SqlError("22023", f"dpgate.topc_threshold must be a finite number, not {raw!r}") from None
    return t


def variances(plan: Plan, epsilon: float) -> tuple[float, float]:
    """(noise variance of the thresholded aggregate released as a cell, the sparse vector's
    comparison variance) at the tier's ``epsilon`` (both at ε/k by group privacy)."""
    sel = _selection(plan)
    eps = unit_epsilon(epsilon, factor(plan))
    cells = dataclasses.replace(plan, selection=None)
    agg = plan.aggregates[sel.aggregate]
    m = measurement_for(agg, split_epsilon(cells, eps)[sel.aggregate])
    var_cells = float(m.noise_variance)
    if agg.func == "count":
        sens = 1.0
    elif agg.lower is None or agg.upper is None:  # the planner bounds every other thresholded aggregate
        raise SqlError("XX000", "internal error: a thresholded aggregate without its bounds; nothing was run")
    else:
        sens = float(max(abs(agg.lower), abs(agg.upper)))
    c = sel.c if sel.c is not None else min(plan.n_cells, MAX_SELECTED)
    c = max(1, min(c, plan.n_cells))
    eps_sel = share_of(eps, 2) if any(o.source == "aggregate" for o in plan.outputs) else eps
    var_svt = comparison_variance(eps_sel, c, "exp", monotone=True, delta=sens)
    return var_cells, var_svt


def for_tier(plan: Plan, tier) -> Plan:
    """``plan`` as the role's tier reads it: a tier with ``consistent = false`` reads the raw
    noisy values (:func:`.rows.consistent_ranges`) whatever the table says, for every kind
    whose rows are :func:`.rows.answer_rows` (central, per-record, MAX/MIN, percentiles)."""
    if not getattr(tier, "consistent", True) and plan.consistent:
        return _with(plan, plan.selection, consistent=False)
    return plan


def choose(plan: Plan, tier, settings: dict) -> tuple[Plan, list[str]]:
    """(the plan to release — with its :class:`~rewriter.plan.Selection` for the sparse
    vector, or without it for the cells —, EXPLAIN's lines saying which and why). A tier
    with ``consistent = false`` reads raw noisy values (:func:`.rows.consistent_ranges`)."""
    plan = for_tier(plan, tier)
    sel = plan.selection
    if sel is None:
        if plan.row_filter is not None and plan.group_by:
            return plan, ["  HAVING: evaluated on every released cell's values (post-processing, no ε)"]
        return plan, []
    cells = _with(plan, None)
    t = _threshold(plan, settings)
    if t is None:
        return cells, [
            "  ORDER BY … LIMIT: a sort of the released cells (post-processing, no ε); with a "
            "threshold (HAVING, or SET dpgate.topc_threshold) the sparse vector can choose the keys"
        ]
    plan = _with(plan, dataclasses.replace(sel, threshold=t))
    if plan.selected:
        return plan, [
            "  HAVING/top-c: sparse vector (Liu et al.) over the keys partition selection released "
            "(the key set is not public); rows whose released value contradicts the HAVING are "
            "dropped (post-processing)"
        ]
    if tier.ladder is not None:
        return cells, ["  HAVING: evaluated on the ladder's released cells (post-processing, no ε)"]
    var_cells, var_svt = variances(plan, float(tier.epsilon))
    figures = (
        f"noise sd on {plan.aggregates[sel.aggregate].label}: cells {math.sqrt(var_cells):.4g}, "
        f"sparse vector {math.sqrt(var_svt):.4g}"
    )
    if var_svt < var_cells:
        return plan, [
            f"  HAVING/top-c: sparse vector (Liu et al.), the lower error here ({figures}); rows "
            "whose released value contradicts the HAVING are dropped (post-processing)"
        ]
    return cells, [
        f"  HAVING/ORDER BY/LIMIT: evaluated on every released cell's values (post-processing, "
        f"no ε); the cells have the lower error here ({figures})"
    ]
