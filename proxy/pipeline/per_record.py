"""Per-record DP tables (Chen et al. 2025): ``COUNT``/``SUM``/``MAX``/``MIN`` where every
record r carries its own budget E(r) from the table's ``privacy`` policy.

Budget semantics. A role's tier ε scales the policy: a statement is answered
under E_q(r) = tier.epsilon × E(r) (levels are assigned by E; every level's
budget becomes tier.epsilon × lo_i exactly, per-record spec §11.21), and the role's
ledger is charged tier.epsilon, once (a repeat is free). So a record r loses at
most (sum of ε charged) × E(r) over a period: the tier budget B bounds every
record's total loss by B × E(r). With the demo tier (ε 1) E_q = E.

Order of a statement (the release pipeline of :mod:`.kind`, as for central tables):
plan (rewriter/per_record.py; a refusal charges nothing) → earlier release of the
same measurement by this role? serve it free → budget pre-check → ε reserved while
ONE backend scan ``GROUP BY keys, level[, value bucket]`` runs (MAX/MIN: plus one
second round trip for the values of levels ≥ ℓ, all cells in one query) — a failure
before the scan starts refunds it, after it started it stays charged → mechanisms
per cell (mechanisms/per_record; empty cells and empty levels are noised) → the
answer is recorded against the charge → rows and one NOTICE.

Mechanisms (β from the policy, default 0.1):
* COUNT(*) / COUNT(col): Algorithm 1 (``prdp_count``);
* SUM(col): the sum extension (``prdp_sum_extension``, §4; needs a monotone
  single-column E over the summed column — ``sum_method = auto`` uses it for the
  inverse and sqrt shortcuts) or Algorithm 2 with the universal Laplace sum
  (``prdp_sum_framework``);
* MAX(col) / MIN(col): Algorithm 2 with the shifted-rank exponential mechanism
  (``prdp_max_framework``; MIN by symmetry, v → U − v: ``prdp_min_framework``).

Data-market ladder tiers (``tier.ladder``) are refused (0A000, before any backend work, in
execute, Describe and EXPLAIN, MAX/MIN included): per-record answers are drawn independently per
tier, so a coalition of a ladder's tiers would learn Σε·E(r), not the max ε their ladder promises
(:func:`refuse_ladder`).

The NOTICE reports ε charged, budget left, ε_τ (the smallest level budget kept,
min–max over groups), and at 1 − β the error bound of Thm 5.1 / Eq. (9) / Thm 6.1
evaluated from released quantities only — with ε_min(D) taken as ε_τ/2 (the
private ε_min(D) itself cannot be used) — and the guaranteed bound on the added
noise alone. MAX/MIN bounds are in rows (rank error), not in value units.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from config import ConfigError
from mechanisms.accounting import share_of
from mechanisms.per_record import (
    ExtensionSum,
    FrameworkMax,
    FrameworkSum,
    LevelHistogram,
    PrDPCount,
    PrivacyFunction,
)
from mechanisms.per_record.core import PrRelease
from mechanisms.snr import judge
from rewriter.errors import FEATURE_NOT_SUPPORTED, Refusal
from rewriter.per_record import (
    ALLOWED,
    PrPlan,
    build_pr_plan,
    parts_scan_sql,
    parts_values_sql,
    pr_param_types,
    scan_sql,
    values_sql,
)

from ..backends import Columns
from ..wire.api import Column, Description, Result, SqlError
from .common import DUMMY, TYPE_OIDS, cell_of, plain_number, pretty
from .kind import Prepared, ReleaseKind, Statement, fetch, plan_as, state_as
from .notice import consistency_text, warning_line
from .per_record_policy import Policy, PolicyError, compile_policy, validate_config, validate_policy
from .rows import answer_rows, kept_cells, output_types
from .selection_path import for_tier

__all__ = [
    "PER_RECORD",
    "PerRecord",
    "describe_per_record",
    "explain_per_record",
    "validate_policy",
    "validate_config",
    "check_config",
    "refuse_ladder",
]

_TEXT = 25


def check_config(config) -> None:
    """Raise ``config.ConfigError`` naming the first invalid per-record policy."""
    problems = validate_config(config)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"{problems[0]}{more}")


# -- policy and mechanisms (compiled once per gateway) -------------------------------


def _cache(gw) -> dict:
    c = getattr(gw, "_per_record_cache", None)
    if c is None or c.get("config") is not gw.config:
        c = {"config": gw.config}
        gw._per_record_cache = c
    return c


def policy_of(gw, table: str) -> Policy:
    cache = _cache(gw)
    key = ("policy", table)
    if key not in cache:
        try:
            cache[key] = compile_policy(table, gw.config.tables[table])
        except PolicyError as e:
            raise SqlError(
                "F0000",
                f"the per-record policy of table {table} is invalid: {e.problems[0]}",
                hint="The operator must fix the config.",
            ) from None
    return cache[key]


def sum_method(prp: PrPlan, pol: Policy) -> str:
    """'extension' or 'framework' for a SUM (refused if 'extension' is configured but
    not sound for this column)."""
    ext_ok = pol.monotone and prp.column == pol.column
    if pol.sum_method == "extension":
        if not ext_ok:
            raise Refusal(
                FEATURE_NOT_SUPPORTED,
                f"SUM({prp.column}) on {pol.table} would need the sum extension "
                "(sum_method = 'extension'), which is only sound for the policy's own "
                f"column {pol.column or '(none: E is a SQL expression)'} with a monotone "
                "E; the operator can set sum_method = 'auto' or 'framework'.",
                hint=ALLOWED,
            )
        return "extension"
    if pol.sum_method == "framework":
        return "framework"
    return "extension" if ext_ok and pol.kind in ("inverse", "sqrt") else "framework"


def _pf(pol: Policy) -> PrivacyFunction:
    """The policy's privacy function (the extension SUM is chosen only where it has one)."""
    if pol.pf is None:
        raise SqlError(
            "XX000", f"internal error: the per-record policy of {pol.table} has no privacy function"
        )
    return pol.pf


def mechanism(gw, prp: PrPlan, pol: Policy, weight: float):
    """(kind, mechanism) for the statement at E_q = weight × E (cached)."""
    kind = prp.func if prp.func != "sum" else f"sum_{sum_method(prp, pol)}"
    cache = _cache(gw)
    key = ("mech", pol.table, kind, weight)
    if key not in cache:
        lv, b = pol.levels, pol.beta
        cache[key] = {
            "count": lambda: PrDPCount(lv, b, weight=weight),
            "sum_extension": lambda: ExtensionSum(_pf(pol), b, levels=lv, weight=weight),
            "sum_framework": lambda: FrameworkSum(lv, pol.U, b, weight=weight),
            "max": lambda: FrameworkMax(lv, pol.U, b, weight=weight),
            "min": lambda: FrameworkMax(lv, pol.U, b, weight=weight),
        }[kind]()
    return kind, cache[key]


def mechanism_name(kind: str) -> str:
    return {
        "count": "prdp_count",
        "sum_extension": "prdp_sum_extension",
        "sum_framework": "prdp_sum_framework",
        "max": "prdp_max_framework",
        "min": "prdp_min_framework",
    }[kind]


# -- one release ------------------------------------------------------------------------


def _split_rows(rows, prp: PrPlan):
    """Backend rows grouped by cell; rows outside the public domain are dropped."""
    n = len(prp.plan.group_by)
    cells = prp.cells
    out: dict[tuple, list] = {c: [] for c in cells}
    known = set(cells)
    for row in rows:
        cell = cell_of(row, n, known)
        if cell is not None:
            out[cell].append(row[n:])
    return out


def _split_columns(cols: Columns, prp: PrPlan, U: int) -> dict | None:
    """MAX/MIN's value rows (key, v, cnt) from a columnar scan, per public cell as
    (values, counts) int64 arrays — the rows :func:`_split_rows` would group, without a
    Python step per row; cells without rows get empty arrays. None where the columns are
    not that (several keys, a NULL, a non-integer value): the rows take over."""
    if len(prp.plan.group_by) != 1 or len(cols.arrays) != 3 or U >= 1 << 62:
        return None
    keys, v, cnt = cols.arrays
    if any(np.ma.isMaskedArray(a) and np.ma.getmaskarray(a).any() for a in cols.arrays):
        return None
    keys, v, cnt = (np.asarray(a) for a in (keys, v, cnt))
    if v.dtype.kind not in "iu" or cnt.dtype.kind not in "iu":
        return None
    empty = np.zeros(0, dtype=np.int64)
    out = {c: (empty, empty) for c in prp.cells}
    known = set(prp.cells)
    uniq, inverse = np.unique(keys, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    groups = np.split(order, np.cumsum(np.bincount(inverse, minlength=uniq.size))[:-1])
    for k, idx in zip(uniq.tolist(), groups):
        cell = cell_of((k,), 1, known)
        if cell is not None:
            out[cell] = (v[idx], cnt[idx])
    return out


def _bounds(kind: str, m, rel: PrRelease, U: int) -> dict:
    """What one cell's release guarantees at 1 - β, from released quantities only.

    * ``noise``: the answer is the aggregate over the KEPT rows — levels >= ℓ, i.e. the
      rows with ε(r) > ε_τ (all rows when ℓ = 1) — plus noise at most this large
      (COUNT/SUM: the kept levels' noise; framework SUM: over min(v, τ); MAX/MIN: rows
      of the kept set beyond the answer, the exponential mechanism's rank margin 2k0).
    * ``bound``: Thm 5.1 / Eq. (9) / Thm 6.1 also bound the rows left out, in terms of
      the level k holding the private ε_min(D) (skipped levels hold <= 2 k_i each). The
      NOTICE states it at k = ℓ - 1 with its condition ``cond``: it holds if every
      aggregated row has ε(r) > ε_τ/2 (None when ℓ <= 2: always)."""
    ell, noise = rel.ell, rel.noise_half_width
    if ell is None or noise is None:  # every per-record mechanism reports both
        raise SqlError("XX000", "internal error: a per-record release without its level or noise bound")
    k = max(1, ell - 1)
    cond = float(m.weight * Fraction(float(m.levels.lo[k - 1]))) if ell >= 3 else None
    out = {"ell": ell, "bound": 0.0, "noise": float(noise), "cond": cond, "tau": None}
    if kind in ("count", "sum_extension"):
        out["bound"] = float(m.error_bound(k))
    elif kind == "sum_framework":
        # Thm 6.1: dropped rows <= dropped_bound(k) (term I) + universal sum (term II):
        # rows above the clipping radius tau <= the AboveThreshold margin, noise <= k.
        # Values are unbounded above, so the statement also assumes Max(D) <= 2 tau.
        eps_m = m.stage2_epsilon(ell)  # universal_sum runs at eps_tau/2
        tau = min(int(Fraction(rel.scale) * eps_m / 2), U) if rel.scale else 0
        eps_r, beta_r = float(eps_m) / 2, m.beta / 4
        clipped = math.ceil(12 / eps_r * math.log(2 * (m.buckets.B + 1) / beta_r))
        out["bound"] = float(noise) + tau * (2 * m.dropped_bound(k) + clipped)
        out["tau"] = tau
    else:  # max / min: rank units (rows beyond the answer): EM rank margin + dropped rows
        out["bound"] = float(noise + m.dropped_bound(k))
    return out


def _hists(rows, prp: PrPlan, pol: Policy, framework_sum: bool) -> dict:
    """Per cell, the level histogram of the scan's rows (Chen et al. 2025 §3)."""
    per_cell = _split_rows(rows, prp)
    return {
        c: LevelHistogram.from_rows(r, pol.levels.L, pol.buckets.B if framework_sum else None)
        for c, r in per_cell.items()
    }


def _answer(gw, prp: PrPlan, pol: Policy, weight: float, kind: str, m, hists: dict, ells, values) -> dict:
    """The measurement: per cell, the mechanism's release from its level histogram (and,
    for MAX/MIN, the values of the kept levels read by the second scan)."""
    src = gw.source
    rels: dict[tuple, PrRelease] = {}
    if kind in ("max", "min"):
        split = _split_columns(values, prp, pol.U) if isinstance(values, Columns) else None
        if split is None:
            values = _split_rows(values.rows() if isinstance(values, Columns) else values, prp)
        for c in hists:
            if split is not None:  # numpy, from a columnar scan
                v, n = split[c]
                if kind == "min":  # min(D) = U - max(U - D)
                    v = pol.U - np.clip(v, 0, pol.U)
                rel = m.release_arrays(ells[c], v, n, src)
            else:
                vc = [(r[0], r[1]) for r in values[c]]
                if kind == "min":
                    vc = [(pol.U - min(max(int(plain_number(v)), 0), pol.U), n) for v, n in vc]
                rel = m.release(ells[c], vc, src)
            if kind == "min":
                rel = dataclasses.replace(rel, value=pol.U - rel.value, mechanism="prdp_min_framework")
            rels[c] = rel
    else:
        for c, h in hists.items():
            rels[c] = m.release(h, src)
    agg = prp.plan.aggregates[0]
    as_float = prp.func != "count" and agg.type == "float"
    keys, values_out = [], []
    pr: dict[str, Any] = {"eps_tau": [], "ell": [], "bound": [], "noise": [], "cond": [], "tau": []}
    for c, rel in rels.items():
        keys.append(list(c))
        values_out.append([float(rel.value) if as_float else int(rel.value)])
        if rel.eps_tau is None:  # every per-record mechanism reports its threshold
            raise SqlError("XX000", "internal error: a per-record release without its threshold ε")
        pr["eps_tau"].append(float(rel.eps_tau))
        for name, v in _bounds(kind, m, rel, pol.U).items():
            pr[name].append(v)
    pr.update(
        func=prp.func,
        units="rank" if kind in ("max", "min") else "value",
        beta=pol.beta,
        levels=pol.levels.L,
        weight=float(weight),
    )
    return {
        "keys": keys,
        "values": values_out,
        "half_width": [max(pr["bound"])],
        "mechanism": [mechanism_name(kind)],
        "epsilon": [float(weight)],
        "labels": [prp.label],
        "per_record": pr,
    }


def _stage1(rows, gw, prp: PrPlan, pol: Policy, m: FrameworkMax):
    """MAX/MIN's first round, in the scan's worker thread: per cell the level histogram and the
    level ℓ (Alg. 1 stage 1, at E/2), and the second round's SQL (the values of levels ≥ ℓ)."""
    hists = _hists(rows, prp, pol, False)
    ells = {c: m.select_level(h, gw.source) for c, h in hists.items()}
    return hists, ells, values_sql(prp, pol.sql, gw.config, gw.backend.dialect, ells)


@dataclass
class PerRecordState:
    """A per-record release's: the table's policy, and the mechanism by its name (``kind``:
    "count", "sum_extension", "sum_framework", "max", "min") — or, for several COUNT/SUM in one
    statement, one (sub-plan, kind, mechanism) per part, each at weight / k."""

    policy: Policy
    kind: str | None = None
    m: PrDPCount | ExtensionSum | FrameworkSum | FrameworkMax | None = None
    parts: list[tuple] | None = None


class PerRecord(ReleaseKind):
    """A statement on a table with a ``privacy`` policy (Chen et al. 2025): ONE scan ``GROUP BY
    keys, level[, value bucket]``; MAX/MIN add a second round trip for the values of the
    levels >= ℓ chosen from the first (Alg. 1, stage 1), all cells in one query."""

    name = "per_record"
    zcdp = False  # per-record DP (a guarantee per record) has no exact zCDP statement
    heavy = plans_in_lane = True  # two scans and a level search; its planning too

    async def plan(self, conn, stmt: Statement, params: list) -> Prepared:
        gw = conn.gw
        prp, pol = await asyncio.to_thread(_plan, conn, stmt, params)  # milliseconds: off the loop
        tier = gw.tier_of(conn.role)
        prp = dataclasses.replace(prp, plan=for_tier(prp.plan, tier))  # the tier's `consistent`
        weight = float(tier.epsilon)
        cols = [Column(o.name, t) for o, t in zip(prp.plan.outputs, output_types(prp.plan))]
        if prp.parts:  # several COUNT/SUM: each at weight / k (sequential composition)
            each = share_of(weight, prp.split)
            parts = [(sub, *mechanism(gw, sub, pol, each)) for sub in map(prp.part, range(prp.split))]
            state = PerRecordState(pol, parts=parts)
        else:
            state = PerRecordState(pol, *mechanism(gw, prp, pol, weight))
        return Prepared(
            self,
            prp,
            cols,
            key=_key(prp, pol, weight),
            canonical=prp.canonical(),
            epsilon=weight,
            state=state,
        )

    def scan_sql(self, conn, p: Prepared) -> str:
        st = state_as(p, PerRecordState)
        kind = st.kind
        return scan_sql(
            plan_as(p, PrPlan),
            st.policy.sql,
            conn.gw.config,
            conn.gw.backend.dialect,
            buckets=kind == "sum_framework",
            with_sum=kind == "sum_extension",
        )

    async def scan(self, conn, p: Prepared, then):
        st = state_as(p, PerRecordState)
        if st.parts is not None:
            return await self._scan_parts(conn, p, then)
        prp, pol, kind, m = plan_as(p, PrPlan), st.policy, st.kind, st.m
        framework_sum = kind == "sum_framework"
        if kind not in ("max", "min"):
            return await fetch(
                conn,
                self.scan_sql(conn, p),
                then=lambda rows: then((_hists(rows, prp, pol, framework_sum), None, None)),
            )
        if not isinstance(m, FrameworkMax):  # MAX/MIN: the two-stage framework mechanism
            raise SqlError("XX000", "internal error: a per-record MAX/MIN without its mechanism")
        gw = conn.gw

        stage1 = functools.partial(_stage1, gw=gw, prp=prp, pol=pol, m=m)  # in the scan's worker thread
        hists, ells, sql = await fetch(conn, self.scan_sql(conn, p), then=stage1)
        return await fetch(conn, sql, then=lambda rows: then((hists, ells, rows)), columnar=True)

    async def _scan_parts(self, conn, p: Prepared, then):
        """Several aggregates: their level scans as ONE backend statement (each part tagged,
        :func:`rewriter.per_record.parts_scan_sql`); with MAX/MIN among them, their second
        rounds (the values of levels ≥ ℓ, Chen et al. 2025 Alg. 1) as one more, once every
        part's ℓ is drawn. ``then`` runs on the last one's rows, with every part's
        (histograms, ℓs, values)."""
        st = state_as(p, PerRecordState)
        gw, pol, parts = conn.gw, st.policy, st.parts or []
        if not parts:
            raise SqlError("XX000", "internal error: a per-record statement without its parts")
        dialect = gw.backend.dialect
        specs = [(sub, kind == "sum_framework", kind == "sum_extension") for sub, kind, _ in parts]
        sql = parts_scan_sql(specs, pol.sql, gw.config, dialect)
        n = len(parts[0][0].plan.group_by)
        extremes = [i for i, (_, kind, _) in enumerate(parts) if kind in ("max", "min")]

        def split(rows) -> list[dict]:  # in the scan's worker thread
            per: list[list[tuple]] = [[] for _ in parts]
            for r in rows:
                i = int(r[0])
                keys, (lvl, b, cnt, sm) = tuple(r[1 : 1 + n]), r[1 + n : 5 + n]
                kind = parts[i][1]
                per[i].append(
                    (*keys, lvl, b, cnt, sm)
                    if kind == "sum_framework"
                    else (*keys, lvl, cnt, sm)
                    if kind == "sum_extension"
                    else (*keys, lvl, cnt)
                )
            return [
                _hists(rows_i, sub, pol, kind == "sum_framework")
                for rows_i, (sub, kind, _) in zip(per, parts)
            ]

        if not extremes:
            return await fetch(conn, sql, then=lambda rows: then([(h, None, None) for h in split(rows)]))

        def stage1(rows):  # every part's histograms; each MAX/MIN's ℓ per cell (Alg. 1, E/2)
            hists = split(rows)
            ells: dict[int, dict] = {}
            for i in extremes:
                m = parts[i][2]
                if not isinstance(m, FrameworkMax):
                    raise SqlError("XX000", "internal error: a per-record MAX/MIN without its mechanism")
                ells[i] = {c: m.select_level(h, gw.source) for c, h in hists[i].items()}
            vsql = parts_values_sql([(parts[i][0], ells[i]) for i in extremes], pol.sql, gw.config, dialect)
            return hists, ells, vsql

        hists, ells, vsql = await fetch(conn, sql, then=stage1)

        def finish(rows):
            values: dict[int, list[tuple]] = {i: [] for i in extremes}
            for r in rows:
                values[extremes[int(r[0])]].append(tuple(r[1:]))
            return then([(h, ells.get(i), values.get(i)) for i, h in enumerate(hists)])

        return await fetch(conn, vsql, then=finish)

    def measure(self, conn, p: Prepared, cells) -> dict:
        prp, st = plan_as(p, PrPlan), state_as(p, PerRecordState)
        pol = st.policy
        if st.parts is not None:
            each = share_of(p.epsilon, prp.split)
            return _combine(
                [
                    _answer(conn.gw, sub, pol, each, kind, m, h, ells, values)
                    for (sub, kind, m), (h, ells, values) in zip(st.parts, cells)
                ]
            )
        hists, ells, values = cells
        if st.kind is None:  # a statement not in parts has its one mechanism
            raise SqlError("XX000", "internal error: a per-record release without its mechanism")
        return _answer(conn.gw, prp, pol, p.epsilon, st.kind, st.m, hists, ells, values)

    def mechanism(self, answer: dict) -> str:
        return "+".join(answer["mechanism"])

    def rows(self, p: Prepared, answer: dict) -> Sequence[tuple]:
        return answer_rows(plan_as(p, PrPlan).plan, answer)

    def notice_body(self, p: Prepared, answer: dict) -> str:
        prp = plan_as(p, PrPlan)
        kinds = [f for f, _ in prp.parts] or [prp.func]
        noised = tuple(a for a, f in zip(prp.plan.aggregates, kinds) if f not in ("max", "min"))
        clamped = consistency_text(dataclasses.replace(prp.plan, aggregates=noised))
        return notice_body(prp, state_as(p, PerRecordState).policy, answer) + clamped

    def warning(self, p: Prepared, answer: dict, rows: Sequence[tuple]) -> str:
        return record_warning(plan_as(p, PrPlan), state_as(p, PerRecordState), answer)

    async def describe(self, conn, stmt: Statement, oids: list[int]) -> Description:
        return await describe_per_record(conn, stmt, oids)

    async def explain(self, conn, stmt: Statement, params: list, plan=None) -> Result:
        return await explain_per_record(conn, stmt, params)


def record_warning(prp: PrPlan, st: PerRecordState, answer: dict) -> str:
    """The warning line of a per-record release: each group's released value judged by its
    mechanism's law (:func:`mechanisms.snr.judge`) at the bound its released level ℓ gives
    (public: the NOTICE states it) — COUNT and SUM against the noise of the levels kept, at
    1 − β; MAX/MIN against the group's released row count where the statement releases a
    COUNT beside it. Over the groups the HAVING / outer WHERE keeps."""
    parts = st.parts if st.parts is not None else [(prp, st.kind, st.m)]
    prs = answer.get("parts") or [answer["per_record"]]
    kept = kept_cells(prp.plan, answer)
    cells = [v for k, v in enumerate(answer["values"]) if kept is None or kept[k]]
    counts = next(
        ([c[j] for c in cells] for j, (_, kind, _) in enumerate(parts) if kind == "count"),
        None,
    )
    out = []
    for j, ((_, kind, m), pr) in enumerate(zip(parts, prs)):
        widths = [w for k, w in enumerate(pr["noise"]) if kept is None or kept[k]]
        values = [c[j] for c in cells]
        sig = judge(m, values, widths, n_hats=counts if kind in ("max", "min") else None)
        out.append((answer["labels"][j], sig))
    return warning_line(out)


def _combine(parts: list[dict]) -> dict:
    """Several COUNT/SUM of one statement, each released at weight / k (sequential
    composition: every record's loss is at most Σ (weight/k)·E(r) = weight·E(r), what one
    statement is charged): the parts' values per cell, in the plan's order."""
    return {
        "keys": parts[0]["keys"],
        "values": [[p["values"][j][0] for p in parts] for j in range(len(parts[0]["keys"]))],
        "half_width": [p["half_width"][0] for p in parts],
        "mechanism": [p["mechanism"][0] for p in parts],
        "epsilon": [p["epsilon"][0] for p in parts],
        "labels": [p["labels"][0] for p in parts],
        "per_record": parts[0]["per_record"],
        "parts": [p["per_record"] for p in parts],
    }


# -- the statement -----------------------------------------------------------------------


def _key(prp: PrPlan, pol: Policy, weight: float) -> str:
    text = f"{prp.canonical()};policy={pol.describe()};sum={pol.sum_method}"
    return f"pr:{hashlib.sha256(text.encode()).hexdigest()[:32]}:eps={weight!r}"


def refuse_ladder(gw, role: str, table: str) -> None:
    """0A000 for a data-market ladder tier: its tiers' per-record releases would be independent,
    and a coalition would learn Σε·E(r), not the max ε of one chain. Nothing is charged."""
    tname = gw.config.roles[role].tier
    tier = gw.config.tiers[tname]
    if tier.ladder is None:
        return
    raise SqlError(
        "0A000",
        f"per-record table {table} is not available to data-market ladder tiers "
        f"(role {role}'s tier {tname} is on ladder {tier.ladder}); nothing was charged",
        hint="Ladder tiers are answered from one noise chain, which per-record releases do "
        "not have: ask COUNT/SUM/AVG of a central table, or use a role whose tier has "
        "no ladder for per-record tables.",
    )


def _plan(conn, stmt: Statement, params) -> tuple[PrPlan, Policy]:
    gw = conn.gw
    prp = build_pr_plan(stmt.tree(), gw.config, list(params) if params else None)
    refuse_ladder(gw, conn.role, prp.plan.table)
    pol = policy_of(gw, prp.plan.table)
    for sub in [prp.part(i) for i in range(len(prp.parts))] or [prp]:
        if sub.func == "sum":
            sum_method(sub, pol)  # refuse before any backend work
    return prp, pol


def _fmt(x: float) -> str:
    """A bound for display, never smaller than the bound itself."""
    if x >= 1:
        return str(math.ceil(x))
    return f"{x:.3g}"


def _threshold(pol: Policy, eps_q: float, weight: float) -> str:
    """' (i.e. col < v)' for ε(r) > eps_q under a shortcut (monotone single-column) E."""
    if pol.pf is None:
        return ""
    v = pol.pf.max_value(math.nextafter(eps_q / weight, math.inf)) + 1
    return f" ({pol.column} < {v})" if 0 < v <= pol.U else ""


def _condition(pol: Policy, pr: dict) -> str:
    conds = pr["cond"]
    if all(c is None for c in conds):
        return ""
    if len(set(conds)) > 1:
        return " if every row has ε(r) > ε_τ/2 of its group"
    (c,) = set(conds)
    return f" if every row has ε(r) > {c:.3g}{_threshold(pol, c, pr['weight'])}"


def notice_body(prp: PrPlan, pol: Policy, answer: dict) -> str:
    """The NOTICE after its common head: ε(r), ε_τ and which rows the answer covers, the
    noise bound and the Thm 5.1 / 6.1 bound at 1 - β, mechanism (per aggregate when several
    share the statement's ε)."""
    names = [o.name for o in prp.plan.outputs if o.source == "aggregate"]
    if answer.get("parts"):
        first: dict[int, str] = {}  # each part's name: the first output it fills
        for o in prp.plan.outputs:
            if o.source == "aggregate":
                first.setdefault(o.index, o.name)
        names = [first.get(i, "") for i in range(len(answer["parts"]))]
        k = len(answer["parts"])
        w = answer["parts"][0]["weight"]
        bodies = "; ".join(
            f"{i + 1}) {_body(pol, pr, names[i] if i < len(names) else label, mech)}"
            for i, (pr, label, mech) in enumerate(zip(answer["parts"], answer["labels"], answer["mechanism"]))
        )
        return (
            f"{k} aggregates share the statement's ε, split equally (sequential composition): each is "
            f"released under ε(r) = {w:g} × {pol.text} in [{w * pol.levels.eps_min:g}, "
            f"{w * pol.levels.eps_max:g}], so a record loses at most {k} × {w:g} × E(r) in all; {bodies}; "
            f"mechanism: {', '.join(answer['mechanism'])}"
        )
    pr = answer["per_record"]
    mech = answer["mechanism"][0]
    scale = f"{pr['weight']:g} × " if pr["weight"] != 1 else ""
    return (
        f"per-record ε(r) = {scale}{pol.text} in [{pr['weight'] * pol.levels.eps_min:g}, "
        f"{pr['weight'] * pol.levels.eps_max:g}]; {_body(pol, pr, names[0], mech)}; mechanism: {mech}"
    )


def _body(pol: Policy, pr: dict, name: str, mech: str) -> str:
    """What one release guarantees: ε_τ, the rows it covers, the noise and theorem bounds."""
    taus, ells = pr["eps_tau"], pr["ell"]
    n = len(taus)
    pct = f"{(1 - pr['beta']) * 100:g}%"
    over = ", max over groups" if n > 1 else ""
    if min(taus) == max(taus):
        tau = f"ε_τ {taus[0]:.3g}" + (f" in all {n} groups" if n > 1 else "")
        kept = (
            "all rows"
            if ells[0] == 1
            else f"the rows with ε(r) > ε_τ{_threshold(pol, taus[0], pr['weight'])}"
        )
    else:
        tau = f"ε_τ {min(taus):.3g}–{max(taus):.3g} over {n} groups"
        kept = "the rows of each group with ε(r) > its ε_τ"
    cond = _condition(pol, pr)
    thm = {"prdp_count": "Thm 5.1", "prdp_sum_extension": "Thm 5.1 / Eq. 9"}.get(mech, "Thm 6.1")
    if pr["units"] == "rank":
        side = "above" if pr["func"] == "max" else "below"
        body = (
            f"{tau}: among {kept}, at most {_fmt(max(pr['noise']))} are {side} the {name} "
            f"({pct}{over}); rows with smaller ε(r) are left out — {thm}: at most "
            f"{_fmt(max(pr['bound']))} rows in all{cond}"
        )
    else:
        what = (
            f"{kept}"
            if mech != "prdp_sum_framework"
            else f"min(value, τ) over {kept}, τ = {_fmt(max(pr['tau']))}"
        )
        if mech == "prdp_sum_framework":
            cond += " and no value is above 2τ" if cond else " if no value is above 2τ"
        body = (
            f"{tau}: the {name} covers {what}, ±{_fmt(max(pr['noise']))} of noise ({pct}{over}); "
            f"rows with smaller ε(r) are left out — {thm}: error at most ±{_fmt(max(pr['bound']))} "
            f"in all{cond}"
        )
    return body


# -- Describe and EXPLAIN ------------------------------------------------------------


async def describe_per_record(conn, stmt: Statement, oids: list[int]) -> Description:
    """Describe (extended protocol) for a per-record statement: parameter and column types."""
    gw = conn.gw
    expr = stmt.tree()
    types = pr_param_types(expr, gw.config)
    inferred = [oids[i] if i < len(oids) and oids[i] else TYPE_OIDS[t] or _TEXT for i, t in enumerate(types)]
    prp = build_pr_plan(expr, gw.config, [DUMMY.get(t, "0") for t in types] if types else None)
    refuse_ladder(gw, conn.role, prp.plan.table)
    policy_of(gw, prp.plan.table)
    return Description(
        inferred, [Column(o.name, t) for o, t in zip(prp.plan.outputs, output_types(prp.plan))]
    )


def explain_accuracy(kind: str, m) -> str:
    """EXPLAIN's accuracy line, from the mechanism's public parameters only (no data): the
    level ℓ the scan selects decides the error, so it is stated for ℓ = 1 (every level kept)
    and ℓ = L (only the top one). COUNT / SUM extension: noise <= Σ_{i>=ℓ} k_i, and with the
    rows of skipped levels <= 2·Σ_{i>=ℓ-1} k_i (Thm 5.1 / Eq. 9); MAX / MIN: rank margin
    2·k0(ℓ), k0 = ⌈(2/ε₂) ln((U+1)/(β/2))⌉ at ε₂ = ε_τ/2 (Thm 6.1, Chen et al. 2025 §6.4), plus the
    dropped rows <= 2·Σ_{i>=ℓ-1} k_i; framework SUM: its clipping radius τ comes from the data."""
    L, beta = m.levels.L, (m.beta if hasattr(m, "beta") else m.scan.beta)
    head = f"  accuracy at 1 − β = {1 - beta:.0%} before any data (ℓ: the level the scan selects; the NOTICE states its own)"
    if kind in ("count", "sum_extension"):
        noise = [sum(m.scan.k[ell - 1 :]) for ell in (1, L)]
        bound = [m.error_bound(max(1, ell - 1)) for ell in (1, L)]
        return (
            f"{head}: noise ±{noise[0]:,} if every level is kept (ℓ = 1) down to ±{noise[1]:,} if only level "
            f"{L}; with the rows of skipped levels, error at most ±{bound[0]:,} (ℓ = 1) to ±{bound[1]:,} "
            f"(ℓ = {L}) (Thm 5.1 / Eq. 9)"
        )
    dropped = [m.dropped_bound(max(1, ell - 1)) for ell in (1, L)]
    if kind in ("max", "min"):
        k0 = [
            math.ceil(2.0 / float(m.stage2_epsilon(ell)) * math.log((m.U + 1) / (beta / 2))) for ell in (1, L)
        ]
        side = "above" if kind == "max" else "below"
        return (
            f"{head}: rank error (rows {side} the answer) at most {2 * k0[0]:,} + {dropped[0]:,} left out "
            f"(ℓ = 1) to {2 * k0[1]:,} + {dropped[1]:,} (ℓ = {L}) (Thm 6.1: 2·k0 + dropped rows)"
        )
    return (
        f"{head}: rows left out at most {dropped[0]:,} (ℓ = 1) to {dropped[1]:,} (ℓ = {L}), each counted "
        "up to the clipping radius τ, plus Laplace noise at τ's scale; τ is chosen from the data, so "
        "the ± figure is in the NOTICE (Thm 6.1)"
    )


def explain_signal(kind: str, m) -> str:
    """EXPLAIN's statement of when a group's answer would be mostly noise (the rules of
    :func:`record_warning`, before any data): a COUNT/SUM when the noise of the levels it keeps
    reaches |value| — a COUNT is useful from that noise + 1 rows, stated for ℓ = L and ℓ = 1 —;
    a MAX/MIN when its rank margin 2·k0 reaches the group's rows (judged where a COUNT is
    released beside it)."""
    L = m.levels.L
    if kind in ("count", "sum_extension"):
        noise = [sum(m.scan.k[ell - 1 :]) for ell in (L, 1)]
        useful = (
            f"; a count useful from groups of {noise[0] + 1:,} (ℓ = {L}) to {noise[1] + 1:,} rows (ℓ = 1)"
            if kind == "count"
            else ""
        )
        return f"  mostly noise when a group's noise bound ≥ |value| (the levels it keeps, at 1 − β){useful}"
    if kind in ("max", "min"):
        beta = m.beta
        k0 = [
            math.ceil(2.0 / float(m.stage2_epsilon(ell)) * math.log((m.U + 1) / (beta / 2))) for ell in (L, 1)
        ]
        return (
            "  mostly noise when the rank margin reaches the group's rows (judged against a COUNT "
            f"released beside it): useful from groups of {2 * k0[0] + 1:,} (ℓ = {L}) to {2 * k0[1] + 1:,} "
            "rows (ℓ = 1)"
        )
    return "  mostly noise when a group's noise bound ≥ |value| (at 1 − β; τ from the data)"


async def explain_per_record(conn, stmt: Statement, params: list) -> Result:
    """``EXPLAIN`` of a per-record statement: policy, mechanism, backend SQL; free."""
    gw = conn.gw
    prp, pol = _plan(conn, stmt, params)
    tier = gw.tier_of(conn.role)
    if prp.parts:
        return _explain_parts(gw, prp, pol, tier)
    kind, m = mechanism(gw, prp, pol, float(tier.epsilon))
    dialect = gw.backend.dialect
    framework_sum = kind == "sum_framework"
    sql = scan_sql(prp, pol.sql, gw.config, dialect, buckets=framework_sum, with_sum=kind == "sum_extension")
    lines = [
        f"dpgate per-record release of {pol.table}: E_q(r) = {tier.epsilon:g} × E(r), "
        f"{pol.describe()}; ε charged {tier.epsilon:g}",
        f"  {prp.label} via {mechanism_name(kind)}, {len(prp.cells)} cell(s) (parallel "
        "composition), every level of every cell noised",
    ]
    lines.append(explain_accuracy(kind, m))
    lines.append(explain_signal(kind, m))
    if kind in ("max", "min"):
        lines.append(
            "  round 2 after ℓ is known: the distinct values of levels >= ℓ of each cell "
            "(one query for all cells)"
        )
    lines.append(
        "backend SQL (one scan, GROUP BY keys, level" + (", value bucket)" if framework_sum else ")") + ":"
    )
    lines.extend("  " + line for line in pretty(sql, dialect).splitlines())
    return Result("EXPLAIN", [Column("QUERY PLAN", _TEXT)], [(line,) for line in lines])


def _explain_parts(gw, prp: PrPlan, pol: Policy, tier) -> Result:
    """EXPLAIN of several COUNT/SUM/MAX/MIN on a per-record table: the ε split, each part's
    mechanism and accuracy, and the one backend statement of their level scans (MAX/MIN's
    second round: one more, once ℓ is known)."""
    dialect = gw.backend.dialect
    each = share_of(float(tier.epsilon), prp.split)
    lines = [
        f"dpgate per-record release of {pol.table}: {prp.split} aggregates share ε "
        f"{tier.epsilon:g}, split equally: each under E_q(r) = {each:g} × E(r) (sequential "
        f"composition), {pol.describe()}; ε charged {tier.epsilon:g} once"
    ]
    specs = []
    for i in range(prp.split):
        sub = prp.part(i)
        kind, m = mechanism(gw, sub, pol, each)
        specs.append((sub, kind == "sum_framework", kind == "sum_extension"))
        lines.append(
            f"  {i + 1}) {sub.label} via {mechanism_name(kind)}, {len(sub.cells)} cell(s), every "
            "level of every cell noised"
            + (
                "; round 2 after ℓ is known: the distinct values of levels >= ℓ of each cell "
                "(one more statement for all MAX/MIN and cells)"
                if kind in ("max", "min")
                else ""
            )
        )
        lines.append("  " + explain_accuracy(kind, m))
        lines.append("  " + explain_signal(kind, m))
    lines.append(
        "backend SQL (one statement: each aggregate's scan GROUP BY keys, level[, value bucket], tagged):"
    )
    sql = parts_scan_sql(specs, pol.sql, gw.config, dialect)
    lines.extend("  " + line for line in pretty(sql, dialect).splitlines())
    return Result("EXPLAIN", [Column("QUERY PLAN", _TEXT)], [(line,) for line in lines])


PER_RECORD = PerRecord()
