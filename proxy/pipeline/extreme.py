"""MAX / MIN and quantiles on a central table, a release kind: statement → histogram
scan → shifted-rank exponential mechanism per group (:mod:`mechanisms.extreme`, Chen et al. 2025
§6.4), or the exponential mechanism for a quantile (:mod:`mechanisms.quantile`, Smith
2011) → ledger → rows (the pipeline of :mod:`.kind`). The tier's ε is charged once per
statement (groups are disjoint: parallel composition); a repeat returns the stored
answer free, as everywhere.

Grouped by a column without a public domain: the same one histogram scan
also carries each key's distinct units and drops the keys below the selection's scan floor
(:func:`rewriter.extreme.histogram_sql`); the keys are chosen by the partition selection of
:mod:`.partitions` (its :func:`~.partitions.selection_plan` and
:func:`~.partitions.select_rows`, not a copy): (ε/2)/k and δ/2k per key, the floor the
other δ/2k; the value of each released key is then drawn at the other ε/2, divided by the
unit's factor. The selection's output is DP, so the values over it compose sequentially:
(ε/2, δ) + ε/2 = (ε, δ) per unit. δ is reserved with ε, in the same ledger charge (``Prepared.delta``,
:func:`.kind.run`); a tier with δ = 0 is refused with the bin hint, as for partitions."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from mechanisms.extreme import ExtremeGrid, ShiftedRankExtreme
from mechanisms.quantile import ExpMechQuantile
from rewriter.extreme import ExtremePlan, build_extreme_plan, extreme_param_types, histogram_sql
from rewriter.plan import Plan
from rewriter.unit import factor

from ..wire.api import Column, Description, Result, SqlError
from .common import DUMMY, TYPE_OIDS, cell_key, cell_of, fmt, pretty, unit_salt
from .kind import Prepared, ReleaseKind, Statement, plan_as, state_as
from .notice import unit_text
from .partitions import (
    SelectionPlan,
    require_delta,
    select_rows,
    selection_explain,
    selection_notice,
    selection_plan,
)
from .rows import answer_rows, output_types
from .selection_path import for_tier

__all__ = ["EXTREME", "Extreme", "ExtremeState", "describe_extreme", "explain_extreme"]

BETA = 0.05  # the rank statement in the NOTICE holds with probability 95%, like the half-widths


def _setup(gw, xp: ExtremePlan, epsilon: float):
    """The grid and the mechanism at the tier's ``epsilon`` (divided by the privacy unit's
    group-privacy factor on a table with a unit: :func:`rewriter.unit.factor`)."""
    epsilon = epsilon / factor(xp.plan)
    spec = gw.config.tables[xp.plan.table].columns[xp.column]
    grid = ExtremeGrid.for_column(spec.type, spec.lower, spec.upper)
    if xp.q is not None:  # a quantile
        return grid, ExpMechQuantile(epsilon, grid, xp.q, BETA)
    return grid, ShiftedRankExtreme(epsilon, grid, xp.func, BETA)


def _sql(gw, xp: ExtremePlan, grid: ExtremeGrid, salt: str = "", sp: SelectionPlan | None = None) -> str:
    return histogram_sql(
        xp,
        grid.lower,
        grid.step,
        grid.U,
        grid.integral and grid.step == 1.0,
        gw.backend.dialect,
        salt,
        floor=None if sp is None else int(sp.floor),
    )


def _selection(plan: Plan, tier) -> SelectionPlan | None:
    """Keys without a public domain: the partition selection's parameters (module doc), or a
    refusal for a tier with δ = 0; None for public keys."""
    if not plan.selected:
        return None
    require_delta(plan, tier)
    return selection_plan(plan, float(tier.epsilon), float(tier.delta))


def _selected_answer(
    gw, xp: ExtremePlan, m, grid: ExtremeGrid, sp: SelectionPlan, rows, delta: float
) -> dict:
    """Rows (k.., v, n, units): the keys chosen by partition selection, then each kept
    key's value from its histogram (v NULL: the key's rows without a value, counted in its
    units only — such a key is selected like any other, from an empty histogram if need be)."""
    n = len(xp.plan.group_by)
    hists: dict[tuple, list] = {}
    units: dict[tuple, int] = {}
    for row in rows:
        key = tuple(row[:n])
        hist = hists.setdefault(key, [])
        if row[n] is not None:
            hist.append((int(row[n]), int(row[n + 1])))
        units[key] = int(row[n + 2])
    order = sorted(units, key=lambda k: tuple((v is None, v) for v in k))  # draws in key order
    kept = select_rows(sp.sel, [(*k, units[k]) for k in order], n, gw.source)
    values = [[m.release(hists[k], gw.source)] for k in kept]
    return {
        "keys": [[cell_key(v) for v in k] for k in kept],
        "values": values,
        "half_width": [m.rank_half_width()],
        "mechanism": [m.name],
        "extreme": {"func": xp.func, "k0": _k(m), "U": grid.U, "step": grid.step, "beta": BETA},
        "partitions": {
            "kept": len(kept),
            "describe": sp.sel.describe(),
            "delta": delta,
            "eps_measures": sp.eps_measures,
        },
    }


def _answer(gw, xp: ExtremePlan, m: ShiftedRankExtreme | ExpMechQuantile, grid: ExtremeGrid, rows) -> dict:
    """The measurement: per group, the histogram of the scan → the mechanism's value."""
    n = len(xp.plan.group_by)
    cells = xp.cells
    hists: dict[tuple, list] = {c: [] for c in cells}
    known = set(cells)
    for row in rows:
        c = cell_of(row, n, known)
        if c is not None:  # NULL / out-of-domain keys match no cell
            hists[c].append((int(row[n]), int(row[n + 1])))
    values = [[m.release(hists[c], gw.source)] for c in cells]
    return {
        "keys": [[cell_key(v) for v in c] for c in cells],
        "values": values,
        "half_width": [m.rank_half_width()],
        "mechanism": [m.name],
        "extreme": {"func": xp.func, "k0": _k(m), "U": grid.U, "step": grid.step, "beta": BETA},
    }


def _k(m) -> int:
    return m.rank_half_width() if isinstance(m, ExpMechQuantile) else m.k0


def _what(xp: ExtremePlan) -> str:
    """How the statement names the aggregate (q is the ascending fraction)."""
    if xp.func == "median":
        return f"median({xp.column})"
    if xp.q is not None:  # a quantile
        return f"{xp.func}({float(xp.q):g}) WITHIN GROUP (ORDER BY {xp.column})"
    return f"{xp.func.upper()}({xp.column})"


def quantile_rank_text(xp: ExtremePlan, k: int, beta: float, groups: str = "") -> str:
    """The rank statement of a quantile release (NOTICE and EXPLAIN)."""
    if xp.q is None:
        raise SqlError("XX000", "internal error: a rank statement for a MAX/MIN release")
    return (
        f"with probability {1 - beta:.0%} the answer's rank is within {k} rows of {float(xp.q):g}·n{groups} "
        f"(n the group's rows), plus the rows sharing one grid point when many do (a rank error, not "
        f"value units; the exponential mechanism, Smith 2011)"
    )


def _key(xp: ExtremePlan, epsilon: float) -> str:
    return f"ex:{hashlib.sha256(xp.canonical().encode()).hexdigest()[:32]}:eps={epsilon!r}"


def notice_body(xp: ExtremePlan, answer: dict) -> str:
    """The NOTICE after its common head: the rank statement of the shifted-rank mechanism
    (after the partition selection's statement and the ε split, for selected keys)."""
    part = answer.get("partitions")
    if part is not None:
        return f"{selection_notice(xp.plan, part)}; values at ε {fmt(part['eps_measures'])}: " + notice_body(
            xp, {k: v for k, v in answer.items() if k != "partitions"}
        )
    e = answer["extreme"]
    if xp.quantile:
        name = next(o.name for o in xp.plan.outputs if o.source == "aggregate")
        groups = f" in each of the {len(answer['keys'])} groups" if len(answer["keys"]) > 1 else ""
        return (
            f"{name}: {_what(xp)} on a grid of {e['U'] + 1} points (step {fmt(e['step'])}): "
            f"{quantile_rank_text(xp, e['k0'], e['beta'], groups)}; mechanism: {answer['mechanism'][0]}; "
            f"{unit_text(xp.plan)}"
        )
    side = "above" if xp.func == "max" else "below"
    name = next(o.name for o in xp.plan.outputs if o.source == "aggregate")
    groups = f" of each of the {len(answer['keys'])} groups" if len(answer["keys"]) > 1 else ""
    return (
        f"{name}: {xp.func.upper()}({xp.column}) on a grid of {e['U'] + 1} points (step {fmt(e['step'])}), "
        f"by the shifted-rank exponential mechanism: with probability {1 - e['beta']:.0%} at most "
        f"{2 * e['k0']} rows{groups}, plus the rows sharing one value when many do, lie {side} the answer "
        f"(a rank error, not value units; k0 = {e['k0']}), so it is usually a little "
        f"{'below the true maximum' if xp.func == 'max' else 'above the true minimum'}; "
        f"mechanism: {answer['mechanism'][0]}; {unit_text(xp.plan)}"
    )


@dataclass
class ExtremeState:
    """A MAX/MIN/quantile release's: the column's public grid, the mechanism at its ε, and the
    partition selection of keys without a public domain (None: public keys)."""

    grid: ExtremeGrid
    m: ShiftedRankExtreme | ExpMechQuantile
    sel: SelectionPlan | None


class Extreme(ReleaseKind):
    """MAX / MIN by the shifted-rank exponential mechanism (Chen et al. 2025 §6.4) and quantiles (Smith 2011) on a central table: one histogram
    scan over the column's public grid, the exponential mechanism per group."""

    name = "extreme"
    heavy = True  # the candidate search

    async def plan(self, conn, stmt: Statement, params: list) -> Prepared:
        gw = conn.gw
        xp = await _with_lookups(gw, await asyncio.to_thread(_build, gw, stmt, params))  # off the loop
        tier = gw.tier_of(conn.role)
        if tier.ladder is not None:  # a ladder's coalition guarantee covers its chain only
            raise SqlError(
                "0A000",
                "MAX, MIN and percentiles are not available to data-market ladder tiers; nothing was charged",
                hint="Ask for COUNT/SUM/AVG: each is released from the ladder's noise chain.",
            )
        xp = dataclasses.replace(xp, plan=for_tier(xp.plan, tier))  # the tier's `consistent`
        eps = float(tier.epsilon)
        sp = _selection(xp.plan, tier)
        grid, m = _setup(gw, xp, eps if sp is None else sp.eps_measures)
        cols = [Column(o.name, oid) for o, oid in zip(xp.plan.outputs, output_types(xp.plan))]
        key, delta = _key(xp, eps), 0.0
        if sp is not None:  # the selection's δ is part of what is released
            delta = float(tier.delta)
            key = f"{key}:delta={delta!r}"
        return Prepared(
            self,
            xp,
            cols,
            key=key,
            canonical=xp.canonical(),
            epsilon=eps,
            delta=delta,
            state=ExtremeState(grid, m, sp),
        )

    def scan_sql(self, conn, p: Prepared) -> str:
        xp, st = plan_as(p, ExtremePlan), state_as(p, ExtremeState)
        return _sql(conn.gw, xp, st.grid, unit_salt(conn.gw, xp.plan), st.sel)

    def measure(self, conn, p: Prepared, cells) -> dict:
        xp, st = plan_as(p, ExtremePlan), state_as(p, ExtremeState)
        if st.sel is not None:
            return _selected_answer(conn.gw, xp, st.m, st.grid, st.sel, cells, p.delta)
        return _answer(conn.gw, xp, st.m, st.grid, cells)

    def mechanism(self, answer: dict) -> str:
        return answer["mechanism"][0] + (", partition_selection" if "partitions" in answer else "")

    def rows(self, p: Prepared, answer: dict) -> Sequence[tuple]:
        return answer_rows(plan_as(p, ExtremePlan).plan, answer)

    def notice_body(self, p: Prepared, answer: dict) -> str:
        return notice_body(plan_as(p, ExtremePlan), answer)

    async def describe(self, conn, stmt: Statement, oids: list[int]) -> Description:
        return await describe_extreme(conn, stmt, oids)

    async def explain(self, conn, stmt: Statement, params: list, plan=None) -> Result:
        return await explain_extreme(conn, stmt, params)


def _build(gw, stmt: Statement, params: list) -> ExtremePlan:
    return build_extreme_plan(stmt.tree(), gw.config, list(params) if params else None)


async def _with_lookups(gw, xp: ExtremePlan) -> ExtremePlan:
    """``xp`` with its keys read from public lookup tables restricted (:mod:`.lookup_domains`)."""
    if not xp.plan.lookups or xp.plan.lookups_done:
        return xp
    return dataclasses.replace(xp, plan=await gw.lookups.resolve(gw, xp.plan))


async def describe_extreme(conn, stmt: Statement, oids: list[int]) -> Description:
    """Describe (extended protocol): parameter and column types."""
    expr = stmt.tree()
    types = extreme_param_types(expr, conn.gw.config)
    inferred = [oids[i] if i < len(oids) and oids[i] else TYPE_OIDS[ty] or 25 for i, ty in enumerate(types)]
    xp = build_extreme_plan(expr, conn.gw.config, [DUMMY.get(ty, "0") for ty in types] if types else None)
    return Description(
        inferred, [Column(o.name, oid) for o, oid in zip(xp.plan.outputs, output_types(xp.plan))]
    )


async def explain_extreme(conn, stmt: Statement, params: list) -> Result:
    """``EXPLAIN`` of a MAX/MIN statement: mechanism, grid, rank margin, backend SQL; free."""
    gw = conn.gw
    xp = await _with_lookups(gw, _build(gw, stmt, params))
    tier = gw.tier_of(conn.role)
    if xp.plan.selected and tier.delta <= 0:
        lines = [
            f"dpgate release of {xp.plan.table}: refused for this role — this GROUP BY needs partition "
            "selection, and this tier has delta = 0"
        ]
        return Result("EXPLAIN", [Column("QUERY PLAN", 25)], [(line,) for line in lines])
    sp = _selection(xp.plan, tier)
    grid, m = _setup(gw, xp, float(tier.epsilon) if sp is None else sp.eps_measures)
    if sp is None:
        lines = [
            f"dpgate release of {xp.plan.table}: {_what(xp)}, ε {tier.epsilon:g} per query, "
            f"{xp.plan.n_cells} group(s) (disjoint: each at the full ε)",
            "  " + unit_text(xp.plan),
        ]
    else:
        lines = [
            selection_explain(xp.plan, tier, sp),
            f"  {_what(xp)} of each released key at ε {sp.eps_measures:g} (the other half of ε; the "
            "released keys are disjoint: each at that ε)",
            "  " + unit_text(xp.plan),
        ]
    if xp.quantile:
        lines.append(
            f"  {m.name} on a grid of {grid.U + 1} points over [{grid.lower:g}, "
            f"{grid.upper:g}] (step {grid.step:g}); {quantile_rank_text(xp, m.rank_half_width(), BETA)}"
        )
    else:
        lines.append(
            f"  {m.name} (Chen et al. 2025 §6.4) on a grid of {grid.U + 1} points over [{grid.lower:g}, "
            f"{grid.upper:g}] (step {grid.step:g}); k0 = {m.k0}; with probability {1 - BETA:.0%} at most "
            f"{m.rank_half_width()} rows per group (plus rows tied at one value) lie beyond the answer"
        )
    what = "; each key's distinct units for the selection beside it" if sp is not None else ""
    lines.append(f"backend SQL (one scan, a histogram that never leaves the proxy{what}):")
    lines += ["  " + line for line in pretty(_sql(gw, xp, grid, sp=sp), gw.backend.dialect).splitlines()]
    return Result("EXPLAIN", [Column("QUERY PLAN", 25)], [(line,) for line in lines])


EXTREME = Extreme()
