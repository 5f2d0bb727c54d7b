"""Answers derived from earlier releases, at no privacy cost (ε 0, or ρ 0 on a zCDP tier).

A statement whose cells are arithmetic on cells this role was already given — a coarser
GROUP BY (sums of a finer release's cells), a total, AVG as a released SUM over a released
COUNT, a ratio, HAVING / ORDER BY / LIMIT, a subset of keys (a WHERE on a group key) — is
answered from those releases: post-processing of released values, so nothing is charged (the
post-processing property of differential privacy; Turbo and CacheDP answer linear queries
from earlier noisy answers in the same way). :mod:`rewriter.derive` decides from the plans
which releases a statement follows from; this module finds them in the ledger, computes the
statement's cells from their raw noisy cells and answers through :func:`.rows.answer_rows`
(the SQL's result over those cells: consistent values, HAVING, ORDER BY, LIMIT).

What is used, and what not:

* the role's own central releases of the current data version, of the same relation, privacy
  unit and bounds, WHERE and aggregate bounds (:func:`rewriter.derive.family`) — never
  another role's, another data version's, a ladder tier's (a ladder's releases are one noise
  chain whose levels may not be combined) or a sparse-vector / partition-selection release
  (its key set is not the whole public domain);
* the stored cells are the raw noisy values (consistency — a COUNT ≥ 0, an AVG within its
  bounds — is applied when rows are made, never stored), so a sum of cells is unbiased; the
  derived value is made consistent afterwards like any released one;
* a released AVG (Kulesza et al. 2024: hourglass) answers AVG over the same cells (a subset,
  HAVING, ORDER BY), not over a coarser GROUP BY — the weights, the cells' counts, are not in
  it — and neither a SUM nor a COUNT unless the statement released them beside it;
  COUNT(DISTINCT), VAR and STDDEV likewise answer their own cells only.

Error: the cells' noises are independent, so variances add: a sum of n cells of variance v
has variance n·v, and its 95% half-width is √n times one cell's (the one-cell half-width is
exact; its ratio to the standard deviation only falls towards 1.96 as cells are added, so
this is conservative; for the discrete Gaussian it is exact to first order). AVG = S/C:
(h_S + |AVG|·h_C)/C, at most the bounds' width.
A key is summed over only when every row lies in one of its cells (a CASE or boolean key;
a WHERE naming its values, ``k = 3`` / ``k IN (…)``, on any key): a row whose key is outside a
declared domain or its bounds is in no cell (:mod:`rewriter.cells`), and the SQL's total
counts it. A sum over a coarser GROUP BY has the contribution bounding of the finer release
(a unit in more of its cells than the bound counts in that many): the NOTICE says so.

``SET dpgate.derive``: ``auto`` (default: derive when every derived value's half-width is at
most :data:`AUTO_RATIO` times what a fresh release by the statement's own mechanisms would
give), ``on``
(whenever possible), ``off``, or a number (that ratio).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from dataclasses import dataclass, field

from rewriter.derive import (
    SIGNATURE_VERSION,
    SUMMABLE,
    CellMap,
    agg_signature,
    cell_map,
    derivable,
    signature,
    table_prefix,
    where_variants,
)
from rewriter.plan import Aggregate, Plan

from ..wire.api import Result, SqlError
from .common import cell_key
from .notice import stated_warning
from .release import releases_of
from .rows import answer_rows

__all__ = ["AUTO_RATIO", "Derivation", "answer", "explain_line", "find", "mark"]

AUTO_RATIO = 2.0
"""``dpgate.derive = auto``: the largest derived/fresh 95% half-width ratio answered from earlier releases."""
SLACK = 1.01  # a ratio is compared with 1% to spare: half-widths are rounded to the mechanisms' integer grids

MAX_CANDIDATES = 256  # most recent releases of the table looked at per statement (id and text)
MAX_DECODED = 16  # … of which at most this many, of a matching family, are read and decoded
_KINDS = ("central", "svt")  # the kinds whose statements may be derived (public cells)
_STATEMENT_CHARS = 72
HEAVY_CELLS = 256  # a derived answer this large is turned into rows on a thread


def mark(plan: Plan, answer: dict) -> dict:
    """``answer`` (a central release of ``plan``) with what later statements are derived
    from it by (:func:`rewriter.derive.signature`)."""
    if derivable(plan) and not plan.selected:
        answer["derive"] = signature(plan)
    return answer


@dataclass
class Source:
    """One earlier release: ledger id, statement text, its answer and the statement's cells on it."""

    id: int
    statement: str
    answer: dict
    cells: CellMap

    def position(self, sig: str) -> int | None:
        sigs = self.answer["derive"]["aggs"]
        return sigs.index(sig) if sig in sigs else None


@dataclass
class Derivation:
    """A statement's cells computed from earlier releases: ``answer`` in the form
    :func:`.rows.answer_rows` reads; per aggregate, how (``how``) and from which releases."""

    plan: Plan
    answer: dict
    sources: list[Source]
    how: list[str] = field(default_factory=list)
    fresh: list[float | None] = field(default_factory=list)  # a fresh release's half-widths

    def ratio(self) -> float:
        """The largest derived/fresh half-width ratio (0 when none is known)."""
        out = 0.0
        for h, f in zip(self.answer["half_width"], self.fresh):
            if f is not None and f > 0:
                out = max(out, h / f)
        return out


def _threshold(conn) -> float | None:
    """The ratio ``SET dpgate.derive`` allows (None: off; inf: on)."""
    settings = getattr(getattr(conn, "session", None), "settings", None) or {}
    raw = str(settings.get("dpgate.derive", "") or "auto").strip().lower()
    if raw == "auto":
        return AUTO_RATIO
    if raw in ("on", "true", "1", "yes"):
        return math.inf
    if raw in ("off", "false", "0", "no"):
        return None
    try:
        r = float(raw)
    except ValueError:
        r = math.nan
    if not r > 0:
        raise SqlError(
            "22023",
            f"dpgate.derive must be auto, on, off or a positive ratio, not {raw!r}",
            hint="SET dpgate.derive = auto (derived when its error is at most twice a fresh release's), on, or off.",
        )
    return r


def _cells_plan(p) -> Plan | None:
    plan = getattr(p, "plan", None)
    if getattr(p.kind, "name", "") not in _KINDS or not isinstance(plan, Plan):
        return None
    if plan.selection is not None:  # HAVING / top-c: over every derived cell (post-processing)
        plan = _without_selection(plan)
    return plan if derivable(plan) else None


def _without_selection(plan: Plan) -> Plan:
    out = dataclasses.replace(plan, selection=None)
    out.memo.domain = plan.memo.domain
    return out


async def find(conn, plan: Plan, data_version: int, budget) -> Derivation | None:
    """The derivation of ``plan`` for ``conn``'s role from its releases at ``data_version``
    with the least error, or None; ``budget``: what a fresh release's measurements would be
    given (its error is the yardstick). Reads the ledger; the work runs off the event loop."""
    gw = conn.gw
    rows = await gw.ledger_read(
        gw.ledger.releases_like, conn.role, data_version, table_prefix(plan), MAX_CANDIDATES
    )
    if not rows:
        return None

    def read(key: str):  # a candidate's stored answer (its MAC checked when decoded)
        stored = gw.ledger.lookup(conn.role, key, data_version)
        return None if stored is None else stored.answer

    return await asyncio.to_thread(_derive, plan, rows, read, budget, _nullable(gw, plan))


def _nullable(gw, plan: Plan):
    """Whether a column of ``plan``'s table may be NULL (True when unknown): COUNT(*) stands
    for COUNT(x) of a column that is never NULL."""
    table = gw.config.tables.get(plan.table)
    cols = getattr(table, "columns", {}) or {}

    def nullable(name: str | None) -> bool:
        spec = cols.get(name) if name is not None and not plan.joins else None
        return True if spec is None else bool(getattr(spec, "nullable", True))

    return nullable


def _derive(plan: Plan, rows, read, budget, nullable) -> Derivation | None:
    """``rows``: candidates (id, key, canonical, statement), newest first; ``read(key)``: a
    candidate's stored answer. At most :data:`MAX_DECODED` of those whose family text
    matches one of ``plan``'s are read."""
    variants = where_variants(plan)
    sources: list[Source] = []
    decoded = 0
    for rid, key, canonical, statement in rows:
        for v in variants:
            if not canonical.startswith(v.prefix):
                continue
            if decoded >= MAX_DECODED:
                break
            decoded += 1
            ans = read(key)
            sig = ans.get("derive") if isinstance(ans, dict) else None
            if not sig or sig.get("v") != SIGNATURE_VERSION or sig.get("family") != v.family():
                break
            cm = cell_map(plan, sig["keys"], ans["keys"], v.removed, cell_key)
            if cm is not None:
                sources.append(Source(rid, statement, ans, cm))
            break
    if not sources:
        return None
    return _combine(plan, sources, budget, nullable)


def _combine(plan: Plan, sources: list[Source], budget, nullable) -> Derivation | None:
    """Each aggregate from the source that gives it with the least error."""
    n_cells = len(plan.cells)
    values = [[None] * len(plan.aggregates) for _ in range(n_cells)]
    hws, how, used = [0.0] * len(plan.aggregates), [""] * len(plan.aggregates), []
    counts: dict[int, list] = {}  # an AVG's derived counts (its fresh error depends on them)
    src_eps: dict[int, float] = {}  # an aggregate taken as it is: the ε it was released at
    for j, a in enumerate(plan.aggregates):
        best = None
        for s in sources:
            got = _one(a, s, nullable)
            if got is not None and (best is None or got[1] < best[1]):
                best = (*got, s)
        if best is None:
            return None
        col, hw, text, n, e, s = best
        if n is not None:
            counts[j] = n
        if e is not None:
            src_eps[j] = e
        for c in range(n_cells):
            values[c][j] = col[c]
        hws[j], how[j] = hw, f"{a.label}: {text} of release #{s.id}"
        if s not in used:
            used.append(s)
    keys = [[cell_key(v) for v in cell] for cell in plan.cells]
    answer = {
        "keys": keys,
        "values": values,
        "half_width": hws,
        "mechanism": ["derived"] * len(plan.aggregates),
        # no "epsilon": a derived value was measured by no one mechanism, so the error bars of
        # ``dp_interval_low/high`` (:mod:`.errorbars`) are NULL for it; the NOTICE states its error
        "labels": [a.label for a in plan.aggregates],
    }
    d = Derivation(plan, answer, used, how)
    d.fresh = _fresh(plan, budget, values, counts, src_eps, hws)
    return d


def _one(a: Aggregate, s: Source, nullable):
    """(column of values per cell, 95% half-width (max over cells), how) of aggregate ``a``
    from source ``s``, or None."""
    ans, cm = s.answer, s.cells
    most = cm.most
    j = s.position(agg_signature(a))
    if j is not None:
        hw = float(ans["half_width"][j])
        if most == 1:
            return [ans["values"][c[0]][j] for c in cm.cells], hw, "its cells", None, _eps(ans, j)
        if a.func in SUMMABLE:
            col = [_total(ans["values"][i][j] for i in c) for c in cm.cells]
            how = f"sums of up to {most} of its cells (variance {most}·v)"
            return col, hw * math.sqrt(most), how, None, None
        # an AVG over several of its cells: from their SUM and COUNT, if released beside it
    if a.func != "avg" or a.column is None or a.filter is not None or a.lower is None or a.upper is None:
        return None
    js = s.position(f"sum({a.column})[{a.lower},{a.upper}]")
    jc = s.position(f"count({a.column})[None,None]")
    if jc is None and not nullable(a.column):
        jc = s.position("count(*)[None,None]")
    if js is None or jc is None:
        return None
    hs, hc = float(ans["half_width"][js]) * math.sqrt(most), float(ans["half_width"][jc]) * math.sqrt(most)
    lo, hi = float(a.lower), float(a.upper)
    col, counts, worst = [], [], 0.0
    for c in cm.cells:
        total = _total(ans["values"][i][js] for i in c)
        count = _total(ans["values"][i][jc] for i in c)
        if count > 0:
            avg = total / count
            h = min((hs + abs(avg) * hc) / count, hi - lo)
        else:  # no count to divide by: the bounds' midpoint, as the mean mechanisms answer
            avg, h = 0.5 * (lo + hi), 0.5 * (hi - lo)
        col.append(avg)
        counts.append(count)
        worst = max(worst, h)
    what = "its SUM over its COUNT" + (f", each summed over up to {most} cells" if most > 1 else "")
    return col, worst, what, counts, None


def _eps(ans: dict, j: int) -> float | None:
    """The ε its mechanism ran at of a stored aggregate, if the answer says."""
    eps = ans.get("epsilon")
    try:
        return float(eps[j]) if isinstance(eps, list) and eps[j] else None
    except (IndexError, TypeError, ValueError):
        return None


def _total(values) -> float | int:
    out = 0
    for v in values:
        out += v if v is not None else 0
    return out


def _fresh(
    plan: Plan,
    budget,
    values: list[list],
    counts: dict[int, list],
    src_eps: dict[int, float],
    hws: list[float],
) -> list[float | None]:
    """Per aggregate, the 95% half-width a fresh release of ``plan`` would have, from the
    measurements its kind would run (``budget``: what they are given, the tier's ε over the
    unit's factor or a zCDP tier's ρ; :func:`.release.releases_of`) — an AVG at each cell's
    derived count and value, the largest over the cells (post-processing of released
    values). Where the mechanism states none before the data (an AVG taken as released, VAR),
    an aggregate taken as it is on a pure-ε tier scales as 1/ε: the derived half-width times
    the ε it was released at over a fresh release's share. None otherwise."""
    groups, shares, ms = releases_of(plan, budget)
    out: list[float | None] = [None] * len(plan.aggregates)
    share: list[float | None] = [None] * len(plan.aggregates)
    for (i, members), e, m in zip(groups, shares, ms):
        for j in [i, *members]:
            share[j] = float(e) if isinstance(e, (int, float)) and isinstance(budget, (int, float)) else None
            out[j] = _half_width(plan.aggregates[j], m, j == i, counts.get(j), values, j)
    for j, h in enumerate(out):
        e = share[j]
        if h is None and j in src_eps and e:
            out[j] = hws[j] * src_eps[j] / e
    return out


def _half_width(a: Aggregate, m, primary: bool, ns, values: list[list], j: int) -> float | None:
    """A fresh release's 95% half-width of aggregate ``a`` by measurement ``m`` (``primary``: its
    own; else a SUM or COUNT part of an AVG's), or None when ``m`` states none here."""
    try:
        if not primary:
            part = getattr(m, "sum_half_width" if a.func == "sum" else "count_half_width", None)
            return float(part()) if callable(part) else None
        hw = getattr(m, "half_width", None)
        if not callable(hw):
            return None
        if a.func == "avg":
            if ns is None:
                return None
            return max(float(hw(0.95, n_hat=float(n), avg_hat=float(v[j]))) for n, v in zip(ns, values))
        return float(hw())
    except Exception:  # a mechanism whose half-width needs what is not known here
        return None


def _quote(statement: str) -> str:
    text = " ".join(statement.split())
    return text if len(text) <= _STATEMENT_CHARS else text[: _STATEMENT_CHARS - 1] + "…"


def body(d: Derivation) -> str:
    """The NOTICE after its common head: the releases used, how, the error, the caveats."""
    names = "; ".join(f"#{s.id} “{_quote(s.statement)}”" for s in d.sources)
    plan, hws = d.plan, d.answer["half_width"]
    shown = [f"{o.name} ±{hws[o.index]:.4g}" for o in plan.outputs if o.source == "aggregate"]
    if not shown:
        shown = [f"{a.label} ±{h:.4g}" for a, h in zip(plan.aggregates, hws)]
    parts = [
        f"derived from earlier release(s) {names} by post-processing (no ε)",
        "; ".join(d.how),
        "95% half-width: "
        + ", ".join(shown)
        + (" (variances of independent cells add)" if any(s.cells.most > 1 for s in d.sources) else ""),
    ]
    rolled = sorted({k for s in d.sources for k in s.cells.rolled if k not in s.cells.filtered})
    mine = {g.column for g in plan.group_by}  # (a WHERE on a key of the statement: its own cells)
    filtered = sorted({k for s in d.sources for k in s.cells.filtered if k not in mine})
    if rolled:
        parts.append("summed over " + ", ".join(rolled))
    if filtered:
        parts.append("cells chosen by the WHERE on " + ", ".join(filtered))
    if plan.unit is not None and any(s.cells.rolled or s.cells.filtered for s in d.sources):
        parts.append(
            f"each {plan.unit.name}'s contribution bounded as in that release "
            f"(at most {plan.unit.max_groups} of its cells)"
        )
    parts.append("SET dpgate.derive = off for a fresh release")
    return "; ".join(parts)


async def answer(conn, p, dv: int, tier, spent: float, head) -> tuple[Result, str, float] | None:
    """``p`` answered from this role's earlier releases at ε 0, or None (released as usual).
    ``head``: the NOTICE's common part (:func:`.kind.notice_head`)."""
    plan = _cells_plan(p)
    budget = getattr(p.state, "mech_eps", None)  # (a central kind's state: what its mechanisms run at)
    if plan is None or budget is None:
        return None
    limit = _threshold(conn)
    if limit is None:
        return None
    d = await find(conn, plan, dv, budget)
    if d is None or d.ratio() > limit * SLACK:
        return None
    big = len(d.answer["keys"]) >= HEAVY_CELLS  # a large answer's rows off the event loop
    rows = await asyncio.to_thread(answer_rows, plan, d.answer) if big else answer_rows(plan, d.answer)
    msg = head(
        charged=0.0,
        remaining=tier.budget - spent,
        budget=tier.budget,
        period=tier.period,
        repeat=False,
        tier=tier,
    )
    warning = stated_warning(plan, d.answer, rows)  # post-processing of the released values
    text = f"{warning}\n{msg}{body(d)}" if warning else msg + body(d)
    return Result(f"SELECT {len(rows)}", p.columns, rows, notices=[text]), "derived", 0.0


async def explain_line(conn, plan: Plan, budget) -> str | None:
    """EXPLAIN's line when the statement would be answered from earlier releases (ε 0);
    ``budget``: what a fresh release's measurements would be given."""
    if not isinstance(plan, Plan):
        return None
    if plan.selection is not None:
        plan = _without_selection(plan)
    if not derivable(plan):
        return None
    limit = _threshold(conn)
    if limit is None:
        return None
    d = await find(conn, plan, await conn.gw.ledger_read(conn.gw.ledger.data_version), budget)
    if d is None:
        return None
    ids = ", ".join(f"#{s.id}" for s in d.sources)
    if d.ratio() > limit * SLACK:
        return (
            f"derivable from earlier release(s) {ids} at ε 0, but with {d.ratio():.3g}× the error of a "
            f"fresh release (dpgate.derive allows {limit:g}×): released fresh"
        )
    return f"answered from earlier release(s) {ids} at ε 0 (post-processing: " + "; ".join(d.how) + ")"
