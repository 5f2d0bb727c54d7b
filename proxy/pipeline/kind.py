"""The release-kind interface and the ONE pipeline every charged kind runs through.

A *release kind* is a way of turning a statement into released rows: central
(geometric / discrete Laplace / hourglass AVG), sparse-vector selection (top-c,
HAVING), a data-market ladder (Wang et al. 2026), per-record DP (Chen et al. 2025), MAX/MIN
(shifted-rank exponential mechanism), a local metric-LDP table (Xiang et al. 2020), a local
Subset column (Wang et al. 2026 §5), and the public domain (no data at all). Each is a
:class:`ReleaseKind`; :func:`.orchestrator.choose` picks one per statement, the kind plans it
(``plan``, or ``prepare`` of the plan as cells it was chosen from), and :func:`run` releases it:

    plan (a refusal charges nothing) → an earlier release of the same key by this
    role is served again for free (a twin in flight is waited for) → budget check →
    ε reserved durably on the ledger's writer thread WHILE the kind's scan runs →
    in the scan's worker thread: the kind's measurement (noise), then the answer is
    recorded against the reservation before anything is sent → rows and a NOTICE.

A failure before the scan starts refunds the reservation, and so does a scan the backend
refused while parsing or binding it (``BackendRefused``: no row was read); once the scan
started reading the statement is charged whatever its outcome (``detail_charged`` says so). Kinds that
charge nothing (local tables: the reports were perturbed at ingestion; the public
domain) answer in :meth:`ReleaseKind.answer_free`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from sqlglot import exp

from mechanisms.accounting import ZCDP, Cost, fits
from mechanisms.accounting import dp_reading as reading
from rewriter import parse
from rewriter.route import Route

from ..backends import BackendError, BackendRefused
from ..stores.ledger import EPS, FEMTO, NANO, RHO, BudgetExceeded, femto
from ..wire.api import Column, Description, Result, SqlError
from . import derive
from .common import budget_error, detail_charged, scan_read
from .repeat_rows import RepeatRows

HEAVY_ROWS = 256
"""A free answer of this many cells is turned into rows off the event loop."""

TWIN_WAIT_S = 30.0
"""How long a statement refused for budget waits for this role's other releases in flight."""


@dataclass
class Statement:
    """One statement on its way to a release: its text (for EXPLAIN the explained statement,
    for COPY its query), its route, and the parse routing decided it from, which the
    statement's planner takes (:meth:`tree`): one parse per statement."""

    sql: str
    route: Route
    parsed: exp.Expression | None = None  # routing's parse, not yet handed to a planner

    def tree(self) -> exp.Expression:
        """The statement's parse, handed over once (a planner may change it): routing's, or a
        fresh one when the route came from a cache (routes are kept by text and by shape)."""
        tree = self.take()
        return tree if tree is not None else parse(self.sql)

    def take(self) -> exp.Expression | None:
        """Routing's parse, handed over once, or None: for a planner that keeps its plans by
        text and parses only when it plans (``Gateway.plan``), so a repeat is never parsed."""
        tree, self.parsed = self.parsed, None
        return tree


@dataclass
class Prepared:
    """A statement planned by one kind: everything the pipeline needs to release it."""

    kind: ReleaseKind
    plan: object  # the kind's own plan (Plan, ExtremePlan, PrPlan, …)
    columns: list[Column]
    key: str | None = None  # the release key; None: nothing is charged
    canonical: str = ""
    epsilon: float = 0.0  # the ε a fresh release is run at (a pure ε-DP statement's cost)
    delta: float = 0.0  # and its δ (partition selection), charged to the tier's δ budget
    cost: Cost | None = None  # what a fresh release costs, from its mechanisms' privacy maps
    #                           (None: a pure (epsilon, delta)-DP statement; :func:`cost_of`)
    state: object = None  # the kind's own, a dataclass of its module (central.CentralState,
    #                       extreme.ExtremeState, per_record.PerRecordState, partitions.SelectionPlan)
    during: Callable[[], object] | None = None  # work the scan's fetch runs beside it (noise drawn ahead)
    columnar: bool = False  # the scan fetched as numpy columns, if the backend can
    data_version: int = 0  # a fresh release's: what the measurement may record beside it (:func:`run`)
    statement: str = ""  # … and the statement's text


_P = TypeVar("_P")


def plan_as(p: Prepared, cls: type[_P]) -> _P:
    """``p``'s plan as the plan class its kind makes; another class is an internal error
    raised before anything runs."""
    if not isinstance(p.plan, cls):
        raise SqlError(
            "XX000",
            f"internal error: a {p.kind.name} statement holds a {type(p.plan).__name__}; nothing was run",
        )
    return p.plan


_S = TypeVar("_S")


def state_as(p: Prepared, cls: type[_S]) -> _S:
    """``p``'s state as the state class its kind makes; another class is an internal error
    raised before anything runs."""
    if not isinstance(p.state, cls):
        raise SqlError(
            "XX000",
            f"internal error: a {p.kind.name} statement holds a {type(p.state).__name__}; nothing was run",
        )
    return p.state


class ReleaseKind:
    """One kind of release. Subclasses implement ``plan``, ``describe``, ``explain``
    and either ``answer_free`` (nothing charged) or ``scan_sql`` + ``measure`` +
    ``rows`` + ``notice_body`` (a charged release)."""

    name = "kind"
    decision = "released"  # the statement log's word for a fresh release
    heavy = False  # runs in the heavy-statement lane whatever its size (:mod:`.lane`)
    zcdp = True  # its cost can be stated exactly in ρ (:func:`cost_of`); False: refused on zCDP tiers
    plans_in_lane = False  # … and is planned there too (its planning is itself heavy)

    async def plan(self, conn, stmt: Statement, params: list) -> Prepared:
        """Plan ``stmt`` for ``conn``'s role; a refusal (Refusal/SqlError) charges nothing.
        Kinds chosen from a plan as cells (:func:`.orchestrator.choose`) are given that plan
        instead (``prepare``)."""
        raise NotImplementedError

    async def describe(self, conn, stmt: Statement, oids: list[int]) -> Description:
        """Parameter and column types (extended protocol), without touching data."""
        raise NotImplementedError

    async def explain(self, conn, stmt: Statement, params: list, plan=None) -> Result:
        """``EXPLAIN``: mechanism, ε, error statement, backend SQL; nothing runs. ``plan``:
        the statement's plan as cells, for the kinds chosen from it."""
        raise NotImplementedError

    # -- a free answer --------------------------------------------------------------
    async def answer_free(self, conn, p: Prepared) -> tuple[Result, str, float]:
        raise NotImplementedError

    # -- a charged release ----------------------------------------------------------
    def scan_sql(self, conn, p: Prepared) -> str:
        """The ONE backend statement whose per-cell rows the measurement reads."""
        raise NotImplementedError

    async def scan(self, conn, p: Prepared, then):
        """Run the scan; ``then(cells)`` runs in the backend's worker thread right after
        it and its value is returned. Kinds with a data-dependent second scan (per-record
        MAX/MIN, Chen et al. 2025 Alg. 1) override this."""
        return await fetch(
            conn,
            self.scan_sql(conn, p),
            then=then,
            during=p.during,
            columnar=p.columnar,
        )

    def measure(self, conn, p: Prepared, cells) -> dict:
        """The measurement: exact per-cell values → released answer (noise drawn here).
        Runs in the backend's worker thread; the answer holds released values only."""
        raise NotImplementedError

    def mechanism(self, answer: dict) -> str:
        return ",".join(sorted(set(answer["mechanism"])))

    def rows(self, p: Prepared, answer: dict) -> Sequence[tuple]:
        """Rows from a released answer (post-processing: free, any number of times)."""
        raise NotImplementedError

    def notice_body(self, p: Prepared, answer: dict) -> str:
        """The kind's part of the NOTICE (error statement, mechanism) after the common head."""
        raise NotImplementedError

    def warning(self, p: Prepared, answer: dict, rows: Sequence[tuple]) -> str:
        """The NOTICE's first line when the answer (``rows``, made from ``answer``) is mostly
        noise (its mechanism's error law: :mod:`.notice`, :mod:`mechanisms.snr`); empty otherwise."""
        return ""

    def after_reply(self, conn, p: Prepared) -> None:
        """Called once a fresh release is ready to send (e.g. refill the noise reservoir)."""


# -- the pipeline -----------------------------------------------------------------------


async def fetch(conn, sql: str, then=None, during=None, columnar: bool = False, write: bool = False):
    """One backend scan (``conn.timing["started"]`` tells whether it began); ``columnar``:
    the result as numpy columns (:class:`proxy.backends.Columns`) if the backend can;
    ``write``: a write dpgate makes (a local table's reports), on the backend's ``writer``
    (scan sessions are read-only at the database)."""
    kw = {"then": then, "timing": conn.timing}
    if during is not None:
        kw["during"] = during
    if columnar and getattr(conn.gw.backend, "columnar", False):
        kw["columnar"] = True
    try:
        backend = conn.gw.backend.writer if write else conn.gw.backend
        return await backend.fetch(sql, conn.gw.statement_timeout, conn.cancel_signal, **kw)
    except BackendRefused as e:  # refused while parsed or bound: no row was read
        conn.timing["refused"] = True
        raise SqlError(e.sqlstate, e.message, hint=e.hint) from None
    except BackendError as e:
        raise SqlError(e.sqlstate, e.message, hint=e.hint) from None


def cost_of(p: Prepared, tier) -> Cost:
    """What releasing ``p`` charges, in ``tier``'s accounting (:mod:`mechanisms.accounting`): the
    cost its kind stated from its mechanisms' privacy maps, or a pure (ε, δ)-DP statement at
    ``p.epsilon``, which a zCDP tier is charged as ρ = ε²/2 (Bun & Steinke 2016 Prop 1.4; with
    δ, δ-approximate zCDP, Prop 1.13)."""
    c = p.cost if p.cost is not None else Cost.pure(p.epsilon, p.delta)
    return c.in_accounting(tier.accounting)


def zcdp_refusal(what: str) -> SqlError:
    """The refusal of a release whose cost cannot be stated exactly in ρ (fail closed)."""
    return SqlError(
        "0A000",
        f"a {what} release cannot be accounted exactly in zCDP (this role's tier has accounting = "
        "'zcdp'); nothing was charged",
        hint="Ask the data owner for a role on a tier with pure ε accounting for this table.",
    )


def with_accounting(rows: list, tier) -> list:
    """EXPLAIN's rows with, on a zCDP tier, a first line saying so, unless the kind's own lines
    state it: every mechanism not calibrated in ρ runs at the tier's ε = √(2ρ) and is charged
    ρ = ε²/2 (Bun & Steinke 2016 Prop 1.4)."""
    if tier.accounting != ZCDP or any("zCDP" in str(r[0]) for r in rows):
        return rows
    line = (
        f"dpgate: accounting zCDP: this release's mechanisms are pure ε-DP, run at ε = √(2ρ) = "
        f"{tier.epsilon:g} and charged ρ {tier.epsilon**2 / 2:g} (alone {dp_reading(tier, tier.epsilon**2 / 2)}; "
        "Bun & Steinke 2016 Prop 1.4)"
    )
    return [(line,), *rows]


def fits_budget(tier, spent: float, cost: Cost) -> bool:
    """Whether ``cost`` fits what is left of ``tier``'s budget after ``spent`` (the accountant's
    :func:`mechanisms.accounting.fits`, at the ledger's resolution; the δ budget is checked on
    its own). A spend in the other unit (inf) leaves nothing."""
    if not math.isfinite(spent):
        return False
    acc = tier.accounting
    return fits(Cost(acc, Fraction(spent)), Cost(acc, cost.amount), Cost(acc, Fraction(tier.budget)))


def unit_of(tier) -> str:
    """The ledger's unit for ``tier``'s amounts: ε, or ρ on a zCDP tier."""
    return RHO if tier.accounting == ZCDP else EPS


def dp_reading(tier, rho: float) -> str:
    """A zCDP amount read as (ε, δ)-DP at the tier's ``conversion_delta`` (Canonne, Kamath &
    Steinke 2020 Cor 13)."""
    return reading(rho, tier.conversion_delta)


def notice_head(
    *,
    charged: float,
    remaining: float,
    budget: float,
    period: str,
    repeat: bool,
    delta: tuple[float, float, float] | None = None,
    tier=None,
) -> str:
    """The NOTICE's common part: what this statement was charged and what is left;
    ``delta``: (δ charged, δ left, δ budget) of a statement with a δ (partition
    selection). A repeat is charged nothing, ε or δ. On a zCDP ``tier`` the amounts are ρ,
    each with its (ε, δ) reading (:func:`dp_reading`)."""
    per = "in total" if period == "never" else f"this {period}"
    if tier is not None and tier.accounting == ZCDP:
        head = (
            "ρ charged 0 (repeat of an earlier release)"
            if repeat
            else f"ρ charged {charged:g} (zCDP; alone {dp_reading(tier, charged)})"
        )
        spent = max(budget - max(remaining, 0.0), 0.0)
        left = (
            f"budget left ρ {max(remaining, 0.0):g} of {budget:g} {per} "
            f"(spent ρ {spent:g}: {dp_reading(tier, spent)})"
        )
        if delta is not None:
            head += f"; δ charged {0.0 if repeat else delta[0]:g}"
            left += f", δ left {max(delta[1], 0.0):g} of {delta[2]:g}"
        return f"dpgate: {head}; {left}; "
    head = "ε charged 0 (repeat of an earlier release)" if repeat else f"ε charged {charged:g}"
    left = f"budget left {max(remaining, 0.0):g} of {budget:g} {per}"
    if delta is not None:
        head += f"; δ charged {0.0 if repeat else delta[0]:g}"
        left += f", δ left {max(delta[1], 0.0):g} of {delta[2]:g}"
    return f"dpgate: {head}; {left}; "


async def run(conn, p: Prepared, sql: str) -> tuple[Result, str, float]:
    """Release ``p`` (or serve it again): ``(Result, decision, ε charged)``."""
    if p.key is None:
        return await p.kind.answer_free(conn, p)
    gw, role, key = conn.gw, conn.role, p.key
    tier = gw.tier_of(role)
    if tier.accounting == ZCDP and not p.kind.zcdp:
        raise zcdp_refusal(p.kind.name)
    # one read: data version, spend, an earlier release
    unit = unit_of(tier)
    dv, spent, stored = await gw.ledger_read(gw.ledger.snapshot, role, key, tier.period, unit)
    while stored is None and (twin := gw.in_flight.get((role, key))) is not None:
        await asyncio.shield(twin)  # the same statement is being released for this role: its answer
        dv, spent, stored = await gw.ledger_read(gw.ledger.snapshot, role, key, tier.period, unit)
    if stored is not None:  # a repeat: the earlier answer, nothing charged
        return await _reply_off_loop(
            p,
            stored,
            tier,
            tier.budget - spent,
            await _delta_left(conn, p, tier),
            gw.repeat_rows,
            (role, key, dv),
        )
    done = asyncio.get_running_loop().create_future()
    gw.in_flight[(role, key)] = done
    try:
        if (derived := await derive.answer(conn, p, dv, tier, spent, notice_head)) is not None:
            return derived  # post-processing of this role's earlier releases: ε 0
        return await _release(conn, p, tier, dv, spent, sql)
    except SqlError as e:
        if e.sqlstate != "53400":
            raise
        stored, spent = await _twin_elsewhere(conn, key, tier)  # another proxy's twin?
        if stored is None:
            raise
        return await _reply_off_loop(p, stored, tier, tier.budget - spent, await _delta_left(conn, p, tier))
    finally:
        del gw.in_flight[(role, key)]
        done.set_result(None)


async def _delta_left(conn, p: Prepared, tier) -> float | None:
    """The δ budget left to ``conn``'s role (None: the statement has no δ)."""
    if p.delta <= 0:
        return None
    return await _delta_remaining(conn, tier)


async def _delta_remaining(conn, tier) -> float:
    """The δ budget left to ``conn``'s role in ``tier``'s period."""
    return tier.delta_budget - await conn.gw.ledger_read(conn.gw.ledger.spent_delta, conn.role, tier.period)


def _delta_error(p: Prepared, remaining: float, tier) -> SqlError:
    per = "in total" if tier.period == "never" else "this " + tier.period
    return SqlError(
        "53400",
        f"δ budget exceeded: this query needs δ {p.delta:g}, {max(remaining, 0):g} "
        f"of {tier.delta_budget:g} is left {per}; nothing was charged",
        hint="Group by columns with a declared domain (no δ), or wait for the next period.",
    )


async def _release(conn, p: Prepared, tier, dv: int, spent: float, sql: str):
    """A fresh release: budget check (ε or ρ, and δ), reserved together while scanning,
    measurement, record."""
    cost = cost_of(p, tier)
    if not fits_budget(tier, spent, cost):
        raise budget_error(conn.role, float(cost.amount), tier.budget - spent, tier)
    if p.delta > 0:
        left = await _delta_remaining(conn, tier)
        if femto(left) < femto(p.delta):
            raise _delta_error(p, left, tier)
    p.data_version, p.statement = dv, sql  # what the measurement may record beside it
    return await _release_eps(conn, p, tier, dv, sql)


async def _release_eps(conn, p: Prepared, tier, dv: int, sql: str):
    gw, kind = conn.gw, p.kind
    cost = cost_of(p, tier)
    amount, delta = float(cost.amount), float(cost.delta)
    # ε or ρ (and δ) are charged (fsync) on the ledger's writer thread while the scan runs
    held = gw.ledger.reserve_soon(
        role=conn.role,
        epsilon=amount,
        budget=tier.budget,
        period=tier.period,
        unit=unit_of(tier),
        **({"delta": delta, "delta_budget": tier.delta_budget} if delta > 0 else {}),
    )

    def measure_and_record(cells):
        # In the backend's worker thread, right after the scan: noise, then the release
        # is stored against the (already durable) charge before anything is sent; the
        # rows are built here too (nothing heavy on the event loop).
        answer = kind.measure(conn, p, cells)
        res = held.result()  # BudgetExceeded: nothing is sent
        stored = gw.ledger.record(
            res,
            key=p.key,
            data_version=dv,
            canonical=p.canonical,
            statement=sql,
            mechanism=kind.mechanism(answer),
            answer=answer,
        )
        try:
            built = None if stored is None else _built(p, stored, gw.repeat_rows, (conn.role, p.key, dv))
        except Exception:  # (raised again by _reply, on the loop)
            built = None
        if built is not None:
            stored = stored.forget()  # the answer is freed in this thread
        del answer, cells
        return res, stored, built

    try:
        async with gw.statement_slot(conn.role):
            res, stored, built = await kind.scan(conn, p, measure_and_record)
    except BudgetExceeded as b:
        if b.what == "δ":
            raise _delta_error(p, b.remaining, tier) from None
        raise budget_error(conn.role, amount, b.remaining, tier) from None
    except BaseException as e:  # nothing was sent: refund if the scan never
        ran = scan_read(conn)  # read a row, else charge what ran
        await asyncio.shield(
            asyncio.wrap_future((gw.ledger.spend_soon if ran else gw.ledger.cancel_soon)(held))
        )
        if not held.cancelled() and held.exception() is None:  # the log line says what the ledger did
            conn.timing["ledger"] = ("charged", amount) if ran else ("refunded", amount)
        detail_charged(conn, e, tier, p.delta)
        raise
    if stored is None:  # cancelled after the scan: nothing sent
        raise SqlError("57014", "canceling statement due to user request")
    kind.after_reply(conn, p)
    if stored.charged:  # the budget left after this charge
        dleft = tier.delta_budget - res.delta_spent_femto / FEMTO if p.delta > 0 else None
        return _reply(p, stored, tier, tier.budget - res.spent_nano / NANO, dleft, built)
    remaining = tier.budget - await gw.ledger_read(gw.ledger.spent, conn.role, tier.period, unit_of(tier))
    return _reply(
        p, stored, tier, remaining, await _delta_left(conn, p, tier), built
    )  # a concurrent twin's answer


_WARNED = "\x1e"  # between a NOTICE text's warning line and its body (:func:`_built`, :func:`_reply`)


def _built(
    p: Prepared, stored, kept: RepeatRows | None = None, release: tuple = ()
) -> tuple[Sequence[tuple], str]:
    """The rows and the kind's NOTICE text of a stored release: its body, after its warning
    line when it has one (:meth:`ReleaseKind.warning`; post-processing; decodes the stored
    answer on first use); with ``kept``, a large result's rows are encoded here
    and kept for the statement's repeats (:mod:`.repeat_rows`; ``release``: the stored
    release's (role, key, data version))."""
    rows, body = p.kind.rows(p, stored.answer), p.kind.notice_body(p, stored.answer)
    try:
        warning = p.kind.warning(p, stored.answer, rows)
    except Exception:  # post-processing of a release already charged: never fail its answer
        logging.getLogger("dpgate.notice").exception("the signal-to-noise check of %s failed", p.kind.name)
        warning = "dpgate WARNING: the signal-to-noise check failed; judge the answer by its half-widths"
    if warning:
        body = f"{warning}{_WARNED}{body}"
    if kept is not None and (k := kept.keep(p.plan, (*release, stored.created), p.columns, rows, body)):
        return k.rows(lambda: rows), body
    return rows, body


async def _reply_off_loop(
    p: Prepared,
    stored,
    tier,
    remaining: float,
    delta_left: float | None = None,
    kept: RepeatRows | None = None,
    release: tuple = (),
) -> tuple[Result, str, float]:
    """:func:`_reply` for a release read back from the ledger: rows kept encoded for this
    statement are written as they are (:mod:`.repeat_rows`); otherwise a large answer is
    decoded and turned into rows on a worker thread (``Stored.heavy``: a 10,000-cell answer
    is milliseconds of Python that would stall every other session's statements)."""
    if kept is not None and (k := kept.get(p.plan, (*release, stored.created))) is not None:
        rows = k.rows(lambda: p.kind.rows(p, stored.answer))  # other formats: built again
        return _reply(p, stored, tier, remaining, delta_left, (rows, k.body))
    if not stored.heavy:  # (its rows are encoded on the loop anyway, to be written)
        return _reply(p, stored, tier, remaining, delta_left, _built(p, stored, kept, release))

    def build():
        out = _built(p, stored, kept, release)
        stored.forget()  # the decoded answer is freed off the loop
        return out

    return _reply(p, stored, tier, remaining, delta_left, await asyncio.to_thread(build))


def _reply(
    p: Prepared, stored, tier, remaining: float, delta_left: float | None = None, built=None
) -> tuple[Result, str, float]:
    """Rows and the NOTICE for a stored (or just recorded) release; ``delta_left``: the δ
    budget left (None: no δ); ``built``: its rows and NOTICE body made already
    (:func:`_built`, off the event loop)."""
    rows, text = built if built is not None else _built(p, stored)
    warning, warned, body = text.partition(_WARNED)
    if not warned:
        warning, body = "", text
    charged = stored.epsilon if stored.charged else 0.0
    delta = None if delta_left is None else (stored.delta, delta_left, tier.delta_budget)
    msg = (
        (warning + "\n" if warning else "")
        + notice_head(
            charged=charged,
            remaining=remaining,
            budget=tier.budget,
            period=tier.period,
            repeat=not stored.charged,
            delta=delta,
            tier=tier,
        )
        + body
    )
    return (
        Result(f"SELECT {len(rows)}", p.columns, rows, notices=[msg]),
        p.kind.decision if stored.charged else "repeat",
        charged,
    )


async def _twin_elsewhere(conn, key: str, tier):
    """After a budget refusal: while other statements of this role are still being
    released (another proxy on the same ledger), wait for them to settle, and serve
    this statement's release if one of them was it. (Stale reservations — a crash
    between charge and record — are not waited for.)"""
    gw, loop = conn.gw, asyncio.get_running_loop()
    deadline = loop.time() + (gw.statement_timeout or TWIN_WAIT_S)
    while True:
        _, spent, stored = await gw.ledger_read(
            gw.ledger.snapshot, conn.role, key, tier.period, unit_of(tier)
        )
        if stored is not None:
            return dataclasses.replace(stored, charged=False), spent
        now = time.time()
        pending = [
            r
            for r in await gw.ledger_read(gw.ledger.open_reservations)
            if r["role"] == conn.role and now - r["created"] < TWIN_WAIT_S
        ]
        if not pending or loop.time() > deadline:
            return None, spent
        await asyncio.sleep(0.02)
