"""One connection's statement pipeline: statement → plan → backend → mechanism →
ledger → rows (the wire layer's :class:`~proxy.wire.api.Handler`).

Order of a DP statement (README "Performance: what a query costs"):
parse and plan (a refusal charges nothing) → an earlier release of the same
measurement by this role is served again for free → budget pre-check → ONE
backend scan in a worker thread; meanwhile the noise, which does not depend on
the data, is drawn on the event loop and the ledger's writer thread charges ε
durably (a reservation; a backend failure before the scan starts refunds it,
a scan that started and then fails, times out or is cancelled keeps it) → in
the scan's worker: noise added, then the ledger stores the answer against the
charge → rows and a NOTICE go to the client.
"""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import logging
import math
import time

from rewriter import build_plan, param_types, parse, to_sql
from rewriter.errors import ExtremeAggregate, Refusal
from rewriter.route import Route

from ..backends import BackendError
from ..backends.base import CancelSignal
from ..stores.ledger import NANO, BudgetExceeded, LedgerUnavailable
from ..wire.api import Column, Description, Result, SqlError
from . import cursors
from .common import DUMMY, TYPE_OIDS, budget_error, charge_what_ran, detail_charged
from .explain import explain_lines
from .extreme import answer_extreme, describe_extreme, explain_extreme
from .local import answer_local, describe_local, explain_local, insert_local
from .multitier import check_ladder_plan, release_multitier
from .per_record import answer_per_record, describe_per_record, explain_per_record
from .release import (NoisePool, answer_rows, domain_answer, domain_notice, noisy_answer, notice,
                      output_types, selection_answer)
from .statements import SessionState, split

log = logging.getLogger("dpgate")

_TEXT, _INT4 = 25, 23
TWIN_WAIT_S = 30.0
"""How long a statement refused for budget waits for this role's other releases in flight."""


def _sql_error(r: Refusal) -> SqlError:
    return SqlError(r.sqlstate, r.message, hint=r.hint)


class Connection:
    """Handler for one authenticated connection of ``role``."""

    def __init__(self, gateway, user: str, database: str, params: dict[str, str]):
        self.gw = gateway
        self.role = user
        self.session = SessionState(user, database, params)
        self._cancel = CancelSignal()
        self._timing: dict = {}
        self.cursors = cursors.Cursors()        # DECLARE … CURSOR / FETCH / CLOSE (proxy/cursors.py)

    # -- wire Handler interface ---------------------------------------------
    def split(self, sql: str) -> list[str]:
        return split(sql)

    def cancel(self) -> None:
        self._cancel.set()

    async def close(self) -> None:
        return None

    async def describe(self, sql: str, param_type_oids: list[int]) -> Description:
        try:
            return await self._describe(sql, param_type_oids)
        except Refusal as r:
            raise _sql_error(r) from None

    async def execute(self, sql: str, params: list[object]) -> Result:
        t0 = time.perf_counter()
        self._cancel.clear()
        self._timing = {}
        decision, eps = "error", 0.0
        try:
            result, decision, eps = await self._execute(sql, params)
            return result
        except Refusal as r:
            decision = f"refused {r.sqlstate}"
            raise _sql_error(r) from None
        except SqlError as e:
            decision = f"error {e.sqlstate}"
            raise
        except asyncio.CancelledError:   # the session is ending (shutdown, client gone): stop
            self._cancel.set()           # the scan or catalog query in its worker thread too
            raise
        except LedgerUnavailable as e:
            log.warning("%s", e)
            decision = f"error {e.sqlstate}"        # 08006; 55000 ledger lost; 53100 / 55P03
            raise SqlError(e.sqlstate, e.line or "the privacy ledger is unavailable: no answer was released; "
                                                 "try again shortly") from None
        finally:       # logged once the reply is written (call_soon runs after this task step)
            asyncio.get_running_loop().call_soon(functools.partial(
                self.gw.log_statement, role=self.role, sql=sql, decision=decision, epsilon=eps,
                ms=(time.perf_counter() - t0) * 1000, backend_ms=self._timing.get("backend_ms")))

    # -- routing ------------------------------------------------------------
    async def _route(self, sql: str) -> Route:
        """The statement's path, from its parse (:meth:`Gateway.route`)."""
        return await self.gw.route_async(sql)

    def _table(self, route: Route):
        """The declared table a routed statement reads (None if it names none)."""
        return self.gw.config.tables.get(route.table) if route.table is not None else None

    async def _describe(self, sql: str, oids: list[int]) -> Description:
        if (cur := cursors.match(sql)) is not None and cur[0] != "discard":
            return await self.cursors.describe(self, cur, oids)
        # Describe must not change the session: only SET / RESET write to it
        head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        local = (copy.deepcopy(self.session) if head in ("SET", "RESET") else self.session).match(sql)
        if local is not None:
            _, cols, _, _ = local
            return Description(list(oids), _columns(cols))
        route = await self._route(sql)
        kind = route.kind
        if kind == "explain":
            return Description(list(oids), [Column("QUERY PLAN", _TEXT)])
        if kind == "views":
            types, cols = await self.gw.views.describe(sql, self.role, oids)   # their own executor
            return Description(types, [Column(n, t) for n, t in cols])
        if kind == "catalog":
            try:
                cols = await asyncio.to_thread(self.gw.catalog.describe, sql, user=self.role)
            except Exception as e:  # CatalogError: never reaches the backend
                raise SqlError(getattr(e, "sqlstate", "0A000"), getattr(e, "message", str(e))) from None
            inferred = self.gw.catalog.param_types(sql)
            types = [(oids[i] if i < len(oids) else 0) or (inferred[i] if i < len(inferred) else _TEXT)
                     for i in range(max(len(oids), len(inferred)))]
            return Description(types, [Column(n, t) for n, t in cols])
        table = self._table(route)
        if kind == "insert" or (table is not None and table.mode == "local"):   # metric LDP reports (seed 002)
            return await describe_local(self, sql, oids)
        if table is not None and table.privacy is not None:   # per-record DP (seed 003)
            return await describe_per_record(self, sql, oids)
        try:
            if "$" not in sql:          # no parameters: plan once (Execute then hits the plan cache)
                plan = self._central(await self.gw.plan_async(sql, None), route)
                return Description([], [Column(o.name, t) for o, t in zip(plan.outputs, output_types(plan))])
            expr = parse(sql)
            types = param_types(expr, self.gw.config)
        except ExtremeAggregate:                           # MAX / MIN: their own release
            return await describe_extreme(self, sql, oids)
        inferred = [oids[i] if i < len(oids) and oids[i] else TYPE_OIDS[t] or _TEXT
                    for i, t in enumerate(types)]
        plan = self._central(await self.gw.plan_async(sql, [DUMMY.get(t, "0") for t in types] if types else None), route)
        return Description(inferred, [Column(o.name, t) for o, t in zip(plan.outputs, output_types(plan))])

    def cursor_columns(self, name: str):
        """Describe Portal of a DECLAREd cursor (psycopg's named cursors ask for it)."""
        return self.cursors.columns(name)

    async def _execute(self, sql: str, params: list[object]):
        if (cur := cursors.match(sql)) is not None:
            done = await self.cursors.run(self, cur, params)
            if done is not None:
                return done
        local = self.session.match(sql)
        if local is not None:
            tag, cols, rows, ps = local
            return Result(tag, _columns(cols), rows, parameter_status=ps), "local", 0.0
        route = await self._route(sql)
        kind = route.kind
        if kind == "explain":
            return await self._explain(route, params), "explain", 0.0
        if kind == "insert":
            return await insert_local(self, sql, params)
        if kind == "views":
            cols, rows = await self.gw.views.run(sql, self.role, params)      # their own executor
            return Result(f"SELECT {len(rows)}", [Column(n, t) for n, t in cols], rows), "views", 0.0
        if kind == "catalog":
            try:
                cols, rows = await asyncio.to_thread(self.gw.catalog.execute, sql, user=self.role, params=params,
                                                     cancel=self._cancel)
            except Exception as e:  # CatalogError and anything else: never reaches the backend
                raise SqlError(getattr(e, "sqlstate", "0A000"), getattr(e, "message", str(e))) from None
            return Result(f"SELECT {len(rows)}", [Column(n, t) for n, t in cols], rows), "catalog", 0.0
        return await self._dp(sql, params, route)

    def _central(self, plan, route: Route):
        """A central plan, checked against the route: the plan's table is the one
        the parse named (the planner and the router read the same FROM)."""
        if plan.table != route.table:
            raise SqlError("XX000", "internal error: the statement's plan and route disagree; "
                           "nothing was run")
        return plan

    # -- the DP pipeline ----------------------------------------------------
    async def _dp(self, sql: str, params: list[object], route: Route):
        gw = self.gw
        table = self._table(route)
        if table is not None and table.mode == "local":       # metric LDP reports (seed 002)
            return await answer_local(self, sql, params)
        if table is not None and table.privacy is not None:   # per-record DP (seed 003)
            try:                                              # SELECT DISTINCT g: the public domain
                plan = await gw.plan_async(sql, params or None)
            except Exception:
                plan = None
            if plan is not None and not plan.aggregates and plan.selection is None:
                return self._domain(plan)
            return await answer_per_record(self, sql, params)
        try:
            plan = self._with_threshold(self._central(await gw.plan_async(sql, params or None), route))
        except ExtremeAggregate:                           # MAX / MIN: their own release
            return await answer_extreme(self, sql, params)
        if not plan.aggregates and plan.selection is None:   # SELECT DISTINCT g: the public domain
            return self._domain(plan)
        tier = gw.tier_of(self.role)
        key = f"{plan.fingerprint()}:eps={tier.epsilon!r}"
        cols = [Column(o.name, t) for o, t in zip(plan.outputs, output_types(plan))]

        # one read: data version, spend, an earlier release
        dv, spent, stored = await gw.ledger_read(gw.ledger.snapshot, self.role, key, tier.period)
        while stored is None and (twin := gw.in_flight.get((self.role, key))) is not None:
            await asyncio.shield(twin)  # the same statement is being released for this role: its
            dv, spent, stored = await gw.ledger_read(gw.ledger.snapshot, self.role, key, tier.period)
        if stored is not None:          # a repeat: the earlier answer, nothing charged
            return self._rows(plan, stored, tier, cols, tier.budget - spent)   # release, free
        done = asyncio.get_running_loop().create_future()
        gw.in_flight[(self.role, key)] = done
        try:
            return await self._release(sql, plan, tier, key, cols, dv, spent)
        except SqlError as e:
            if e.sqlstate != "53400":
                raise
            stored, spent = await self._twin_elsewhere(key, tier)   # another proxy's twin?
            if stored is None:
                raise
            return self._rows(plan, stored, tier, cols, tier.budget - spent)
        finally:
            del gw.in_flight[(self.role, key)]
            done.set_result(None)

    def _domain(self, plan):
        """``SELECT DISTINCT g`` / ``SELECT g … GROUP BY g`` with no aggregate (issue 19): the
        public domain from the config; no scan, nothing charged."""
        cols = [Column(o.name, t) for o, t in zip(plan.outputs, output_types(plan))]
        rows = answer_rows(plan, domain_answer(plan))
        return Result(f"SELECT {len(rows)}", cols, rows, notices=[domain_notice(plan)]), "domain", 0.0

    async def _twin_elsewhere(self, key: str, tier):
        """After a budget refusal: while other statements of this role are still being
        released (another proxy on the same ledger), wait for them to settle, and
        serve this statement's release if one of them was it. (Stale reservations —
        a crash between charge and record — are not waited for.)"""
        gw, loop = self.gw, asyncio.get_running_loop()
        deadline = loop.time() + (gw.statement_timeout or TWIN_WAIT_S)
        while True:
            _, spent, stored = await gw.ledger_read(gw.ledger.snapshot, self.role, key, tier.period)
            if stored is not None:
                return dataclasses.replace(stored, charged=False), spent
            now = time.time()
            pending = [r for r in await gw.ledger_read(gw.ledger.open_reservations)
                       if r["role"] == self.role and now - r["created"] < TWIN_WAIT_S]
            if not pending or loop.time() > deadline:
                return None, spent
            await asyncio.sleep(0.02)

    async def _release(self, sql, plan, tier, key, cols, dv, spent):
        """A fresh release of ``plan``: budget check, charge while scanning, noise, record."""
        gw = self.gw
        remaining = tier.budget - spent
        if remaining + 1e-9 < tier.epsilon:
            raise budget_error(self.role, tier.epsilon, remaining, tier)
        if tier.ladder is not None:                       # multi-tier chain (seed 000)
            check_ladder_plan(plan)                       # refused before the scan: free
            async with gw.statement_slot(self.role), charge_what_ran(self, tier):
                cells = await self._fetch(to_sql(plan, gw.backend.dialect))
            stored = await release_multitier(self, plan, cells, tier, key, dv, sql)
            return self._rows(plan, stored, tier, cols, await self._remaining(tier))
        pool = NoisePool(plan, tier.epsilon, gw.source, gw.reservoir) if plan.selection is None else None
        # ε is charged (fsync) on the ledger's writer thread while the scan runs
        held = gw.ledger.reserve_soon(role=self.role, epsilon=tier.epsilon, budget=tier.budget,
                                      period=tier.period)

        def noise_and_record(cells):
            # In the backend's worker thread, right after the scan: noise, then the
            # release is stored against the (already durable) charge before anything is sent.
            if pool is None:
                answer = selection_answer(plan, cells, tier.epsilon, gw.source)
            else:
                answer = noisy_answer(plan, cells, tier.epsilon, gw.source, pool)
            res = held.result()                           # BudgetExceeded: nothing is sent
            return res, gw.ledger.record(
                res, key=key, data_version=dv, canonical=plan.canonical(), statement=sql,
                mechanism=",".join(sorted(set(answer["mechanism"]))), answer=answer)

        try:
            async with gw.statement_slot(self.role):      # noise drawn while the scan runs
                stored = await self._fetch(to_sql(plan, gw.backend.dialect), then=noise_and_record,
                                           during=pool.fill if pool is not None and pool.worthwhile else None)
        except BudgetExceeded as b:
            raise budget_error(self.role, tier.epsilon, b.remaining, tier) from None
        except BaseException as e:                        # nothing was sent: refund if the scan never
            settle = gw.ledger.spend_soon if self._timing.get("started") else gw.ledger.cancel_soon
            await asyncio.shield(asyncio.wrap_future(settle(held)))      # started, else charge what ran
            detail_charged(self, e, tier)
            raise
        res, stored = stored
        if stored is None:                                # cancelled after the scan: nothing sent
            raise SqlError("57014", "canceling statement due to user request")
        if pool is not None and pool.worthwhile:          # the next statement's noise, drawn
            gw.reservoir.refill_soon(asyncio.get_running_loop(), pool.ms, pool.cells,  # after the
                                     busy=lambda: gw.backend.scans > 0)                    # reply, while idle
        if stored.charged:                                # the budget left after this charge
            return self._rows(plan, stored, tier, cols, tier.budget - res.spent_nano / NANO)
        return self._rows(plan, stored, tier, cols, await self._remaining(tier))  # a concurrent twin's answer

    async def _fetch(self, sql: str, then=None, during=None):
        """One backend scan (``self._timing["started"]`` tells whether it began)."""
        kw = {"then": then, "timing": self._timing}
        if during is not None:
            kw["during"] = during
        try:
            return await self.gw.backend.fetch(sql, self.gw.statement_timeout, self._cancel, **kw)
        except BackendError as e:
            raise SqlError(e.sqlstate, e.message) from None

    async def _remaining(self, tier) -> float:
        return tier.budget - await self.gw.ledger_read(self.gw.ledger.spent, self.role, tier.period)

    def _rows(self, plan, stored, tier, cols, remaining: float):
        """Rows and the NOTICE for a stored (or just recorded) release."""
        rows = answer_rows(plan, stored.answer)
        msg = notice(plan, stored.answer, charged=stored.epsilon if stored.charged else 0.0,
                     remaining=max(remaining, 0.0), budget=tier.budget, period=tier.period,
                     repeat=not stored.charged)
        decision = "released" if stored.charged else "repeat"
        return (Result(f"SELECT {len(rows)}", cols, rows, notices=[msg]), decision,
                stored.epsilon if stored.charged else 0.0)

    def _with_threshold(self, plan):
        """A top-c query takes its public threshold from HAVING or the session setting."""
        sel = plan.selection
        if sel is None or sel.threshold is not None:
            return plan
        raw = self.session.settings.get("dpgate.topc_threshold")
        if raw in (None, ""):
            raise SqlError("22023", "a top-c query (ORDER BY COUNT(*) DESC LIMIT c) needs a public "
                           "threshold", hint="Add HAVING COUNT(*) > T, or run SET dpgate.topc_threshold = T "
                           "first; only keys above T are considered.")
        try:
            t = float(raw)
            if not math.isfinite(t):             # NaN / ±inf: not a threshold (issue 17)
                raise ValueError(raw)
        except ValueError:
            raise SqlError("22023", f"dpgate.topc_threshold must be a finite number, not {raw!r}") from None
        return dataclasses.replace(plan, selection=dataclasses.replace(sel, threshold=t))

    async def _explain(self, route: Route, params: list[object]) -> Result:
        body, table = route.body, self._table(route)
        if table is not None and table.mode == "local":      # metric LDP reports (seed 002)
            return await explain_local(self, body, params)
        if table is not None and table.privacy is not None:   # per-record DP (seed 003)
            return await explain_per_record(self, body, params)
        try:
            plan = self._central(build_plan(parse(body), self.gw.config, params or None), route.inner)
        except ExtremeAggregate:                           # MAX / MIN: their own release
            return await explain_extreme(self, body, params)
        dialect = self.gw.backend.dialect
        lines = explain_lines(plan, self.gw.tier_of(self.role), to_sql(plan, dialect), dialect)
        return Result("EXPLAIN", [Column("QUERY PLAN", _TEXT)], [(line,) for line in lines])


def _columns(cols):
    if cols is None:
        return None
    return [Column(n, _INT4 if t == "int4" else _TEXT) for n, t in cols]

