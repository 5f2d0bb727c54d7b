"""From exact per-cell measures to a released answer: the measurement.

``noisy_answer`` is the only place where exact aggregates meet the mechanisms; its output (the
*answer*) holds released values only and is what the ledger stores. Each aggregate's mechanism
(:func:`measurement_for`), the statement's releases and their ε shares (:func:`releases_of`),
the sparse vector's selection (:func:`selection_answer`) and the public domain's answer
(:func:`domain_answer`) are here. The noise may have been drawn before the data was known
(:mod:`.noise`); the rows are made from the answer by :mod:`.rows`, the NOTICE by :mod:`.notice`.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Protocol

from mechanisms import GeometricCount, LaplaceSum, split
from mechanisms.accounting import ZCDP, Cost, compose, pure_epsilon, unit_epsilon
from mechanisms.accounting import shares as cost_shares
from mechanisms.discrete_gaussian import GaussianCount, GaussianSum
from mechanisms.gaussian_stats import GaussianMean, GaussianVariance
from mechanisms.mean import make_mean
from mechanisms.once import single_flight
from mechanisms.svt import QueryShape, svt_select
from mechanisms.variance import VARIANCE_FUNCS, MomentVariance
from rewriter.plan import Aggregate, Plan
from rewriter.unit import factor, groups_bound

from ..stores.answer import ColumnarAnswer
from ..wire.api import SqlError
from .columnar import CellColumns
from .common import cell_key, plain_number


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
        # unclamped: the rows clamp it to the bounds when the plan is consistent (.rows)
        return make_mean(mechanism or "hourglass", epsilon, lower, upper, integer=integer, clamp=False)
    raise ValueError(f"no mechanism for {func}")


GAUSSIAN_FUNCS = ("count", "count_distinct", "sum", "avg", *VARIANCE_FUNCS)
"""The aggregates released with the discrete Gaussian on a zCDP tier (COUNT and SUM: one
integer query per cell; AVG: its SUM and COUNT; VAR/STDDEV: its three moments —
:mod:`mechanisms.gaussian_stats`)."""


def contributions_sq(plan: Plan) -> int:
    """The squared L2 norm, in rows, of one privacy unit's largest contribution to the plan's
    cells (the L2 counterpart of :func:`rewriter.unit.factor`'s L1 k): R rows in each of at most
    m = min(G, cells) cells is m·R² (Δ₂ = √m·R); R rows in all (total mode) is at most R²
    (‖v‖₂ ≤ ‖v‖₁); one unit counted once in each of m cells (COUNT(DISTINCT unit)) is m; 1
    without a unit (one row)."""
    b = plan.unit
    if b is None:
        return 1
    cells = min(groups_bound(b), max(plan.n_cells, 1))
    if all(m.kind == "count_distinct" and m.column == b.column for m in plan.measures):
        return cells
    return b.max_rows * b.max_rows if b.total else cells * b.max_rows * b.max_rows


def zcdp_measurement_for(agg: Aggregate, rho, csq: int, k: int):
    """The mechanism for one aggregate at a share ``rho`` of a zCDP statement: the discrete
    Gaussian for COUNT and SUM at the L2 sensitivity of a unit's contribution (``csq`` =
    Δ₂² in rows, :func:`contributions_sq`; Canonne, Kamath & Steinke 2020 Thm 4), AVG as their
    ratio and VAR/STDDEV from three Gaussian moments (:mod:`mechanisms.gaussian_stats`), any other the pure
    mechanism at ε = √(2ρ) over the unit's factor ``k`` (Bun & Steinke 2016 Prop 1.4; group
    privacy). Built once per parameters, as :func:`measurement_for`."""
    return _zmeasurement(agg.func, agg.mechanism, agg.type == "int", agg.lower, agg.upper, rho, csq, k)


@single_flight(maxsize=1024)
def _zmeasurement(func: str, mechanism, integer: bool, lower, upper, rho, csq: int, k: int):
    if func in ("count", "count_distinct"):
        return GaussianCount(rho, contributions_sq=csq)
    if func == "sum":
        return GaussianSum(rho, lower, upper, integer=integer, contributions_sq=csq)
    if func == "avg":
        return GaussianMean(rho, lower, upper, integer=integer, contributions_sq=csq)
    if func in VARIANCE_FUNCS:
        return GaussianVariance(rho, lower, upper, integer=integer, func=func, contributions_sq=csq)
    return _measurement(func, mechanism, integer, lower, upper, unit_epsilon(pure_epsilon(rho), k))


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


def releases_of(plan: Plan, epsilon: float | Cost):
    """(release groups, shares, measurements) of ``plan``, computed once per plan (kept beside
    its frozen fields, like ``Plan.canonical``). ``epsilon``: the ε the row-level mechanisms run
    at (the tier's over the unit's factor k; shares in ε), or a zCDP statement's cost (the
    tier's ρ for a whole unit; shares in ρ, :func:`zcdp_measurement_for`)."""
    memo = plan.memo.releases
    hit = memo.get(epsilon)
    if hit is None:
        groups = release_groups(plan)
        if isinstance(epsilon, Cost):
            if epsilon.accounting != ZCDP:
                raise ValueError("a pure statement's releases are given their mechanism ε")
            parts = [c.amount for c in cost_shares(epsilon, len(groups))]
            csq, k = contributions_sq(plan), factor(plan)
            ms = [zcdp_measurement_for(plan.aggregates[i], r, csq, k) for (i, _), r in zip(groups, parts)]
            hit = memo[epsilon] = (groups, [float(r) for r in parts], ms)
        else:
            eps_shares = [float(e) for e in split(epsilon, len(groups))]
            hit = memo[epsilon] = (
                groups,
                eps_shares,
                [measurement_for(plan.aggregates[i], e) for (i, _), e in zip(groups, eps_shares)],
            )
    return hit


def statement_cost(plan: Plan, epsilon: float | Cost) -> Cost:
    """What releasing ``plan`` costs a privacy unit, from its measurements' privacy maps:
    sequential composition over the releases of each one's map at the unit's distance
    (a pure mechanism at d_in = k rows; the discrete Gaussian's map is already for the
    unit's whole contribution). Cells are disjoint: parallel composition makes them free."""
    _, _, ms = releases_of(plan, epsilon)
    k = factor(plan)
    costs = [
        Cost.zcdp(m.privacy_map_exact(1))
        if getattr(m, "unit", "eps") == "rho"
        else Cost.pure(m.privacy_map_exact(k))
        for m in ms
    ]
    if isinstance(epsilon, Cost):  # each pure part as ε²/2 on its own (Bun & Steinke 2016 Prop 1.4)
        costs = [c.in_accounting(ZCDP) for c in costs]
    return compose(costs)


BATCH_MIN_CELLS = 32  # from here a release draws its noise per measurement, not per cell
# (one array draw costs about as much as a few cells drawn one by one; bench.cells)


class DrawnNoise(Protocol):
    """What :func:`noisy_answer` takes of noise drawn before the data was known
    (:class:`.noise.ScanNoise` is one): each draw once, for the cells it was drawn for."""

    def cell_draws(self) -> list:
        """Per cell, the draw of each measurement (None: drawn live); [] when none."""
        ...

    def batch_draws(self, cells: int) -> list | None:
        """Per measurement, its batch draw for ``cells`` cells; None when none."""
        ...


def noisy_answer(
    plan: Plan,
    cells,
    epsilon: float | Cost,
    source,
    noise: DrawnNoise | None = None,
    predrawn: list | None = None,
) -> dict:
    """Apply each release's mechanism to every cell (empty cells included), with the noise
    drawn while the scan ran (``noise``) where there is some.
    ``cells``: the completed cells, as rows (:func:`rewriter.complete`) or as columns
    (:class:`.columnar.CellColumns`). A release of ``BATCH_MIN_CELLS`` cells or more without
    per-cell draws takes each measurement's noise for all cells at once
    (``Measurement.draw_many``/``apply_many``: the same exact law) and is answered column by
    column (a :class:`~proxy.stores.answer.ColumnarAnswer`); measurements without a batch form,
    small releases and per-cell draws go cell by cell. ``predrawn``: the batch draws per
    measurement for these cells, given directly."""
    k = len(plan.group_by)
    groups, shares, ms = releases_of(plan, epsilon)
    drawn = noise.cell_draws() if noise is not None else []
    if noise is not None and predrawn is None:
        predrawn = noise.batch_draws(len(cells))
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
            zs = drawn[c] if c < len(drawn) else [None] * len(ms)
            out = [None] * n
            for (i, members), m, z in zip(groups, ms, zs):
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
        batch = predrawn[r] if predrawn is not None else m.draw_many(len(cells), source)
        if batch is None:
            _apply_cells(plan, i, members, m, cells if table is None else table.rows(), k, source, cols, hws)
            continue
        args = [column(j) for j in plan.aggregates[i].measures]
        rel = m.apply_many(args[0] if len(args) == 1 else tuple(args), batch)
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


MAX_SELECTED = 20  # keys a HAVING without LIMIT may return (SVT cutoff c; noise grows with c)


def selection_answer(plan: Plan, cells: list[tuple], epsilon: float, source) -> dict:
    """HAVING / top-c by SVT with exponential noise (Liu et al., Alg. 2 + appending).

    Only the ⊤ keys are released, in key order (public), never ranked by a true
    value. With ``values`` the select list's aggregates are released for those keys
    only, at a separate half of ε (noted in the NOTICE); the SVT part's cost never
    depends on how many keys pass.
    """
    sel = plan.selection
    if sel is None:
        raise SqlError("XX000", "internal error: a selection release of a plan without a selection")
    k = len(plan.group_by)
    agg = plan.aggregates[sel.aggregate]
    scores = [plain_number(row[k + agg.measures[0]]) for row in cells]
    out_aggs = sorted({o.index for o in plan.outputs if o.source == "aggregate"})
    eps_sel = epsilon / 2 if out_aggs else epsilon
    if agg.func == "count":
        sens, shape = 1.0, QueryShape("count")
    elif agg.lower is None or agg.upper is None:  # the planner bounds every other thresholded aggregate
        raise SqlError("XX000", "internal error: a thresholded aggregate without its bounds")
    else:
        sens = float(max(abs(agg.lower), abs(agg.upper)))
        shape = QueryShape("sum", lower=agg.lower, upper=agg.upper, cap=1, single_group=True)
    c = sel.c if sel.c is not None else min(len(scores), MAX_SELECTED)
    c = max(1, min(c, len(scores)))
    threshold: float | list[float]
    if sel.per_key:  # public per-group thresholds (one group key)
        table = dict(sel.per_key)
        threshold = [_threshold(table.get(cell_key(row[0]), sel.threshold)) for row in cells]
    else:
        threshold = _threshold(sel.threshold)
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


def _threshold(t) -> float:
    """A selection's threshold as the sparse vector technique compares it; None (no HAVING
    constant and no ``SET dpgate.topc_threshold``, which the selection path resolves first)
    is an internal error."""
    if t is None:
        raise SqlError("XX000", "internal error: a selection without its threshold")
    return float(t)


def prepare_mechanisms(cfg) -> None:
    """AVG/SUM/COUNT half-width constants for every (non-ladder) tier ε × bounded column of a
    central table, computed at start rather than by the first statements. Every one
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
