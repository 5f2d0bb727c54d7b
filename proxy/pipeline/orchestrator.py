"""One connection's statement pipeline: statement → kind → plan → backend → mechanism →
ledger → rows (the wire layer's :class:`~proxy.wire.api.Handler`).

Statements that release nothing (session SET/SHOW, cursors, catalog, the budget
views) are answered here. Every other statement is parsed once, by routing
(:meth:`Gateway.parse_route`: the route and its parse tree, which the planner takes,
:class:`.kind.Statement`), and released by ONE kind, decided in one place, :func:`choose`
— for execute, Describe, EXPLAIN and the heavy-statement lane alike — from the route (its
table, and which planner its parse names: ``Route.planner``) and, for a central table, the
statement's plan as cells:

========================  ==================================================
table / statement         kind
========================  ==================================================
public table              :data:`.public.PUBLIC` (exact rows, free)
``mode = "local"``        :data:`.local.LOCAL` (a Subset column: ``SUBSET``)
``privacy`` policy        :data:`.per_record.PER_RECORD` (``SELECT DISTINCT g``: ``DOMAIN``)
central, MAX / MIN / q    :data:`.extreme.EXTREME` (``Route.planner == "extreme"``)
central, ``LIMIT 0``      :data:`.central.EMPTY` (no rows: no scan, free)
central, keys selected    :data:`.partitions.PARTITIONS` (a ladder tier: ``LADDER`` refuses)
central, no aggregate     :data:`.central.DOMAIN` (the public domain, free)
central, GROUP BY, a      :data:`.thresholds.THRESHOLD` (cells released only with
``min_units_per_group``   enough noisy units; a ladder tier is refused)
central, ladder tier      :data:`.multitier.LADDER`
central, HAVING / top-c   :data:`.central.SVT` (when the sparse vector has the lower error)
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

from sqlglot import exp

from rewriter.copy import COPY_HINT
from rewriter.errorbars import interval_level, with_interval_columns
from rewriter.errors import Refusal
from rewriter.parsing import parse
from rewriter.plan import Plan
from rewriter.route import Route

from ..backends.base import CancelSignal
from ..stores.ledger import LedgerUnavailable
from ..wire.api import Column, CopyFormat, Description, Result, SqlError
from . import cursors, derive, scalar
from .auto_bounds import statement_note
from .central import CENTRAL, DOMAIN, EMPTY, SVT, checked, mechanism_budget
from .extreme import EXTREME
from .kind import Prepared, ReleaseKind, Statement, run, with_accounting, zcdp_refusal
from .lane import heavy, ledger_error
from .local import LOCAL, insert_local
from .multitier import LADDER
from .partitions import PARTITIONS
from .per_record import PER_RECORD
from .public import PUBLIC
from .selection_path import choose as selection_path
from .session_views import SessionViews
from .statements import SessionState, split
from .thresholds import THRESHOLD, min_units_of, unthresholded

log = logging.getLogger("dpgate")

_TEXT, _INT4 = 25, 23


def _sql_error(r: Refusal) -> SqlError:
    return SqlError(r.sqlstate, r.message, hint=r.hint)


def _enclosed(route: Route) -> tuple[str, Route]:
    """The statement an EXPLAIN or a COPY encloses: its text and its route (the router gives
    both for these kinds; their absence is an internal error raised before anything runs)."""
    if route.body is None or route.inner is None:
        raise SqlError(
            "XX000", f"internal error: a {route.kind} route without its statement; nothing was run"
        )
    return route.body, route.inner


class Connection:
    """Handler for one authenticated connection of ``role``."""

    def __init__(self, gateway, user: str, database: str, params: dict[str, str]):
        self.gw = gateway
        self.role = user
        self.session = SessionState(user, database, params)
        self.cancel_signal = CancelSignal()  # set by CancelRequest: stops the scan in its worker
        self.timing: dict = {}  # this statement's backend timing ("started", "backend_ms")
        self.cursors = cursors.Cursors()  # DECLARE … CURSOR / FETCH / CLOSE (proxy/cursors.py)
        self.temp_views = SessionViews(gateway)  # CREATE TEMPORARY VIEW: this connection's names

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
    async def _route(self, sql: str) -> tuple[Route, exp.Expression | None]:
        """The statement's path, and the parse it was decided from (None: a cached route):
        :meth:`Gateway.parse_route`."""
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
        await self.gw.current_bounds()  # bounds written "auto": this data version's
        sql = await self.temp_views.inline_async(sql)  # a temporary view: its definition
        route, tree = await self._route(sql)
        sql, route, tree = await self._with_intervals(sql, route, tree)
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
        if route.scalars:  # the statement around its scalar subqueries (rewriter.scalar)
            return await scalar.describe(self, sql, tree, oids)
        if route.lookup:
            return await scalar.lookup_describe(self, sql, tree, oids)
        stmt = Statement(sql, route, tree)
        if kind == "insert":
            return await LOCAL.describe(self, stmt, oids)
        return await self.choose(route).describe(self, stmt, oids)  # columns: the planner's

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
        await self.gw.current_bounds()  # bounds written "auto": this data version's
        sql = await self.temp_views.inline_async(sql)  # a temporary view: its definition
        route, tree = await self._route(sql)
        sql, route, tree = await self._with_intervals(sql, route, tree)
        return await self._answer_routed(sql, route, tree, params)

    async def _with_intervals(self, sql: str, route: Route, tree):
        """``SET dpgate.intervals = on``: a DP statement with its aggregates' error bars as
        columns (:mod:`rewriter.errorbars`), routed as written so; others unchanged."""
        level = interval_level(self.session.settings.get("dpgate.intervals"))
        table = self._table(route)
        if level is None or route.kind != "dp" or table is None or table.mode != "central" or table.privacy:
            return sql, route, tree  # (local and per-record tables' releases have no error bars)
        new = with_interval_columns(tree if tree is not None else parse(sql), level)
        if new is None:
            return sql, route, tree
        sql = new.sql(dialect="postgres")
        route, tree = await self._route(sql)
        return sql, route, tree

    async def _answer_routed(self, sql: str, route: Route, tree, params: list[object]):
        """:meth:`answer` of a routed statement (``tree``: routing's parse, or None)."""
        kind = route.kind
        if kind == "explain":
            body, inner = _enclosed(route)
            if inner.scalars:  # several releases (rewriter.scalar)
                return await scalar.explain(self, body, inner, tree, params), "explain", 0.0
            if inner.lookup:  # a release joined to a public table's rows (rewriter.lookup)
                return await scalar.lookup_explain(self, body, tree, params), "explain", 0.0
            shown, shown_route, shown_tree = await self._with_intervals(body, inner, None)
            if shown != body:  # SET dpgate.intervals: the statement as it would run
                body, inner, tree = shown, shown_route, shown_tree
            return await self._explain(Statement(body, inner, tree), params), "explain", 0.0
        if kind == "copy":
            return await self._copy(route, tree, params)
        if route.scalars:  # scalar subqueries: released first, then bound (rewriter.scalar)
            return await scalar.answer(self, sql, route, tree, params)
        if route.lookup:  # a release joined to a public table's rows (rewriter.lookup)
            return await scalar.lookup_answer(self, sql, tree, params)
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
        stmt = Statement(sql, route, tree)
        lane = self.gw.lane  # the heavy-statement lane (.lane), if any:
        if lane is not None:  # a kind planned there, or a shape heavy before: unplanned
            ladder = self.gw.tier_of(self.role).ladder is not None
            if self.choose(route).plans_in_lane or lane.knows_heavy(route, ladder):
                if (done := await lane.answer(self, sql, params)) is not None:
                    return done
        p = await self.prepare(stmt, params)
        if lane is not None and heavy(p):
            lane.remember_heavy(route, ladder)
            if (done := await lane.answer(self, sql, params)) is not None:
                return done
        done = await run(self, p, sql)
        if note := statement_note(self.gw.bounds, _tables_read(route, p.plan)):
            res = done[0]
            res.notices[:] = [f"{n}; {note}" for n in res.notices[:1]] + res.notices[1:]
        return done

    # -- the release kind ------------------------------------------------------
    def choose(self, route: Route, plan: Plan | None = None) -> ReleaseKind:
        """:func:`choose` for this connection's role."""
        return choose(route, self._table(route), self.gw.tier_of(self.role), plan)

    async def _kind(self, stmt: Statement, params: list[object]):
        """``(kind, plan, released)``: the statement's release kind (:func:`choose`), the plan as
        cells it was chosen from and that plan as it is released (HAVING / top-c: by the sparse
        vector or from the cells, :func:`.selection_path.choose`); both None for the kinds that
        plan the statement themselves. A refusal charges nothing."""
        gw, route = self.gw, stmt.route
        kind = self.choose(route)
        if kind is PER_RECORD:  # SELECT DISTINCT g: the public domain (the cells' planner says)
            tree = stmt.take()
            try:
                plan = await gw.plan_async(
                    stmt.sql, params or None, tree.copy() if tree is not None else None
                )
            except Exception:
                plan = None
            stmt.parsed = tree  # the per-record planner's, if the kind stays
            kind = self.choose(route, plan)
            return (kind, plan, plan) if kind is not PER_RECORD else (kind, None, None)
        if kind is not CENTRAL:
            return kind, None, None
        plan = checked(await gw.plan_async(stmt.sql, params or None, stmt.take()), route)
        released = selection_path(plan, gw.tier_of(self.role), self.session.settings)[0]
        return self.choose(route, released), plan, released

    async def prepare(self, stmt: Statement, params: list[object]) -> Prepared:
        """Plan the statement with its release kind, chosen once (a refusal charges nothing)."""
        kind, _, released = await self._kind(stmt, params)
        if released is None:
            p = await kind.plan(self, stmt, params)
            unthresholded(p, self._table(stmt.route))
            return p
        return kind.prepare(self, released)

    async def _copy(self, route: Route, tree, params: list[object]):
        """``COPY (query) TO STDOUT``: the query answered exactly as the same SELECT is
        (its plan, release key and charge; a repeat is free), its rows framed as COPY."""
        cp = route.copy
        body, inner = _enclosed(route)
        if cp is None:
            raise SqlError("XX000", "internal error: a COPY route without its output format; nothing was run")
        if inner.table is None:  # the catalog's or the views': routed as a statement of its own
            res, decision, eps = await self.answer(body, params)
        else:
            shown, shown_route, shown_tree = await self._with_intervals(body, inner, None)
            if shown != body:  # SET dpgate.intervals: the query's error bars as columns too
                body, inner, tree = shown, shown_route, shown_tree
            res, decision, eps = await self._answer_routed(body, inner, tree, params)
        if res.columns is None:
            raise SqlError("0A000", "COPY takes a query that returns rows.", hint=COPY_HINT)
        names = [c.name for c in res.columns]
        force = cp.force_quote
        if isinstance(force, bool):  # FORCE_QUOTE * (or none)
            idx = frozenset(range(len(names))) if force else frozenset()
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

    async def _explain(self, stmt: Statement, params: list[object]) -> Result:
        """``EXPLAIN``: what the kind the statement's execution would have says of it."""
        kind, plan, _ = await self._kind(stmt, params)
        tier = self.gw.tier_of(self.role)
        if tier.accounting == "zcdp" and not kind.zcdp:
            raise zcdp_refusal(kind.name)  # as its execution would be
        res = await kind.explain(self, stmt, params, plan)
        res.rows = with_accounting(res.rows, tier)
        if kind in (CENTRAL, SVT) and (
            line := await derive.explain_line(self, plan, mechanism_budget(plan, tier))
        ):
            res.rows = [(line,), *res.rows]  # answered from earlier releases: ε 0
        if note := statement_note(self.gw.bounds, _tables_read(stmt.route, plan)):
            res.rows = [*res.rows, (note,)]
        return res


def _tables_read(route: Route, plan) -> list[str]:
    """The declared tables a statement reads: its route's and those its plan joins."""
    names = [route.table] if route.table is not None else []
    return names + [j[0] for j in getattr(plan, "joins", ()) or () if j[3] != "unit"]  # not the unit's path


def choose(route: Route, table, tier, plan: Plan | None = None) -> ReleaseKind:
    """The release kind of a statement: the one place it is decided (module doc's table) —
    execute, Describe, EXPLAIN and the heavy-statement lane all ask here. ``route``: the
    statement's (its table's mode, and which planner its parse names); ``table``: the declared
    table it reads; ``tier``: the role's; ``plan``: its plan as cells, when its kind depends on
    it (a central table's statement as released — HAVING / top-c by the sparse vector or
    from the cells —, a per-record table's ``SELECT DISTINCT``). Without
    ``plan``: the kind that plans the statement (columns, lane) — CENTRAL standing for every
    kind chosen from a central plan."""
    if route.kind == "public":  # a public table: exact rows
        return PUBLIC
    if table is not None and table.mode == "local":  # metric LDP reports (Xiang et al. 2020)
        return LOCAL
    if table is not None and table.privacy is not None:  # per-record DP (Chen et al. 2025)
        distinct = plan is not None and not plan.aggregates and plan.selection is None
        return DOMAIN if distinct else PER_RECORD
    if route.planner == "extreme":  # MAX / MIN / percentiles: their own release
        return EXTREME
    if plan is None:
        return CENTRAL
    if plan.limit == 0:  # no rows whatever the data: no scan
        return EMPTY
    if plan.selected:  # keys without a public domain: partition selection (not a ladder's)
        return LADDER if tier.ladder is not None else PARTITIONS
    if not plan.aggregates and plan.selection is None:  # SELECT DISTINCT g: the public domain
        return DOMAIN
    if plan.group_by and min_units_of(table) is not None:  # a minimum of units per released cell
        return THRESHOLD
    if tier.ladder is not None:  # multi-tier chain (Wang et al. 2026)
        return LADDER
    if plan.selection is not None:  # HAVING / top-c: the sparse vector technique (Liu et al.)
        return SVT
    return CENTRAL


def _columns(cols):
    if cols is None:
        return None
    return [Column(n, _INT4 if t == "int4" else _TEXT) for n, t in cols]
