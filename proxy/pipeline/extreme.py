"""MAX / MIN and quantiles on a central table: statement → histogram scan → shifted-rank
exponential mechanism per group (:mod:`mechanisms.extreme`, seed 003 §6.4), or the
exponential mechanism for a quantile (:mod:`mechanisms.quantile`, Smith 2011) →
ledger → rows. The tier's ε is charged once per statement (groups are disjoint:
parallel composition); a repeat returns the stored answer free, as everywhere."""
from __future__ import annotations

import asyncio
import hashlib

from mechanisms.extreme import ExtremeGrid, ShiftedRankExtreme
from mechanisms.quantile import ExpMechQuantile
from rewriter import parse
from rewriter.extreme import ExtremePlan, build_extreme_plan, extreme_param_types, histogram_sql

from ..backends import BackendError
from ..stores.ledger import BudgetExceeded
from ..wire.api import Column, Description, Result, SqlError
from .common import DUMMY, TYPE_OIDS, budget_error, cell_key, cell_of, charge_what_ran, fmt, pretty
from .release import answer_rows, output_types

__all__ = ["answer_extreme", "describe_extreme", "explain_extreme"]

BETA = 0.05          # the rank statement in the NOTICE holds with probability 95%, like the half-widths


def _setup(gw, xp: ExtremePlan, epsilon: float):
    spec = gw.config.tables[xp.plan.table].columns[xp.column]
    grid = ExtremeGrid.for_column(spec.type, spec.lower, spec.upper)
    if xp.quantile:
        return grid, ExpMechQuantile(epsilon, grid, xp.q, BETA)
    return grid, ShiftedRankExtreme(epsilon, grid, xp.func, BETA)


def _sql(gw, xp: ExtremePlan, grid: ExtremeGrid) -> str:
    return histogram_sql(xp, grid.lower, grid.step, grid.U, grid.integral and grid.step == 1.0,
                         gw.backend.dialect)


async def _release(conn, xp: ExtremePlan, epsilon: float) -> dict:
    gw = conn.gw
    grid, m = _setup(gw, xp, epsilon)
    try:
        rows = await gw.backend.fetch(_sql(gw, xp, grid), gw.statement_timeout, conn._cancel,
                                      timing=conn._timing)
    except BackendError as e:
        raise SqlError(e.sqlstate, e.message) from None
    n = len(xp.plan.group_by)
    cells = xp.cells
    hists: dict[tuple, list] = {c: [] for c in cells}
    known = set(cells)
    for row in rows:
        c = cell_of(row, n, known)
        if c is not None:                         # NULL / out-of-domain keys match no cell
            hists[c].append((int(row[n]), int(row[n + 1])))
    values = [[m.release(hists[c], gw.source)] for c in cells]
    return {"keys": [[cell_key(v) for v in c] for c in cells], "values": values, "half_width": [m.rank_half_width()],
            "mechanism": [m.name], "extreme": {"func": xp.func, "k0": _k(m), "U": grid.U,
                                                "step": grid.step, "beta": BETA}}


def _k(m) -> int:
    return m.rank_half_width() if isinstance(m, ExpMechQuantile) else m.k0


def _what(xp: ExtremePlan) -> str:
    """How the statement names the aggregate (q is the ascending fraction)."""
    if xp.func == "median":
        return f"median({xp.column})"
    if xp.quantile:
        return f"{xp.func}({float(xp.q):g}) WITHIN GROUP (ORDER BY {xp.column})"
    return f"{xp.func.upper()}({xp.column})"


def quantile_rank_text(xp: ExtremePlan, k: int, beta: float, groups: str = "") -> str:
    """The rank statement of a quantile release (NOTICE and EXPLAIN)."""
    return (f"with probability {1 - beta:.0%} the answer's rank is within {k} rows of {float(xp.q):g}·n{groups} "
            f"(n the group's rows), plus the rows sharing one grid point when many do (a rank error, not "
            f"value units; the exponential mechanism, Smith 2011)")


def _key(xp: ExtremePlan, epsilon: float) -> str:
    return f"ex:{hashlib.sha256(xp.canonical().encode()).hexdigest()[:32]}:eps={epsilon!r}"


def notice(xp: ExtremePlan, answer: dict, *, charged: float, remaining: float, budget: float,
           period: str, repeat: bool) -> str:
    e = answer["extreme"]
    per = "in total" if period == "never" else f"this {period}"
    head = "ε charged 0 (repeat of an earlier release)" if repeat else f"ε charged {charged:g}"
    if xp.quantile:
        name = next(o.name for o in xp.plan.outputs if o.source == "aggregate")
        groups = f" in each of the {len(answer['keys'])} groups" if len(answer["keys"]) > 1 else ""
        return (f"dpgate: {head}; budget left {remaining:g} of {budget:g} {per}; {name}: {_what(xp)} on a "
                f"grid of {e['U'] + 1} points (step {fmt(e['step'])}): "
                f"{quantile_rank_text(xp, e['k0'], e['beta'], groups)}; mechanism: {answer['mechanism'][0]}")
    side = "above" if xp.func == "max" else "below"
    name = next(o.name for o in xp.plan.outputs if o.source == "aggregate")
    groups = f" of each of the {len(answer['keys'])} groups" if len(answer["keys"]) > 1 else ""
    return (f"dpgate: {head}; budget left {remaining:g} of {budget:g} {per}; {name}: "
            f"{xp.func.upper()}({xp.column}) on a grid of {e['U'] + 1} points (step {fmt(e['step'])}), by the "
            f"shifted-rank exponential mechanism: with probability {1 - e['beta']:.0%} at most "
            f"{2 * e['k0']} rows{groups}, plus the rows sharing one value when many do, lie {side} the answer "
            f"(a rank error, not value units; k0 = {e['k0']}), so it is usually a little "
            f"{'below the true maximum' if xp.func == 'max' else 'above the true minimum'}; "
            f"mechanism: {answer['mechanism'][0]}")


async def answer_extreme(conn, sql: str, params: list):
    """The orchestrator's hook for MAX/MIN on a central table: ``(Result, decision, ε)``."""
    gw = conn.gw
    xp = build_extreme_plan(parse(sql), gw.config, list(params) if params else None)
    tier = gw.tier_of(conn.role)
    if tier.ladder is not None:          # a ladder's coalition guarantee covers its chain only
        raise SqlError("0A000", "MAX, MIN and percentiles are not available to data-market ladder tiers; "
                       "nothing was charged", hint="Ask for COUNT/SUM/AVG: each is released from the ladder's "
                       "noise chain.")
    eps = float(tier.epsilon)
    key = _key(xp, eps)
    cols = [Column(o.name, oid) for o, oid in zip(xp.plan.outputs, output_types(xp.plan))]
    dv, spent, stored = await gw.ledger_read(gw.ledger.snapshot, conn.role, key, tier.period)
    if stored is None:
        if tier.budget - spent + 1e-9 < eps:
            raise budget_error(conn.role, eps, tier.budget - spent, tier)
        async with gw.statement_slot(conn.role), charge_what_ran(conn, tier):
            answer = await _release(conn, xp, eps)
        try:                                       # recorded before anything is sent
            stored = await asyncio.to_thread(
                gw.ledger.charge_and_record, role=conn.role, key=key, data_version=dv, epsilon=eps,
                budget=tier.budget, period=tier.period, canonical=xp.canonical(), statement=sql,
                mechanism=answer["mechanism"][0], answer=answer)
        except BudgetExceeded as b:
            raise budget_error(conn.role, eps, b.remaining, tier) from None
    remaining = tier.budget - await gw.ledger_read(gw.ledger.spent, conn.role, tier.period)
    rows = answer_rows(xp.plan, stored.answer)
    msg = notice(xp, stored.answer, charged=stored.epsilon if stored.charged else 0.0,
                 remaining=max(remaining, 0.0), budget=tier.budget, period=tier.period,
                 repeat=not stored.charged)
    return (Result(f"SELECT {len(rows)}", cols, rows, notices=[msg]),
            "released" if stored.charged else "repeat", stored.epsilon if stored.charged else 0.0)


async def describe_extreme(conn, sql: str, oids: list[int]) -> Description:
    """Describe (extended protocol): parameter and column types."""
    expr = parse(sql)
    types = extreme_param_types(expr, conn.gw.config)
    inferred = [oids[i] if i < len(oids) and oids[i] else TYPE_OIDS[ty] or 25 for i, ty in enumerate(types)]
    xp = build_extreme_plan(expr, conn.gw.config, [DUMMY.get(ty, "0") for ty in types] if types else None)
    return Description(inferred, [Column(o.name, oid) for o, oid in zip(xp.plan.outputs, output_types(xp.plan))])


async def explain_extreme(conn, body: str, params: list) -> Result:
    """``EXPLAIN`` of a MAX/MIN statement: mechanism, grid, rank margin, backend SQL; free."""
    gw = conn.gw
    xp = build_extreme_plan(parse(body), gw.config, list(params) if params else None)
    tier = gw.tier_of(conn.role)
    grid, m = _setup(gw, xp, float(tier.epsilon))
    lines = [f"dpgate release of {xp.plan.table}: {_what(xp)}, ε {tier.epsilon:g} per query, "
             f"{xp.plan.n_cells} group(s) (disjoint: each at the full ε)"]
    if xp.quantile:
        lines.append(f"  {m.name} on a grid of {grid.U + 1} points over [{grid.lower:g}, "
                     f"{grid.upper:g}] (step {grid.step:g}); {quantile_rank_text(xp, m.rank_half_width(), BETA)}")
    else:
        lines.append(f"  {m.name} (seed 003 §6.4) on a grid of {grid.U + 1} points over [{grid.lower:g}, "
                     f"{grid.upper:g}] (step {grid.step:g}); k0 = {m.k0}; with probability {1 - BETA:.0%} at most "
                     f"{m.rank_half_width()} rows per group (plus rows tied at one value) lie beyond the answer")
    lines.append("backend SQL (one scan, a histogram that never leaves the proxy):")
    lines += ["  " + line for line in pretty(_sql(gw, xp, grid), gw.backend.dialect).splitlines()]
    return Result("EXPLAIN", [Column("QUERY PLAN", 25)], [(line,) for line in lines])
