"""MAX / MIN and quantiles on a central table, a release kind: statement → histogram
scan → per group, the shifted-rank or capped-rank exponential mechanism (:mod:`mechanisms.extreme`,
Chen et al. 2025 §6.4), or the plain or protected exponential mechanism for a quantile
(:mod:`mechanisms.quantile`, Smith 2011) → ledger → rows (the pipeline of :mod:`.kind`). The tier's
ε is charged once per statement (groups are disjoint: parallel composition); a repeat returns the
stored answer free, as everywhere.

Which mechanism runs is chosen per statement by the error laws (:func:`extreme_mechanism`,
:func:`quantile_mechanism`: ε over the unit's factor, the grid and β only, never the data), and
EXPLAIN lists the candidates. Every mechanism has ``expected_error(n)`` and ``useful_from()``
(its error law); a release stores the chosen one's useful group size in its answer's
``extreme`` (one part's in ``joint.parts``) as ``useful_from``, and the NOTICE states it.

Grouped by a column without a public domain: the same one histogram scan
also carries each key's distinct units and drops the keys below the selection's scan floor
(:func:`rewriter.extreme.histogram_sql`); the keys are chosen by the partition selection of
:mod:`.partitions` (its :func:`~.partitions.selection_plan` and
:func:`~.partitions.select_rows`, not a copy): (ε/2)/k and δ/2k per key, the floor the
other δ/2k; the value of each released key is then drawn at the other ε/2, divided by the
unit's factor. The selection's output is DP, so the values over it compose sequentially:
(ε/2, δ) + ε/2 = (ε, δ) per unit. δ is reserved with ε, in the same ledger charge (``Prepared.delta``,
:func:`.kind.run`); a tier with δ = 0 is refused with the bin hint, as for partitions.

Several MAX/MIN/percentiles in one statement, or beside COUNT/SUM/AVG/… (a joint plan,
:mod:`rewriter.extreme`): one backend statement reads each column's histogram and the cells;
the tier's ε is split into equal shares (:func:`joint_setup`: sequential composition) — one per
MAX/MIN, per percentile of a column with fewer than ``TREE_MIN`` of them, ⌈log2(k + 1)⌉ for a
column's k ≥ ``TREE_MIN`` percentiles drawn together by recursive splitting
(:class:`mechanisms.quantile.RecursiveQuantiles`, Kaplan, Schnapp and Stemmer 2022), one for
the cells (released by :func:`.release.noisy_answer` as alone at that share). Over keys
without a public domain the keys are chosen once, from the first column's histogram, and the
shares split the values' half of ε. The NOTICE and EXPLAIN number the releases and state
each one's share and error."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from mechanisms.accounting import share_of, unit_epsilon
from mechanisms.extreme import (
    CappedRankExtreme,
    ExtremeGrid,
    RankTargetExtreme,
    choose_extreme,
)
from mechanisms.quantile import (
    ExpMechQuantile,
    ProtectedQuantile,
    RecursiveQuantiles,
    ascending,
    choose_quantile,
    tree_depth,
)
from rewriter import complete
from rewriter.extreme import (
    ExtremePart,
    ExtremePlan,
    GridSql,
    build_extreme_plan,
    extreme_param_types,
    histogram_sql,
    joint_sql,
)
from rewriter.plan import Plan
from rewriter.unit import factor

from ..wire.api import Column, Description, Result, SqlError
from .common import DUMMY, TYPE_OIDS, cell_key, cell_of, fmt, pretty, unit_salt
from .explain import single_tier_lines
from .extreme_text import aim_text, choice_text, rank_mechanism_text, tie_words, useful_text
from .kind import Prepared, ReleaseKind, Statement, plan_as, state_as
from .notice import notice_body as cells_notice_body
from .notice import rank_warning, unit_text
from .partitions import (
    SelectionPlan,
    require_delta,
    select_rows,
    selection_explain,
    selection_notice,
    selection_plan,
)
from .release import noisy_answer
from .rowcheck import SHARE, RowCheck, enabled, plan_check, row_counts, zcdp_line
from .rowcheck import explain_text as row_check_explain
from .rowcheck import measure as row_check_measure
from .rowcheck import notice_text as row_check_notice
from .rows import answer_rows, output_types
from .selection_path import for_tier

__all__ = ["EXTREME", "Extreme", "ExtremeState", "describe_extreme", "explain_extreme"]

BETA = 0.05  # the rank statement in the NOTICE holds with probability 95%, like the half-widths


def extreme_mechanism(epsilon: float, grid: ExtremeGrid, func: str) -> RankTargetExtreme:
    """MAX/MIN's mechanism at ``epsilon`` (already over the unit's factor): of the shifted
    rank and the capped rank, the one the error laws choose (:func:`mechanisms.extreme.
    choose_extreme`: public inputs only — ε, the grid, β). Its useful group size is computed
    here too (memoised: the NOTICE states it), in the planning thread, not the scan's."""
    m = choose_extreme(epsilon, grid, func, BETA)[0]
    m.useful_from()
    return m


def quantile_mechanism(epsilon: float, grid: ExtremeGrid, q: Fraction) -> ExpMechQuantile:
    """A percentile's mechanism at ``epsilon`` (already over the unit's factor): of the plain
    exponential mechanism and the protected quantile, the one the error laws choose
    (:func:`mechanisms.quantile.choose_quantile`: public inputs only); its useful group size
    computed here too, as for MAX/MIN."""
    m = choose_quantile(epsilon, grid, q, BETA)[0]
    m.useful_from()
    return m


def _setup(gw, xp: ExtremePlan, epsilon: float):
    """The grid and the mechanism at the tier's ``epsilon`` (divided by the privacy unit's
    group-privacy factor on a table with a unit: :func:`rewriter.unit.factor`)."""
    epsilon = unit_epsilon(epsilon, factor(xp.plan))  # group privacy (the accountant)
    spec = gw.config.tables[xp.plan.table].columns[xp.column]
    grid = ExtremeGrid.for_column(spec.type, spec.lower, spec.upper)
    if xp.q is not None:  # a quantile
        return grid, quantile_mechanism(epsilon, grid, xp.q)
    return grid, extreme_mechanism(epsilon, grid, xp.func)


def _extreme_meta(m, grid: ExtremeGrid, xp_func: str) -> dict:
    """What the NOTICE states of a MAX/MIN/quantile release (stored with the answer)."""
    meta = {"func": xp_func, "k0": _k(m), "U": grid.U, "step": grid.step, "beta": BETA}
    meta["useful_from"] = m.useful_from()
    if isinstance(m, (CappedRankExtreme, ProtectedQuantile)):
        meta["share"] = str(m.share)
    if isinstance(m, ProtectedQuantile):
        meta["shift"] = m.shift()
    return meta


def _explain_meta(m, grid: ExtremeGrid, xp_func: str) -> dict:
    """:func:`_extreme_meta` for EXPLAIN's rank line (the useful size is on the choice's line)."""
    meta = _extreme_meta(m, grid, xp_func)
    meta.pop("useful_from")
    return meta


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


def _selection(plan: Plan, tier, epsilon: float | None = None) -> SelectionPlan | None:
    """Keys without a public domain: the partition selection's parameters (module doc) at
    ``epsilon`` (the tier's, or what a row check leaves), or a refusal for a tier with δ = 0;
    None for public keys."""
    if not plan.selected:
        return None
    require_delta(plan, tier)
    return selection_plan(plan, float(tier.epsilon if epsilon is None else epsilon), float(tier.delta))


def check_columns(xp: ExtremePlan) -> list[str]:
    """The columns whose MAX/MIN/percentiles the statement releases without a count of their
    rows (no COUNT of the column, no COUNT(*), unfiltered): the row check counts them."""
    counted = {a.column for a in xp.plan.aggregates if a.func == "count" and a.filter is None}
    if None in counted:
        return []
    return [c for c in xp.columns if c not in counted]


def _checked(xp: ExtremePlan, tier, on: bool) -> tuple[float, RowCheck | None]:
    """The ε the statement's rank releases (and its partition selection) run at, and its row
    check (:mod:`.rowcheck`; None when off or every column is counted)."""
    delta = float(tier.delta) if xp.plan.selected else 0.0
    check = plan_check(xp.plan, tier, check_columns(xp), delta) if on else None
    return (float(tier.epsilon) if check is None else check.rest), check


def _totals(hists: dict, cells: Sequence) -> list[int]:
    """Each cell's rows in its histogram (what the row check counts)."""
    return [sum(n for _, n in hists[c]) for c in cells]


def _selected_answer(
    gw,
    xp: ExtremePlan,
    m,
    grid: ExtremeGrid,
    sp: SelectionPlan,
    rows,
    delta: float,
    check: RowCheck | None = None,
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
    out = {
        "keys": [[cell_key(v) for v in k] for k in kept],
        "values": values,
        "half_width": [m.rank_half_width()],
        "mechanism": [m.name],
        "extreme": _extreme_meta(m, grid, xp.func),
        "partitions": {
            "kept": len(kept),
            "describe": sp.sel.describe(),
            "delta": delta,
            "eps_measures": sp.eps_measures,
        },
    }
    if check is not None:
        out["row_check"] = row_check_measure(check, [_totals(hists, kept)], gw.source)
    return out


def _answer(
    gw,
    xp: ExtremePlan,
    m: RankTargetExtreme | ExpMechQuantile,
    grid: ExtremeGrid,
    rows,
    check: RowCheck | None = None,
) -> dict:
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
    out = {
        "keys": [[cell_key(v) for v in c] for c in cells],
        "values": values,
        "half_width": [m.rank_half_width()],
        "mechanism": [m.name],
        "extreme": _extreme_meta(m, grid, xp.func),
    }
    if check is not None:
        out["row_check"] = row_check_measure(check, [_totals(hists, cells)], gw.source)
    return out


def _k(m) -> int:
    return m.rank_half_width() if isinstance(m, ExpMechQuantile) else m.k0


def _what(xp: ExtremePlan) -> str:
    """How the statement names the aggregate (q is the ascending fraction)."""
    if xp.func == "median":
        return f"median({xp.column})"
    if xp.q is not None:  # a quantile
        return f"{xp.func}({float(xp.q):g}) WITHIN GROUP (ORDER BY {xp.column})"
    return f"{xp.func.upper()}({xp.column})"


def quantile_rank_text(xp: ExtremePlan, k: int, beta: float, groups: str = "", e: dict | None = None) -> str:
    """The rank statement of a quantile release (NOTICE and EXPLAIN); ``e``: the release's
    stored facts (the protected quantile's share, the useful group size) when known."""
    if xp.q is None:
        raise SqlError("XX000", "internal error: a rank statement for a MAX/MIN release")
    e = e or {}
    guard, ties = "", "), plus the rows sharing one grid point when many do ("
    if "share" in e:  # the protected quantile: ranks [#{x < y}, #{x ≤ y}], ties included
        side = "above" if xp.q >= Fraction(1, 2) else "below"
        ties = "; ties included: a value whose tied rows contain the aim counts as exact; "
        if e.get("shift"):
            guard = (
                f"; it keeps at least min(k0, {e['share']}·n) rows {side} its aim, at most {e['shift']} rows from "
                f"q·n (within the {k} stated), so that the grid beyond the data scores low"
            )
    tail = f"; {useful_text(e)}" if "useful_from" in e else ""
    return (
        f"with probability {1 - beta:.0%} the answer's rank is within {k} rows of {float(xp.q):g}·n{groups} "
        f"(n the group's rows{ties}a rank error, not value units; the exponential mechanism, Smith 2011)"
        f"{guard}{tail}"
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
            f"{quantile_rank_text(xp, e['k0'], e['beta'], groups, e)}; mechanism: {answer['mechanism'][0]}; "
            f"{unit_text(xp.plan)}"
        )
    name = next(o.name for o in xp.plan.outputs if o.source == "aggregate")
    groups = f" of each of the {len(answer['keys'])} groups" if len(answer["keys"]) > 1 else ""
    return (
        f"{name}: {xp.func.upper()}({xp.column}) on a grid of {e['U'] + 1} points (step {fmt(e['step'])}), "
        f"{rank_mechanism_text(xp.func, e, groups)}; mechanism: {answer['mechanism'][0]}; {unit_text(xp.plan)}"
    )


@dataclass
class ExtremeState:
    """A MAX/MIN/quantile release's: the column's public grid, the mechanism at its ε, and the
    partition selection of keys without a public domain (None: public keys)."""

    grid: ExtremeGrid
    m: RankTargetExtreme | ExpMechQuantile
    sel: SelectionPlan | None
    check: RowCheck | None = None  # the row counts released beside it (:mod:`.rowcheck`)


@dataclass
class JointState:
    """A joint release's (:func:`joint_setup`): each column's grid; each part's mechanism at
    one share of ε (None for a part drawn by its column's tree); the columns whose
    percentiles are drawn together by :class:`RecursiveQuantiles` (at as many shares as it has
    rounds); how many shares ε was split into; the ε the cells' mechanisms run at."""

    grids: dict[str, ExtremeGrid]
    mechs: list[RankTargetExtreme | ExpMechQuantile | None]
    trees: dict[str, RecursiveQuantiles]
    shares: int
    share: float  # the statement's ε over ``shares``
    cells_eps: float  # the cells' mechanisms' ε: one share over the cells' unit factor
    sel: SelectionPlan | None = None  # keys without a public domain: their partition selection
    check: RowCheck | None = None  # the row counts released beside them (:mod:`.rowcheck`)


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
        run_eps, check = _checked(xp, tier, enabled(conn))  # the row check's share taken first
        sp = _selection(xp.plan, tier, run_eps)
        cols = [Column(o.name, oid) for o, oid in zip(xp.plan.outputs, output_types(xp.plan))]
        key, delta = _key(xp, eps), 0.0
        if sp is not None:  # the selection's δ is part of what is released
            delta = float(tier.delta)
            key = f"{key}:delta={delta!r}"
        if check is not None:  # another release: the split and the counts
            key = f"{key}:row_check={SHARE}"
        values_eps = run_eps if sp is None else sp.eps_measures
        state: ExtremeState | JointState
        if xp.joint:
            state = await asyncio.to_thread(joint_setup, gw, xp, values_eps)
            state.sel, state.check = sp, check
        else:
            grid, m = await asyncio.to_thread(_setup, gw, xp, values_eps)
            state = ExtremeState(grid, m, sp, check)
        return Prepared(
            self,
            xp,
            cols,
            key=key,
            canonical=xp.canonical(),
            epsilon=eps,
            delta=delta,
            cost=None if check is None else check.cost,
            state=state,
        )

    def scan_sql(self, conn, p: Prepared) -> str:
        xp = plan_as(p, ExtremePlan)
        if isinstance(p.state, JointState):
            return _joint_sql(conn.gw, xp, p.state, unit_salt(conn.gw, xp.plan))
        st = state_as(p, ExtremeState)
        return _sql(conn.gw, xp, st.grid, unit_salt(conn.gw, xp.plan), st.sel)

    def measure(self, conn, p: Prepared, cells) -> dict:
        xp = plan_as(p, ExtremePlan)
        if isinstance(p.state, JointState):
            return joint_answer(conn.gw, xp, p.state, cells, p.delta)
        st = state_as(p, ExtremeState)
        if st.sel is not None:
            return _selected_answer(conn.gw, xp, st.m, st.grid, st.sel, cells, p.delta, st.check)
        return _answer(conn.gw, xp, st.m, st.grid, cells, st.check)

    def mechanism(self, answer: dict) -> str:
        if "joint" in answer:
            names = ",".join(dict.fromkeys(m for m in answer["mechanism"] if m))
            return names + (", partition_selection" if "partitions" in answer else "")
        return answer["mechanism"][0] + (", partition_selection" if "partitions" in answer else "")

    def rows(self, p: Prepared, answer: dict) -> Sequence[tuple]:
        return answer_rows(plan_as(p, ExtremePlan).plan, answer)

    def notice_body(self, p: Prepared, answer: dict) -> str:
        xp = plan_as(p, ExtremePlan)
        body = joint_notice(xp, answer) if xp.joint else notice_body(xp, answer)
        counted = row_check_notice(answer)
        return f"{body}; {counted}" if counted else body

    def warning(self, p: Prepared, answer: dict, rows: Sequence[tuple]) -> str:
        """Mostly noise where the groups' released counts — a COUNT in the same statement, or
        the row check's (:mod:`.rowcheck`) — are below the mechanism's useful group size
        (:func:`.notice.rank_warning`)."""
        xp, counts = plan_as(p, ExtremePlan), row_counts(answer)
        if not isinstance(p.state, JointState):
            if counts is None:  # SET dpgate.row_check = off: no count released with it
                return ""
            st = state_as(p, ExtremeState)
            name = next(o.name for o in xp.plan.outputs if o.source == "aggregate")
            return rank_warning(
                xp.plan, [(0, name, xp.column, st.m, xp.q)], answer, p.epsilon, row_counts=counts
            )
        js = p.state
        parts = [
            (x.index, x.name, x.column, m if m is not None else js.trees[x.column], x.q)
            for x, m in zip(xp.parts, js.mechs)
        ]
        cells = central_answer(xp, answer)
        return rank_warning(
            xp.plan,
            parts,
            answer,
            p.epsilon,
            cells=None if cells is None or xp.central is None else (xp.central, cells),
            row_counts=counts,
        )

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
    """``EXPLAIN`` of a MAX/MIN statement: mechanism, grid, rank margin, backend SQL; free. The
    lines are made in a worker thread (the error laws behind the choice are computed there)."""
    gw = conn.gw
    xp = await _with_lookups(gw, _build(gw, stmt, params))
    tier = gw.tier_of(conn.role)
    on = enabled(conn)
    lines = await asyncio.to_thread(joint_explain if xp.joint else _explain_lines, gw, xp, tier, on)
    return Result("EXPLAIN", [Column("QUERY PLAN", 25)], [(line,) for line in lines])


def _explain_lines(gw, xp: ExtremePlan, tier, row_check: bool = True) -> list[str]:
    """EXPLAIN of a single MAX/MIN/percentile release (``row_check``: the session's setting)."""
    if xp.plan.selected and tier.delta <= 0:
        return [
            f"dpgate release of {xp.plan.table}: refused for this role — this GROUP BY needs partition "
            "selection, and this tier has delta = 0"
        ]
    run_eps, check = _checked(xp, tier, row_check)
    sp = _selection(xp.plan, tier, run_eps)
    grid, m = _setup(gw, xp, run_eps if sp is None else sp.eps_measures)
    if sp is None:
        lines = [
            f"dpgate release of {xp.plan.table}: {_what(xp)}, ε {tier.epsilon:g} per query, "
            f"{xp.plan.n_cells} group(s) (disjoint: each at the "
            + ("same ε, the row check's share taken first)" if check is not None else "full ε)"),
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
            f"{grid.upper:g}] (step {grid.step:g}); "
            f"{quantile_rank_text(xp, m.rank_half_width(), BETA, e=_explain_meta(m, grid, xp.func))}"
        )
        lines.append(f"  {choice_text(m)}")
    else:
        assert isinstance(m, RankTargetExtreme)
        lines.append(
            f"  {m.name} on a grid of {grid.U + 1} points over [{grid.lower:g}, "
            f"{grid.upper:g}] (step {grid.step:g}); {aim_text(m)}; with probability {1 - BETA:.0%} at most "
            f"{m.rank_half_width()} rows per group {tie_words(m)} lie beyond the answer"
        )
        lines.append(f"  {choice_text(m)}")
    if check is not None:
        lines.append("  " + row_check_explain(check, _what(xp)))
    what = "; each key's distinct units for the selection beside it" if sp is not None else ""
    lines.append(f"backend SQL (one scan, a histogram that never leaves the proxy{what}):")
    lines += ["  " + line for line in pretty(_sql(gw, xp, grid, sp=sp), gw.backend.dialect).splitlines()]
    return _with_zcdp(lines, check, tier)


def _with_zcdp(lines: list[str], check: RowCheck | None, tier) -> list[str]:
    """EXPLAIN's lines with, on a zCDP tier with a row check, its accounting first."""
    return [zcdp_line(check, tier), *lines] if check is not None and check.unit == "ρ" else lines


EXTREME = Extreme()


# -- several MAX/MIN/quantiles, and COUNT/SUM/AVG beside them: one statement, one scan -----------


def _grid(gw, xp: ExtremePlan, column: str) -> ExtremeGrid:
    spec = gw.config.tables[xp.plan.table].columns[column]
    return ExtremeGrid.for_column(spec.type, spec.lower, spec.upper)


TREE_MIN = 3
"""A column with this many percentiles in one statement has them drawn together by recursive
splitting (:class:`RecursiveQuantiles`: ⌈log2(k + 1)⌉ shares of ε instead of k); below it
each is its own exponential mechanism at one share (bench.quantiles_joint measures both)."""


def joint_setup(gw, xp: ExtremePlan, epsilon: float) -> JointState:
    """The joint release's mechanisms. ε is split into equal shares (sequential composition:
    the statement is ε-DP): one per MAX/MIN, one per percentile of a column with fewer than
    ``TREE_MIN`` of them, ⌈log2(k + 1)⌉ for a column's k ≥ ``TREE_MIN`` percentiles (drawn
    together by recursive splitting), one for the cells. On a table with a unit each
    MAX/MIN/percentile mechanism also runs over the unit's group-privacy factor, as alone."""
    grids = {c: _grid(gw, xp, c) for c in xp.columns}
    by_column: dict[str, list[ExtremePart]] = {}
    for p in xp.parts:
        if p.q is not None:
            by_column.setdefault(p.column, []).append(p)
    tree_cols = {c: ps for c, ps in by_column.items() if len(ps) >= TREE_MIN}
    shares = (
        sum(1 for p in xp.parts if p.q is None or p.column not in tree_cols)
        + sum(tree_depth(len(ps)) for ps in tree_cols.values())
        + (xp.central is not None)
    )
    share = share_of(epsilon, shares)  # sequential composition (the accountant)
    k = factor(xp.plan)
    mechs: list[RankTargetExtreme | ExpMechQuantile | None] = [
        None
        if p.q is not None and p.column in tree_cols
        else quantile_mechanism(unit_epsilon(share, k), grids[p.column], p.q)
        if p.q is not None
        else extreme_mechanism(unit_epsilon(share, k), grids[p.column], p.func)
        for p in xp.parts
    ]
    trees = {
        c: RecursiveQuantiles(
            unit_epsilon(Fraction(share) * tree_depth(len(ps)), k),
            grids[c],
            tuple(p.q for p in ps if p.q is not None),
            BETA,
        )
        for c, ps in tree_cols.items()
    }
    for tree in trees.values():  # the NOTICE's useful sizes, memoised here (planning thread)
        for q in tree.qs:
            tree.useful_from(q)
    cells_eps = unit_epsilon(share, factor(xp.central)) if xp.central is not None else 0.0
    return JointState(grids, mechs, trees, shares, share, cells_eps)


def _joint_sql(gw, xp: ExtremePlan, js: JointState, salt: str = "") -> str:
    grids = {c: GridSql(g.lower, g.step, g.U, g.integral and g.step == 1.0) for c, g in js.grids.items()}
    floor = None if js.sel is None else int(js.sel.floor)
    return joint_sql(xp, grids, gw.backend.dialect, salt, floor)


def joint_answer(gw, xp: ExtremePlan, js: JointState, rows, delta: float = 0.0) -> dict:
    """The measurement of a joint release. The scan's rows (part, k.., v, n, m..) are split:
    part −1 are the cells (noised by their own mechanisms at ``js.cells_eps``), part i the
    histogram of ``xp.columns[i]``; per cell, each part's mechanism draws its value, a tree
    column's percentiles are drawn together (ascending by construction), and the other
    percentiles of a column are put in ascending order of q (:func:`ascending`: post-processing)."""
    n = len(xp.plan.group_by)
    col_index = {c: i for i, c in enumerate(xp.columns)}
    central_rows = []
    part_meta = None
    if js.sel is None:
        cells = xp.cells
        known = set(cells)
        hists: list[dict[tuple, list]] = [{c: [] for c in cells} for _ in xp.columns]
        for row in rows:
            tag = int(row[0])
            if tag < 0:
                central_rows.append((*row[1 : 1 + n], *row[3 + n :]))
                continue
            c = cell_of(row[1:], n, known)
            if c is not None and row[1 + n] is not None:
                hists[tag][c].append((int(row[1 + n]), int(row[2 + n])))
    else:  # keys chosen by partition selection from the first histogram's units (module doc)
        sp = js.sel
        found: list[dict[tuple, list]] = [{} for _ in xp.columns]
        units: dict[tuple, int] = {}
        for row in rows:
            tag, key = int(row[0]), tuple(row[1 : 1 + n])
            hist = found[tag].setdefault(key, [])
            if row[1 + n] is not None:
                hist.append((int(row[1 + n]), int(row[2 + n])))
            if tag == 0:
                units[key] = int(row[3 + n])
        order = sorted(units, key=lambda k: tuple((v is None, v) for v in k))  # draws in key order
        cells = select_rows(sp.sel, [(*k, units[k]) for k in order], n, gw.source)
        hists = [{c: h.get(c, []) for c in cells} for h in found]
        part_meta = {
            "kept": len(cells),
            "describe": sp.sel.describe(),
            "delta": float(delta),
            "eps_measures": sp.eps_measures,
        }
    width = len(xp.plan.aggregates)
    values: list[list] = [[None] * width for _ in cells]
    hw: list[float] = [0.0] * width
    mech: list[str] = [""] * width
    eps: list[float] = [0.0] * width
    central_meta = None
    if xp.central is not None:
        ans = noisy_answer(xp.central, complete(xp.central, central_rows), js.cells_eps, gw.source)
        cvals = ans["values"]
        for j, ci in enumerate(xp.central_index):
            if ci is None:
                continue
            for r in range(len(cells)):
                values[r][j] = cvals[r][ci]
            hw[j], mech[j], eps[j] = ans["half_width"][ci], ans["mechanism"][ci], ans["epsilon"][ci]
        central_meta = {k: list(ans[k]) for k in ("half_width", "mechanism", "epsilon", "labels")}
    parts_meta = []
    for part, m in zip(xp.parts, js.mechs):
        g = js.grids[part.column]
        if m is None:  # drawn with its column's tree below
            tree = js.trees[part.column]
            hw[part.index], mech[part.index], eps[part.index] = (
                tree.rank_half_width(part.q),
                tree.name,
                tree.epsilon,
            )
            parts_meta.append(
                {
                    "k0": tree.rank_half_width(part.q),
                    "U": g.U,
                    "step": g.step,
                    "beta": BETA,
                    "useful_from": tree.useful_from(part.q),  # the tree's estimate
                }
            )
            continue
        h = hists[col_index[part.column]]
        for r, c in enumerate(cells):
            values[r][part.index] = m.release(h[c], gw.source)
        hw[part.index], mech[part.index], eps[part.index] = m.rank_half_width(), m.name, m.epsilon
        meta = _extreme_meta(m, g, part.func)
        meta.pop("func")
        parts_meta.append(meta)
    for col, tree in js.trees.items():
        members = [p for p in xp.parts if p.column == col and p.q is not None]
        h = hists[col_index[col]]
        for r, c in enumerate(cells):
            got = tree.release_all(h[c], gw.source)
            for p in members:
                values[r][p.index] = got[p.q] if p.q is not None else None
    for col in xp.columns:  # the other percentiles of a column, ascending in q
        qs = [p for p in xp.parts if p.column == col and p.q is not None and col not in js.trees]
        for row_values in values:
            ordered = ascending([row_values[p.index] for p in qs], [p.q or Fraction(0) for p in qs])
            for p, v in zip(qs, ordered):
                row_values[p.index] = v
    out = {
        "keys": [[cell_key(v) for v in c] for c in cells],
        "values": values,
        "half_width": hw,
        "mechanism": mech,
        "epsilon": eps,
        "joint": {
            "shares": js.shares,
            "share": js.share,
            "parts": parts_meta,
            "trees": {c: {"rounds": t.rounds, "epsilon": t.epsilon} for c, t in js.trees.items()},
            "central": central_meta,
        },
    }
    if part_meta is not None:
        out["partitions"] = part_meta
    if js.check is not None:
        totals = [_totals(hists[col_index[c]], cells) for c in js.check.columns]
        out["row_check"] = row_check_measure(js.check, totals, gw.source)
    return out


def _part_text(xp: ExtremePlan, part: ExtremePart, e: dict, cells: int) -> str:
    """What one part of a joint release guarantees (its rank statement), as the single NOTICE."""
    one = xp.single(part)
    if part.q is not None:
        groups = f" in each of the {cells} groups" if cells > 1 else ""
        return (
            f"{part.name}: {_what(one)} on a grid of {e['U'] + 1} points (step {fmt(e['step'])}): "
            f"{quantile_rank_text(one, e['k0'], e['beta'], groups, e)}"
        )
    groups = f" of each of the {cells} groups" if cells > 1 else ""
    return (
        f"{part.name}: {_what(one)} on a grid of {e['U'] + 1} points (step {fmt(e['step'])}), "
        f"{rank_mechanism_text(part.func, e, groups)}"
    )


def _split_text(
    xp: ExtremePlan, shares: int, share: float, trees: dict[str, int], checked: bool = False
) -> str:
    """The ε split (NOTICE and EXPLAIN); ``trees``: each tree column's rounds; ``checked``: the
    row check took its share first (:mod:`.rowcheck`)."""
    k = factor(xp.plan)
    per_unit = (
        f" (the MAX/MIN/percentiles run at ε/{k} of their share, over a unit's kept rows)" if k > 1 else ""
    )
    tree = "".join(
        f"; the {sum(p.column == c and p.q is not None for p in xp.parts)} percentiles of {c} take {r} of them "
        "(recursive splitting)"
        for c, r in trees.items()
    )
    less = f" (the statement's, less the row count's {SHARE})" if checked else ""
    if shares == 1:
        at = "ε" if checked else "the statement's ε"
        return f"one release at {at} {share:g}{less}{tree}{per_unit}"
    after = f", after the row count's {SHARE}" if checked else ""
    return f"ε split into {shares} equal shares (sequential composition{after}): ε {share:g} each{tree}{per_unit}"


def _useful_rows(n: int | None) -> str:
    """A tree quantile's useful group size (its error estimate), as a parenthesis."""
    return f" (useful from about {n} rows)" if n is not None else ""


def _tree_text(
    xp: ExtremePlan, col: str, tree: dict, parts: list[tuple[ExtremePart, dict]], cells: int
) -> str:
    """The statement of a column's percentiles drawn together by recursive splitting."""
    groups = f" in each of the {cells} groups" if cells > 1 else ""
    each = ", ".join(
        f"{p.name} within {e['k0']} rows of {float(p.q or 0):g}·n{_useful_rows(e.get('useful_from'))}"
        for p, e in parts
    )
    e = parts[0][1]
    return (
        f"{', '.join(p.name for p, _ in parts)}: {', '.join(_what(xp.single(p)) for p, _ in parts)} on a grid of "
        f"{e['U'] + 1} points (step {fmt(e['step'])}), drawn together by recursive splitting (Kaplan, Schnapp "
        f"and Stemmer 2022) at ε {tree['epsilon']:g} in {tree['rounds']} rounds, each on disjoint rows, "
        f"ascending by construction: with probability {1 - BETA:.0%} {each}{groups} (n the group's rows), "
        "plus the rows sharing one grid point per round when many do (a rank error, not value units)"
    )


def central_answer(xp: ExtremePlan, answer: dict) -> dict | None:
    """The cells' part of a joint answer as a central answer of ``xp.central`` (None: none)."""
    meta = answer["joint"].get("central")
    if xp.central is None or meta is None:
        return None
    by_cell = sorted((ci, jj) for jj, ci in enumerate(xp.central_index) if ci is not None)
    return {
        "keys": answer["keys"],
        "values": [[v[jj] for _, jj in by_cell] for v in answer["values"]],
        **meta,
    }


def joint_notice(xp: ExtremePlan, answer: dict) -> str:
    """The NOTICE of a joint release: the ε split, then each release's statement in order —
    each MAX/MIN/quantile's rank statement (a tree column's percentiles together), the
    cells' ± — and the unit."""
    j = answer["joint"]
    cells = len(answer["keys"])
    trees = j.get("trees", {})
    texts = []
    for p, e in zip(xp.parts, j["parts"]):
        if p.q is not None and p.column in trees:
            if p is next(x for x in xp.parts if x.column == p.column and x.q is not None):
                members = [
                    (x, m) for x, m in zip(xp.parts, j["parts"]) if x.column == p.column and x.q is not None
                ]
                texts.append(_tree_text(xp, p.column, trees[p.column], members, cells))
            continue
        texts.append(_part_text(xp, p, e, cells))
    if any(
        sum(p.column == c and p.q is not None for p in xp.parts) > 1 for c in xp.columns if c not in trees
    ):
        texts[-1] += "; the percentiles of one column are returned in ascending order (post-processing)"
    cells_answer = central_answer(xp, answer)
    if xp.central is not None and cells_answer is not None:
        rest = [o.name for o in xp.central.outputs if o.source == "aggregate"]
        body = cells_notice_body(xp.central, cells_answer)
        texts.append(f"{', '.join(rest)} (the cells, at ε {j['share']:g}): {body}")
    numbered = "; ".join(f"{i + 1}) {t}" for i, t in enumerate(texts))
    if xp.central is None:  # (the cells' text names theirs and ends with the unit)
        numbered += f"; mechanism: {', '.join(dict.fromkeys(m for m in answer['mechanism'] if m))}"
    unit = "" if xp.central is not None else f"; {unit_text(xp.plan)}"
    rounds = {c: t["rounds"] for c, t in trees.items()}
    split = _split_text(xp, j["shares"], j["share"], rounds, "row_check" in answer)
    part = answer.get("partitions")
    if part is not None:  # keys chosen first, at the other half of ε
        split = f"{selection_notice(xp.plan, part)}; values at ε {fmt(part['eps_measures'])}: {split}"
    return f"{split}: {numbered}{unit}"


def joint_explain(gw, xp: ExtremePlan, tier, row_check: bool = True) -> list[str]:
    """EXPLAIN of a joint release: the split, each part's mechanism and grid (a tree
    column's percentiles together), the row check, the cells' lines, the one backend statement
    (``row_check``: the session's setting)."""
    eps = float(tier.epsilon)
    if xp.plan.selected and tier.delta <= 0:
        return [
            f"dpgate release of {xp.plan.table}: refused for this role — this GROUP BY needs partition "
            "selection, and this tier has delta = 0"
        ]
    run_eps, check = _checked(xp, tier, row_check)
    sp = _selection(xp.plan, tier, run_eps)
    js = joint_setup(gw, xp, run_eps if sp is None else sp.eps_measures)
    js.sel, js.check = sp, check
    rounds = {c: t.rounds for c, t in js.trees.items()}
    split = _split_text(xp, js.shares, js.share, rounds, check is not None)
    if sp is None:
        lines = [
            f"dpgate release of {xp.plan.table}: {xp.plan.n_cells} group(s) (disjoint: each at the full "
            f"share), ε {eps:g} per query; {split}",
            "  " + unit_text(xp.plan),
        ]
    else:
        lines = [
            selection_explain(xp.plan, tier, sp),
            f"  the values of each released key at ε {sp.eps_measures:g} (the other half of ε; the released "
            f"keys are disjoint): {split}; the keys' units read from {xp.columns[0]}'s histogram",
            "  " + unit_text(xp.plan),
        ]
    i = 0
    for part, m in zip(xp.parts, js.mechs):
        g = js.grids[part.column]
        grid = f"on a grid of {g.U + 1} points over [{g.lower:g}, {g.upper:g}] (step {g.step:g})"
        if m is None:
            tree = js.trees[part.column]
            members = [p for p in xp.parts if p.column == part.column and p.q is not None]
            if part is not members[0]:
                continue
            each = ", ".join(
                f"{p.name} within {tree.rank_half_width(p.q)} rows of {float(p.q or 0):g}·n"
                f"{_useful_rows(tree.useful_from(p.q))}"
                for p in members
            )
            i += 1
            lines.append(
                f"  {i}) {', '.join(p.name for p in members)}: {len(members)} percentiles of {part.column} by "
                f"{tree.name} (Kaplan, Schnapp and Stemmer 2022) at ε {tree.epsilon:g}: {tree.rounds} rounds of "
                f"ε {tree.round_epsilon:g}, each on disjoint rows {grid}; with probability {1 - BETA:.0%} {each} "
                "(plus rows tied at one grid point per round)"
            )
            continue
        what = _what(xp.single(part))
        if part.q is not None:
            assert isinstance(m, ExpMechQuantile)
            meta = _explain_meta(m, g, part.func)
            bound = (
                f"{quantile_rank_text(xp.single(part), m.rank_half_width(), BETA, e=meta)}; {choice_text(m)}"
            )
        else:
            assert isinstance(m, RankTargetExtreme)
            bound = (
                f"k0 = {_k(m)}; with probability {1 - BETA:.0%} at most {m.rank_half_width()} rows per group "
                f"{tie_words(m)} lie beyond the answer; {aim_text(m)}; {choice_text(m)}"
            )
        i += 1
        lines.append(f"  {i}) {part.name}: {what} by {m.name} at ε {m.epsilon:g} {grid}; {bound}")
    if check is not None:
        lines.append("  " + row_check_explain(check, "the releases above"))
    if xp.central is not None:
        sub = tier.model_copy(update={"epsilon": js.share})
        head = single_tier_lines(xp.central, sub)
        lines.append(f"  {i + 1}) the cells at ε {js.share:g}: " + head[0].strip())
        lines += ["  " + line for line in head[2:]]
    if any(
        sum(p.column == c and p.q is not None for p in xp.parts) > 1 for c in xp.columns if c not in js.trees
    ):
        lines.append("  the percentiles of one column are returned in ascending order (post-processing)")
    lines.append(
        "backend SQL (one statement: each column's histogram, which never leaves the proxy"
        + (", and the cells" if xp.central is not None else "")
        + "):"
    )
    lines += ["  " + line for line in pretty(_joint_sql(gw, xp, js), gw.backend.dialect).splitlines()]
    return _with_zcdp(lines, check, tier)
