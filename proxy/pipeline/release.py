"""From exact per-cell measures to a released answer, and from a stored answer to rows.

``noisy_answer`` is the only place where exact aggregates meet the mechanisms;
its output (the *answer*) holds released values only and is what the ledger
stores. ``answer_rows`` is post-processing (ORDER BY / LIMIT / column order) and
may run any number of times on a stored answer at no privacy cost.
"""

from __future__ import annotations

import datetime
import threading
from collections import OrderedDict
from operator import itemgetter

from mechanisms import GeometricCount, LaplaceSum, split
from mechanisms.mean import make_mean
from mechanisms.once import single_flight
from mechanisms.svt import QueryShape, svt_select
from mechanisms.variance import VARIANCE_FUNCS, MomentVariance
from rewriter.plan import Aggregate, Plan
from rewriter.postprocess import aggregates_in
from rewriter.unit import describe, factor

from ..stores.answer import ColumnarAnswer, cell_count
from ..wire.api import ColumnRows
from .columnar import CellColumns
from .common import cell_key, fmt, plain_number
from .postexpr import evaluate, post_process, rollup

TYPE_OIDS = {
    "int": 20,
    "float": 701,
    "text": 25,
    "bool": 16,
    "numeric": 1700,
    "date": 1082,
    "timestamp": 1114,
}


def measurement_for(agg: Aggregate, epsilon: float):
    """The mechanism for one aggregate at ``epsilon``: two-sided geometric COUNT,
    discrete-Laplace SUM on a fixed-point grid, and for AVG the add-remove optimal
    mean of Kulesza et al. 2024 (Algorithm 3 with hourglass noise unless the column's config
    chooses ``laplace_transformed`` or ``shifted_laplace``). Measurements hold no
    per-release state, so one instance per (aggregate kind, bounds, ε) is reused — built once
    even by concurrent first statements (single flight), its half-width tables shared."""
    return _measurement(agg.func, agg.mechanism, agg.type == "int", agg.lower, agg.upper, float(epsilon))


@single_flight(maxsize=1024)
def _measurement(func: str, mechanism, integer: bool, lower, upper, epsilon: float):
    if func in ("count", "count_distinct"):  # COUNT(DISTINCT col): sensitivity 1 too
        return GeometricCount(epsilon)
    if func in VARIANCE_FUNCS:
        return MomentVariance(epsilon, lower, upper, integer=integer, func=func)
    if func == "sum":
        return LaplaceSum(epsilon, lower, upper, integer=integer)
    if func == "avg":
        return make_mean(mechanism or "hourglass", epsilon, lower, upper, integer=integer)
    raise ValueError(f"no mechanism for {func}")


def release_groups(plan: Plan) -> list[tuple[int, list[int]]]:
    """Aggregates answered by one release: (primary, [members]). AVG(x) also answers
    SUM(x) and COUNT(x) of the same column (Kulesza et al. 2024 §2: post-processing of one
    release, charged once); VAR_POP/VAR_SAMP/STDDEV_*(x) of one column are one release
    of its noisy moments, which answers COUNT(x) too; every other aggregate is its own release."""
    groups, taken = [], set()
    for i, a in enumerate(plan.aggregates):  # VAR/STDDEV(x): one release of x's moments
        if a.func in VARIANCE_FUNCS and i not in taken:
            members = [
                j
                for j, b in enumerate(plan.aggregates)
                if j != i
                and j not in taken
                and b.column == a.column
                and (b.func in VARIANCE_FUNCS or b.func == "count")
            ]
            taken.update(members + [i])
            groups.append((i, members))
    for i, a in enumerate(plan.aggregates):
        if a.func == "avg" and i not in taken:
            members = [
                j
                for j, b in enumerate(plan.aggregates)
                if j != i and j not in taken and b.column == a.column and b.func in ("sum", "count")
            ]
            taken.update(members + [i])
            groups.append((i, members))
    for i in range(len(plan.aggregates)):
        if i not in taken:
            groups.append((i, []))
    return groups


def split_epsilon(plan: Plan, epsilon: float) -> list[float]:
    """ε per aggregate: sequential composition over the statement's releases (equal
    shares; an AVG's SUM/COUNT share its release); cells are disjoint, so parallel
    composition makes the cells free."""
    groups = release_groups(plan)
    shares = [float(e) for e in split(epsilon, len(groups))]
    out = [0.0] * len(plan.aggregates)
    for (i, members), e in zip(groups, shares):
        out[i] = e
        for j in members:
            out[j] = e
    return out


def _time_key(v, typ: str):
    """A date/timestamp group value of a stored answer (ISO text) as the value sent."""
    if v is None or typ not in ("date", "timestamp"):
        return v
    return datetime.date.fromisoformat(v) if typ == "date" else datetime.datetime.fromisoformat(v)


def releases_of(plan: Plan, epsilon: float):
    """(release groups, ε shares, measurements) of ``plan`` at ``epsilon``, computed
    once per plan (kept beside its frozen fields, like ``Plan.canonical``)."""
    memo = plan.memo.releases
    hit = memo.get(epsilon)
    if hit is None:
        groups = release_groups(plan)
        shares = [float(e) for e in split(epsilon, len(groups))]
        hit = memo[epsilon] = (
            groups,
            shares,
            [measurement_for(plan.aggregates[i], e) for (i, _), e in zip(groups, shares)],
        )
    return hit


class NoiseReservoir:
    """Noise drawn ahead of demand, per measurement (``Measurement.draw``; its law
    depends only on the measurement's public parameters, never on data or
    predicates). After a reply the server tops it up on the event loop to
    ``DEPTH`` statements' worth of the shape just answered, one draw per callback
    and only while no scan runs (Python work beside a scan slows it: the scan
    thread needs the GIL to finish), so the next statement of that shape finds
    its noise ready. Each draw is handed out once (``take`` removes it); draws
    live in memory only."""

    MAX_MEASUREMENTS = 256
    DEPTH = 2
    IDLE_POLL_S = 0.002

    def __init__(self, source) -> None:
        self.source = source
        self._draws: OrderedDict = OrderedDict()  # measurement -> [draw, …]
        self._filling: set = set()  # measurement tuples being topped up
        self._take_lock = threading.Lock()  # takers: the loop, and scan threads (NoisePool.take)

    def take(self, m, n: int) -> list:
        """Up to ``n`` draws for ``m``, each handed out once (refills only append)."""
        with self._take_lock:
            got = self._draws.get(m)
            if not got:
                return []
            out = got[:n]
            del got[:n]
        return out

    def refill(self, ms, n: int) -> None:
        """Top up each of ``ms`` to ``n`` draws (at most ``NoisePool.MAX_DRAWS``)."""
        for _ in self._steps(ms, n):
            pass

    def refill_soon(self, loop, ms, cells: int, busy=lambda: False) -> None:
        """:meth:`refill` to ``DEPTH * cells`` on ``loop``, one draw per callback
        (an arriving statement is read between two draws), waiting while
        ``busy()`` (a scan is running)."""
        key = tuple(ms)
        if key in self._filling:
            return
        self._filling.add(key)
        steps = self._steps(ms, self.DEPTH * cells)

        def step() -> None:
            if busy():
                loop.call_later(self.IDLE_POLL_S, step)
            elif next(steps, None) is not None:
                loop.call_soon(step)
            else:
                self._filling.discard(key)

        loop.call_soon(step)

    def _steps(self, ms, n: int):
        n = min(n, NoisePool.MAX_DRAWS)
        for m in ms:
            got = self._draws.get(m)
            if got is None:
                got = self._draws[m] = []
                if len(self._draws) > self.MAX_MEASUREMENTS:
                    self._draws.popitem(last=False)
            else:
                self._draws.move_to_end(m)
            while len(got) < n:
                d = m.draw(self.source)
                if d is None:  # this measurement draws at apply time
                    break
                got.append(d)
                yield d

    def __len__(self) -> int:
        return sum(len(v) for v in self._draws.values())


class NoisePool:
    """A statement's noise drawn before its data is known (``Measurement.draw``):
    taken from the reservoir, the rest drawn on the event loop while the backend
    scans, so only additions remain after the scan. Draw ``c`` goes to cell ``c``
    — the cell order is the plan's public domain order, never data-dependent —
    and each draw is used at most once (``take`` empties the pool); cells beyond
    the pool, or a pool not filled in time, draw live. Only small statements are
    pre-drawn (``MAX_DRAWS``) so a large GROUP BY never blocks the event loop."""

    MAX_DRAWS = 64

    def __init__(self, plan: Plan, epsilon: float, source, reservoir: NoiseReservoir | None = None) -> None:
        self.ms = releases_of(plan, epsilon)[2]
        self.cells, self.source, self.reservoir = plan.n_cells, source, reservoir
        self._lock = threading.Lock()
        self._draws: list | None = None
        self._taken = False

    @property
    def worthwhile(self) -> bool:
        return 0 < self.cells * len(self.ms) <= self.MAX_DRAWS

    def fill(self) -> None:
        with self._lock:
            if not self._taken and self._draws is None:
                ready = [
                    self.reservoir.take(m, self.cells) if self.reservoir is not None else [] for m in self.ms
                ]
                self._draws = [
                    [r[c] if c < len(r) else m.draw(self.source) for m, r in zip(self.ms, ready)]
                    for c in range(self.cells)
                ]

    def take(self) -> list:
        """The pre-drawn noise, per cell; a pool the loop did not get to fill in time (a
        fast scan) still takes what the reservoir holds, the rest is drawn live (None)."""
        with self._lock:
            self._taken = True
            draws, self._draws = self._draws, None
            if draws is None and self.reservoir is not None and self.worthwhile:
                ready = [self.reservoir.take(m, self.cells) for m in self.ms]
                draws = [[r[c] if c < len(r) else None for r in ready] for c in range(self.cells)]
        return draws or []


BATCH_MIN_CELLS = 32  # from here a release draws its noise per measurement, not per cell
# (one array draw costs about as much as a few cells drawn one by one; bench.cells)


def noisy_answer(
    plan: Plan, cells, epsilon: float, source, pool: NoisePool | None = None, predrawn: list | None = None
) -> dict:
    """Apply each release's mechanism to every cell (empty cells included), with
    noise from ``pool`` where it was pre-drawn. ``cells``: the completed cells, as rows
    (:func:`rewriter.complete`) or as columns (:class:`.columnar.CellColumns`). A release of
    ``BATCH_MIN_CELLS`` cells or more (and no pool) draws each measurement's noise for all
    cells at once (``Measurement.draw_many``/``apply_many``: the same exact law)
    and is answered column by column (a :class:`~proxy.stores.answer.ColumnarAnswer`);
    measurements without a batch form, small releases and pooled noise go cell by cell.
    ``predrawn``: the batch draws per measurement for these cells, drawn while the scan ran
    (:mod:`.batch_noise`)."""
    k = len(plan.group_by)
    groups, shares, ms = releases_of(plan, epsilon)
    drawn = []
    if pool is not None:
        ms, drawn = pool.ms, pool.take()  # the measurements the noise was drawn for
    n = len(plan.aggregates)
    hws, mech, eps = [0.0] * n, [""] * n, [0.0] * n
    for (i, members), m, e in zip(groups, ms, shares):
        for j in [i, *members]:
            mech[j], eps[j] = m.name, e
    labels = [a.label for a in plan.aggregates]
    if drawn or len(cells) < BATCH_MIN_CELLS:
        if isinstance(cells, CellColumns):
            cells = cells.rows()
        keys, values = [], []
        for c, row in enumerate(cells):
            keys.append([cell_key(v) for v in row[:k]])
            measures = [plain_number(v) for v in row[k:]]
            noise = drawn[c] if c < len(drawn) else [None] * len(ms)
            out = [None] * n
            for (i, members), m, z in zip(groups, ms, noise):
                _apply_one(plan, i, members, m, _arg(plan.aggregates[i], measures), z, source, out, hws)
            values.append(out)
        return {
            "keys": keys,
            "values": values,
            "half_width": hws,
            "mechanism": mech,
            "epsilon": eps,
            "labels": labels,
        }
    table = cells if isinstance(cells, CellColumns) else None
    if table is not None:
        keys, column = table.keys, table.measures.__getitem__
    else:
        keys = [_plain_column(list(map(itemgetter(i), cells)), cell_key, {int, str, bool}) for i in range(k)]
        column = lambda j: _plain_column(list(map(itemgetter(k + j), cells)), plain_number, {int, float})  # noqa: E731
    cols: list = [None] * n
    for r, ((i, members), m) in enumerate(zip(groups, ms)):
        noise = predrawn[r] if predrawn is not None else m.draw_many(len(cells), source)
        if noise is None:
            _apply_cells(plan, i, members, m, cells if table is None else table.rows(), k, source, cols, hws)
            continue
        args = [column(j) for j in plan.aggregates[i].measures]
        rel = m.apply_many(args[0] if len(args) == 1 else tuple(args), noise)
        cols[i], hws[i] = _column(rel), max(hws[i], float(rel.half_width))
        for j in members:  # SUM(x), COUNT(x) from the AVG(x) release
            part = rel.parts[0] if plan.aggregates[j].func == "sum" else rel.parts[1]
            cols[j], hws[j] = _column(part), max(hws[j], float(part.half_width))
    return ColumnarAnswer(keys, cols, len(cells), half_width=hws, mechanism=mech, epsilon=eps, labels=labels)


def _column(rel):
    """A batch release's values as an answer column: its numpy array where it has one."""
    return rel.array if rel.array is not None else rel.values


def _plain_column(col: list, convert, plain: set) -> list:
    """``col`` through ``convert`` (cell_key / plain_number), skipped when every value's type
    is in ``plain`` (which both return as they are)."""
    return col if set(map(type, col)) <= plain else list(map(convert, col))


def _arg(agg: Aggregate, measures: list):
    return measures[agg.measures[0]] if len(agg.measures) == 1 else tuple(measures[j] for j in agg.measures)


def _apply_one(plan: Plan, i: int, members: list[int], m, arg, z, source, out: list, hws: list) -> None:
    """One cell of one release: its value in ``out[i]`` and its members' (SUM/COUNT of an AVG,
    VAR siblings) in ``out[j]``; half-widths kept at their maximum over the cells."""
    rel = m.apply(arg, z, source)
    out[i] = rel.value
    hws[i] = max(hws[i], float(rel.half_width))
    for j in members:  # SUM(x), COUNT(x) from the AVG(x) release
        fj = plan.aggregates[j].func
        part = (
            m.derive(rel, fj)
            if hasattr(m, "derive")  # VAR/STDDEV(x) siblings
            else rel.parts[0]
            if fj == "sum"
            else rel.parts[1]
        )
        out[j] = part.value
        hws[j] = max(hws[j], float(part.half_width))


def _apply_cells(
    plan: Plan, i: int, members: list[int], m, cells, k: int, source, cols: list, hws: list
) -> None:
    """A release without a batch form, cell by cell, into the columns ``cols``."""
    for j in [i, *members]:
        cols[j] = [None] * len(cells)
    out = [None] * len(plan.aggregates)
    agg = plan.aggregates[i]
    for c, row in enumerate(cells):
        _apply_one(plan, i, members, m, _arg(agg, [plain_number(v) for v in row[k:]]), None, source, out, hws)
        for j in [i, *members]:
            cols[j][c] = out[j]


def domain_answer(plan: Plan) -> dict:
    """``SELECT g … GROUP BY g`` / ``SELECT DISTINCT g`` with no aggregate: every cell of
    the public domain, from the config alone (no data read, nothing released)."""
    cells = plan.cells
    return {"keys": [[cell_key(v) for v in c] for c in cells], "values": [[] for _ in cells]}


def domain_notice(plan: Plan) -> str:
    keys = ", ".join(o.name for o in plan.outputs if o.source == "group")
    return (
        f"dpgate: these are the {plan.n_cells} values of the public domain of {keys}, derived "
        "from the config (declared domains and bounds); no data was read and nothing was "
        "charged (ε = 0). Values that occur in no row are listed too."
    )


def output_types(plan: Plan) -> list[int]:
    oids = []
    for o in plan.outputs:
        if o.source == "group":
            oids.append(TYPE_OIDS[plan.group_by[o.index].type])
        elif o.post or o.source == "expr":
            oids.append(TYPE_OIDS[o.type])
        else:
            a = plan.aggregates[o.index]
            oids.append(
                20 if a.func in ("count", "count_distinct") or (a.func == "sum" and a.type == "int") else 701
            )
    return oids


def _order(rows: list[tuple], i: int, desc: bool, nulls_first: bool | None) -> list[tuple]:
    """One stable sort pass; Postgres puts NULLs last for ASC, first for DESC."""
    nf = desc if nulls_first is None else nulls_first
    nulls = [r for r in rows if r[i] is None]
    rest = sorted((r for r in rows if r[i] is not None), key=lambda r: r[i], reverse=desc)
    return nulls + rest if nf else rest + nulls


def _cell(o, key, vals):
    if o.source == "group":
        return _time_key(key[o.index], o.type)
    if o.source == "expr":  # an expression over released values (post-processing)
        return evaluate(o.post, key, vals)
    return post_process(vals[o.index], o.post) if o.post else vals[o.index]


def _plain_rows(plan: Plan, key_column, value_column) -> list[tuple] | None:
    """The rows column by column when every output is a key or an aggregate as released (no
    date/time key to convert, no post-processing): what :func:`_cell` gives, without a call
    per value, so a large answer's rows cost a few list operations per column. ``key_column(i)`` / ``value_column(j)``: the
    answer's key ``i`` / aggregate ``j`` of every cell. None otherwise."""
    cols = []
    for o in plan.outputs:
        if o.source == "group" and o.type not in ("date", "timestamp"):
            cols.append(key_column(o.index))
        elif o.source == "aggregate" and not o.post:
            cols.append(value_column(o.index))
        else:
            return None
    return ColumnRows(cols) if cols else None  # rows made only if something reads them


def _aligned(plan: Plan, answer: dict) -> dict:
    """``answer`` with its aggregates in ``plan``'s order: two spellings of one measurement
    (same canonical text) may list the same aggregates in another order."""
    labels, mine = answer.get("labels"), [a.label for a in plan.aggregates]
    if not labels or labels == mine or sorted(labels) != sorted(mine) or len(set(mine)) != len(mine):
        return answer
    where = [labels.index(lab) for lab in mine]
    out = dict(answer, labels=mine, values=[[v[i] for i in where] for v in answer["values"]])
    for k in ("half_width", "mechanism", "epsilon"):
        if isinstance(answer.get(k), list) and len(answer[k]) == len(labels):
            out[k] = [answer[k][i] for i in where]
    return out


def consistent_ranges(plan: Plan) -> list[tuple | None]:
    """Per aggregate, the public range its released value is clamped to, or None: a COUNT
    ≥ 0, a SUM of a column bounded below by ≥ 0 (above by ≤ 0) ≥ 0 (≤ 0), an AVG within
    its column's bounds, a VAR/STDDEV ≥ 0. Nothing when the table says ``consistent = false``."""
    out: list[tuple | None] = []
    for a in plan.aggregates:
        r = None
        if not getattr(plan, "consistent", True):
            pass
        elif a.func in ("count", "count_distinct") or a.func in VARIANCE_FUNCS:
            r = (0, None)
        elif a.func == "sum" and a.lower is not None and a.lower >= 0:
            r = (0, None)
        elif a.func == "sum" and a.upper is not None and a.upper <= 0:
            r = (None, 0)
        elif a.func == "avg" and a.lower is not None and a.upper is not None:
            r = (a.lower, a.upper)
        out.append(r)
    return out


def _clamp(v, r):
    if v is None or r is None:
        return v
    lo, hi = r
    if lo is not None and v < lo:
        return type(v)(lo)
    if hi is not None and v > hi:
        return type(v)(hi)
    return v


def _consistent_column(col: list, r) -> list:
    return col if r is None else [_clamp(v, r) for v in col]


def answer_rows(plan: Plan, answer: dict) -> list[tuple]:
    """The statement's rows from a released answer, as Postgres would compute them over the
    released cells: the released values made consistent (:func:`consistent_ranges`), then
    HAVING / an outer WHERE (``row_filter``), the select list, ORDER BY (an output, or an
    expression not selected), OFFSET and LIMIT. Post-processing: free; the stored answer
    keeps the measurement as released."""
    answer = _aligned(plan, answer)
    keep = _row_filter(plan, answer)
    hidden = [item.tree for item in plan.order_by if item.tree is not None]
    ranges = consistent_ranges(plan)
    if keep is None and not hidden:
        if isinstance(answer, ColumnarAnswer) and answer.columns is not None:
            key_column, raw_column = answer.column_list(0), answer.column_list(1)
        else:
            keys, values = answer["keys"], answer["values"]
            key_column = lambda i: [key[i] for key in keys]  # noqa: E731
            raw_column = lambda j: [vals[j] for vals in values]  # noqa: E731
        value_column = lambda j: _consistent_column(raw_column(j), ranges[j])  # noqa: E731
        if (plain := _plain_rows(plan, key_column, value_column)) is not None:
            return _arranged(plan, plain)
    cells = [
        (key, [_clamp(v, r) for v, r in zip(vals, ranges)] if any(ranges) else vals)
        for key, vals in zip(answer["keys"], answer["values"])
    ]
    cells = [
        (key, vals) for key, vals in cells if keep is None or evaluate(keep, key, vals) is True
    ]  # HAVING / outer WHERE
    if plan.outputs and plan.outputs[0].source == "expr" and plan.outputs[0].post[0] == "rollup":
        rows = [tuple(rollup(o.post, cells) for o in plan.outputs)]  # COUNT/SUM/… of released rows
    else:
        rows = [
            tuple(_cell(o, key, vals) for o in plan.outputs) + tuple(evaluate(t, key, vals) for t in hidden)
            for key, vals in cells
        ]
    rows = _arranged(plan, rows)
    n = len(plan.outputs)
    return [r[:n] for r in rows] if hidden else rows


def _row_filter(plan: Plan, answer: dict):
    """The filter on released rows: HAVING and an outer WHERE. Over a sparse-vector answer
    (the sparse vector technique, Liu et al.) it is applied where the values it reads were released with the keys; a key
    released alone passed the HAVING as the sparse vector decided it."""
    keep = getattr(plan, "row_filter", None)
    if keep is None or "svt" not in answer:
        return keep
    released = {o.index for o in plan.outputs if o.source == "aggregate"}
    return keep if aggregates_in(keep) <= released else None


def _arranged(plan: Plan, rows: list[tuple]) -> list[tuple]:
    """``rows`` in ``plan``'s ORDER BY, top-c ranking, OFFSET and LIMIT."""
    n = len(plan.outputs)
    j = sum(item.tree is not None for item in plan.order_by)  # sort keys not selected: after the outputs
    for item in reversed(plan.order_by):
        if item.tree is not None:
            j -= 1
        rows = _order(rows, item.output if item.tree is None else n + j, item.desc, item.nulls_first)
    sel = plan.selection
    if sel is not None and sel.kind == "top":  # rank by the released (noisy) value, if any
        ranked = [
            i for i, o in enumerate(plan.outputs) if o.source == "aggregate" and o.index == sel.aggregate
        ]
        if ranked:
            rows = _order(rows, ranked[0], True, False)
    start = plan.offset or 0
    end = None if plan.limit is None else start + plan.limit
    return rows if start == 0 and end is None else rows[start:end]


def notice_body(plan: Plan, answer: dict) -> str:
    """The NOTICE after its common head (``kind.notice_head``): 95% half-width per output
    column, mechanism, and what the sparse vector / ladder / clock contributed."""
    answer = _aligned(plan, answer)
    hw, shown = [], set()
    for o in plan.outputs:
        if o.source == "aggregate":
            h = answer["half_width"][o.index]
            func = plan.aggregates[o.index].func
            avg = func == "avg" or func in VARIANCE_FUNCS
            hw.append(
                f"{o.name} ±{fmt(h)}"
                + (" (a bound)" if func in VARIANCE_FUNCS else "")
                + (" (max over rows)" if avg and cell_count(answer) > 1 else "")
            )
            shown.add(o.index)
    if (
        any(o.source == "expr" for o in plan.outputs)
        or getattr(plan, "row_filter", None) is not None
        or any(item.tree is not None for item in plan.order_by)
    ):
        for i, a in enumerate(plan.aggregates):  # released values the expressions were computed from
            if i not in shown and i < len(answer["half_width"]):
                hw.append(f"{a.label} ±{fmt(answer['half_width'][i])}")
    mech = ", ".join(sorted(set(answer["mechanism"])))
    clamped = consistency_text(plan)
    svt = ""
    if "svt" in answer:
        s = answer["svt"]
        svt = (
            f"; sparse vector: {s['selected']} of {s['candidates']} keys passed the threshold "
            f"{s['threshold']:g}{' (default; per-group thresholds)' if s.get('per_key') else ''} (c = {s['c']}, {s['passes']} pass(es)); the list may be incomplete"
        )
        if s["values_epsilon"]:
            svt += f"; values of the returned keys cost a separate ε {s['values_epsilon']:g}"
        else:
            svt += "; keys only, no values released"
    if "ladder" in answer:  # multi-tier ladder (Wang et al. 2026): which level this tier got
        svt += ladder_notice(answer["ladder"])
    if plan.clock:  # now() / current_date: dpgate's clock, not the backend's
        svt += f"; now() = {plan.clock} UTC, evaluated by dpgate when planned"
    return f"95% half-width: {', '.join(hw) or 'n/a'}; mechanism: {mech}{svt}{clamped}; {unit_text(plan)}"


def consistency_text(plan: Plan) -> str:
    """The NOTICE's statement of the consistency post-processing (empty when none applies)."""
    parts = []
    for a, r in zip(plan.aggregates, consistent_ranges(plan)):
        if r is None:
            continue
        lo, hi = r
        what = (
            f"clamped to [{lo:g}, {hi:g}]"
            if lo is not None and hi is not None
            else f"clamped to ≥ {lo:g}"
            if lo is not None
            else f"clamped to ≤ {hi:g}"
        )
        parts.append(f"{a.label} {what}")
    if not parts:
        return ""
    return (
        f"; consistent values: {', '.join(parts)} (post-processing, no ε; biased near the bound: "
        "`consistent = false` on the table returns the raw noisy values)"
    )


def unit_text(plan: Plan) -> str:
    """What one guarantee protects: a row, or a person (privacy unit) with the bounds
    that made it so (NOTICE and EXPLAIN)."""
    u = plan.unit
    if getattr(plan, "per_unit", ""):  # a per-unit histogram (rewriter.histogram): one row per unit
        return plan.per_unit
    if u is None:
        return "privacy unit: row (each row is protected; declare privacy_unit for per-person guarantees)"
    k = factor(plan)
    return (
        f"privacy unit: {u.name} (ε per {u.name}, all its rows; {describe(u)} — rows beyond are left out; "
        f"mechanisms run at ε/{k})"
    )


def ladder_notice(info: dict) -> str:
    """The NOTICE fragment for an answer served from a ladder."""
    levels = ", ".join(f"{e:g}" for e in info["levels"])
    lvl = info["level"]
    how = ""
    if info.get("served") in ("root", "nearest_lower"):
        how = f" (nearest level ≤ your ε {info['tier_epsilon']:g})"
    return (
        f"; ladder {info['name']}: tier {info['tier']} gets level ε {lvl:g}{how} of {{{levels}}}; "
        f"all tiers share one noise chain, so tiers pooling answers learn at most their highest level"
    )


MAX_SELECTED = 20  # keys a HAVING without LIMIT may return (SVT cutoff c; noise grows with c)


def selection_answer(plan: Plan, cells: list[tuple], epsilon: float, source) -> dict:
    """HAVING / top-c by SVT with exponential noise (Liu et al., Alg. 2 + appending).

    Only the ⊤ keys are released, in key order (public), never ranked by a true
    value. With ``values`` the select list's aggregates are released for those keys
    only, at a separate half of ε (noted in the NOTICE); the SVT part's cost never
    depends on how many keys pass.
    """
    sel = plan.selection
    k = len(plan.group_by)
    agg = plan.aggregates[sel.aggregate]
    scores = [plain_number(row[k + agg.measures[0]]) for row in cells]
    out_aggs = sorted({o.index for o in plan.outputs if o.source == "aggregate"})
    eps_sel = epsilon / 2 if out_aggs else epsilon
    if agg.func == "count":
        sens, shape = 1.0, QueryShape("count")
    else:
        sens = float(max(abs(agg.lower), abs(agg.upper)))
        shape = QueryShape("sum", lower=agg.lower, upper=agg.upper, cap=1, single_group=True)
    c = sel.c if sel.c is not None else min(len(scores), MAX_SELECTED)
    c = max(1, min(c, len(scores)))
    threshold = sel.threshold
    if sel.per_key:  # public per-group thresholds (one group key)
        table = dict(sel.per_key)
        threshold = [float(table.get(cell_key(row[0]), sel.threshold)) for row in cells]
    res = svt_select(
        scores, threshold, c, eps_sel, sens, monotone=True, source=source, strict=sel.op == ">", shape=shape
    )
    chosen = sorted(res.indices)
    keys = [[cell_key(v) for v in cells[i][:k]] for i in chosen]
    values = [[None] * len(plan.aggregates) for _ in chosen]
    hws = [0.0] * len(plan.aggregates)
    mechs, shares = [res.mechanism], [float(res.epsilon)]
    if out_aggs:
        parts = [float(e) for e in split(epsilon - float(res.epsilon), len(out_aggs))]
        for share, ai in zip(parts, out_aggs):
            a = plan.aggregates[ai]
            m = measurement_for(a, share)
            mechs.append(m.name)
            shares.append(share)
            for row_vals, i in zip(values, chosen):
                measures = [plain_number(v) for v in cells[i][k:]]
                arg = (
                    measures[a.measures[0]]
                    if len(a.measures) == 1
                    else tuple(measures[j] for j in a.measures)
                )
                rel = m.release(arg, source)
                row_vals[ai] = rel.value
                hws[ai] = max(hws[ai], float(rel.half_width))
    return {
        "keys": keys,
        "values": values,
        "half_width": hws,
        "mechanism": mechs,
        "epsilon": shares,
        "labels": [a.label for a in plan.aggregates],
        "svt": {
            "c": c,
            "passes": res.passes_used,
            "incomplete": bool(res.incomplete),
            "threshold": sel.threshold,
            "selected": len(chosen),
            "candidates": len(scores),
            "per_key": bool(sel.per_key),
            "values_epsilon": epsilon - float(res.epsilon) if out_aggs else 0.0,
        },
    }


def prepare_mechanisms(cfg) -> None:
    """AVG/SUM/COUNT half-width constants for every (non-ladder) tier ε × bounded column of a
    central table, computed now rather than by the first statements. Every one
    is a closed form or a bounded table at any ε (mechanisms/mean/quantiles.py),
    so no ε needs refusing; other ε shares (several releases in one statement) are computed
    on first use, once (single flight). A column the mechanism rejects is left to the
    statement path, which refuses it with its own message."""
    eps = sorted({t.epsilon for t in cfg.tiers.values() if t.ladder is None})
    for table in cfg.tables.values():
        if table.mode != "central" or table.privacy is not None:
            continue
        for col in table.columns.values():
            if not col.bounded or not col.lower < col.upper:
                continue
            for e in eps:
                try:
                    make_mean(col.avg_mechanism, e, col.lower, col.upper, integer=col.type == "int").setup()
                except Exception:  # an optimisation: never blocks loading
                    pass
