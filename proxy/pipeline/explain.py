"""``EXPLAIN <query>``: the rewrite, without running it or charging budget."""

from __future__ import annotations

from collections.abc import Sequence

from mechanisms import split
from mechanisms.accounting import unit_epsilon
from mechanisms.mean.bias import clamp_bias
from mechanisms.snr import judge
from rewriter.params import needs
from rewriter.plan import Output, Plan
from rewriter.unit import KEPT_CELLS, KEPT_ROWS, factor

from .common import avg_half_widths, explain_output_line, pretty
from .notice import consistency_text, unit_text
from .release import measurement_for, split_epsilon


def explain_lines(
    plan: Plan, head: list[str], backend_sql: str, dialect: str, path: Sequence[str] = ()
) -> list[str]:
    """EXPLAIN of a central plan: the kind's ``head`` (ε and the mechanism per output:
    :func:`single_tier_lines`, or a ladder's), then selection (``path``: which release answers
    a HAVING / top-c and why, :func:`.selection_path.choose`), post-processing, backend SQL."""
    lines = list(head)
    for g in plan.group_by:
        if g.column in plan.key_filter and g.domain is not None:
            lines.append(
                f"  keys: the WHERE predicate on {g.column} keeps {len(g.domain)} value(s) of its public "
                "domain, evaluated on the domain (public: the config and the query's literals; no ε)"
            )
    for look in plan.lookups if plan.lookups_done else ():
        names = ", ".join(plan.group_by[i].column for i in look.keys)
        lines.append(
            f"  keys: {names} read from public tables: the values they give under the WHERE's "
            "conjuncts over their columns (public data, exact; no ε)"
        )
    if plan.selection is not None:
        sel = plan.selection
        a = plan.aggregates[sel.aggregate]
        part = "half of ε" if sel.values else "all of ε"
        lines.append(
            f"  keys: sparse vector technique with exponential noise (Liu et al.) on {a.label} "
            f"{sel.op} {sel.threshold if sel.threshold is not None else 'dpgate.topc_threshold'}, "
            f"c = {sel.c or 'up to 20'}, {part}; only passing keys are released"
        )
    lines.extend(path)
    if clamped := consistency_text(plan):
        lines.append("  " + clamped.removeprefix("; "))
    if plan.order_by or plan.limit is not None:
        lines.append("  ORDER BY / LIMIT applied to the released rows (post-processing, free)")
    for name, _ in needs(backend_sql):
        if name.startswith(KEPT_CELLS):
            lines.append(
                f"  privacy unit: their rows by (unit, cell), with the running sums of the bound in "
                f"total, are read from {name}, made once from the kept rows; the scan adds the keyed offset"
            )
            continue
        what = "the units above the bound"
        if name.startswith(KEPT_ROWS):
            what += " and their rows"
        lines.append(
            f"  privacy unit: {what} are read from {name}, made once per worker from "
            "the whole table (it cannot change while it is served); the scan bounds only their rows"
            + ("; the analyst's aggregate reads the base table alone" if plan.unit_lookup is not None else "")
        )
    lines.append("backend SQL (one scan):")
    lines.extend("  " + line for line in pretty(backend_sql, dialect).splitlines())
    return lines


def post_text(post: tuple) -> str:
    """'; then round(·, 1)' for an output's display steps (post-processing, no ε)."""
    if not post:
        return ""
    names = {"int": "integer", "float": "double precision", "numeric": "numeric"}
    steps = [
        f"cast to {names[arg]}" if op == "cast" else f"{op}(·{'' if arg is None else f', {arg}'})"
        for op, arg in post
    ]
    return "; then " + ", ".join(steps) + " (post-processing, no ε)"


def single_tier_lines(plan: Plan, tier) -> list[str]:
    """EXPLAIN's header and per-output lines for a single tier (no ladder)."""
    k = factor(plan)
    shares = split_epsilon(plan, unit_epsilon(tier.epsilon, k))
    if plan.selection is not None:  # the sparse vector: the values at their own shares (a separate half of ε)
        shares = value_shares(plan, unit_epsilon(tier.epsilon, k))
    lines = [
        f"dpgate release of {plan.table}: ε {tier.epsilon:g} per query, "
        f"{plan.n_cells} cell(s), {len(plan.aggregates)} aggregate(s) sharing ε"
        + (f" / {k} (group privacy over a person's kept rows)" if k > 1 else ""),
        "  " + unit_text(plan),
    ]
    if plan.unit is not None:
        where = "in all" if plan.unit.total else "in a group"
        lines.append(
            f"  bias: a {plan.unit.name} with more than {plan.unit.max_rows} row(s) {where}, or rows in "
            f"more than {plan.unit.max_groups} group(s), is under-counted; raising the bounds "
            f"lowers that bias and raises the noise in proportion (ε/{k})"
        )
    shown = {o.index for o in plan.outputs if o.source == "aggregate"}
    hidden = [
        Output(f"({a.label})", "aggregate", i, "float")
        for i, a in enumerate(plan.aggregates)
        if i not in shown
    ]  # released for an expression or a filter only
    for o in [*plan.outputs, *hidden]:
        if (line := explain_output_line(plan, o)) is not None:
            lines.append(line)
            continue
        a = plan.aggregates[o.index]
        if not shares[o.index]:  # the sparse vector's aggregate alone: its keys line says it
            continue
        m = measurement_for(a, shares[o.index])
        hw = getattr(m, "half_width", None)
        hw_txt = f"±{hw():.4g}" if callable(hw) and a.func != "avg" else "depends on the noisy count"
        if a.func == "avg" and callable(hw):
            hw_txt = avg_half_widths(m)
        if a.func in ("var_pop", "var_samp", "stddev_pop", "stddev_samp") and callable(hw):
            hw_txt = (
                "a bound from the noisy count, Σ(x-m) and Σ(x-m)² (each ε/3, m the bounds' midpoint; "
                f"Bonferroni + interval arithmetic), at most ±{hw():.4g}"
            )
        bounds = f", clamped to [{a.lower:g}, {a.upper:g}]" if a.lower is not None else ""
        lines.append(
            f"  {o.name}: {a.label}{bounds} via {m.name}, ε {shares[o.index]:g}, "
            f"scale {getattr(m, 'scale', 'n/a')}, 95% half-width {hw_txt}" + post_text(o.post)
        )
        lines.extend(f"    {t}" for t in signal_lines(plan, m, a, tier))
    return lines


def value_shares(plan: Plan, epsilon: float) -> list[float]:
    """Per aggregate, the ε its values are released at under the sparse vector
    (:func:`.release.selection_answer`): half of ``epsilon`` split equally over the select
    list's aggregates; 0 for an aggregate released for the selection only."""
    out = sorted({o.index for o in plan.outputs if o.source == "aggregate"})
    shares = [0.0] * len(plan.aggregates)
    parts = [float(e) for e in split(epsilon / 2, len(out))] if out else []
    for i, e in zip(out, parts):
        shares[i] = e
    return shares


def signal_lines(plan: Plan, m, a, tier) -> list[str]:
    """Before anything is charged: when this aggregate's answer would be mostly noise (its
    mechanism's rule, :func:`mechanisms.snr.judge` with no released value yet) and from which
    group it is useful; for an AVG, where the clamp to its bounds biases it by more than a
    tenth of its half-width h (:func:`mechanisms.mean.bias.clamp_bias`)."""
    sig = judge(m, (), 0.0)
    out = []
    if sig is not None:
        useful = sig.useful()
        out.append(f"mostly noise when {sig.rule}" + (f"; {useful}" if useful else ""))
    law = clamp_bias(m) if a.func == "avg" else None
    if law is not None and law.within is not None:
        if plan.consistent and getattr(tier, "consistent", True):
            out.append(
                f"near a bound: a true AVG within {law.within:.2g}·h of {float(a.lower):,.6g} or "
                f"{float(a.upper):,.6g} is returned biased toward the middle by more than h/10, up to "
                f"{law.at_bound:.2g}·h at the bound (the clamp to the bounds; h its 95% half-width; "
                "`consistent = false` on the table or tier returns the unclamped value, unbiased)"
            )
        else:
            out.append(
                "unclamped (`consistent = false`): unbiased to first order; it may lie outside the bounds"
            )
    return out
