"""The central release kinds (a table with neither ``mode = "local"`` nor a per-record
policy): the public domain, the noisy cells (geometric COUNT, discrete-Laplace SUM,
hourglass AVG of the add-remove mean, Kulesza et al. 2024, moments for VAR), and sparse-vector selection (top-c,
HAVING; Liu et al.). The data-market ladder (multi-tier release, Wang et al. 2026) is in :mod:`.multitier`, MAX/MIN
in :mod:`.extreme`. Each plans a statement with :func:`rewriter.build_plan`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from mechanisms.accounting import ZCDP, Cost, unit_epsilon
from rewriter import Refusal, complete, param_types, parse, to_sql, typed_plan
from rewriter.dialects import get as dialect_of
from rewriter.lru import LRU
from rewriter.plan import Output, Plan
from rewriter.unit import factor, heavy_threshold, lookup_premise, lookup_splits, rows_premise, splits

from ..backends import Columns
from ..wire.api import Column, Description, Result, SqlError
from .columnar import complete_columns
from .common import DUMMY, TYPE_OIDS, avg_half_widths, explain_output_line, unit_salt
from .derive import mark
from .explain import explain_lines, post_text, signal_lines, single_tier_lines
from .kind import HEAVY_ROWS, Prepared, ReleaseKind, Statement, dp_reading, plan_as, state_as
from .noise import ScanNoise, scan_noise
from .notice import cells_warning, domain_notice, notice_body, selection_warning
from .release import (
    contributions_sq,
    domain_answer,
    noisy_answer,
    releases_of,
    selection_answer,
    statement_cost,
)
from .rows import answer_rows, output_types
from .selection_path import choose

__all__ = [
    "CENTRAL",
    "DOMAIN",
    "EMPTY",
    "SVT",
    "Central",
    "CentralState",
    "Domain",
    "Empty",
    "Svt",
    "checked",
    "columns_of",
    "mechanism_epsilon",
    "scan_sql",
]

_TEXT = 25


def checked(plan, route):
    """A central plan, checked against the statement's route: the plan's table is the one
    the parse named (the planner and the router read the same FROM)."""
    if plan.table != route.table:
        raise SqlError("XX000", "internal error: the statement's plan and route disagree; nothing was run")
    return plan


def mechanism_epsilon(plan, epsilon: float) -> float:
    """The ε the row-level mechanisms run at: the tier's ε over the privacy unit's
    group-privacy factor k (:func:`rewriter.unit.factor`) on a table with a unit
    (:func:`mechanisms.accounting.unit_epsilon`)."""
    return unit_epsilon(epsilon, factor(plan))


def mechanism_budget(plan, tier) -> float | Cost:
    """What a central plan's measurements are given (:func:`.release.releases_of`): on a pure
    tier the ε its row-level mechanisms run at (:func:`mechanism_epsilon`); on a zCDP tier the
    statement's ρ for a whole unit (the discrete Gaussian at the unit's L2 sensitivity)."""
    if tier.accounting == ZCDP:
        return Cost.zcdp(tier.rho)
    return mechanism_epsilon(plan, tier.epsilon)


def release_suffix(tier) -> str:
    """The part of a release key naming what the tier runs at: its ε, or its ρ on a zCDP tier."""
    return f"rho={tier.rho!r}" if tier.accounting == ZCDP else f"eps={tier.epsilon!r}"


def scan_sql(gw, plan) -> str:
    """A central plan's backend SQL; on a table with a privacy unit, keyed by the salt
    of the current data version (:func:`.common.unit_salt`), its heavy units read from a
    relation the backend keeps where the table cannot change meanwhile (``Backend.frozen``)."""
    return to_sql(plan, gw.backend.dialect, unit_salt(gw, plan), **held(gw, plan))


# what a kept relation may hold (one per table and bound in each process, shared by its scans):
KEPT_UNITS_MAX = 2_000_000  # heavy units: ≈ 16 bytes each
KEPT_KEYS_MAX = 2_000_000  # keys of heavy units' rows in a looked-up table: ≈ 24 bytes each
# the heavy units' rows themselves: [backend] kept_rows (config); TPC-H's lineitem ≈ 35 bytes each, compressed
_PREMISES: LRU[tuple, str] = LRU(256)  # a premise's text, by what it is made of


class Held(TypedDict):
    """:func:`rewriter.to_sql`'s keywords for what the backend holds of a plan's source while it
    cannot change (:func:`held`)."""

    frozen: bool
    rows: bool
    cells: bool
    decimals: dict[str, tuple[int, int]]


def held(gw, plan) -> Held:
    """What the scan of ``plan`` reads from what the backend holds of its source while it cannot
    change, as :func:`rewriter.to_sql`'s keywords: ``frozen`` — the heavy units from a kept relation
    (:func:`frozen`); ``rows`` — their rows too (:func:`rewriter.unit.heavy_rows`), where there are at
    most ``[backend] kept_rows`` of them (:func:`rewriter.unit.rows_premise`, asked once per file
    held and answered off the event loop, as the lookup's premise is: until then the scan joins the
    table to the kept units); ``cells`` — a total-mode statement without a WHERE reads its heavy
    units' (unit, cell) rows and running sums from a relation made from those rows once (at most
    ``[backend] kept_rows`` rows of them kept, ``Backend.keeps_cells``;
    :func:`rewriter.unit.per_unit_scan`); ``decimals`` — the source's fixed-point columns, which a
    SUM clamps and sums in their own type (``Backend.decimals``, :mod:`rewriter.fixed_point`)."""
    decimals = gw.backend.decimals(plan.source) if any(m.kind == "sum" for m in plan.measures) else {}
    if not frozen(gw, plan):
        return Held(frozen=False, rows=False, cells=False, decimals=decimals)
    b, bound = gw.backend, kept_rows_bound(gw)
    rows = bound > 0 and b.holds(premise_sql(plan, b.dialect, rows_at_most=bound))
    return Held(frozen=True, rows=rows, cells=rows and b.keeps_cells(bound), decimals=decimals)


def kept_rows_bound(gw) -> int:
    """The most heavy units' rows a table's kept relation may hold (``[backend] kept_rows``)."""
    return int(gw.config.backend.kept_rows)


def frozen(gw, plan) -> bool:
    """Whether ``plan``'s heavy units are read from a relation the backend keeps
    (``Backend.frozen``, :func:`rewriter.unit.heavy_set`): its table cannot change while the
    backend is open, and has at most KEPT_UNITS_MAX·(T + 1) rows, so that the relation, of the units
    with more than T rows, holds at most KEPT_UNITS_MAX of them. A unit looked up through a
    reference (:func:`rewriter.unit.lookup_splits`): both tables frozen and the lookup's premise
    true of them (:func:`rewriter.unit.lookup_premise`, asked once and answered off the
    event loop: every row finds one row with a unit, and the relation would hold at most
    KEPT_KEYS_MAX of its keys)."""
    if plan.unit is None:
        return False
    if splits(plan):
        return gw.backend.frozen(plan.source, KEPT_UNITS_MAX * (heavy_threshold(plan) + 1))
    if lookup_splits(plan) and plan.unit_lookup is not None:  # the heavy units' keys in the looked-up table
        b = gw.backend
        return (
            b.frozen(plan.source)
            and b.frozen(plan.unit_lookup.source)
            and b.holds(premise_sql(plan, b.dialect))
        )
    return False


def premise_sql(plan, dialect: str, rows_at_most: int | None = None) -> str:
    """:func:`rewriter.unit.lookup_premise` of ``plan`` as ``dialect`` reads it (``rows_at_most``:
    :func:`rewriter.unit.rows_premise` at that bound), made once per (dialect, table, lookup, T):
    every statement over the table shares it (it reads no WHERE, key or measure), and building it
    costs a millisecond of Python."""
    unit = plan.unit.column if plan.unit is not None else None
    key = (dialect, plan.source, unit, plan.unit_lookup, heavy_threshold(plan), rows_at_most, KEPT_KEYS_MAX)
    text = _PREMISES.get(key)
    if text is None:
        if rows_at_most is not None:
            made = rows_premise(plan, rows_at_most)
        else:
            made = lookup_premise(plan, KEPT_KEYS_MAX)
        text = dialect_of(dialect).sql(made)
        _PREMISES.put(key, text)
    return text


def columns_of(plan) -> list[Column]:
    """The result columns of a central plan (names and type OIDs)."""
    return [Column(o.name, t) for o, t in zip(plan.outputs, output_types(plan))]


@dataclass
class CentralState:
    """A central release's: what its mechanisms run at (:func:`mechanism_budget`: the tier's ε over
    the unit's factor k, or a zCDP tier's ρ), and the noise drawn while the scan runs
    (:class:`.noise.ScanNoise`: per cell, the reservoir's first, or for a large public domain in
    one batch on a thread), if any."""

    mech_eps: float | Cost
    noise: ScanNoise | None = None


class Central(ReleaseKind):
    """Every cell of the public domain, noised (the add-remove mean of Kulesza et al. 2024 for AVG; geometric / discrete
    Laplace otherwise). The noise, which does not depend on the data, is drawn while the
    scan runs (:class:`~.noise.ScanNoise`)."""

    name = "central"

    def prepare(self, conn, plan) -> Prepared:
        gw = conn.gw
        tier = gw.tier_of(conn.role)
        budget = self.budget(plan, tier)
        p = Prepared(
            self,
            plan,
            columns_of(plan),
            key=f"{plan.fingerprint()}:{release_suffix(tier)}",
            canonical=plan.canonical(),
            epsilon=tier.epsilon,
            cost=self.cost(plan, budget),
            state=CentralState(budget),
        )
        self.prepare_noise(conn, p)
        return p

    def budget(self, plan, tier) -> float | Cost:
        """What the measurements run at (:func:`mechanism_budget`)."""
        return mechanism_budget(plan, tier)

    def cost(self, plan, budget: float | Cost) -> Cost | None:
        """The statement's cost from its measurements' privacy maps (:func:`.release.statement_cost`)."""
        return statement_cost(plan, budget)

    def prepare_noise(self, conn, p: Prepared) -> None:
        gw, st = conn.gw, state_as(p, CentralState)
        st.noise = scan_noise(plan_as(p, Plan), st.mech_eps, gw.source, gw.reservoir)
        if st.noise is not None:  # drawn while the scan runs; a batch's scan fetched as columns
            p.during, p.columnar = st.noise.start, st.noise.columnar

    async def describe(self, conn, stmt: Statement, oids: list[int]) -> Description:
        gw, sql, route = conn.gw, stmt.sql, stmt.route
        if "$" not in sql:  # no parameters: plan once (Execute then hits the plan cache)
            plan = checked(await gw.plan_async(sql, None, stmt.take()), route)
            return Description([], columns_of(plan))
        key = ("describe", self.name, sql, tuple(oids))
        hit = gw.description(key)
        if hit is None:  # refusals are not kept: each Describe raises them again
            tree = stmt.tree()
            types = param_types(tree, gw.config)  # (on a copy)
            inferred = [
                oids[i] if i < len(oids) and oids[i] else TYPE_OIDS[t] or _TEXT for i, t in enumerate(types)
            ]
            try:
                plan = checked(
                    await gw.plan_async(sql, [DUMMY.get(t, "0") for t in types] if types else None, tree),
                    route,
                )
            except Refusal:  # a stand-in value the statement cannot take (date_trunc's unit):
                try:  # the columns of the plan typed without values
                    plan = checked(typed_plan(parse(sql), gw.config), route)
                except Refusal:
                    plan = None
                if plan is None:
                    raise
            hit = gw.description(key, (tuple(inferred), tuple(columns_of(plan))))
        return Description(list(hit[0]), list(hit[1]))

    async def explain(self, conn, stmt: Statement, params: list, plan=None) -> Result:
        gw = conn.gw
        if plan is None:
            plan = checked(await gw.plan_async(stmt.sql, params or None, stmt.take()), stmt.route)
        plan, path = choose(plan, gw.tier_of(conn.role), conn.session.settings)  # HAVING / top-c
        dialect = gw.backend.dialect
        lines = explain_lines(
            plan,
            self.explain_head(plan, gw.tier_of(conn.role)),
            to_sql(plan, dialect, **held(gw, plan)),
            dialect,
            path,
        )
        return Result("EXPLAIN", [Column("QUERY PLAN", _TEXT)], [(line,) for line in lines])

    gaussian = True  # on a zCDP tier, COUNT/SUM by the discrete Gaussian (False: pure mechanisms at √(2ρ))

    def explain_head(self, plan, tier) -> list[str]:
        if tier.accounting != ZCDP:
            return single_tier_lines(plan, tier)
        if self.gaussian:
            return zcdp_lines(plan, tier)
        return single_tier_lines(plan, tier)  # (the accounting's line: kind.with_accounting)

    def scan_sql(self, conn, p: Prepared) -> str:
        return scan_sql(conn.gw, p.plan)

    def measure(self, conn, p: Prepared, cells) -> dict:
        plan, st = plan_as(p, Plan), state_as(p, CentralState)
        if isinstance(cells, Columns):  # a large domain, fetched as columns
            table = complete_columns(plan, cells)
            cells = table if table is not None else complete(plan, cells.rows())
        else:
            cells = complete(plan, cells)
        return mark(plan, noisy_answer(plan, cells, st.mech_eps, conn.gw.source, st.noise))  # derivable later

    def rows(self, p: Prepared, answer: dict) -> Sequence[tuple]:
        return answer_rows(plan_as(p, Plan), answer)

    def notice_body(self, p: Prepared, answer: dict) -> str:
        plan = plan_as(p, Plan)
        body = notice_body(plan, answer)
        if any("gaussian" in m for m in answer["mechanism"]):
            body += f"; {gaussian_text(plan)}"
        return body

    def warning(self, p: Prepared, answer: dict, rows: Sequence[tuple]) -> str:
        return cells_warning(plan_as(p, Plan), answer, p.epsilon, rows)

    def after_reply(self, conn, p: Prepared) -> None:
        noise = state_as(p, CentralState).noise
        if noise is not None:  # the next statement's noise, drawn while the backend is idle
            gw = conn.gw
            noise.after_reply(asyncio.get_running_loop(), busy=lambda: gw.backend.scans > 0)


def gaussian_text(plan) -> str:
    """What sets a zCDP release's discrete Gaussian noise (NOTICE and EXPLAIN): Δ₂ of one unit's
    contribution (:func:`.release.contributions_sq`)."""
    b, csq = plan.unit, contributions_sq(plan)
    if b is None:
        l2, who = "1", "row"
    elif b.total:
        l2, who = f"{b.max_rows} (R rows in all)", b.name
    elif csq % (b.max_rows * b.max_rows) == 0 and b.max_rows > 1:
        l2, who = f"√{csq // (b.max_rows * b.max_rows)}·{b.max_rows} (√min(G, cells)·R)", b.name
    else:
        l2, who = f"√{csq}", b.name
    return (
        f"zCDP: COUNT/SUM noised by the discrete Gaussian at the L2 sensitivity of one {who}'s "
        f"contribution, Δ₂ = {l2} (Canonne, Kamath & Steinke 2020)"
    )


def zcdp_lines(plan, tier) -> list[str]:
    """EXPLAIN's header and per-output lines on a zCDP tier: the accounting, ρ per query with its
    (ε, δ) reading, the ρ share and noise of each release."""
    groups, parts, ms = releases_of(plan, Cost.zcdp(tier.rho))
    share = {}
    for (i, members), r, m in zip(groups, parts, ms):
        for j in [i, *members]:
            share[j] = (r, m)
    primary = {i for i, _ in groups}
    lines = [
        f"dpgate release of {plan.table}: accounting zCDP, ρ {tier.rho:g} per query "
        f"(alone {dp_reading(tier, tier.rho)}; ρ adds up over queries, Bun & Steinke 2016), "
        f"{plan.n_cells} cell(s), {len(groups)} release(s) sharing ρ",
        "  " + gaussian_text(plan),
        "  AVG is the ratio of a discrete Gaussian SUM and COUNT (each ρ_share/2), VAR/STDDEV come from "
        "three discrete Gaussian moments (each ρ_share/3); their half-widths are bounds",
    ]
    shown = {o.index for o in plan.outputs if o.source == "aggregate"}
    hidden = [
        Output(f"({a.label})", "aggregate", i, "float")
        for i, a in enumerate(plan.aggregates)
        if i not in shown
    ]
    for o in [*plan.outputs, *hidden]:
        if (line := explain_output_line(plan, o)) is not None:
            lines.append(line)
            continue
        a = plan.aggregates[o.index]
        r, m = share[o.index]
        hw = avg_half_widths(m) if a.func == "avg" else f"±{m.half_width():.4g}"
        bounds = f", clamped to [{a.lower:g}, {a.upper:g}]" if a.lower is not None else ""
        lines.append(
            f"  {o.name}: {a.label}{bounds} via {m.name}, ρ {r:g}, "
            f"scale {getattr(m, 'output_scale', getattr(m, 'scale', 'n/a'))}, 95% half-width {hw}"
            + post_text(o.post)
        )
        if o.index in primary:  # the rule and the useful size by the discrete Gaussian's law
            lines.extend(f"    {t}" for t in signal_lines(plan, m, a, tier))
    return lines


class Svt(Central):
    """Top-c (``ORDER BY COUNT(*) DESC LIMIT c``) and ``HAVING``: the sparse vector
    technique chooses the keys (Liu et al.; SVT spec), then their values are noised."""

    name = "svt"

    def budget(self, plan, tier) -> float | Cost:
        """The sparse vector and its values are pure ε-DP (Liu et al.): run at the tier's ε over
        the unit's factor k — on a zCDP tier at ε = √(2ρ) (Bun & Steinke 2016 Prop 1.4)."""
        return mechanism_epsilon(plan, tier.epsilon)

    def cost(self, plan, budget: float | Cost) -> Cost | None:
        """A pure ε-DP statement at the tier's ε (the selection's ε and its values' together),
        charged as such, or as ρ = ε²/2 on a zCDP tier (:func:`.kind.cost_of`)."""
        return None

    gaussian = False

    def prepare_noise(self, conn, p: Prepared) -> None:
        return None

    def measure(self, conn, p: Prepared, cells) -> dict:
        plan, eps = plan_as(p, Plan), state_as(p, CentralState).mech_eps
        if isinstance(eps, Cost):  # (Svt.budget gives an ε)
            raise SqlError("XX000", "internal error: a sparse-vector release without its ε; nothing was run")
        return selection_answer(plan, complete(plan, cells), eps, conn.gw.source)

    def warning(self, p: Prepared, answer: dict, rows: Sequence[tuple]) -> str:
        return selection_warning(plan_as(p, Plan), answer, p.epsilon, rows)

    def after_reply(self, conn, p: Prepared) -> None:
        return None


class Domain(ReleaseKind):
    """``SELECT DISTINCT g`` / ``SELECT g … GROUP BY g`` with no aggregate: the
    public domain from the config; no scan, nothing charged."""

    name = "domain"

    def prepare(self, conn, plan) -> Prepared:
        return Prepared(self, plan, columns_of(plan))

    async def explain(self, conn, stmt: Statement, params: list, plan=None) -> Result:
        return Result("EXPLAIN", [Column("QUERY PLAN", _TEXT)], [(domain_notice(plan),)])

    async def answer_free(self, conn, p: Prepared):
        plan = plan_as(p, Plan)
        big = plan.n_cells >= HEAVY_ROWS  # a large domain: rows off the loop
        rows = await asyncio.to_thread(_domain_rows, plan) if big else _domain_rows(plan)
        return (
            Result(f"SELECT {len(rows)}", p.columns, rows, notices=[domain_notice(plan)]),
            "domain",
            0.0,
        )


class Empty(ReleaseKind):
    """A statement with ``LIMIT 0`` (the schema probe of data-frame and ORM clients): its
    rows are none whatever the data holds, so nothing is scanned, released or charged; its
    columns are the plan's, as the same statement without the LIMIT returns them."""

    name = "empty"

    def prepare(self, conn, plan) -> Prepared:
        return Prepared(self, plan, columns_of(plan))

    async def answer_free(self, conn, p: Prepared):
        return Result("SELECT 0", p.columns, [], notices=[_EMPTY_NOTE]), "empty", 0.0

    async def explain(self, conn, stmt: Statement, params: list, plan=None) -> Result:
        return Result("EXPLAIN", [Column("QUERY PLAN", _TEXT)], [(_EMPTY_NOTE,)])


_EMPTY_NOTE = "dpgate: LIMIT 0 returns no rows whatever the data: nothing read, nothing charged"


def _domain_rows(plan) -> Sequence[tuple]:
    return answer_rows(plan, domain_answer(plan))


CENTRAL, SVT, DOMAIN, EMPTY = Central(), Svt(), Domain(), Empty()
