"""Local (metric-LDP) tables through the proxy (Xiang et al. 2020, metric-LDP spec §8).

* ``INSERT INTO <local table> … VALUES …``: the proxy buckets and perturbs every
  row (:class:`proxy.ingest.ldp_load.Encoder`, randomness from ``gw.source``) and writes
  only the reports to ``<table>_reports`` (created if missing). The raw values
  never reach the backend. INSERT into any other table is refused (42501). Writing
  is a permission: only roles whose config grants the table (``[roles.X] insert =
  ["trips"]``) may, at most ``insert_rows_per_minute`` rows a minute (a token bucket
  per role and proxy, :class:`RowBucket`); both are checked before anything is
  perturbed or stored (42501 / 53400).
* ``SELECT`` on a local table: :func:`rewriter.local.plan_local` validates it and
  builds ONE aggregate scan over the reports (estimators in the product form of
  §3.5); the rows are post-processing of reports that were perturbed once, so
  nothing is charged (ε 0, decision ``ldp``) and nothing needs to be stored in the
  ledger: the same query over the same reports always gives the same answer.
  The NOTICE says so and gives each estimate's standard deviation (§4.2: the
  unbiased variance estimate of the same scan, clamped into the exact bounds over
  all data sets of that size), or for percentiles a 95% rank-error bound.
  The query-time options (edge buckets, quantile point, isotonic CDF, clip; config or
  ``SET dpgate.local_*``, :mod:`.local_options`) are named in the NOTICE and EXPLAIN.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
import weakref
from typing import TypeVar

import numpy as np
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from mechanisms.metric_ldp import Query, notice_std, prefix_width, quantile, variance_bounds
from mechanisms.snr import additive_each, mean_rule, rank_share_rule
from rewriter import dialects, parse
from rewriter.errors import Refusal
from rewriter.local import LocalPlan, layout, plan_local
from rewriter.local_subset import SubsetPlan
from rewriter.lru import LRU
from rewriter.values import literal_value

from ..ingest.ldp_load import Encoder, IngestError
from ..ingest.ldp_specs import check_layout, guarantee
from ..wire.api import Column, Description, Result, SqlError
from .kind import HEAVY_ROWS, Prepared, ReleaseKind, fetch, plan_as
from .local_bind import BoundAgg, bind, scan, scan_columns
from .local_options import count_value, disc_value, overrides_of, prefix_values
from .local_reports import ensure_reports
from .local_subset import answer_subset, explain_subset
from .notice import warning_line

__all__ = [
    "LOCAL",
    "SUBSET",
    "Local",
    "Subset",
    "insert_local",
    "describe_local",
    "describe_guarantee",
    "explain_local",
    "local_guarantees",
    "ensure_reports",
    "local_answer",
]

TYPE_OIDS = {"int": 20, "float": 701, "text": 25, "bool": 16}
DELTA = 0.05  # percentile rank-error bounds hold with probability 1 - DELTA
_PLANS: LRU = LRU(512)
_BUCKETS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_WRITES: weakref.WeakKeyDictionary = (
    weakref.WeakKeyDictionary()
)  # Backend.serial_writes: one INSERT at a time


def describe_guarantee(name: str, table, tiers: dict | None = None) -> str:
    """One line for ``dpgate serve``: where the reports live and the per-record guarantee."""
    lay = layout(name, table, tiers)
    check_layout(lay)
    groups = "; ".join("(" + ", ".join(g.columns) + ")" for g in lay.groups) or "none"
    cats = "".join(f"; Subset {c.name} for ladder {c.ladder_name}" for c in lay.categories)
    return (
        f"  local table {name} (metric LDP, reports in {lay.reports}; joint {groups}{cats}; "
        f"estimator {lay.estimator}): {guarantee(lay)} per record, perturbed once at "
        "ingestion; queries charge no budget"
    )


# ---------------------------------------------------------------------------- backend
async def _fetch(conn, sql: str, write: bool = False) -> list[tuple]:
    async with conn.gw.statement_slot(conn.role):
        return await fetch(conn, sql, write=write)


# ---------------------------------------------------------------------------- SELECT
def _plan(gw, sql: str, params, overrides: tuple = (), stmt=None) -> LocalPlan | SubsetPlan:
    """The plan of ``sql`` (kept by text); ``stmt``: its :class:`.kind.Statement`, whose parse
    the planner takes when it plans."""
    key = (id(gw), id(gw.config), sql, tuple((type(p).__name__, p) for p in params or ()), overrides)
    hit = _PLANS.get(key)
    if hit is not None:
        return hit
    plan = plan_local(
        stmt.tree() if stmt is not None else parse(sql), gw.config, list(params or []), overrides
    )
    _PLANS.put(key, plan)
    return plan


_V = TypeVar("_V")


def _need(value: _V | None, what: str) -> _V:
    """``value``, which the local planner sets for every aggregate of the kind that reads it;
    None is an internal error."""
    if value is None:
        raise SqlError("XX000", f"internal error: a local aggregate without its {what}")
    return value


def _columns(plan: LocalPlan | SubsetPlan) -> list[Column]:
    return [Column(o.name, TYPE_OIDS[o.type]) for o in plan.outputs]


class Local(ReleaseKind):
    """A SELECT on a local (metric-LDP) table (Xiang et al. 2020): one aggregate scan over reports
    that were perturbed once at ingestion; post-processing, nothing charged."""

    name = "local"

    async def plan(self, conn, stmt, params: list) -> Prepared:
        plan = _plan(conn.gw, stmt.sql, params, overrides_of(conn), stmt)
        if isinstance(plan, SubsetPlan):  # a categorical Subset column (Wang et al. 2026 §5)
            return Prepared(SUBSET, plan, [])
        return Prepared(self, plan, _columns(plan))

    async def answer_free(self, conn, p: Prepared):
        gw, plan = conn.gw, plan_as(p, LocalPlan)
        await ensure_reports(gw, plan.layout)
        text, _ = scan(plan, gw.backend.dialect)
        cells = await _fetch(conn, text)
        if len(cells) >= HEAVY_ROWS:  # off the event loop
            rows, msg = await asyncio.to_thread(local_answer, plan, cells)
        else:
            rows, msg = local_answer(plan, cells)
        return Result(f"SELECT {len(rows)}", p.columns, rows, notices=[msg]), "ldp", 0.0

    async def describe(self, conn, stmt, oids: list[int]) -> Description:
        return await describe_local(conn, stmt.sql, oids, stmt)

    async def explain(self, conn, stmt, params: list, plan=None) -> Result:
        return await explain_local(conn, stmt.sql, params, stmt)


class Subset(Local):
    """A SELECT of a categorical Subset column of a local table (multi-tier release, Wang et al. 2026 §5): each tier
    reads its own level of the ladder the rows were perturbed with; nothing charged."""

    name = "subset"

    async def answer_free(self, conn, p: Prepared):
        return await answer_subset(conn, plan_as(p, SubsetPlan), _fetch)


LOCAL, SUBSET = Local(), Subset()


def _num(v):
    if v is None:
        return None
    return float(v)


def _avg_std(
    plan: LocalPlan,
    a,
    b: BoundAgg,
    n: int,
    num: float,
    den: float,
    var_num: float | None,
    wmax: float | None,
    exact_den: bool,
) -> float:
    """Std of AVG = num/den. Exact den: std(num)/den. Otherwise the delta method with
    the linearised query num - avg*den, bounded over all data sets of n reports."""
    spec, est = _need(b.spec, "group"), plan.layout.estimator
    q, dq = _need(b.query, "query"), _need(b.den, "denominator")
    avg = num / den
    if exact_den:
        bounds = variance_bounds(spec, q, n, est, wmax)
        return notice_std(var_num, bounds) / den
    if a.row_weight is not None:  # public weight: (w - avg) per record
        hi = variance_bounds(spec, q, n, est, (wmax or 0.0) + abs(avg))[1]
        return math.sqrt(hi) / den
    d0 = _diff_dim(q, dq, spec)
    ws = [dq.weight(spec, d) for d in range(spec.D)]
    ws[d0] = q.scale * q.weight(spec, d0) - avg * dq.scale * dq.weight(spec, d0)
    lin = Query(tuple(ws))
    return math.sqrt(variance_bounds(spec, lin, n, est)[1]) / den


def _diff_dim(q: Query, dq: Query, spec) -> int:
    for d in range(spec.D):
        if not np.array_equal(q.weight(spec, d), dq.weight(spec, d)):
            return d
    return 0


def local_answer(plan: LocalPlan, cells: list[tuple]) -> tuple[list[tuple], str]:
    """Rows (every group cell, then ORDER BY/LIMIT) and the NOTICE, from the scan's rows."""
    lay = plan.layout
    sc = scan_columns(plan)
    bound = bind(plan)
    k = len(plan.group_by)
    by_key = {}
    for cell in cells:
        by_key[tuple(_key(v) for v in cell[:k])] = cell
    keys = list(itertools.product(*[_need(g.domain, "group domain") for g in plan.group_by])) if k else [()]
    stds = [0.0] * len(plan.aggs)
    notes = [""] * len(plan.aggs)
    widths = {}
    n_total = 0
    out_rows = []
    for key in keys:
        row = by_key.get(tuple(key))
        n = int(row[sc.n]) if row is not None else 0
        n_total += n
        vals = []
        errs: list[float | None] = [None] * len(plan.aggs)  # 95% half-widths (pct: a rank share)
        for i, (a, s, b) in enumerate(zip(plan.aggs, sc.slots, bound)):
            get = (lambda j, row=row: _num(row[j])) if row is not None else (lambda j: None)
            if a.kind == "exact":
                v = get(s["value"])
                if a.func == "count":
                    v = int(v or 0)
                elif v is not None and a.out_type == "int":
                    v = int(round(v))
                vals.append(v)
                notes[i] = "exact"
                continue
            spec = _need(b.spec, "group")
            est = lay.estimator
            if a.kind == "est":
                v = get(s["value"]) or 0.0
                if a.func == "count":
                    v = count_value(plan.options, v, n)
                wmax = get(s["wmax"]) if "wmax" in s else None
                bounds = variance_bounds(
                    spec, _need(b.query, "query"), n, est, wmax if a.row_weight else None
                )
                std = notice_std(get(s["var"]), bounds) if n else 0.0
                stds[i] = max(stds[i], std)
                errs[i] = Z95 * std
                vals.append(int(round(v)) if a.out_type == "int" else float(v))
                continue
            if a.kind == "avg":
                num, den = get(s["value"]) or 0.0, get(s["den"]) or 0.0
                if den <= 0 or n == 0:
                    vals.append(None)
                    continue
                wmax = get(s["wmax"]) if "wmax" in s else None
                dq = _need(b.den, "denominator")
                exact_den = all(w is None for w in dq.weights) and dq.scale == 1.0
                std = _avg_std(
                    plan, a, b, n, num, den, get(s["var"]) if "var" in s else None, wmax, exact_den
                )
                stds[i] = max(stds[i], std)
                errs[i] = Z95 * std
                notes[i] = "bound"
                vals.append(float(num / den))
                continue
            # percentile
            den = get(s["den"]) or 0.0
            if den <= 0 or n == 0:
                vals.append(None)
                continue
            prefix = prefix_values(plan.options, [get(j) or 0.0 for j in s["prefix"]], den)
            p = min(max(_need(a.p, "quantile"), 1e-12), 1.0)
            res = quantile(
                [den, *prefix], p, spec, _need(a.dim, "dimension"), "cont" if a.cont else "disc", a.represent
            )
            v = disc_value(a, float(res.value))
            vals.append(int(round(v)) if a.out_type == "int" else v)
            if i not in widths:
                widths[i] = prefix_width(spec, b.prefixes, est)
            t = widths[i] * math.sqrt(n * math.log(2 * max(len(b.prefixes), 1) / DELTA) / 2) / den
            stds[i] = max(stds[i], t)
            errs[i] = t
            notes[i] = "rank"
        out_rows.append((key, vals, errs))
    pairs = [
        (tuple(key[o.index] if o.source == "group" else vals[o.index] for o in plan.outputs), errs)
        for key, vals, errs in out_rows
    ]
    for idx, desc in reversed(plan.order_by):
        nulls = [r for r in pairs if r[0][idx] is None]
        rest = sorted((r for r in pairs if r[0][idx] is not None), key=lambda r: r[0][idx], reverse=desc)
        pairs = nulls + rest if desc else rest + nulls
    start = plan.offset or 0
    pairs = pairs[start : None if plan.limit is None else start + plan.limit]
    msg = _notice(plan, stds, notes, n_total)
    warn = local_warning(plan, pairs)
    return [r for r, _ in pairs], f"{warn}\n{msg}" if warn else msg


def local_warning(plan: LocalPlan, rows: list[tuple[tuple, list]]) -> str:
    """The warning line of a local-table answer (empty when no value is mostly noise): each
    returned row's estimate judged by the rule of its kind at its own 95% half-width, from the
    estimator's variance over the reports (metric-LDP spec §4.2; the reports are already
    private, so this is post-processing) — a COUNT/SUM by the additive rule, an AVG of a
    private column against a quarter of its [lo, hi], a percentile by its rank-error bound
    (:mod:`mechanisms.snr`). ``rows``: (the row, per aggregate its half-width or rank share)."""
    parts = []
    for k, o in enumerate(plan.outputs):
        if o.source != "aggregate":
            continue
        a = plan.aggs[o.index]
        errs = [(r[k], e[o.index]) for r, e in rows if e[o.index] is not None]
        if a.kind == "est":
            parts.append((o.name, additive_each([v for v, _ in errs], [h for _, h in errs])))
        elif a.kind == "avg" and (span := _private_range(plan, a)) is not None and errs:
            parts.append((o.name, mean_rule([v for v, _ in errs], max(h for _, h in errs), *span)))
        elif a.kind == "pct" and a.p is not None and errs:
            parts.append((o.name, rank_share_rule([t for _, t in errs], a.p, 1 - DELTA)))
    return warning_line(parts)


def _private_range(plan: LocalPlan, a) -> tuple[float, float] | None:
    """The public [lo, hi] of the private column an AVG averages, or None (not a private value column)."""
    where = plan.layout.where.get(a.column) if a.column else None
    if where is None:
        return None
    dim = plan.layout.groups[where[0]].dims[where[1]]
    return (dim.lo, dim.hi) if dim.kind == "value" else None


def _key(v):
    if v is None or isinstance(v, (bool, str)):
        return v
    f = float(v)
    return int(f) if f.is_integer() and not isinstance(v, float) else v


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1e5 else f"{x:.4g}"


def _notice(plan: LocalPlan, stds, notes, n_total: int) -> str:
    lay = plan.layout
    parts = []
    many = plan.n_cells > 1
    for o in plan.outputs:
        if o.source != "aggregate":
            continue
        i = o.index
        if notes[i] == "exact":
            parts.append(f"{o.name} exact (public columns only)")
        elif notes[i] == "rank":
            parts.append(f"{o.name} rank error ≤ {100 * stds[i]:.2g}% (95%)")
        elif notes[i] == "bound":
            parts.append(f"{o.name} ±{_fmt(stds[i])} (bound)")
        else:
            parts.append(f"{o.name} ±{_fmt(stds[i])}")
    est = any(a.kind != "exact" for a in plan.aggs)
    std = f"; std: {', '.join(parts)}" + (" (max over rows)" if many and est else "")
    return (
        f"dpgate: ε charged 0 (local table {lay.name}: metric-LDP reports perturbed once at "
        f"ingestion; answers are post-processing, no budget is used); {n_total:,} reports"
        f"{std}; estimator {lay.estimator}, {plan.options.text(plan.private)}; guarantee per "
        f"record {guarantee(lay)}"
    )


# ---------------------------------------------------------------------------- INSERT
def _read_only(gw) -> SqlError:
    local = sorted(n for n, t in gw.config.tables.items() if t.mode == "local")
    where = f" ({', '.join(local)})" if local else ""
    return SqlError(
        "42501",
        f"INSERT is only accepted into local (metric-LDP) tables{where}; dpgate is otherwise read-only",
        hint="Local tables store perturbed reports only; other tables are read with "
        "aggregate SELECT queries.",
    )


def _insert_target(gw, sql: str):
    expr = parse(sql)
    if not isinstance(expr, exp.Insert):
        raise _read_only(gw)
    expr = normalize_identifiers(expr, dialect="postgres")
    target = expr.this
    cols = None
    if isinstance(target, exp.Schema):
        cols = [c.name for c in target.expressions]
        target = target.this
    if not isinstance(target, exp.Table) or target.args.get("catalog") is not None:
        raise _read_only(gw)
    schema = target.args.get("db")
    table = gw.config.tables.get(target.name)
    if (schema is not None and schema.name != "public") or table is None or table.mode != "local":
        raise _read_only(gw)
    return expr, target.name, table, cols


def _check_grant(gw, role: str, name: str) -> None:
    """42501 unless the config grants ``role`` INSERT into local table ``name``."""
    spec = gw.config.roles.get(role)
    if spec is None or name not in spec.insert:
        raise SqlError(
            "42501",
            f"permission denied for table {name}",
            hint=f"Writing into a local table is granted per role in the config: "
            f'[roles.<role>] insert = ["{name}"]. Reading it needs no grant.',
        )


class RowBucket:
    """Token bucket of one role: ``rate`` rows a minute, at most ``rate`` at once.
    :meth:`take` removes ``n`` tokens or raises 53400 (nothing taken); :meth:`give`
    returns them (an INSERT that then failed stored nothing)."""

    def __init__(self, rate: int, clock=time.monotonic):
        self.rate, self.clock = rate, clock
        self.tokens, self.at = float(rate), clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(float(self.rate), self.tokens + (now - self.at) * self.rate / 60.0)
        self.at = now

    def take(self, role: str, n: int) -> None:
        self._refill()
        hint = (
            f"Role {role} may INSERT {self.rate} rows per minute (insert_rows_per_minute in its "
            "config); for bulk loads the operator runs `dpgate ldp-load`."
        )
        if n > self.rate:
            raise SqlError(
                "53400",
                f"an INSERT of {n} rows exceeds role {role}'s limit of {self.rate} "
                "rows per minute; nothing was stored",
                hint="Split it into smaller INSERTs. " + hint,
            )
        if n > self.tokens:
            wait = math.ceil((n - self.tokens) * 60.0 / self.rate)
            raise SqlError(
                "53400",
                f"row rate limit reached for role {role}: {n} rows asked, "
                f"{int(self.tokens)} available; retry in {wait} s; nothing was stored",
                hint=hint,
            )
        self.tokens -= n

    def give(self, n: int) -> None:
        self.tokens = min(float(self.rate), self.tokens + n)


def _bucket(gw, role: str) -> RowBucket:
    rate = gw.config.roles[role].insert_rows_per_minute
    per_gw = _BUCKETS.setdefault(gw, {})
    b = per_gw.get(role)
    if b is None or b.rate != rate:
        b = per_gw[role] = RowBucket(rate)
    return b


_INSERT_ARGS = frozenset({"this", "expression"})
_INSERT_CLAUSES = {
    "with_": "WITH",
    "returning": "RETURNING",
    "conflict": "ON CONFLICT",
    "alternative": "OR REPLACE / OR IGNORE",
    "overwrite": "OVERWRITE",
    "where": "WHERE",
}


def _insert_shape(expr, name, table, cols):
    for k, v in expr.args.items():  # fail closed: only INSERT INTO t [(cols)] VALUES …
        if v and k not in _INSERT_ARGS:
            what = _INSERT_CLAUSES.get(k, k.rstrip("_").upper().replace("_", " "))
            raise SqlError(
                "0A000",
                f"INSERT with {what} is not supported on a local table",
                hint="Use INSERT INTO t (columns) VALUES (…), (…).",
            )
    values = expr.expression
    if not isinstance(values, exp.Values):
        raise SqlError(
            "0A000",
            "only INSERT … VALUES is accepted into a local table",
            hint=f"For bulk loads use `dpgate ldp-load --table {name} FILE.csv` (or --from-table SRC).",
        )
    declared = list(table.columns)
    if cols is None:
        cols = declared
    for c in cols:
        if c not in table.columns:
            raise SqlError(
                "42703",
                f"column {c} of local table {name} is not declared; declared columns: {', '.join(declared)}",
            )
    if len(set(cols)) != len(cols):
        raise SqlError("42701", "a column is listed twice in the INSERT")
    rows = []
    for t in values.expressions:
        items = t.expressions if isinstance(t, exp.Tuple) else [t]
        if len(items) != len(cols):
            raise SqlError("42601", f"INSERT has {len(items)} values for {len(cols)} columns")
        rows.append(items)
    return cols, rows


def _value(node, params, col: str):
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Cast):
        return _value(node.this, params, col)
    if isinstance(node, exp.Parameter):
        n = int(node.this.this) if isinstance(node.this, exp.Literal) else 0
        if not 1 <= n <= len(params):
            raise SqlError("08P01", f"the statement uses ${n} but {len(params)} parameter(s) were supplied")
        v = params[n - 1]
        return float(v) if type(v).__name__ == "Decimal" else v
    try:
        ok, v = literal_value(node)
    except Refusal as r:
        raise SqlError(r.sqlstate, r.message) from None
    if not ok:
        raise SqlError(
            "0A000",
            f"VALUES for column {col} must be a literal or a $n parameter, not {node.sql('postgres')}",
            hint="Compute values before inserting.",
        )
    return v


def _sql_value(v, dialect: str) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, float):
        return repr(v)
    return exp.Literal.string(str(v)).sql(dialect=dialect)


async def insert_local(conn, sql: str, params: list):
    """INSERT … VALUES into a local table: perturb in the proxy, store reports only."""
    gw = conn.gw
    expr, name, table, cols = _insert_target(gw, sql)
    _check_grant(gw, conn.role, name)  # before anything is perturbed or stored
    cols, rows = _insert_shape(expr, name, table, cols)
    params = list(params or [])
    data = {c: [_value(r[i], params, c) for r in rows] for i, c in enumerate(cols)}
    n = len(rows)
    bucket = _bucket(gw, conn.role)
    bucket.take(conn.role, n)  # counted per row, before perturbing
    try:
        lay = await ensure_reports(gw, layout(name, table, gw.config.tiers))  # as stored
        enc = Encoder(lay, gw.source).encode(data, n)
    except BaseException as e:
        bucket.give(n)  # refused before the write: nothing stored
        if isinstance(e, IngestError):
            raise SqlError(e.sqlstate, e.message, hint=e.hint) from None
        raise
    dialect = gw.backend.dialect
    q = dialects.get(dialect).quote
    schema = [c for c, _ in lay.report_schema()]
    tuples = ", ".join(
        "(" + ", ".join(_sql_value(enc[c][i], dialect) for c in schema) + ")" for i in range(n)
    )
    ins = f"INSERT INTO {q(lay.reports)} ({', '.join(q(c) for c in schema)}) VALUES {tuples}"
    # once the write is sent the rows stay counted, whatever its outcome
    if gw.backend.serial_writes:  # e.g. Spark: appends to one table share a directory
        async with _WRITES.setdefault(gw, asyncio.Lock()):  # this proxy sends one at a time
            await _fetch(conn, ins, write=True)
    else:
        await _fetch(conn, ins, write=True)
    return Result(f"INSERT 0 {n}"), "ldp-insert", 0.0


# ---------------------------------------------------------------------------- Describe
async def describe_local(conn, sql: str, oids: list[int], stmt=None) -> Description:
    """Describe (extended protocol) of a SELECT on a local table or of an INSERT (``stmt``: its
    :class:`.kind.Statement`, whose parse is read)."""
    gw = conn.gw
    tree = stmt.tree() if stmt is not None else parse(sql)
    if isinstance(tree, exp.Insert):  # from the parse, as the route
        expr, name, table, cols = _insert_target(gw, sql)
        _check_grant(gw, conn.role, name)
        cols, rows = _insert_shape(expr, name, table, cols)
        types: dict[int, str] = {}
        for r in rows:
            for node, c in zip(r, cols):
                while isinstance(node, (exp.Paren, exp.Cast)):
                    node = node.this
                if isinstance(node, exp.Parameter) and isinstance(node.this, exp.Literal):
                    types.setdefault(int(node.this.this), table.columns[c].type)
        n = max(types, default=0)
        inferred = [
            oids[i] if i < len(oids) and oids[i] else TYPE_OIDS.get(types.get(i + 1, ""), 25)
            for i in range(max(n, len(oids)))
        ]
        return Description(inferred, None)
    plan = plan_local(tree, gw.config, None)
    inferred = [
        oids[i] if i < len(oids) and oids[i] else TYPE_OIDS.get(t, 25) if t else 25
        for i, t in enumerate(plan.param_types)
    ]
    return Description(inferred, _columns(plan))


# ---------------------------------------------------------------------------- EXPLAIN
EXPLAIN_NS = (1_000, 10_000, 100_000)  # reports in a cell at which EXPLAIN states the error
Z95 = 1.959963984540054  # standard normal 97.5% point: 95% two-sided (CLT over reports)


def explain_widths(plan: LocalPlan, config) -> list[str]:
    """Per aggregate, its 95% half-width before any data is read, at n = 1,000 / 10,000 /
    100,000 reports in the cell: estimates ±z·σ_max(n), σ_max² the largest exact variance over
    all data sets of n reports (metric-LDP spec §4.2, :func:`mechanisms.metric_ldp.variance_bounds`:
    ∝ n); AVG by the delta method at the worse end of the column's range with the denominator
    n (every report in range; a narrower range has fewer, and a larger error); percentiles the
    rank-error bound of §3.10 at den = n. With a public row weight: × the largest |weight|."""
    lay = plan.layout
    out = []
    for a, b in zip(plan.aggs, bind(plan)):
        if a.kind == "exact":
            out.append("exact: no noise")
            continue
        spec = _need(b.spec, "group")
        wmax = 1.0 if a.row_weight else None
        per = " (× the largest |weight|)" if a.row_weight else ""
        if a.kind == "est":
            hw = [
                Z95 * math.sqrt(variance_bounds(spec, _need(b.query, "query"), n, lay.estimator, wmax)[1])
                for n in EXPLAIN_NS
            ]
        elif a.kind == "avg":
            dq = _need(b.den, "denominator")
            exact_den = all(w is None for w in dq.weights) and dq.scale == 1.0
            col = config.tables[lay.name].local.columns.get(a.column) if a.column else None
            ends = (col.lo, col.hi) if col is not None else (0.0,)
            hw = [
                Z95 * max(_avg_std(plan, a, b, n, v * n, float(n), None, wmax, exact_den) for v in ends)
                for n in EXPLAIN_NS
            ]
        else:
            w = prefix_width(spec, b.prefixes, lay.estimator)
            ranks = [
                100 * w * math.sqrt(n * math.log(2 * max(len(b.prefixes), 1) / DELTA) / 2) / n
                for n in EXPLAIN_NS
            ]
            out.append(
                "95% rank error ≤ "
                + ", ".join(f"{r:.2g}% at n = {n:,}" for r, n in zip(ranks, EXPLAIN_NS))
                + " reports"
            )
            continue
        out.append(
            "95% half-width "
            + ", ".join(f"±{_fmt(h)} at n = {n:,}" for h, n in zip(hw, EXPLAIN_NS))
            + f" reports{per}"
        )
    return out


async def explain_local(conn, sql: str, params: list, stmt=None) -> Result:
    """EXPLAIN of a local-table SELECT: the estimator, the guarantee and the ONE scan
    (nothing runs, nothing is charged)."""
    plan = _plan(conn.gw, sql, params, overrides_of(conn), stmt)
    if isinstance(plan, SubsetPlan):
        return await explain_subset(conn, plan)
    lay = plan.layout
    text, _ = scan(plan, conn.gw.backend.dialect)
    lines = [
        f" dpgate answer over local table {lay.name}: metric-LDP reports in {lay.reports}; "
        "post-processing, ε 0 charged",
        f"   guarantee per record: {guarantee(lay)}",
        f"   estimator {lay.estimator} (spec §3.5 product form)",
        f"   options (post-processing, spec §8): {plan.options.text(plan.private, True)}",
    ]
    what = {
        "exact": "exact over public columns",
        "est": "unbiased estimate, std from §4.2",
        "avg": "ratio of two estimates, std bound by the delta method",
        "pct": "binary search over all prefix estimates (§3.10), 95% rank-error bound",
    }
    rule = {  # when a returned value is mostly noise (local_warning; mechanisms.snr)
        "est": "; mostly noise when half-width ≥ |value|",
        "avg": "; mostly noise when half-width ≥ (hi − lo)/4 of the column",
        "pct": "; mostly noise when the rank error ≥ max(q, 1 − q)",
    }
    for a, width in zip(plan.aggs, explain_widths(plan, conn.gw.config)):
        lines.append(f"   {a.label}: {what[a.kind]}; {width}{rule.get(a.kind, '')}")
    lines += [" backend SQL (one scan):", "   " + text]
    return Result("EXPLAIN", [Column("QUERY PLAN", 25)], [(line,) for line in lines])


def local_guarantees(cfg) -> list[str]:
    """:func:`describe_guarantee` for every local table of ``cfg`` (ValueError, naming the
    field, if a table's local layout is invalid)."""
    return [describe_guarantee(name, t, cfg.tiers) for name, t in cfg.tables.items() if t.mode == "local"]
