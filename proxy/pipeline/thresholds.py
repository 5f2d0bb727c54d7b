"""Minimum units per released group: a table's ``min_units_per_group = T`` releases a GROUP BY
cell only when its noisy number of distinct units (rows, on a table without a unit) is at
least T — pre-thresholding, as Google's differentially private SQL does (Wilson et al. 2020,
"Differentially private SQL with bounded user contribution": a group is released only if a
noisy count of its users passes a threshold).

The scan returns, per public cell, the statement's measures and the cell's distinct units
over the unit's kept rows (:mod:`rewriter.unit`: one unit is in at most G = ``max_groups_per_unit``
cells). The unit counts are one more release of the statement (sequential composition: its
ε is split into g + 1 equal shares, g the statement's releases, the first for the test): a
two-sided geometric count per cell at ε_t / min(G, cells) (adding or removing one unit moves
at most that many cells' counts by 1; parallel composition over the cells otherwise). Cells
whose noisy count is below T are not released (their values are never measured: the rest of
the cells' values are noised at the remaining ε, as CENTRAL does). Which cells pass is a DP
output, post-processing of the noisy counts; the NOTICE and EXPLAIN say how many passed and
what it cost. On a zCDP tier the shares are of ρ: the values by the tier's zCDP mechanisms, the
test a pure ε-DP count at ε = √(2ρ_t) (ε²/2-zCDP, Bun & Steinke 2016 Prop 1.4). A ladder tier is
refused (its tiers share one noise chain). Only CENTRAL releases (COUNT/SUM/AVG/VAR over public keys, HAVING and top-c
evaluated on the released cells) are thresholded here; over keys without a public domain,
partition selection reads the units beyond T − 1 (:func:`.partitions.selection_plan`: a public
shift of its input, same (ε, δ)), so no key with fewer than T units is released there either.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

from mechanisms import GeometricCount
from mechanisms.accounting import ZCDP, Cost, compose, pure_epsilon, share_of, unit_epsilon
from rewriter import complete
from rewriter.plan import Measure, Plan
from rewriter.unit import factor, groups_bound

from ..backends import Columns
from ..wire.api import Column, Result, SqlError
from .central import Central, CentralState, checked, columns_of, release_suffix, scan_sql
from .common import fmt
from .explain import explain_lines, single_tier_lines
from .kind import Prepared, plan_as, state_as
from .notice import notice_body
from .release import noisy_answer, release_groups, statement_cost

__all__ = ["THRESHOLD", "Threshold", "ThresholdState", "min_units_of", "unthresholded"]


def min_units_of(table) -> int | None:
    """The table's ``min_units_per_group`` (None: every cell is released)."""
    return getattr(table, "min_units_per_group", None) if table is not None else None


def unthresholded(p: Prepared, table) -> None:
    """A statement planned by a kind that does not apply ``min_units_per_group`` (MAX/MIN and
    percentiles, a per-record table's release) is refused when it groups (fail closed: its groups
    would be released whatever their number of units); without GROUP BY it is one group of the
    whole table, as a thresholded release's would be too."""
    t = min_units_of(table)
    inner = getattr(p.plan, "plan", p.plan)
    if t is None or not getattr(inner, "group_by", ()):
        return
    raise SqlError(
        "0A000",
        f"table {getattr(inner, 'table', '')} releases only groups with at least {t} "
        f"distinct units (min_units_per_group), which this release ({p.kind.name}) does not apply; "
        "nothing was charged",
        hint="Ask it without GROUP BY, or ask COUNT, SUM, AVG or VAR per group (those are thresholded).",
    )


@dataclass
class ThresholdState(CentralState):
    """The values' mechanism ε (after the test's share, over the unit's factor), the test's ε,
    its noise's sensitivity, the threshold and the scan's plan (units as the last measure)."""

    test_eps: float = 0.0
    sensitivity: int = 1
    threshold: int = 1
    scan: Plan | None = None


def _state(plan: Plan, tier, threshold: int) -> ThresholdState:
    """The test's share and the values' (g + 1 equal shares of the tier's ε, or of its ρ on a
    zCDP tier: the values by their zCDP mechanisms at the rest, the test, a pure ε-DP count,
    at ε = √(2ρ_test), Bun & Steinke 2016 Prop 1.4)."""
    g = len(release_groups(plan))
    units = Measure("count_distinct", plan.unit.column) if plan.unit is not None else Measure("count_rows")
    sens = min(groups_bound(plan.unit), max(plan.n_cells, 1)) if plan.unit is not None else 1
    budget: float | Cost
    if tier.accounting == ZCDP:
        test_eps = pure_epsilon(share_of(tier.rho, g + 1))
        budget = Cost.zcdp(share_of(Fraction(tier.rho) * g, g + 1))
    else:
        test_eps = share_of(tier.epsilon, g + 1)
        budget = unit_epsilon(share_of(Fraction(tier.epsilon) * g, g + 1), factor(plan))
    return ThresholdState(
        budget,
        None,
        test_eps,
        sens,
        threshold,
        dataclasses.replace(plan, measures=plan.measures + (units,)),
    )


def _test(st: ThresholdState) -> GeometricCount:
    """The per-cell unit count's mechanism: the test's ε over the cells a unit reaches."""
    return GeometricCount(unit_epsilon(st.test_eps, st.sensitivity))


def _text(what: str, threshold: int, test_eps: float, sens: int) -> str:
    return (
        f"groups with fewer than {threshold} distinct {what}s are not released: each cell's {what}s "
        f"counted with geometric noise at ε {fmt(test_eps)}"
        + (f"/{sens} (a {what} is in at most {sens} cells)" if sens > 1 else "")
        + " (pre-thresholding, one share of the statement's budget)"
    )


class Threshold(Central):
    """CENTRAL with a minimum number of units per released cell (module doc)."""

    name = "threshold"

    def prepare(self, conn, plan) -> Prepared:
        gw = conn.gw
        tier = gw.tier_of(conn.role)
        t = min_units_of(gw.config.tables.get(plan.table))
        if t is None:
            raise SqlError("XX000", "internal error: a thresholded release of a table without a threshold")
        if tier.ladder is not None:
            raise SqlError(
                "0A000",
                f"table {plan.table} releases only groups with at least {t} distinct units "
                "(min_units_per_group), which a ladder tier's shared noise chain does not apply; "
                "nothing was charged",
                hint="Use a tier without a ladder for this table.",
            )
        if plan.selection is not None:  # HAVING / top-c: evaluated on the released cells
            plan = dataclasses.replace(plan, selection=None)
        st = _state(plan, tier, t)
        test = Cost.pure(_test(st).privacy_map_exact(st.sensitivity)).in_accounting(tier.accounting)
        cost = compose([statement_cost(plan, st.mech_eps), test])  # each part by its privacy map
        return Prepared(
            self,
            plan,
            columns_of(plan),
            key=f"{plan.fingerprint()}:{release_suffix(tier)}:min_units={t}",
            canonical=f"{plan.canonical()};min_units={t}",
            epsilon=tier.epsilon,
            cost=cost,
            state=st,
        )

    def prepare_noise(self, conn, p: Prepared) -> None:
        return None

    def scan_sql(self, conn, p: Prepared) -> str:
        scan = state_as(p, ThresholdState).scan
        if scan is None:
            raise SqlError("XX000", "internal error: a thresholded release without its scan")
        return scan_sql(conn.gw, scan)

    async def explain(self, conn, stmt, params: list, plan=None) -> Result:
        gw = conn.gw
        if plan is None:
            plan = checked(await gw.plan_async(stmt.sql, params or None, stmt.take()), stmt.route)
        plan = dataclasses.replace(plan, selection=None)
        tier = gw.tier_of(conn.role)
        t = min_units_of(gw.config.tables.get(plan.table)) or 1
        st = _state(plan, tier, t)
        what = plan.unit.name if plan.unit is not None else "row"
        if tier.accounting == ZCDP:  # the central lines of a zCDP tier, and the test's
            res = await super().explain(conn, stmt, params, plan)
            line = f"  min units per group: {_text(what, t, st.test_eps, st.sensitivity)}"
            res.rows = [res.rows[0], (line + "; the values at the other ρ shares",), *res.rows[1:]]
            return res
        head = single_tier_lines(plan, tier.model_copy(update={"epsilon": tier.epsilon - st.test_eps}))
        head = [
            single_tier_lines(plan, tier)[0],
            f"  min units per group: {_text(what, t, st.test_eps, st.sensitivity)}; the values share "
            f"the other ε {fmt(tier.epsilon - st.test_eps)}",
            *head[1:],
        ]
        sql = scan_sql(gw, st.scan)
        lines = explain_lines(plan, head, sql, gw.backend.dialect, [])
        return Result("EXPLAIN", [Column("QUERY PLAN", 25)], [(line,) for line in lines])

    def measure(self, conn, p: Prepared, cells) -> dict:
        plan, st = plan_as(p, Plan), state_as(p, ThresholdState)
        if st.scan is None:
            raise SqlError("XX000", "internal error: a thresholded release without its scan")
        rows = cells.rows() if isinstance(cells, Columns) else cells
        full = complete(st.scan, rows)
        source = conn.gw.source
        test, units = _test(st), [int(row[-1]) for row in full]
        drawn = test.draw_many(len(units), source)  # the law of one draw per cell, at once
        noisy = (
            [u + int(z) for u, z in zip(units, drawn)]
            if drawn is not None
            else [test.release(u, source).value for u in units]
        )
        kept = [row[:-1] for row, v in zip(full, noisy) if v >= st.threshold]
        answer = noisy_answer(plan, kept, st.mech_eps, source)
        answer["min_units"] = {
            "threshold": st.threshold,
            "kept": len(kept),
            "cells": len(full),
            "epsilon": st.test_eps,
            "sensitivity": st.sensitivity,
        }
        return answer

    def notice_body(self, p: Prepared, answer: dict) -> str:
        plan = plan_as(p, Plan)
        mu = answer.get("min_units")
        body = notice_body(plan, answer)
        if not mu:
            return body
        what = plan.unit.name if plan.unit is not None else "row"
        return (
            f"{mu['kept']} of {mu['cells']} groups released; "
            f"{_text(what, mu['threshold'], mu['epsilon'], mu['sensitivity'])}; {body}"
        )

    def after_reply(self, conn, p: Prepared) -> None:
        return None


THRESHOLD = Threshold()
