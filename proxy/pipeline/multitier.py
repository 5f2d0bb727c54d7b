"""Data-market tiers: one noise chain answers every tier of a ladder (multi-tier release, Wang et al. 2026).

Tiers that name the same ``ladder`` in the config (demo: bronze ε 0.1, silver
ε 0.5, gold ε 2 in ladder ``market``) are answered from ONE chain per query
(paper Alg. 1): on the first request from ANY of them the whole ladder is drawn
from one backend scan — the root at the ladder's top level is the only data
access, every lower level is the level above plus a fresh, data-independent
residual — and persisted (:mod:`proxy.stores.ladder_store`) BEFORE anything is
answered. Each role then gets its tier's level; a tier never sees a higher one.
A coalition of tiers holds a post-processing of its highest level (Thm 4.1,
data-processing inequality), so it learns at most max ε, not Σε.

Mechanisms (every cell of a GROUP BY and every aggregate its own chain):

* COUNT — two-sided geometric (TSG) chain, sensitivity 1.
* SUM — TSG chain on the proxy's fixed-point integer grid (the grid of
  :class:`mechanisms.LaplaceSum`: integers for int columns, a power-of-two grid
  with one extra unit of sensitivity for float columns).
* AVG — Algorithm 3 of the add-remove mean (Kulesza et al. 2024): the grid input (A, nM − A) of
  :class:`mechanisms.mean.LaplaceTransformedMean` gets a discrete-Laplace (TSG)
  chain on EACH coordinate at the FULL level ε (no split; the neighbour shift
  ±(a, M − a) has l1 norm M = the chain's sensitivity), via
  :class:`mechanisms.multitier.VectorLadder`; AVG, SUM(x) and COUNT(x) of the
  same column are post-processing of that one release, as for single tiers.

Several releases in one statement split the level ε equally (a fixed fraction,
so each aggregate's chain is monotone and the coalition still loses max ε).

Accounting: each role pays its tier ε once per distinct query (the ordinary
release pipeline of :mod:`.kind`, with the tier's level as the answer). The data
owner's view :func:`coalition_rows` (``SELECT * FROM dpgate.coalition``,
``dpgate coalition``) shows per ladder the tiers released, the coalition loss
(max level released) and what independent release would have cost (Σ ε).

Tiers added later (spec §9): a tier whose ε is not a generated level gets the
nearest lower level (App. H) by default, or — with ``ladder_insert = "bridge"``
on the tier — an exact bridge draw between its two neighbours, persisted into
the chain. Below the lowest level the chain is continued by one residual (§9a)
in both modes. Above the root nothing can be added without a fresh look at the
data (§9c), so such a tier gets the root. A new data version starts new chains.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mechanisms import GeometricCount, LaplaceSum, split
from mechanisms.accounting import share_of, unit_epsilon
from mechanisms.mean import LaplaceTransformedMean
from mechanisms.multitier import VectorLadder, make_ladder, nearest_lower_level
from rewriter import complete
from rewriter.errors import Refusal
from rewriter.plan import Plan
from rewriter.unit import factor

from ..ingest.subset_ingest import estimate_group_counts, perturb_row_subset  # re-exported (Subset, local DP)
from ..stores.ladder_store import store_for
from ..wire.api import SqlError
from .central import Central, columns_of
from .common import avg_half_widths, cell_key, explain_output_line, plain_number
from .explain import signal_lines
from .kind import Prepared, plan_as
from .notice import cells_warning, unit_text
from .release import release_groups

__all__ = [
    "LADDER",
    "Ladder",
    "serve_level",
    "check_ladder_plan",
    "coalition_rows",
    "explain_ladder_lines",
    "COALITION_COLUMNS",
    "ladder_levels",
    "perturb_row_subset",
    "estimate_group_counts",
]

MECH = {
    "count": "multitier_geometric_count",
    "sum": "multitier_discrete_laplace_sum",
    "avg": "multitier_laplace_transformed_mean",
}


def _lk(level: float) -> str:
    return repr(float(level))


def ladder_levels(config, name: str) -> list[float]:
    """The ladder's version: the ε set of the tiers naming it, descending."""
    return sorted({float(t.epsilon) for t in config.tiers.values() if t.ladder == name}, reverse=True)


# -- slots: one chain family per release of the statement ----------------------
@dataclass(frozen=True)
class _Slot:
    name: str  # "avg(income)#0": stable for every statement with the same canonical text
    index: int  # the release's primary aggregate (plan order)
    members: tuple  # SUM(x)/COUNT(x) answered by an AVG(x) release
    kind: str
    lower: float | None
    upper: float | None
    integer: bool


def _slots(plan) -> list[_Slot]:
    seen: dict[str, int] = {}
    out = []
    for i, members in release_groups(plan):
        a = plan.aggregates[i]
        n = seen.get(a.label, 0)
        seen[a.label] = n + 1
        out.append(_Slot(f"{a.label}#{n}", i, tuple(members), a.func, a.lower, a.upper, a.type == "int"))
    return out


def _share(level: float, groups: int, k: int = 1) -> float:
    """The ε of one release at a tier level (equal split, as for single tiers); on a table
    with a privacy unit, of level/k (group privacy over a unit's kept rows: every level
    then holds per unit, :func:`rewriter.unit.factor`)."""
    return share_of(unit_epsilon(level, k), groups)


def _bounds(slot: _Slot) -> tuple[float, float]:
    """A SUM's or AVG's clamping bounds (the planner bounds every one)."""
    if slot.lower is None or slot.upper is None:
        raise SqlError("XX000", f"internal error: the ladder release {slot.name} has no bounds")
    return slot.lower, slot.upper


def _sum_measure(slot: _Slot, eps: float = 1.0) -> LaplaceSum:
    return LaplaceSum(eps, *_bounds(slot), integer=slot.integer)


def _avg_measure(slot: _Slot, eps: float = 1.0) -> LaplaceTransformedMean:
    return LaplaceTransformedMean(eps, *_bounds(slot), integer=slot.integer)


def _sensitivity(slot: _Slot) -> int:
    if slot.kind == "count":
        return 1
    if slot.kind == "sum":
        return int(_sum_measure(slot).sensitivity)  # grid units
    return int(_avg_measure(slot).grid)  # l1 of ±(a, M − a)


def _true_value(slot: _Slot, plan, measures: list):
    """The exact quantity the chain's root is drawn around (grid integers)."""
    a = plan.aggregates[slot.index]
    if slot.kind == "count":
        return int(measures[a.measures[0]])
    if slot.kind == "sum":
        s = measures[a.measures[0]]
        if slot.integer:
            return int(s)
        m = _sum_measure(slot)
        return round(float(s) / m.grid)  # as LaplaceSum.release
    mean = _avg_measure(slot)
    A, n = mean.grid_input(tuple(measures[j] for j in a.measures))
    return (A, n * mean.grid - A)


def _chain(slot: _Slot, shares: list[float]):
    sens = _sensitivity(slot)
    if slot.kind == "avg":
        return VectorLadder("tsg", shares, sensitivity=sens, dim=2)
    return make_ladder("tsg", shares, sens)


def _ints(values) -> list[int]:
    """Python ints of a chain level's values (int64 or object array)."""
    return [int(v) for v in values.tolist()]


def draw_ladder(plan, cells: list[tuple], levels: list[float], source) -> dict:
    """Alg. 1 for every cell and release: the raw chain values at every level.

    The roots are the only use of ``cells`` (the exact measures); nothing here is
    ever sent as is — :func:`answer_at` post-processes one level into an answer."""
    slots = _slots(plan)
    g = len(slots)
    k = len(plan.group_by)
    shares = [_share(e, g, factor(plan)) for e in levels]
    chains = {s.name: _chain(s, shares) for s in slots}
    rows = [[plain_number(v) for v in row[k:]] for row in cells]
    drawn: dict[str, dict[float, list[Any]]] = {}  # slot -> share -> per-cell values
    for s in slots:
        truths = [_true_value(s, plan, m) for m in rows]
        many = chains[s.name].release_many(truths, source)  # the whole release at once
        drawn[s.name] = {
            sh: (list(zip(*(_ints(c) for c in v))) if s.kind == "avg" else _ints(v)) for sh, v in many.items()
        }
    lks = [_lk(e) for e in levels]
    per_slot = [(s.name, s.kind == "avg", [drawn[s.name][sh] for sh in shares]) for s in slots]
    out_cells = []
    for i, row in enumerate(cells):
        raw = {
            name: {lk: (list(col[i]) if avg else col[i]) for lk, col in zip(lks, cols)}
            for name, avg, cols in per_slot
        }
        out_cells.append({"key": [cell_key(v) for v in row[:k]], "raw": raw})
    return {
        "family": "tsg",
        "groups": g,
        "slots": {s.name: {"kind": s.kind, "sensitivity": _sensitivity(s)} for s in slots},
        "cells": out_cells,
    }


def insert_level(plan, body: dict, levels: list[float], new: float, source) -> dict:
    """Add level ``new`` to a stored ladder without touching the data (spec §9a/§9b):
    below the lowest level one forward residual, between two levels an exact bridge
    conditioned on both neighbours. Returns the new body."""
    g = body["groups"]
    slots = _slots(plan)
    shares = [_share(e, g, factor(plan)) for e in levels]
    sh_new = _share(new, g, factor(plan))
    body = json.loads(json.dumps(body))
    for s in slots:
        lad = make_ladder("tsg", shares, body["slots"][s.name]["sensitivity"])
        for cell in body["cells"]:
            raw = cell["raw"][s.name]
            if s.kind == "avg":
                coords = []
                for c in range(2):
                    existing = {sh: raw[_lk(e)][c] for e, sh in zip(levels, shares)}
                    coords.append(int(lad.bridge_insert(existing, sh_new, source)))
                raw[_lk(new)] = coords
            else:
                existing = {sh: raw[_lk(e)] for e, sh in zip(levels, shares)}
                raw[_lk(new)] = int(lad.bridge_insert(existing, sh_new, source))
    return body


def answer_at(plan, body: dict, level: float, tier_eps: float) -> dict:
    """The answer (noisy_answer's shape) of the chain's ``level``: post-processing only."""
    slots = _slots(plan)
    g = body["groups"]
    share = _share(level, g, factor(plan))
    charged = [float(e) for e in split(tier_eps, g)]
    n = len(plan.aggregates)
    hws, mech, eps = [0.0] * n, [""] * n, [0.0] * n
    meas: dict[str, Any] = {}  # slot -> its mechanism (GeometricCount, LaplaceSum or LaplaceTransformedMean)
    for s, ch in zip(slots, charged):
        for j in (s.index, *s.members):
            mech[j], eps[j] = MECH[s.kind], ch
        if s.kind == "count":
            meas[s.name] = GeometricCount(share)
        elif s.kind == "sum":
            meas[s.name] = _sum_measure(s, share)
        else:
            meas[s.name] = _avg_measure(s, share)
    keys, values = [], []
    lk = _lk(level)
    if body["cells"]:  # a count's or sum's half-width is the same in every cell
        for s in slots:
            if s.kind != "avg":
                hws[s.index] = float(meas[s.name].half_width())
    for cell in body["cells"]:
        out: list[Any] = [None] * n
        for s in slots:
            raw, m = cell["raw"][s.name][lk], meas[s.name]
            if s.kind == "count":
                out[s.index] = int(raw)
            elif s.kind == "sum":
                out[s.index] = int(raw) if s.integer else float(raw) * m.grid
            else:
                y1, y2 = raw
                rel = m._release(y1 / m.grid, (y1 + y2) / m.grid)
                out[s.index] = rel.value
                hws[s.index] = max(hws[s.index], float(rel.half_width))
                for j in s.members:
                    part = rel.parts[0] if plan.aggregates[j].func == "sum" else rel.parts[1]
                    out[j] = part.value
                    hws[j] = max(hws[j], float(part.half_width))
        keys.append(list(cell["key"]))
        values.append(out)
    return {
        "keys": keys,
        "values": values,
        "half_width": hws,
        "mechanism": mech,
        "epsilon": eps,
        "interval_epsilon": [share] * n,  # each value's marginal law: the level's share (errorbars)
        "labels": [a.label for a in plan.aggregates],
    }


def _choose_level(levels: list[float], tier_eps: float, mode: str) -> tuple[float, str]:
    """(level to serve, how): exact / root / nearest_lower / bridge / extend."""
    if tier_eps in levels:
        return tier_eps, "exact"
    if tier_eps > levels[0]:
        return levels[0], "root"  # §9c would need the data again: serve the root
    if tier_eps < levels[-1]:
        return tier_eps, "extend"  # §9a: one more residual below the lowest level
    if mode == "bridge":
        return tier_eps, "bridge"  # §9b: exact bridge between the two neighbours
    lower = nearest_lower_level(levels, tier_eps)
    if lower is None:  # tier_eps is at least the lowest level here
        raise SqlError("XX000", f"internal error: no ladder level below ε {tier_eps:g}")
    return lower, "nearest_lower"


def explain_ladder_lines(plan, tier) -> list[str]:
    """EXPLAIN's header and per-column lines for a tier of a ladder (no data, no charge)."""
    _check_funcs(plan)
    slots = _slots(plan)
    g = len(slots)
    share = _share(float(tier.epsilon), g, factor(plan))
    by_index = {}
    for s in slots:
        for j in (s.index, *s.members):
            by_index[j] = s
    lines = [
        f"dpgate release of {plan.table} from ladder {tier.ladder}: ε {tier.epsilon:g} per query, "
        f"{plan.n_cells} cell(s), {len(plan.aggregates)} aggregate(s) sharing ε",
        f"  one noise chain per cell and aggregate serves every tier of ladder {tier.ladder}; this tier "
        f"gets its own level (never a higher one); the chain is drawn from one scan on the first request "
        f"of any tier and stored before answering",
        "  " + unit_text(plan),
    ]
    for o in plan.outputs:
        if (line := explain_output_line(plan, o)) is not None:
            lines.append(line)
            continue
        a, s = plan.aggregates[o.index], by_index[o.index]
        m = level_measure(s, share)
        if isinstance(m, LaplaceTransformedMean):
            scale, hw = f"{m.scale:.4g}", avg_half_widths(m)
        else:
            scale, hw = f"{m.output_scale:.4g}", f"±{m.half_width():.4g}"
        bounds = f", clamped to [{a.lower:g}, {a.upper:g}]" if a.lower is not None else ""
        via = MECH[s.kind] + (
            "" if o.index == s.index else f" (from the {plan.aggregates[s.index].label} release)"
        )
        lines.append(
            f"  {o.name}: {a.label}{bounds} via {via}, ε {share:g}, scale {scale}, 95% half-width {hw}"
        )
        if o.index == s.index:  # the rule and the useful size by this level's law
            lines.extend(f"    {t}" for t in signal_lines(plan, m, a, tier))
    return lines


# -- the orchestrator's entry point ----------------------------------------------
def _check_funcs(plan) -> None:
    """Ladder chains exist for COUNT, SUM and AVG only (VAR/STDDEV, COUNT(DISTINCT): 0A000)."""
    odd = [a.label for a in plan.aggregates if a.func not in MECH]
    if odd:
        raise SqlError(
            "0A000",
            f"{', '.join(odd)} is not available to data-market ladder tiers; nothing was charged",
            hint="Ask for COUNT, SUM or AVG on a ladder tier.",
        )


def check_ladder_plan(plan) -> None:
    """Refuse, before any scan, what ladder tiers cannot be served (a refusal after
    the scan would be a free timing probe)."""
    _check_funcs(plan)
    if plan.selection is not None:
        raise SqlError(
            "0A000",
            "HAVING and top-c (sparse vector) are not available to data-market ladder "
            "tiers; nothing was charged",
            hint="Ask for the GROUP BY without HAVING / ORDER BY … LIMIT: every cell of the public "
            "domain is released from the ladder.",
        )


class Ladder(Central):
    """A data-market tier's release (Wang et al. 2026): its level of the query's ladder. The
    first request of any tier draws the whole ladder from the one scan and persists it
    (in the scan's worker thread, before anything is answered); the tier's ε is
    charged like any release (reserved while scanning, recorded with the answer)."""

    name = "ladder"
    heavy = True  # the chain per cell

    def prepare(self, conn, plan) -> Prepared:
        if plan.selected:  # keys without a public domain: partition selection is not a ladder's
            raise SqlError(
                "0A000",
                "GROUP BY a column without a public domain (partition selection) is not "
                "available to data-market ladder tiers; nothing was charged",
                hint="Group by columns with a declared domain.",
            )
        check_ladder_plan(plan)  # refused before the scan: free
        tier = conn.gw.tier_of(conn.role)
        return Prepared(
            self,
            plan,
            columns_of(plan),
            key=f"{plan.fingerprint()}:eps={tier.epsilon!r}",
            canonical=plan.canonical(),
            epsilon=tier.epsilon,
        )

    def explain_head(self, plan, tier) -> list[str]:
        return explain_ladder_lines(plan, tier)

    async def scan(self, conn, p: Prepared, then):
        """The query's stored ladder, if there is one, is checked against its MAC before the
        scan (a damaged one refuses the statement before anything is read: refunded)."""
        tier = conn.gw.tier_of(conn.role)
        await asyncio.to_thread(
            store_for(conn.gw.ledger).check, tier.ladder, plan_as(p, Plan).fingerprint(), p.data_version
        )
        return await super().scan(conn, p, then)

    def measure(self, conn, p: Prepared, cells) -> dict:
        plan = plan_as(p, Plan)
        return serve_level(conn.gw, conn.role, plan, complete(plan, cells), p.data_version, p.statement)

    def warning(self, p: Prepared, answer: dict, rows: Sequence[tuple]) -> str:
        """The served level's values judged by that level's law (:func:`level_law`)."""
        plan = plan_as(p, Plan)
        return cells_warning(plan, answer, p.epsilon, rows, level_law(plan, answer))

    def after_reply(self, conn, p: Prepared) -> None:
        return None


def level_measure(slot: _Slot, share: float) -> GeometricCount | LaplaceSum | LaplaceTransformedMean:
    """The marginal law of one value of a chain's level at ``share`` (the level's ε per release):
    the two-sided geometric chain's level is that mechanism at that ε (Wang et al. 2026)."""
    if slot.kind == "count":
        return GeometricCount(share)
    if slot.kind == "sum":
        return _sum_measure(slot, share)
    return _avg_measure(slot, share)


def level_law(plan, answer: dict):
    """Each release's law at the served level (:data:`.notice.Law`): the level's measurement at
    its share (``interval_epsilon``) and the level over that share, to name a useful ε."""
    shares = answer.get("interval_epsilon") or []
    level = float((answer.get("ladder") or {}).get("level") or 0.0)
    by_index = {s.index: s for s in _slots(plan)}

    def law(i: int, _agg):
        s = by_index.get(i)
        if s is None or i >= len(shares) or not shares[i]:
            return None
        share = float(shares[i])
        return level_measure(s, share), (level / share if level else 1.0)

    return law


def serve_level(gw, role: str, plan, cells, data_version: int, sql: str) -> dict:
    """``role``'s tier's answer from the query's ladder, drawing and persisting the whole
    ladder first if this is the first request of any tier (blocking: runs in the scan's
    worker thread)."""
    tier = gw.tier_of(role)
    name = tier.ladder
    tier_name = gw.config.roles[role].tier
    mode = getattr(tier, "ladder_insert", "nearest") or "nearest"
    store = store_for(gw.ledger)  # first use opens (and on Postgres connects)
    qkey = plan.fingerprint()
    tier_eps = float(tier.epsilon)

    row = store.get(name, qkey, data_version)
    if row is None:
        version = ladder_levels(gw.config, name)
        if tier_eps not in version:  # cannot happen with a consistent config; be safe
            version = sorted(set(version) | {tier_eps}, reverse=True)
        body = draw_ladder(plan, cells, version, gw.source)
        row, _created = store.create(
            ladder=name,
            qkey=qkey,
            data_version=data_version,
            canonical=plan.canonical(),
            statement=sql,
            version=version,
            levels=version,
            body=body,
        )
        # (a racing request of another tier may have committed first: we use its ladder)
    level, served = _choose_level(row.levels, tier_eps, mode)
    if served in ("extend", "bridge"):

        def change(r):
            if level in r.levels:
                return None
            new_body = insert_level(plan, r.body, r.levels, level, gw.source)
            return sorted(r.levels + [level], reverse=True), new_body

        row = store.update(row.id, change)

    answer = answer_at(plan, row.body, level, tier_eps)
    answer["ladder"] = {
        "id": row.id,
        "name": name,
        "tier": tier_name,
        "tier_epsilon": tier_eps,
        "level": level,
        "levels": list(row.levels),
        "served": served,
        "data_version": data_version,
    }
    return answer


LADDER = Ladder()


# -- the data owner's view -------------------------------------------------------
COALITION_COLUMNS = [
    ("ladder", "VARCHAR"),
    ("statement", "VARCHAR"),
    ("data_version", "BIGINT"),
    ("levels", "VARCHAR"),
    ("tiers_released", "VARCHAR"),
    ("roles", "VARCHAR"),
    ("releases", "BIGINT"),
    ("coalition_loss", "DOUBLE"),
    ("independent_loss", "DOUBLE"),
    ("saved", "DOUBLE"),
    ("created", "VARCHAR"),
]


def coalition_rows(gw, role: str | None) -> tuple[list, list]:
    """Per ladder (one query, one data version): the tiers and roles it was
    released to, the coalition loss = max level released (what all of them
    together learn), and the independent-release cost Σ ε charged (what fresh
    noise per release would have cost them together). Metadata only.

    ``role`` None is the operator (CLI); otherwise only an admin role may read it."""
    if role is not None and not gw.config.roles[role].admin:
        raise Refusal(
            "42501",
            "dpgate.coalition is the data owner's view; only an admin role can read it",
            hint="Your own spending is in dpgate.budget and dpgate.releases.",
        )
    rows = []
    for lad in store_for(gw.ledger).ladder_summaries():
        rel = lad["releases"]
        per_tier: dict[str, tuple[float, float]] = {}  # tier -> (level held, ε paid)
        for r in rel:
            lv, ep = per_tier.get(r["tier"], (0.0, 0.0))
            per_tier[r["tier"]] = (max(lv, r["level"]), max(ep, r["epsilon"]))
        tiers = ", ".join(
            f"{t} {lv:g}" + (f" (ε {ep:g})" if ep > lv + 1e-12 else "")
            for t, (lv, ep) in sorted(per_tier.items(), key=lambda kv: (-kv[1][0], kv[0]))
        )
        roles = ", ".join(sorted({r["role"] for r in rel}))
        loss = max((r["level"] for r in rel), default=0.0)
        indep = math.fsum(r["epsilon"] for r in rel)
        ts = datetime.fromtimestamp(lad["created"], UTC).strftime("%Y-%m-%d %H:%M:%S+00")
        rows.append(
            (
                lad["ladder"],
                lad["statement"],
                lad["data_version"],
                ", ".join(f"{e:g}" for e in lad["levels"]),
                tiers,
                roles,
                len(rel),
                loss,
                indep,
                round(indep - loss, 12),
                ts,
            )
        )
    return COALITION_COLUMNS, rows
