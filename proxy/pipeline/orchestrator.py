"""One connection's statement pipeline: statement → kind → plan → backend → mechanism →
ledger → rows (the wire layer's :class:`~proxy.wire.api.Handler`).

Statements that release nothing (session SET/SHOW, cursors, catalog, the budget
views, EXPLAIN) are answered here; every other statement is planned by ONE release
kind, picked once from the route and the plan (:meth:`Connection.prepare`):

========================  ==================================================
table / statement         kind
========================  ==================================================
``mode = "local"``        :data:`.local.LOCAL` (a Subset column: ``SUBSET``)
``privacy`` policy        :data:`.per_record.PER_RECORD`
central, MAX / MIN        :data:`.extreme.EXTREME`
central, ``LIMIT 0``      :data:`.central.EMPTY` (no rows: no scan, free)
central, no aggregate     :data:`.central.DOMAIN` (the public domain, free)
central, ladder tier      :data:`.multitier.LADDER`
central, HAVING / top-c   :data:`.central.SVT`
central                   :data:`.central.CENTRAL`
========================  ==================================================

and released by the one pipeline of :func:`.kind.run` (repeat lookup → budget →
reserve while scanning → noise → record → rows and NOTICE).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import time

from rewriter.copy import COPY_HINT
from rewriter.errors import ExtremeAggregate, Refusal
from rewriter.route import Route

from ..backends.base import CancelSignal
from ..stores.ledger import LedgerUnavailable
from ..wire.api import Column, CopyFormat, Description, Result, SqlError
from . import cursors
from .central import CENTRAL, DOMAIN, EMPTY, SVT, checked
from .extreme import EXTREME
from .kind import Prepared, ReleaseKind, run
from .lane import heavy, ledger_error
from .local import LOCAL, insert_local
from .multitier import LADDER
from .partitions import PARTITIONS
from .per_record import PER_RECORD
from .public import PUBLIC
from .selection_path import choose
from .session_views import SessionViews
from .statements import SessionState, split

log = logging.getLogger("dpgate")

_TEXT, _INT4 = 25, 23


def _sql_error(r: Refusal) -> SqlError:
    return SqlError(r.sqlstate, r.message, hint=r.hint)


class Connection:
    """Handler for one authenticated connection of ``role``."""

    def __init__(self, gateway, user: str, database: str, params: dict[str, str]):
        self.gw = gateway
        self.role = user
        self.session = SessionState(user, database, params)
        self.cancel_signal = CancelSignal()  # set by CancelRequest: stops the scan in its worker
        self.timing: dict = {}  # this statement's backend timing ("started", "backend_ms")
        self.cursors = cursors.Cursors()  # DECLARE … CURSOR / FETCH / CLOSE (proxy/cursors.py)
        self.temp_views = SessionViews(gateway)  # CREATE TEMPORARY VIEW: this session's names

    # -- wire Handler interface ---------------------------------------------
    def split(self, sql: str) -> list[str]:
        return split(sql)

    def cancel(self) -> None:
        self.cancel_signal.set()

    async def close(self) -> None:
        self.temp_views.close()

    async def describe(self, sql: str, param_type_oids: list[int]) -> Description:
        try:
            return await self._describe(sql, param_type_oids)
        except Refusal as r:
            raise _sql_error(r) from None

    async def execute(self, sql: str, params: list[object]) -> Result:
        t0 = time.perf_counter()
        self.cancel_signal.clear()
        self.timing = {}
        decision, eps = "error", 0.0
        try:
            result, decision, eps = await self.answer(sql, params)
            return result
        except Refusal as r:
            decision = f"refused {r.sqlstate}"
            raise _sql_error(r) from None
        except SqlError as e:
            decision = f"error {e.sqlstate}"
            raise
        except asyncio.CancelledError:  # the session is ending (shutdown, client gone): stop
            self.cancel_signal.set()  # the scan or catalog query in its worker thread too
            raise
        except LedgerUnavailable as e:
            log.warning("%s", e)
            decision = f"error {e.sqlstate}"  # 08006; 55000 ledger lost; 53100 / 55P03
            raise ledger_error(e) from None
        finally:  # logged once the reply is written (call_soon runs after this task step)
            ledger, eps = self.timing.get("ledger", ("charged" if eps else "none", eps))
            asyncio.get_running_loop().call_soon(
                functools.partial(
                    self.gw.log_statement,
                    role=self.role,
                    sql=sql,
                    decision=decision,
                    epsilon=eps,
                    ms=(time.perf_counter() - t0) * 1000,
                    backend_ms=self.timing.get("backend_ms"),
                    ledger=ledger,
                )
            )

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
        if self.temp_views.statement(sql) is not None:  # CREATE TEMPORARY VIEW / DROP VIEW
            return Description(list(oids), None)
        sql = await self.temp_views.inline_async(sql)  # a temporary view: its definition
        route = await self._route(sql)
        kind = route.kind
        if kind == "explain":
            return Description(list(oids), [Column("QUERY PLAN", _TEXT)])
        if kind == "copy":  # COPY … TO STDOUT: no row description
            return Description(list(oids), None)
        if kind == "views":
            types, cols = await self.gw.views.describe(sql, self.role, oids)  # their own executor
            return Description(types, [Column(n, t) for n, t in cols])
        if kind == "catalog":
            try:
                cols = await asyncio.to_thread(
                    self.gw.catalog.describe, sql, user=self.role, session=self.temp_views.key
                )
            except Exception as e:  # CatalogError: never reaches the backend
                raise SqlError(
                    getattr(e, "sqlstate", "0A000"),
                    getattr(e, "message", str(e)),
                    hint=getattr(e, "hint", None),
                ) from None
            inferred = self.gw.catalog.param_types(sql)
            types = [
                (oids[i] if i < len(oids) else 0) or (inferred[i] if i < len(inferred) else _TEXT)
                for i in range(max(len(oids), len(inferred)))
            ]
            return Description(types, [Column(n, t) for n, t in cols])
        if kind == "insert":
            return await LOCAL.describe(self, route, sql, oids)
        family = self._family(route)
        try:
            return await family.describe(self, route, sql, oids)
        except ExtremeAggregate:  # MAX / MIN: their own release
            return await EXTREME.describe(self, route, sql, oids)

    def cursor_columns(self, name: str):
        """Describe Portal of a DECLAREd cursor (psycopg's named cursors ask for it)."""
        return self.cursors.columns(name)

    async def answer(self, sql: str, params: list[object]):
        """``(Result, decision, ε charged)`` for one statement (also a cursor's query)."""
        if (cur := cursors.match(sql)) is not None:
            done = await self.cursors.run(self, cur, params)
            if done is not None:
                return done
        local = self.session.match(sql)
        if local is not None:
            tag, cols, rows, ps = local
            return Result(tag, _columns(cols), rows, parameter_status=ps), "local", 0.0
        if (view := self.temp_views.statement(sql)) is not None:  # CREATE TEMPORARY VIEW / DROP VIEW
            return await self.temp_views.run(self, view, params), "view", 0.0
        sql = await self.temp_views.inline_async(sql)  # a temporary view: its definition
        route = await self._route(sql)
        kind = route.kind
        if kind == "explain":
            return await self._explain(route, params), "explain", 0.0
        if kind == "copy":
            return await self._copy(route, params)
        if kind == "insert":
            return await insert_local(self, sql, params)
        if kind == "views":
            cols, rows = await self.gw.views.run(sql, self.role, params)  # their own executor
            return Result(f"SELECT {len(rows)}", [Column(n, t) for n, t in cols], rows), "views", 0.0
        if kind == "catalog":
            try:
                cols, rows = await asyncio.to_thread(
                    self.gw.catalog.execute,
                    sql,
                    user=self.role,
                    params=params,
                    cancel=self.cancel_signal,
                    session=self.temp_views.key,
                )
            except Exception as e:  # CatalogError and anything else: never reaches the backend
                raise SqlError(
                    getattr(e, "sqlstate", "0A000"),
                    getattr(e, "message", str(e)),
                    hint=getattr(e, "hint", None),
                ) from None
            return Result(f"SELECT {len(rows)}", [Column(n, t) for n, t in cols], rows), "catalog", 0.0
        lane = self.gw.lane  # the heavy-statement lane (.lane), if any:
        if lane is not None:  # per-record, or a shape heavy before: unplanned
            ladder = self.gw.tier_of(self.role).ladder is not None
            if self._family(route) is PER_RECORD or lane.knows_heavy(route, ladder):
                if (done := await lane.answer(self, sql, params)) is not None:
                    return done
        p = await self.prepare(route, sql, params)
        if lane is not None and heavy(p):
            lane.remember_heavy(route, ladder)
            if (done := await lane.answer(self, sql, params)) is not None:
                return done
        return await run(self, p, sql)

    # -- picking the release kind --------------------------------------------
    def _family(self, route: Route) -> ReleaseKind:
        """The kind that plans statements on the routed table: local, per-record or central."""
        table = self._table(route)
        if route.kind == "public":  # a public table: exact rows
            return PUBLIC
        if table is not None and table.mode == "local":  # metric LDP reports (Xiang et al. 2020)
            return LOCAL
        if table is not None and table.privacy is not None:  # per-record DP (Chen et al. 2025)
            return PER_RECORD
        return CENTRAL

    async def prepare(self, route: Route, sql: str, params: list[object]) -> Prepared:
        """Plan the statement and pick its release kind, once (a refusal charges nothing)."""
        gw = self.gw
        family = self._family(route)
        if family is not CENTRAL:
            if family is PER_RECORD:  # SELECT DISTINCT g: the public domain
                try:
                    plan = await gw.plan_async(sql, params or None)
                except Exception:
                    plan = None
                if plan is not None and not plan.aggregates and plan.selection is None:
                    return DOMAIN.prepare(self, plan)
            return await family.plan(self, route, sql, params)
        try:
            plan = checked(await gw.plan_async(sql, params or None), route)
            plan = choose(plan, gw.tier_of(self.role), self.session.settings)[
                0
            ]  # HAVING / top-c: which release
        except ExtremeAggregate:  # MAX / MIN: their own release
            return await EXTREME.plan(self, route, sql, params)
        if plan.limit == 0:  # no rows whatever the data: no scan
            return EMPTY.prepare(self, plan)
        if plan.selected:  # keys without a public domain
            if gw.tier_of(self.role).ladder is not None:
                raise SqlError(
                    "0A000",
                    "GROUP BY a column without a public domain (partition selection) is not "
                    "available to data-market ladder tiers; nothing was charged",
                    hint="Group by columns with a declared domain.",
                )
            return PARTITIONS.prepare(self, plan)
        if not plan.aggregates and plan.selection is None:  # SELECT DISTINCT g: the public domain
            return DOMAIN.prepare(self, plan)
        if gw.tier_of(self.role).ladder is not None:  # multi-tier chain (Wang et al. 2026)
            return LADDER.prepare(self, plan)
        if plan.selection is not None:  # HAVING / top-c: the sparse vector technique (Liu et al.)
            return SVT.prepare(self, plan)
        return CENTRAL.prepare(self, plan)

    async def _copy(self, route: Route, params: list[object]):
        """``COPY (query) TO STDOUT``: the query answered exactly as the same SELECT is
        (its plan, release key and charge; a repeat is free), its rows framed as COPY."""
        cp = route.copy
        res, decision, eps = await self.answer(route.body, params)
        if res.columns is None:
            raise SqlError("0A000", "COPY takes a query that returns rows.", hint=COPY_HINT)
        names = [c.name for c in res.columns]
        force = cp.force_quote
        if force is True:
            idx = frozenset(range(len(names)))
        else:
            missing = [n for n in force if n not in names]
            if missing:
                raise SqlError(
                    "42703",
                    f'FORCE_QUOTE column "{missing[0]}" is not a column of the query ({", ".join(names)}).',
                    hint=COPY_HINT,
                )
            idx = frozenset(names.index(n) for n in force)
        fmt = CopyFormat(cp.format, cp.header, cp.delimiter, cp.null, cp.quote, cp.escape, idx)
        return (
            Result(f"COPY {len(res.rows)}", res.columns, res.rows, notices=res.notices, copy=fmt),
            decision,
            eps,
        )

    async def _explain(self, route: Route, params: list[object]) -> Result:
        body, inner = route.body, route.inner
        family = self._family(inner)
        if family is CENTRAL and self.gw.tier_of(self.role).ladder is not None:
            family = LADDER  # its level of a ladder (multi-tier release, Wang et al. 2026)
        try:
            if family in (CENTRAL, LADDER):
                plan = await self.gw.plan_async(body, params or None)
                if plan.limit == 0:  # no rows whatever the data: no scan
                    family = EMPTY
                elif family is CENTRAL and plan.selected:
                    family = PARTITIONS  # keys by partition selection
            return await family.explain(self, inner, body, params)
        except ExtremeAggregate:  # MAX / MIN: their own release
            return await EXTREME.explain(self, inner, body, params)


def _columns(cols):
    if cols is None:
        return None
    return [Column(n, _INT4 if t == "int4" else _TEXT) for n, t in cols]
