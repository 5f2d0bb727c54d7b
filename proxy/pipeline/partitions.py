"""GROUP BY a column without a public domain: the released keys are chosen by
DP partition selection (Desfontaines et al. 2022), a release kind.

The scan returns, per key the data has, the statement's measures and the number of
distinct privacy units (rows, on a table without a unit) — over the unit's kept rows
(:mod:`rewriter.unit`), so one unit is in at most ``k = max_groups_per_unit`` keys (with ``max_rows_scope = "total"``: also at most R; :func:`rewriter.unit.groups_bound`). Each
key is kept with the optimal truncated-geometric probability π(n) (Desfontaines et al.
2022; :mod:`mechanisms.partition_selection`) at (ε_s/k, δ'/k) per key; keys never seen are
never invented (π(0) = 0). The scan itself drops keys whose π(n) ≤ δ'/k (so a table of
a million one-person keys does not ship a million rows): that costs another δ'/k per key,
so δ' = δ/2 and the statement is (ε, δ)-DP per unit in all. The kept keys' aggregates
are then noised at ε_m by the central mechanisms (group privacy over the unit's kept
rows). ε_s = ε_m = ε/2 (ε_s = ε when only the keys are asked for). The tier's δ per
query is charged to its δ budget.

MAX / MIN and percentiles over such keys (:mod:`.extreme`) share the selection step
(:func:`selection_plan`, :func:`select_rows`): their one histogram scan carries each key's
distinct units, the keys are chosen here at ε/2 and δ, the values at the other ε/2.

HAVING / top-c over such keys: the sparse vector technique (Liu et al., as the SVT kind)
runs at ε_m over the keys partition selection released — a mechanism over a key set that
is itself already a DP output, so the two compose sequentially: (ε_s, δ) + ε_m. Within
ε_m the SVT takes half and the selected keys' values the other half (with values asked
for; :func:`release.selection_answer`): ε/2 selection, ε/4 SVT, ε/4 values, each at
ε/k by group privacy. Keys the SVT rejects are not shown (post-processing). The NOTICE
and EXPLAIN state the split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from fractions import Fraction

from mechanisms.accounting import share_of, unit_epsilon
from mechanisms.partition_selection import TruncatedGeometricSelection
from rewriter import dialects, to_sql
from rewriter.params import rebound
from rewriter.plan import Measure, Plan
from rewriter.unit import factor, groups_bound

from ..wire.api import Column, Result, SqlError
from .central import Central, checked, columns_of, held
from .common import cell_key, fmt, unit_salt
from .explain import explain_lines, single_tier_lines
from .kind import Prepared, plan_as, state_as
from .notice import cells_warning, notice_body, selection_warning, unit_text
from .release import noisy_answer, selection_answer
from .rows import answer_rows
from .selection_path import choose
from .thresholds import min_units_of

__all__ = [
    "PARTITIONS",
    "Partitions",
    "bin_hint",
    "floor_sql",
    "require_delta",
    "scan_floor",
    "select_rows",
    "selection_explain",
    "selection_notice",
    "selection_plan",
]


@dataclasses.dataclass(frozen=True)
class SelectionPlan:
    """A partition selection's parameters at the tier's (ε, δ) (module doc); the state of a
    PARTITIONS release, and of a MAX/MIN over keys without a public domain."""

    sel: TruncatedGeometricSelection  # the mechanism, at half of ε (all of it with no aggregate)
    floor: int  # the least number of units per key the scan returns
    eps_measures: float  # the ε left for the values
    k: int  # their group-privacy factor
    scan: Plan  # the statement's plan with the units per key as one more measure
    shift: int = 0  # min_units_per_group - 1: selection reads the units beyond it (a public shift)


def selection_plan(plan: Plan, epsilon: float, delta: float, min_units: int | None = None) -> SelectionPlan:
    """The selection's parameters for ``plan`` at the tier's (ε, δ): mechanism, scan
    threshold, ε of the measures and their group-privacy factor. ``min_units`` (the table's
    ``min_units_per_group``): the selection reads max(n − (min_units − 1), 0) units — a public
    shift, so π is applied as designed (same (ε, δ)) and a key with fewer units is never
    released (π(0) = 0)."""
    eps_sel = share_of(epsilon, 2) if plan.aggregates else epsilon
    k = groups_bound(plan.unit) if plan.unit is not None else 1
    sel = TruncatedGeometricSelection(eps_sel, delta / 2, k=k)
    shift = max((min_units or 1) - 1, 0)
    floor_ = scan_floor(sel, Fraction(delta) / 2 / k) + shift
    units = Measure("count_distinct", plan.unit.column) if plan.unit is not None else Measure("count_rows")
    return SelectionPlan(
        sel,
        floor_,
        epsilon - eps_sel,
        factor(plan),
        dataclasses.replace(plan, measures=plan.measures + (units,)),
        shift,
    )


def bin_hint(plan: Plan) -> str | None:
    """For a bounded numeric key: group by bins of its declared range instead (every bin
    answered, no δ)."""
    for g in plan.group_by:
        if g.domain is None and g.type in ("int", "float") and g.expr is None:
            return (
                f"Group by bins of its declared range: GROUP BY floor({g.column} / w) * w (or "
                f"width_bucket), every bin answered with no δ; or use a tier with delta > 0."
            )
    return None


def require_delta(plan: Plan, tier) -> None:
    """A tier with δ = 0 cannot run partition selection: refused (0A000, nothing charged),
    with the bin hint for a bounded numeric key."""
    if tier.delta > 0:
        return
    col = ", ".join(g.column for g in plan.group_by if g.domain is None)
    raise SqlError(
        "0A000",
        f"GROUP BY {col}: no public domain, so the keys would be chosen by "
        f"partition selection, which needs a δ; this role's tier has delta = 0 (nothing was "
        "charged)",
        hint=bin_hint(plan)
        or f"Declare a domain for {col} in the config, or use "
        "a tier with delta > 0 (e.g. delta = 1e-7, delta_budget = 1e-5).",
    )


def select_rows(sel: TruncatedGeometricSelection, rows, n: int, source, shift: int = 0) -> list[tuple]:
    """The selection step: of ``rows`` (one per key: the n key columns first, the key's
    distinct units last), those partition selection keeps (over the units beyond ``shift``,
    :func:`selection_plan`), without the units, in key order (public, never by count)."""
    kept = [tuple(r[:-1]) for r in rows if sel.select(max(int(r[-1]) - shift, 0), source)]
    kept.sort(key=lambda r: tuple((v is None, v) for v in r[:n]))
    return kept


def selection_notice(plan: Plan, part: dict) -> str:
    """The NOTICE's selection statement (``part``: the answer's "partitions" entry)."""
    what = plan.unit.name if plan.unit is not None else "row"
    return (
        f"{part['describe']} over the number of distinct {what}s per key: {part['kept']} key(s) released, "
        f"keys with few {what}s are never shown (δ {fmt(part['delta'])} per release)"
        + (
            f"; min_units_per_group: keys with fewer than {part['min_units']} distinct {what}s are never "
            f"released (the selection reads the {what}s beyond {part['min_units'] - 1})"
            if part.get("min_units")
            else ""
        )
    )


def selection_explain(plan: Plan, tier, sp: SelectionPlan) -> str:
    """EXPLAIN's selection line."""
    cols = ", ".join(g.column for g in plan.group_by)
    return (
        f"dpgate release of {plan.table}: ε {tier.epsilon:g}, δ {tier.delta:g} per query; keys of "
        f"({cols}) (no public domain) chosen by {sp.sel.describe()} (half of δ); "
        f"keys with fewer than {sp.floor} distinct units (π(n) ≤ δ/2) are dropped in the scan "
        "(the other half)"
        + (
            f"; min_units_per_group {sp.shift + 1}: the selection reads the units beyond {sp.shift}"
            if sp.shift
            else ""
        )
    )


def floor_sql(gw, plan: Plan, sp: SelectionPlan, salt: str | None = None) -> str:
    """The scan: the statement's measures and the units per key, keys below the floor dropped."""
    inner = to_sql(
        sp.scan, gw.backend.dialect, unit_salt(gw, plan) if salt is None else salt, **held(gw, sp.scan)
    )
    q = dialects.get(gw.backend.dialect).quote
    units = q(f"m{len(sp.scan.measures)}")
    return rebound(f"SELECT * FROM ({inner}) AS {q('scan')} WHERE {units} >= {int(sp.floor)}", inner)


def scan_floor(sel: TruncatedGeometricSelection, slack) -> int:
    """The least n the scan returns: the first n with π(n) > ``slack``; keys below it
    (π(n) ≤ slack, so dropping them costs at most ``slack`` per key) never reach the proxy."""
    n = 1
    while n < sel.n_one and sel.keep_probability(n) <= slack:
        n += 1
    return n


class Partitions(Central):
    """Keys chosen by partition selection, then their aggregates noised (module doc)."""

    name = "partitions"
    gaussian = False  # partition selection and its values are pure (ε, δ)-DP

    def prepare(self, conn, plan) -> Prepared:
        gw = conn.gw
        tier = gw.tier_of(conn.role)
        require_delta(plan, tier)
        t = min_units_of(gw.config.tables.get(plan.table))
        sp = selection_plan(plan, tier.epsilon, tier.delta, t)
        at_least = f":min_units={t}" if t else ""
        return Prepared(
            self,
            plan,
            columns_of(plan),
            key=f"{plan.fingerprint()}:eps={tier.epsilon!r}:delta={tier.delta!r}{at_least}",
            canonical=plan.canonical() + (f";min_units={t}" if t else ""),
            epsilon=tier.epsilon,
            delta=tier.delta,
            state=sp,
        )

    def scan_sql(self, conn, p: Prepared) -> str:
        return floor_sql(conn.gw, plan_as(p, Plan), state_as(p, SelectionPlan))

    async def explain(self, conn, stmt, params: list, plan=None) -> Result:
        gw = conn.gw
        if plan is None:
            plan = checked(await gw.plan_async(stmt.sql, params or None, stmt.take()), stmt.route)
        tier = gw.tier_of(conn.role)
        plan, path = choose(plan, tier, conn.session.settings)  # HAVING / top-c
        t = min_units_of(gw.config.tables.get(plan.table))
        sql = floor_sql(gw, plan, selection_plan(plan, tier.epsilon, tier.delta or 1e-9, t), salt="")
        lines = explain_lines(plan, self.explain_head(plan, tier, t), sql, gw.backend.dialect, path)
        return Result("EXPLAIN", [Column("QUERY PLAN", 25)], [(line,) for line in lines])

    def measure(self, conn, p: Prepared, rows) -> dict:
        sp, source = state_as(p, SelectionPlan), conn.gw.source
        plan = plan_as(p, Plan)
        n = len(plan.group_by)
        kept = select_rows(sp.sel, rows, n, source, sp.shift)
        if plan.selection is not None:  # HAVING / top-c: SVT over the selected keys (module doc)
            answer = selection_answer(plan, kept, unit_epsilon(sp.eps_measures, sp.k), source)
        elif plan.aggregates:
            answer = noisy_answer(plan, kept, unit_epsilon(sp.eps_measures, sp.k), source)
        else:
            answer = {
                "keys": [[cell_key(v) for v in r[:n]] for r in kept],
                "values": [[] for _ in kept],
                "half_width": [],
                "mechanism": [],
                "epsilon": [],
                "labels": [],
            }
        answer["partitions"] = {
            "kept": len(kept),
            "describe": sp.sel.describe(),
            "delta": p.delta,
            "eps_measures": sp.eps_measures if plan.aggregates else 0.0,
            "min_units": sp.shift + 1 if sp.shift else None,
        }
        return answer

    def mechanism(self, answer: dict) -> str:
        return ", ".join(sorted(set(answer["mechanism"]) | {"partition_selection"}))

    def rows(self, p: Prepared, answer: dict) -> Sequence[tuple]:
        return answer_rows(plan_as(p, Plan), answer)

    def notice_body(self, p: Prepared, answer: dict) -> str:
        part, plan = answer["partitions"], plan_as(p, Plan)
        head = selection_notice(plan, part)
        if not plan.aggregates:
            return f"{head}; {unit_text(plan)}"
        if plan.selection is not None:
            return (
                f"{head}; HAVING/top-c by SVT over the released keys at ε {fmt(part['eps_measures'])} (half to "
                "the sparse vector, half to the values): " + notice_body(plan, answer)
            )
        return f"{head}; values at ε {fmt(part['eps_measures'])}: " + notice_body(plan, answer)

    def warning(self, p: Prepared, answer: dict, rows: Sequence[tuple]) -> str:
        """The released keys' values judged as a central release's (:func:`.notice.cells_warning`;
        the sparse vector's, each at its own share: :func:`.notice.selection_warning`)."""
        plan = plan_as(p, Plan)
        if not plan.aggregates:  # keys only
            return ""
        if plan.selection is not None:
            return selection_warning(plan, answer, p.epsilon, rows)
        return cells_warning(plan, answer, p.epsilon, rows)

    def explain_head(self, plan, tier, min_units: int | None = None) -> list[str]:
        if tier.delta <= 0:
            return [
                f"dpgate release of {plan.table}: refused for this role — this GROUP BY "
                "needs partition selection, and this tier has delta = 0"
            ]
        sp = selection_plan(plan, tier.epsilon, tier.delta, min_units)
        lines = [selection_explain(plan, tier, sp)]
        if plan.selection is not None:
            lines.append(
                f"  HAVING/top-c: SVT over the released keys at ε {sp.eps_measures:g} (the other half of ε; "
                "of it half to the sparse vector, half to the passing keys' values)"
            )
        if plan.aggregates:
            lines += single_tier_lines(plan, tier.model_copy(update={"epsilon": sp.eps_measures}))[1:]
        else:
            lines.append("  " + unit_text(plan))
        return lines

    def prepare_noise(self, conn, p: Prepared) -> None:
        return None

    def after_reply(self, conn, p: Prepared) -> None:
        return None


PARTITIONS = Partitions()
