"""The central release kinds (a table with neither ``mode = "local"`` nor a per-record
policy): the public domain, the noisy cells (geometric COUNT, discrete-Laplace SUM,
hourglass AVG of the add-remove mean, Kulesza et al. 2024, moments for VAR), and sparse-vector selection (top-c,
HAVING; Liu et al.). The data-market ladder (multi-tier release, Wang et al. 2026) is in :mod:`.multitier`, MAX/MIN
in :mod:`.extreme`. Each plans a statement with :func:`rewriter.build_plan`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from rewriter import Refusal, complete, param_types, parse, to_sql, typed_plan
from rewriter.plan import Plan
from rewriter.unit import factor

from ..backends import Columns
from ..wire.api import Column, Description, Result, SqlError
from .columnar import complete_columns
from .common import DUMMY, TYPE_OIDS, unit_salt
from .explain import explain_lines, single_tier_lines
from .kind import HEAVY_ROWS, Prepared, ReleaseKind, Statement, plan_as, state_as
from .noise import ScanNoise, scan_noise
from .notice import cells_warning, domain_notice, notice_body
from .release import domain_answer, noisy_answer, selection_answer
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
    """The ε the row-level mechanisms run at: the tier's ε, divided by the privacy unit's
    group-privacy factor k (:func:`rewriter.unit.factor`) on a table with a unit."""
    return epsilon / factor(plan)


def scan_sql(gw, plan) -> str:
    """A central plan's backend SQL; on a table with a privacy unit, keyed by the salt
    of the current data version (:func:`.common.unit_salt`)."""
    return to_sql(plan, gw.backend.dialect, unit_salt(gw, plan))


def columns_of(plan) -> list[Column]:
    """The result columns of a central plan (names and type OIDs)."""
    return [Column(o.name, t) for o, t in zip(plan.outputs, output_types(plan))]


@dataclass
class CentralState:
    """A central release's: the ε its mechanisms run at (the tier's, over the unit's factor k),
    and the noise drawn while the scan runs (:class:`.noise.ScanNoise`: per cell, the reservoir's
    first, or for a large public domain in one batch on a thread), if any."""

    mech_eps: float
    noise: ScanNoise | None = None


class Central(ReleaseKind):
    """Every cell of the public domain, noised (the add-remove mean of Kulesza et al. 2024 for AVG; geometric / discrete
    Laplace otherwise). The noise, which does not depend on the data, is drawn while the
    scan runs (:class:`~.noise.ScanNoise`)."""

    name = "central"

    def prepare(self, conn, plan) -> Prepared:
        gw = conn.gw
        tier = gw.tier_of(conn.role)
        p = Prepared(
            self,
            plan,
            columns_of(plan),
            key=f"{plan.fingerprint()}:eps={tier.epsilon!r}",
            canonical=plan.canonical(),
            epsilon=tier.epsilon,
            state=CentralState(mechanism_epsilon(plan, tier.epsilon)),
        )
        self.prepare_noise(conn, p)
        return p

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
            plan, self.explain_head(plan, gw.tier_of(conn.role)), to_sql(plan, dialect), dialect, path
        )
        return Result("EXPLAIN", [Column("QUERY PLAN", _TEXT)], [(line,) for line in lines])

    def explain_head(self, plan, tier) -> list[str]:
        return single_tier_lines(plan, tier)

    def scan_sql(self, conn, p: Prepared) -> str:
        return scan_sql(conn.gw, p.plan)

    def measure(self, conn, p: Prepared, cells) -> dict:
        plan, st = plan_as(p, Plan), state_as(p, CentralState)
        if isinstance(cells, Columns):  # a large domain, fetched as columns
            table = complete_columns(plan, cells)
            cells = table if table is not None else complete(plan, cells.rows())
        else:
            cells = complete(plan, cells)
        return noisy_answer(plan, cells, st.mech_eps, conn.gw.source, st.noise)

    def rows(self, p: Prepared, answer: dict) -> Sequence[tuple]:
        return answer_rows(plan_as(p, Plan), answer)

    def notice_body(self, p: Prepared, answer: dict) -> str:
        return notice_body(plan_as(p, Plan), answer)

    def warning(self, p: Prepared, answer: dict, rows: Sequence[tuple]) -> str:
        return cells_warning(plan_as(p, Plan), answer, p.epsilon, rows)

    def after_reply(self, conn, p: Prepared) -> None:
        noise = state_as(p, CentralState).noise
        if noise is not None:  # the next statement's noise, drawn while the backend is idle
            gw = conn.gw
            noise.after_reply(asyncio.get_running_loop(), busy=lambda: gw.backend.scans > 0)


class Svt(Central):
    """Top-c (``ORDER BY COUNT(*) DESC LIMIT c``) and ``HAVING``: the sparse vector
    technique chooses the keys (Liu et al.; SVT spec), then their values are noised."""

    name = "svt"

    def prepare_noise(self, conn, p: Prepared) -> None:
        return None

    def measure(self, conn, p: Prepared, cells) -> dict:
        plan = plan_as(p, Plan)
        return selection_answer(
            plan, complete(plan, cells), state_as(p, CentralState).mech_eps, conn.gw.source
        )

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
