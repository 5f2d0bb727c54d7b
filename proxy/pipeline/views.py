"""dpgate's own relations, readable with SQL: ``dpgate.budget``, ``dpgate.releases``
and (admins only) ``dpgate.coalition``.

A role sees its own rows; an admin role sees every role's. ``dpgate.coalition``
(multi-tier ladders, :func:`proxy.pipeline.multitier.coalition_rows`, plus one row per categorical
Subset column of a local table, :func:`proxy.pipeline.local_subset.subset_coalition_rows`) is the data
owner's view and is refused to other roles. The rows come from the
ledger (metadata only: never a released value or a true one) and are queried in a
private in-memory DuckDB, so any read-only SELECT over them works (WHERE, ORDER BY,
aggregates, parameters ``$1`` …) and nothing else is reachable from it.

Cost: a read follows its answer, not the ledger's history. Only the views a
query names are filled; ``dpgate.budget`` is one primary-key read per role;
for ``dpgate.releases`` the parse decides what the ledger can do itself
(:func:`pushdown`): the role filter (a role's own rows, or an admin's
``WHERE role = …``) and other exact conditions of a single-view SELECT go into
the ledger's indexed query, and so do its ORDER BY and LIMIT / OFFSET when the
query is a plain projection whose every condition went down. Whatever the
ledger returns, the user's query still runs in full over it, so a pushdown can
only save work, never change an answer. A query that would need more than
:data:`MAX_ROWS` releases is refused (54000) rather than truncated.

Views run on a small executor of their own (:class:`Views`, two threads, each
with its own DuckDB) and read the ledger on a connection of their own
(:class:`proxy.stores.view_reads.ViewReads`): a view read never holds up a DP statement's
ledger reads or writes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import duckdb
import sqlglot
from sqlglot import exp

from mechanisms.accounting import zcdp_epsilon
from rewriter.errors import Refusal
from rewriter.postprocess import name as pg_name

from ..stores.view_reads import VIEW_RELEASE_COLUMNS, ViewReads
from .kind import unit_of
from .local_subset import subset_coalition_rows  # LDP Subset columns: loss per row
from .multitier import COALITION_COLUMNS, coalition_rows

# a cheap router only (the orchestrator's): what a statement reads is decided from its parse

BUDGET_COLUMNS = [
    ("role", "VARCHAR"),
    ("tier", "VARCHAR"),
    ("epsilon_per_query", "DOUBLE"),
    ("spent", "DOUBLE"),
    ("remaining", "DOUBLE"),
    ("budget", "DOUBLE"),
    ("period", "VARCHAR"),
    ("resets_at", "VARCHAR"),
    ("delta_spent", "DOUBLE"),
    ("delta_remaining", "DOUBLE"),
    ("delta_budget", "DOUBLE"),
    ("accounting", "VARCHAR"),
    ("rho_per_query", "DOUBLE"),
    ("spent_as_epsilon", "DOUBLE"),
    ("spent_as_delta", "DOUBLE"),
]
"""A zCDP tier's amounts (``epsilon_per_query`` aside: the ε its pure mechanisms run at) are ρ:
``spent``, ``remaining`` and ``budget``; ``spent_as_epsilon``/``spent_as_delta`` read what was spent as
(ε, δ)-DP at the tier's ``conversion_delta`` (Canonne, Kamath & Steinke 2020 Cor 13; a pure tier's
are its ε and δ spent)."""
RELEASE_COLUMNS = [
    ("role", "VARCHAR"),
    ("released_at", "VARCHAR"),
    ("statement", "VARCHAR"),
    ("epsilon", "DOUBLE"),
    ("mechanism", "VARCHAR"),
    ("data_version", "BIGINT"),
    ("rho", "DOUBLE"),
]
_OIDS = {"VARCHAR": 25, "DOUBLE": 701, "BIGINT": 20, "INTEGER": 23, "BOOLEAN": 16, "HUGEINT": 1700}
VIEW_NAMES = ("budget", "releases", "coalition")
# dpgate.releases as the ledger stores it, and its view columns computed from that in DuckDB
_RAW_RELEASES = [
    ("role", "VARCHAR"),
    ("created", "DOUBLE"),
    ("statement", "VARCHAR"),
    ("epsilon_nano", "BIGINT"),
    ("mechanism", "VARCHAR"),
    ("data_version", "BIGINT"),
    ("unit", "VARCHAR"),
]
_RELEASE_VALUES = (  # a zCDP tier's release: its ρ in ``rho``, ``epsilon`` NULL
    "role, strftime(make_timestamp(CAST(created * 1000000 AS BIGINT)), '%Y-%m-%d %H:%M:%S') "
    "|| '+00', statement, CASE WHEN unit = 'rho' THEN NULL ELSE epsilon_nano / 1000000000 END, "
    "mechanism, data_version, CASE WHEN unit = 'rho' THEN epsilon_nano / 1000000000 END"
)
MAX_ROWS = 100_000  # releases one query may materialise (refused above, never truncated)

# a parameter's type as Postgres would infer it: from the view column it is compared with
_COLUMN_OIDS = {n: _OIDS[t] for n, t in BUDGET_COLUMNS + RELEASE_COLUMNS}
_CAST_OIDS = {
    exp.DataType.Type.INT: 23,
    exp.DataType.Type.BIGINT: 20,
    exp.DataType.Type.SMALLINT: 21,
    exp.DataType.Type.DOUBLE: 701,
    exp.DataType.Type.FLOAT: 700,
    exp.DataType.Type.BOOLEAN: 16,
    exp.DataType.Type.TEXT: 25,
    exp.DataType.Type.VARCHAR: 1043,
    exp.DataType.Type.DECIMAL: 1700,
}
_DUCK_TYPES = {
    16: "BOOLEAN",
    20: "BIGINT",
    21: "SMALLINT",
    23: "INTEGER",
    700: "FLOAT",
    701: "DOUBLE",
    1700: "DOUBLE",
}
_COMPARE = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.In, exp.Like, exp.ILike, exp.Is)
_FLIP = {exp.EQ: "=", exp.LT: ">", exp.LTE: ">=", exp.GT: "<", exp.GTE: "<="}
_OP = {exp.EQ: "=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
# exact conditions the ledger applies as the view would: text compared as bytes, integers
_FILTERABLE = {"role": str, "statement": str, "mechanism": str, "data_version": int}


VIEW_DESCRIPTIONS = {
    "budget": "your ε and δ budgets: spent, remaining, when they reset (an admin sees every role)",
    "releases": "your released statements: when, ε, mechanism (never a value; an admin sees every role)",
    "coalition": "admins: per multi-tier query and Subset column, coalition loss (max ε) vs Σε",
}


def catalog_views() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """The views as the emulated catalog lists them (``\\dv dpgate.*``, ``\\d dpgate.budget``):
    name -> (description, [(column, DuckDB type)])."""
    cols = {"budget": BUDGET_COLUMNS, "releases": RELEASE_COLUMNS, "coalition": COALITION_COLUMNS}
    return {n: (VIEW_DESCRIPTIONS[n], cols[n]) for n in VIEW_NAMES}


def next_reset(period: str, now: datetime | None = None, key: str | None = None) -> str:
    """When the budget of ``period`` resets: the start of the period after the current one
    (``key``: that period's key, e.g. the ledger's latest recorded one; else ``now``'s)."""
    now = now or datetime.now(UTC)
    if period == "never":
        return "never"
    if key is not None:
        now = _period_start(period, key) or now
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        nxt = day + timedelta(days=1)
    elif period == "week":
        nxt = day + timedelta(days=7 - day.weekday())
    else:
        nxt = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
    return nxt.strftime("%Y-%m-%d %H:%M:%S+00")


def _period_start(period: str, key: str) -> datetime | None:
    """The first instant of the period ``key`` (``ledger.period_key``'s forms), or None."""
    try:
        if period == "day":
            return datetime.strptime(key, "%Y-%m-%d").replace(tzinfo=UTC)
        if period == "week":
            return datetime.strptime(key + "-1", "%G-W%V-%u").replace(tzinfo=UTC)
        if period == "month":
            return datetime.strptime(key, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        return None
    return None


# ----------------------------------------------------------------------------- the parse


def parse_view_query(sql: str) -> exp.Expression:
    """The statement's tree, checked: one read-only query over dpgate's views only."""
    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.ParseError as e:
        raise Refusal(
            "42601", f"syntax error: {e.errors[0]['description'] if e.errors else e}", hint=None
        ) from None
    if (
        not isinstance(tree, exp.Query)
        or not isinstance(tree, exp.Expression)  # every query node is one (the type checker's view)
        or any(
            isinstance(n, (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Command, exp.Into))
            for n in tree.walk()
        )
    ):
        raise Refusal(
            "42501",
            "dpgate.budget, dpgate.releases and dpgate.coalition are read-only; use SELECT",
            hint=None,
        )
    for t in tree.find_all(exp.Table):
        if (t.db or "").lower() != "dpgate" or t.name.lower() not in VIEW_NAMES:
            raise Refusal(
                "42501",
                "a query on dpgate.budget / dpgate.releases / dpgate.coalition cannot read other relations",
                hint=None,
            )
    for f in tree.find_all(exp.Anonymous):
        raise Refusal("42883", f"function {f.name} is not available here", hint=None)
    return tree


def _parameters(tree: exp.Expression) -> list[tuple[exp.Parameter, int]]:
    out = []
    for p in tree.find_all(exp.Parameter):
        try:
            out.append((p, int(p.name)))
        except ValueError:
            raise Refusal("42601", f'syntax error at or near "${p.name}"', hint=None) from None
    return out


def param_types(tree: exp.Expression) -> list[int]:
    """Type OIDs of ``$1 … $n``: the type of the view column a parameter is compared
    with, of an explicit cast, bigint in LIMIT / OFFSET, text otherwise."""
    found = _parameters(tree)
    types = [25] * max((n for _, n in found), default=0)
    for p, n in found:
        if n < 1:
            raise Refusal("42P02", f"there is no parameter ${n}", hint=None)
        parent = p.parent
        if isinstance(parent, exp.Cast):
            oid = _CAST_OIDS.get(parent.to.this)
        elif isinstance(parent, (exp.Limit, exp.Offset)):
            oid = 20
        elif isinstance(parent, _COMPARE):
            cols = [
                c
                for c in (parent.this, *parent.expressions, parent.args.get("expression"))
                if isinstance(c, exp.Column)
            ]
            oid = _COLUMN_OIDS.get(cols[0].name.lower()) if cols else None
        else:
            oid = None
        if oid:
            types[n - 1] = oid
    return types


def _literal(value) -> exp.Expression:
    if value is None:
        return exp.null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float, Decimal)):
        return exp.Literal.number(str(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value).decode("utf-8", "replace")
    return exp.Literal.string(str(value))


def bind(tree: exp.Expression, params: list | None, types: list[int] | None = None) -> exp.Expression:
    """The tree with ``$n`` replaced by the bound values as literals (``params`` None:
    typed NULLs, for Describe)."""
    found = _parameters(tree)
    if not found:
        return tree
    tree = tree.copy()
    for p, n in _parameters(tree):
        tree_node: exp.Expression
        if params is None:
            oid = (types or [])[n - 1] if 0 < n <= len(types or []) else 25
            tree_node = exp.cast(exp.null(), _DUCK_TYPES.get(oid, "VARCHAR"))
        else:
            if not 0 < n <= len(params):
                raise Refusal("42P02", f"there is no parameter ${n}", hint=None)
            value = params[n - 1]
            if (
                isinstance(p.parent, (exp.Limit, exp.Offset))
                and isinstance(value, str)
                and value.strip().isdigit()
            ):
                value = int(value)
            tree_node = _literal(value)
        p.replace(tree_node)
    return tree


# ----------------------------------------------------------------------------- pushdown


@dataclass
class Pushdown:
    """What the ledger's query does for ``dpgate.releases`` (all of it ANDed with the
    reader's row permission): exact conditions, and — only when every condition of
    the query went down — its order and a row limit (LIMIT + OFFSET)."""

    where: list[tuple[str, str, object]] = field(default_factory=list)
    order: list[tuple[str, bool]] = field(default_factory=list)
    limit: int | None = None


def _value(node):
    """A literal's Python value (str, int, float), or raises LookupError."""
    neg = isinstance(node, exp.Neg)
    if neg:
        node = node.this
    if isinstance(node, exp.Literal):
        if node.is_string and not neg:
            return node.this
        if not node.is_string:
            v = int(node.this) if re.fullmatch(r"\d+", node.this) else float(node.this)
            return -v if neg else v
    raise LookupError


def _int(node) -> int | None:
    try:
        v = _value(node)
    except (LookupError, ValueError):
        return None
    return v if type(v) is int and v >= 0 else None


def _condition(cond, own) -> tuple[str, str, object] | None:
    """``col op literal`` / ``col IN (literals)`` on an exact view column, or None."""
    if isinstance(cond, exp.In) and not cond.args.get("query") and not cond.args.get("unnest"):
        col = own(cond.this)
        try:
            values = [_value(v) for v in cond.expressions]
        except (LookupError, ValueError):
            return None
        if col in _FILTERABLE and values and all(type(v) is _FILTERABLE[col] for v in values):
            return col, "IN", values
        return None
    if type(cond) not in _OP:
        return None
    for side, other, op in (
        (cond.this, cond.expression, _OP[type(cond)]),
        (cond.expression, cond.this, _FLIP[type(cond)]),
    ):
        col = own(side)
        if col in _FILTERABLE:
            try:
                v = _value(other)
            except (LookupError, ValueError):
                return None
            kind = _FILTERABLE[col]
            if type(v) is not kind or (kind is str and op != "="):
                return None  # text: equality only (ordering is the engine's)
            return col, op, v
    return None


def pushdown(tree: exp.Expression) -> Pushdown:
    """What the ledger can do for a query reading ``dpgate.releases`` once, as the
    single relation of one SELECT: its WHERE's exact conditions (an AND of
    ``column op literal``) and, for a plain projection (columns, ``*``) whose every
    condition went down, ORDER BY (view columns; ``released_at`` last) and LIMIT /
    OFFSET. Anything else: nothing but the permission filter."""
    nothing = Pushdown()
    tables = list(tree.find_all(exp.Table))
    if not isinstance(tree, exp.Select) or len(tables) != 1 or tables[0].name.lower() != "releases":
        return nothing
    allowed = {"expressions", "from_", "where", "order", "limit", "offset"}
    if any(v not in (None, [], False) for k, v in tree.args.items() if k not in allowed):
        return nothing
    if any(s is not tree for s in tree.find_all(exp.Select)) or tree.find(exp.Subquery):
        return nothing
    table = tables[0]
    if not isinstance(table.parent, exp.From):
        return nothing
    names = {table.name.lower(), (table.alias or table.name).lower()}

    def own(node) -> str | None:
        if not isinstance(node, exp.Column) or (node.table and node.table.lower() not in names):
            return None
        name = node.this.this if isinstance(node.this, exp.Identifier) else None
        quoted = node.this.quoted if isinstance(node.this, exp.Identifier) else False
        name = name if quoted else (name or "").lower()
        return name if name in VIEW_RELEASE_COLUMNS else None

    # an output alias named like a view column could be what WHERE / ORDER BY mean: leave them
    for e in tree.expressions:
        if (
            isinstance(e, exp.Alias)
            and e.alias.lower() in VIEW_RELEASE_COLUMNS
            and own(e.this) != e.alias.lower()
        ):
            return nothing
    out = Pushdown()
    where = tree.args.get("where")
    conds = (
        list(where.this.flatten())
        if where is not None and isinstance(where.this, exp.And)
        else ([where.this] if where is not None else [])
    )
    all_down = True
    for c in conds:
        got = _condition(c.unnest() if isinstance(c, exp.Paren) else c, own)
        if got is None:
            all_down = False
        else:
            out.where.append(got)
    plain = all(
        isinstance(e, (exp.Star, exp.Column)) or (isinstance(e, exp.Alias) and isinstance(e.this, exp.Column))
        for e in tree.expressions
    )
    if not (all_down and plain):
        return out
    order = tree.args.get("order")
    keys: list[tuple[str, bool]] = []
    for o in order.expressions if order is not None else []:
        col = own(o.this) if isinstance(o, exp.Ordered) else None
        if col is None or (keys and keys[-1][0] == "released_at"):
            return out  # released_at sorts as its timestamp: exact only as last key
        keys.append((col, bool(o.args.get("desc"))))
    limit, offset = tree.args.get("limit"), tree.args.get("offset")
    if limit is None:
        return out
    n = _int(limit.expression) if isinstance(limit, exp.Limit) else None
    skip = 0 if offset is None else _int(offset.expression)
    if n is None or skip is None:
        return out
    out.order, out.limit = keys, n + skip
    return out


# ----------------------------------------------------------------------------- the views


class Views:
    """dpgate's views, answered on their own executor and ledger connection."""

    def __init__(self, gateway, workers: int = 2):
        self.gw = gateway
        self.reads = ViewReads(gateway.ledger)
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="dpgate-views")
        self._local = threading.local()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.reads.close()

    async def run(self, sql: str, role: str, params: list | None = None):
        """``execute`` on the views' executor."""
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, self.execute, sql, role, list(params or ())
        )

    async def describe(self, sql: str, role: str, oids: list[int] | None = None):
        """(parameter type OIDs, columns) of a view query, on the views' executor."""
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, self.describe_now, sql, role, list(oids or ())
        )

    def describe_now(self, sql: str, role: str, oids: list[int]):
        tree = parse_view_query(sql)
        inferred = param_types(tree)
        types = [
            (oids[i] if i < len(oids) and oids[i] else 0) or (inferred[i] if i < len(inferred) else 25)
            for i in range(max(len(oids), len(inferred)))
        ]
        cols, _ = self._answer(bind(tree, None, types), role, fill=False)
        return types, cols

    def execute(self, sql: str, role: str, params: list | None = None):
        """Run a read-only SELECT over the role's view rows → (columns, rows)."""
        tree = parse_view_query(sql)
        return self._answer(bind(tree, params or []), role, fill=True)

    # -- rows -----------------------------------------------------------------
    def _budget(self, role: str) -> list[tuple]:
        cfg = self.gw.config
        roles = list(cfg.roles) if cfg.roles[role].admin else [role]
        pairs = [(r, cfg.tiers[cfg.roles[r].tier].period) for r in roles]
        spent = self.reads.spent_many(pairs)  # in the period the charge path enforces
        out = []
        for r, period in pairs:
            tier = cfg.tiers[cfg.roles[r].tier]
            s, d, key, unit = spent[(r, period)]
            zcdp = tier.accounting == "zcdp"
            if unit is not None and unit != unit_of(tier):  # spent in the other unit: nothing left
                left = 0.0
            else:
                left = max(tier.budget - s, 0.0)
            if zcdp:
                cd = tier.conversion_delta
                reading = (zcdp_epsilon(s, cd), cd + d) if unit in (None, "rho") else (None, None)
            else:
                reading = (s, d) if unit in (None, "eps") else (None, None)
            out.append(
                (
                    r,
                    cfg.roles[r].tier,
                    tier.epsilon,
                    s,
                    left,
                    tier.budget,
                    tier.period,
                    next_reset(tier.period, key=key),
                    d,
                    max(tier.delta_budget - d, 0.0),
                    tier.delta_budget,
                    tier.accounting,
                    tier.rho if zcdp else None,
                    *reading,
                )
            )
        return out

    def _releases(self, role: str, tree: exp.Expression) -> list[tuple]:
        admin = self.gw.config.roles[role].admin
        p = pushdown(tree)
        cap = p.limit if p.limit is not None else MAX_ROWS + 1
        rows = self.reads.release_rows(
            roles=None if admin else [role], where=p.where, order=p.order, limit=cap
        )
        if p.limit is None and len(rows) > MAX_ROWS:
            raise Refusal(
                "54000",
                f"this query would read more than {MAX_ROWS} releases",
                hint="Add WHERE role = … (an admin), or ORDER BY released_at DESC LIMIT n.",
            )
        return rows  # as stored: released_at and ε are computed in DuckDB (_RAW_RELEASES)

    def _duck(self) -> duckdb.DuckDBPyConnection:
        """This executor thread's private DuckDB (no file or network access)."""
        con = getattr(self._local, "con", None)
        if con is None:
            con = duckdb.connect(":memory:", config={"threads": 1, "memory_limit": "256MB"})
            con.execute("CREATE SCHEMA dpgate")
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            self._local.con = con
        return con

    def _answer(self, tree: exp.Expression, role: str, *, fill: bool):
        named = {t.name.lower() for t in tree.find_all(exp.Table)}
        tables: dict[str, tuple[list, list]] = {}
        if "coalition" in named:
            ccols, coalition = coalition_rows(self.gw, role)  # refuses non-admin roles (42501)
            tables["coalition"] = (
                list(ccols),
                list(coalition) + subset_coalition_rows(self.gw) if fill else [],
            )
        if "budget" in named:
            tables["budget"] = (BUDGET_COLUMNS, self._budget(role) if fill else [])
        if "releases" in named:
            tables["releases"] = (_RAW_RELEASES, self._releases(role, tree) if fill else [])
        con = self._duck()
        for name in VIEW_NAMES:  # this query's rows only: nothing stays from the last one
            if name not in tables:
                con.execute(f"DROP TABLE IF EXISTS dpgate.{name}")
        for name, (cols, rows) in tables.items():  # one columnar insert (few Python objects)
            view = RELEASE_COLUMNS if cols is _RAW_RELEASES else cols
            con.execute(
                f"CREATE OR REPLACE TABLE dpgate.{name} (" + ", ".join(f"{n} {t}" for n, t in view) + ")"
            )
            if rows:
                cells = ", ".join(f"UNNEST(${i + 1}::{t}[]) AS {n}" for i, (n, t) in enumerate(cols))
                values = _RELEASE_VALUES if cols is _RAW_RELEASES else ", ".join(n for n, _ in cols)
                con.execute(
                    f"INSERT INTO dpgate.{name} SELECT {values} FROM (SELECT {cells})",
                    [list(c) for c in zip(*rows)],
                )
        try:
            cur = con.execute(tree.sql(dialect="duckdb"))
            rows = cur.fetchall()
        except duckdb.Error as e:
            raise Refusal(
                "42601", f"cannot run this query on dpgate's views: {str(e).splitlines()[0]}", hint=None
            ) from None
        names = output_names(tree, [d[0] for d in cur.description])
        cols = [(n, _OIDS.get(str(d[1]).upper(), 25)) for n, d in zip(names, cur.description)]
        rows = [tuple(float(v) if isinstance(v, Decimal) else v for v in r) for r in rows]
        cols = [(n, 701 if o == 1700 else o) for n, o in cols]
        return cols, rows


def output_names(tree: exp.Expression, engine: list[str]) -> list[str]:
    """The result's column names as Postgres gives them (an alias, else the column's or the
    function's name — ``count``, ``sum`` —, else ``?column?``), not the engine's own
    (DuckDB names ``COUNT(*)`` ``count_star()``). ``SELECT *`` keeps the view's names."""
    if (
        not isinstance(tree, exp.Select)
        or any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star) for e in tree.expressions)
        or len(tree.expressions) != len(engine)
    ):
        return engine
    return [e.alias if isinstance(e, exp.Alias) else pg_name(e) for e in tree.expressions]
