"""Statements of several releases: scalar subqueries (:mod:`rewriter.scalar`), and a public
table looked up by a release's keys (:mod:`rewriter.lookup`).

Each scalar subquery is released first, as the statement of its own it is; its released
value is bound as a constant into the statement around it, which is then released (its
arithmetic over the constant is post-processing; a constant in its WHERE is sequential
composition: the second release reads rows chosen by a released value, Dwork & Roth 2014,
Thm. 3.14). The statement is charged the tier's ε once, split evenly over the releases it
makes fresh: a subquery this role has released before at the tier's ε (the same statement
asked alone) is served from the ledger for free and takes no share. A repeat of the whole
statement finds every release stored and is free. Every release runs through
:func:`.kind.run` (budget, reservation while scanning, charge-what-ran, the stored answer);
the budget for the whole statement is checked before the first scan. The NOTICE and EXPLAIN
state the split.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from sqlglot import exp

from mechanisms.accounting import share_of
from rewriter import lookup as rl
from rewriter import parse
from rewriter import scalar as rs
from rewriter.errors import Refusal
from rewriter.postprocess import output_type
from rewriter.route import Route

from ..wire.api import Column, Description, Result, SqlError
from .common import budget_error
from .kind import Statement, zcdp_refusal
from .notice import WARNING
from .postexpr import evaluate
from .rows import TYPE_OIDS

_TEXT = 25
_NAMES = {20: "bigint", 21: "smallint", 23: "integer", 701: "double precision", 700: "real", 1700: "numeric"}
_TYPED = {16: "boolean", 25: "text", 1082: "date", 1114: "timestamp", 1184: "timestamptz", 1186: "interval"}
_STAND_IN = {16: True, 20: 1, 21: 1, 23: 1, 701: 1.0, 700: 1.0, 1700: 1}


class _Share:
    """The gateway as a release of one part of the statement sees it: the role's tier with ε
    replaced by this part's share, and no heavy-statement lane (the lane plans at the tier's
    own ε)."""

    def __init__(self, gw, epsilon: float):
        self._gw, self._eps = gw, epsilon
        self.lane = None

    def tier_of(self, role: str):
        return self._gw.tier_of(role).model_copy(update={"epsilon": self._eps})

    def __getattr__(self, name: str):
        return getattr(self._gw, name)


def _at(conn, epsilon: float):
    """``conn`` releasing at ``epsilon`` (the same session, cancel and timing)."""
    sub = copy.copy(conn)
    sub.gw = _Share(conn.gw, epsilon)
    return sub


@dataclass
class _Part:
    sql: str
    route: Route
    stored: bool  # released before at the tier's ε: served again, no share


def _releases(n: int) -> str:
    return f"{n} release" + ("" if n == 1 else "s")


def _text(sql: str, limit: int = 80) -> str:
    s = " ".join(sql.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _value_literal(res: Result) -> exp.Expression:
    """The one value of a scalar subquery's released rows as a constant of its type; no row
    is NULL, more than one is Postgres's error 21000."""
    rows = list(res.rows)
    if len(rows) > 1:
        raise SqlError("21000", "more than one row returned by a subquery used as an expression")
    oid = res.columns[0].type_oid if res.columns else 0
    value = rows[0][0] if rows else None
    if oid in _TYPED and value is not None:
        return rs.literal(value if isinstance(value, bool) else str(value), _TYPED[oid])
    if oid in (701, 700) and value is not None:
        return rs.literal(float(value))
    return rs.literal(value, None if value is not None else _NAMES.get(oid, _TYPED.get(oid)))


def _stand_in(oid: int) -> exp.Expression:
    """A constant of a scalar's type, for planning the statement around it without its value
    (Describe, EXPLAIN)."""
    if oid in _STAND_IN:
        return rs.literal(_STAND_IN[oid])
    return rs.literal(None, _TYPED.get(oid, _NAMES.get(oid)))


async def _parts(conn, sql: str, tree, params: list, table: str | None):
    """The statement's parse, its scalar subqueries, the distinct statements they are (one
    release each: a subquery written twice is released once) as parts, stored or fresh, and
    which part each subquery is."""
    tree = tree if tree is not None else parse(sql)
    if params or tree.find(exp.Parameter) is not None:  # each part a statement of its own
        tree = rs.bind_params(tree, params)
    found = rs.scalars(tree)
    gw = conn.gw
    tier = gw.tier_of(conn.role)
    if tier.ladder is not None:
        raise Refusal(
            "0A000",
            "a statement with scalar subqueries is several releases; a data-market tier releases one "
            "statement at a time.",
            hint="run the subquery as a statement of its own and write its value into the statement.",
        )
    parts: list[_Part] = []
    which: list[int] = []
    for s in found:
        same = next((i for i, p in enumerate(parts) if p.sql == s.sql), None)
        if same is not None:
            which.append(same)
            continue
        which.append(len(parts))
        route, inner_tree = await gw.route_async(s.sql)
        stored = route.kind == "public"  # exact, free: no share
        if route.kind == "dp" and route.table is not None and not route.scalars:
            p = await conn.prepare(Statement(s.sql, route, inner_tree), [])
            if p.key is not None:
                stored = (await gw.ledger_read(gw.ledger.snapshot, conn.role, p.key, tier.period))[
                    2
                ] is not None
            else:
                stored = True  # free (public domain, public table): no share
        parts.append(_Part(s.sql, route, stored))
    for part in parts:
        rs.check_unit(gw.config.tables, table, part.route.table)
    return tree, found, parts, which


async def _stand_ins(conn, found: list[rs.Scalar]) -> list[exp.Expression]:
    """A constant of each scalar subquery's type (its columns as Describe finds them)."""
    out = []
    for s in found:
        d = await conn.describe(s.sql, [])
        out.append(_stand_in((d.columns or [Column("", 0)])[0].type_oid))
    return out


async def _around(conn, tree, found: list[rs.Scalar]) -> tuple[str, bool]:
    """The statement around the scalar subqueries with a stand-in constant for each, planned
    (a refusal here, before any release, charges nothing): its text, and whether its release
    is charged (not the public domain or a public table)."""
    copy_ = tree.copy()
    bound = rs.bind(copy_, rs.find(copy_), await _stand_ins(conn, found))
    if rs.constant_outputs(copy_) is not None:  # SELECT without FROM: arithmetic over the values
        return bound, False
    route, t = await conn.gw.route_async(bound)
    if route.kind == "dp" and route.table is not None:
        return bound, (await conn.prepare(Statement(bound, route, t), [])).key is not None
    return bound, False


def _share(conn, parts: list[_Part], outer_charged: bool) -> float:
    tier = conn.gw.tier_of(conn.role)
    fresh = sum(not p.stored for p in parts) + (1 if outer_charged else 0)
    return share_of(tier.epsilon, max(fresh, 1))


async def answer(conn, sql: str, route: Route, tree, params: list):
    """``(Result, decision, ε charged)`` of a statement with scalar subqueries."""
    gw = conn.gw
    tier = gw.tier_of(conn.role)
    if tier.accounting == "zcdp":  # its ε shares are pure ε (each subquery its own statement)
        raise zcdp_refusal("scalar-subquery")
    tree, found, parts, which = await _parts(conn, sql, tree, params, route.table)
    _, outer_charged = await _around(conn, tree, found)  # refused before any release: nothing charged
    eps = _share(conn, parts, outer_charged)
    sub = _at(conn, eps)
    fresh = 0  # the releases this statement makes at its share (0: a repeat of it)
    for part in parts:
        if not part.stored:
            p = await sub.prepare(Statement(part.sql, part.route, None), [])
            fresh += (
                p.key is not None
                and (await gw.ledger_read(gw.ledger.snapshot, conn.role, p.key, tier.period))[2] is None
            )
    if fresh:  # the whole statement's ε is checked before its first scan
        spent = await gw.ledger_read(gw.ledger.spent, conn.role, tier.period)
        need = eps * (fresh + (1 if outer_charged else 0))
        if tier.budget - spent + 1e-9 < need:
            raise budget_error(conn.role, need, tier.budget - spent, tier)
    values, notices, charged, lines = [], [], 0.0, []
    for i, part in enumerate(parts):
        who = sub if not part.stored else conn
        res, _, c = await who.answer(part.sql, [])
        charged += c
        values.append(_value_literal(res))
        notices += [f"(scalar subquery {i + 1}) {n}" for n in res.notices]
        lines.append(
            f"scalar subquery {i + 1} {_text(part.sql)}: ε {c:g}"
            + (" (a stored release, or public data: free)" if not c else "")
        )
    bound = rs.bind(tree, [s.node for s in found], [values[w].copy() for w in which])
    outs = rs.constant_outputs(tree)
    if outs is None:
        res, decision, c = await sub.answer(bound, [])
    else:  # SELECT without FROM: post-processing of the released values, here
        row = tuple(evaluate(t, (), []) for _, t, _ in outs)
        cols = [Column(name, TYPE_OIDS[output_type(typ)]) for name, _, typ in outs]
        res, decision, c = Result("SELECT 1", cols, [row]), "released", 0.0
    charged += c
    lines.append(
        f"the statement around them: ε {c:g}"
        + (" (a stored release: free)" if not c and outer_charged else "")
    )
    left = tier.budget - await gw.ledger_read(gw.ledger.spent, conn.role, tier.period)
    per = "in total" if tier.period == "never" else f"this {tier.period}"
    head = (
        f"dpgate: ε charged {charged:g} for this statement's {_releases(len(parts) + outer_charged)} "
        f"({'; '.join(lines)}); budget left {max(left, 0.0):g} of {tier.budget:g} {per}; "
        "each scalar subquery released first and bound as a constant (sequential composition); "
        "arithmetic over released values is post-processing (no ε)"
    )
    notices += [f"(the statement around them) {n}" for n in res.notices]
    warning = leading_warning(notices)
    out = Result(
        res.command_tag,
        res.columns,
        res.rows,
        notices=[f"{warning}\n{head}" if warning else head, *notices],
    )
    return out, decision if charged else "repeat", charged


def leading_warning(notices: list[str]) -> str:
    """The statement's one warning line from its releases' NOTICEs (each ``(part) …``, its
    warning line first when that release is mostly noise, :data:`.notice.WARNING`): every
    noisy part's reasons, each named by its part; empty when no part is mostly noise."""
    reasons = []
    for n in notices:
        part, _, text = n.partition(") ")
        first = text.split("\n", 1)[0]
        if first.startswith(WARNING):
            reasons.append(f"{part}) {first.removeprefix(WARNING).removeprefix(' — ')}")
    return f"{WARNING} — {' | '.join(reasons)}" if reasons else ""


async def describe(conn, sql: str, tree, oids: list[int]) -> Description:
    """Columns of a statement with scalar subqueries: the statement around them planned with
    a constant of each one's type in its place (nothing is read); each ``$n``'s type as the
    part that reads it infers it (the client's, if it gave one)."""
    tree = tree if tree is not None else parse(sql)
    found = rs.scalars(tree)
    parts = [(rs.parameters(s.node), await conn.describe(s.sql, [])) for s in found]
    bound = rs.bind(tree, [s.node for s in found], await _stand_ins(conn, found))
    outs = rs.constant_outputs(tree)
    if outs is None:
        outer = await conn.describe(bound, oids)
    else:  # SELECT without FROM: its items' types over the values
        outer = Description([], [Column(name, TYPE_OIDS[output_type(typ)]) for name, _, typ in outs])
    described = [(rs.parameters(tree), outer), *parts]
    n = max([len(oids)] + [max(ns, default=0) for ns, _ in described])

    def typ(i: int) -> int:
        if i < len(oids) and oids[i]:
            return oids[i]
        got = (d.param_type_oids[i] for ns, d in described if i + 1 in ns and i < len(d.param_type_oids))
        return next(got, 0)

    return Description([typ(i) for i in range(n)], outer.columns)


async def explain(conn, sql: str, route: Route, tree, params: list) -> Result:
    """EXPLAIN of a statement with scalar subqueries: the split of ε, then each release's own
    EXPLAIN at its share (the statement around them planned with a stand-in constant)."""
    tree, found, parts, _ = await _parts(conn, sql, tree, params, route.table)
    tier = conn.gw.tier_of(conn.role)
    bound, outer_charged = await _around(conn, tree, found)
    eps = _share(conn, parts, outer_charged)
    sub = _at(conn, eps)
    fresh = sum(not p.stored for p in parts) + outer_charged
    lines = [
        f"statement of {_releases(len(parts) + outer_charged)}: ε {tier.epsilon:g} split over the {fresh} made fresh "
        f"(ε {eps:g} each); each scalar subquery is released first and its value bound as a constant "
        "into the statement around it (sequential composition; arithmetic over it is post-processing)"
    ]
    for i, part in enumerate(parts):
        who = sub if not part.stored else conn
        head = f"scalar subquery {i + 1}: {_text(part.sql, 200)}"
        lines.append(head + (" — stored at the tier's ε: served again, ε 0" if part.stored else ""))
        res, _, _ = await who.answer(f"EXPLAIN {part.sql}", [])
        lines += ["  " + str(r[0]) for r in res.rows]
    lines.append(f"the statement around them (a stand-in constant shown for each value): {_text(bound, 200)}")
    if outer_charged or rs.constant_outputs(parse(bound)) is None:
        res, _, _ = await sub.answer(f"EXPLAIN {bound}", [])
        lines += ["  " + str(r[0]) for r in res.rows]
    else:
        lines.append("  computed by dpgate over the released values (post-processing, no ε)")
    return Result("EXPLAIN", [Column("QUERY PLAN", _TEXT)], [(line,) for line in lines])


# -- a public table looked up by a release's keys (rewriter.lookup) ---------------------------


def _lookup_of(conn, sql: str, tree, params: list) -> rl.Lookup:
    if params:
        raise Refusal(
            "0A000",
            "a public table joined to released rows takes no parameters here; write the values in.",
            hint=rl.HINT,
        )
    found = rl.split(tree if tree is not None else parse(sql), conn.gw.config.tables)
    if found is None:
        raise SqlError("XX000", "internal error: a lookup route without its lookup; nothing was run")
    return found


def _nulls_sorted(rows: list[tuple], order: tuple[tuple[int, bool, bool], ...]) -> list[tuple]:
    """``rows`` in ORDER BY order as Postgres sorts them (a stable pass per key, last first;
    NULLs first or last as each key says)."""
    for i, desc, nulls_first in reversed(order):
        nulls = [r for r in rows if r[i] is None]
        rest = sorted((r for r in rows if r[i] is not None), key=lambda r: r[i], reverse=desc)
        rows = nulls + rest if nulls_first else rest + nulls
    return rows


async def lookup_answer(conn, sql: str, tree, params: list):
    """``(Result, decision, ε charged)``: the aggregating query released (its own statement, at
    the tier's ε), the public table's rows read exactly (free), joined on the equality here."""
    lk = _lookup_of(conn, sql, tree, params)
    released, decision, charged = await conn.answer(lk.released, [])
    public, _, _ = await conn.answer(lk.public, [])
    dn = [c.name for c in released.columns or []]
    pn = [c.name for c in public.columns or []]
    if lk.d_key not in dn or lk.p_key not in pn:
        raise SqlError("XX000", "internal error: a lookup's join column is missing; nothing more was run")
    di, pi = dn.index(lk.d_key), pn.index(lk.p_key)
    by_key: dict = {}
    for r in public.rows:
        if r[pi] is not None:
            by_key.setdefault(r[pi], []).append(r)
    at = [(dn if s == "d" else pn).index(c) for s, c, _ in lk.outputs]
    rows = [
        tuple((rd if s == "d" else rp)[k] for (s, _, _), k in zip(lk.outputs, at))
        for rd in released.rows
        if rd[di] is not None
        for rp in by_key.get(rd[di], ())
    ]
    rows = _nulls_sorted(rows, lk.order)
    end = None if lk.limit is None else lk.offset + lk.limit
    rows = rows[lk.offset : end]
    types = {("d", c.name): c.type_oid for c in released.columns or []}
    types.update({("p", c.name): c.type_oid for c in public.columns or []})
    cols = [Column(name, types[(s, c)]) for s, c, name in lk.outputs]
    note = (
        f"(joined with the rows of the public table {lk.public_table}: exact, no ε — joining public "
        "data to released rows is post-processing)"
    )
    out = Result(f"SELECT {len(rows)}", cols, rows, notices=[*released.notices, note])
    return out, decision, charged


async def lookup_describe(conn, sql: str, tree, oids: list[int]) -> Description:
    """Columns of a lookup: the released statement's and the public table's, nothing read."""
    lk = _lookup_of(conn, sql, tree, [])
    d, p = await conn.describe(lk.released, []), await conn.describe(lk.public, [])
    types = {("d", c.name): c.type_oid for c in d.columns or []}
    types.update({("p", c.name): c.type_oid for c in p.columns or []})
    return Description(list(oids), [Column(name, types[(s, c)]) for s, c, name in lk.outputs])


async def lookup_explain(conn, sql: str, tree, params: list) -> Result:
    """EXPLAIN of a lookup: the release's own EXPLAIN, then the public rows it is joined with."""
    lk = _lookup_of(conn, sql, tree, params)
    res, _, _ = await conn.answer(f"EXPLAIN {lk.released}", [])
    lines = [f"released: {_text(lk.released, 200)}", *("  " + str(r[0]) for r in res.rows)]
    lines.append(
        f"joined on {lk.d_key} = {lk.public_table}.{lk.p_key} with {_text(lk.public, 200)} "
        "(a public table: exact, no ε; the join is post-processing)"
    )
    return Result("EXPLAIN", [Column("QUERY PLAN", _TEXT)], [(line,) for line in lines])
