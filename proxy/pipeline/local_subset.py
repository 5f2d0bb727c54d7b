"""Categorical Subset columns of local tables through the proxy (multi-tier release, Wang et al. 2026 §5; multi-tier spec §10
"LDP categorical columns"; planning in :mod:`rewriter.local_subset`).

``SELECT zone, COUNT(*) FROM trips [WHERE public …] GROUP BY zone`` is answered for the
connecting role's tier only: the tier's stored level (its ε, or the nearest LOWER stored level
for a tier added after ingestion — never a higher one), ONE backend scan summing that level's d
bit columns, then ``(count_j − n f)/(t − f)`` with the MATCHED template's (t, f) (pitfall 10).
Nothing is charged (the reports were perturbed once at ingestion; answers are post-processing);
the NOTICE gives the 95% half-width (:func:`proxy.ingest.subset_ingest.tier_template`) and the guarantee.
Roles whose tier is not on the column's ladder are refused (42501).
"""

from __future__ import annotations

import itertools
import math

from mechanisms.snr import additive_each
from rewriter import dialects
from rewriter.dialects import SQLDialect
from rewriter.local import layout
from rewriter.local_subset import Category, SubsetPlan, subset_sql

from ..ingest.subset_ingest import estimate_from_counts, ladder_of, realised, tier_template, top
from ..wire.api import Column, Result, SqlError
from .local_reports import ensure_reports, stored_layout
from .notice import warning_line

__all__ = ["answer_subset", "explain_subset", "serve_level", "subset_answer", "subset_coalition_rows"]


def serve_level(cfg, role: str, cat: Category, table: str) -> tuple[float, str, object]:
    """(stored level, tier name, tier) a role reads for ``cat``, or a 42501 SqlError."""
    tname = cfg.roles[role].tier
    tier = cfg.tiers[tname]
    on = sorted(n for n, t in cfg.tiers.items() if t.ladder == cat.ladder_name)
    if tier.ladder != cat.ladder_name:
        why = "has no ladder" if tier.ladder is None else f"is on ladder {tier.ladder}"
        raise SqlError(
            "42501",
            f"{cat.name} of local table {table} is served only to the tiers of "
            f"ladder {cat.ladder_name} ({', '.join(on)}); role {role}'s tier {tname} {why}",
            hint=f"Its rows were perturbed once for the ε of ladder {cat.ladder_name}'s "
            "tiers; connect as a role of one of them.",
        )
    level = cat.stored_level(tier.epsilon)
    if level is None:
        raise SqlError(
            "42501",
            f"tier {tname} (ε {tier.epsilon:g}) is below every stored level of "
            f"{table}.{cat.name} ({_levels(cat)}); a tier never reads a higher level",
            hint="Reports for a lower ε would need the rows perturbed again, which is "
            "a new release; re-load the table with the new ladder.",
        )
    return level, tname, tier


def _levels(cat: Category) -> str:
    return ", ".join(f"{e:g}" for e in cat.levels)


def _key(v):
    if v is None or isinstance(v, (bool, str)):
        return v
    f = float(v)
    return int(f) if f.is_integer() and not isinstance(v, float) else v


def subset_answer(plan: SubsetPlan, cat: Category, level: float, cells: list[tuple]):
    """Rows (every group cell, then ORDER BY/LIMIT), the max 95% half-width, the report count
    and each returned row's 95% half-width (its public-key cell's: the template's at its n)."""
    k = len(plan.public_keys)
    d = cat.d
    tpl = ladder_of(cat).match[level]
    by_key = {tuple(_key(v) for v in row[:k]): row for row in cells}
    est: dict = {}
    each: dict = {}  # per public-key cell, its 95% half-width
    hw, n_total = 0.0, 0
    for pk in itertools.product(*plan.public_domains):
        row = by_key.get(tuple(pk))
        n = int(row[k]) if row is not None else 0
        counts = [int(row[k + 1 + j] or 0) for j in range(d)] if row is not None else [0] * d
        est[tuple(pk)] = estimate_from_counts(counts, n, d, tpl.rho, tpl.k) if n else [0.0] * d
        n_total += n
        each[tuple(pk)] = tier_template(ladder_of(cat), level, n)["half_width"] if n else 0.0
        hw = max(hw, each[tuple(pk)])
    index = {v: j for j, v in enumerate(cat.domain)}
    rows = []
    for key in itertools.product(*plan.domains):
        pk = tuple(v for i, v in enumerate(key) if i != plan.cat_key)
        count = int(round(est[pk][index[key[plan.cat_key]]]))
        rows.append((tuple(key[o.index] if o.source == "group" else count for o in plan.outputs), each[pk]))
    for idx, desc in reversed(plan.order_by):
        rows = sorted(rows, key=lambda r: r[0][idx], reverse=desc)
    start = plan.offset or 0
    rows = rows[start : None if plan.limit is None else start + plan.limit]
    return [r for r, _ in rows], hw, n_total, [h for _, h in rows]


def _tier_line(cat: Category, level: float, tname: str, tier) -> str:
    tpl = ladder_of(cat).match[level]
    t, f = (float(v) for v in tpl.t_f(cat.d))
    lower = (
        "" if level == tier.epsilon else f" (nearest lower stored level: ε {tier.epsilon:g} is not stored)"
    )
    return (
        f"ladder {cat.ladder_name}: tier {tname} reads level ε {level:g} of {{{_levels(cat)}}}{lower}, "
        f"realised ε {tpl.level:.3g} with k = {tpl.k} of d = {cat.d}, debiased with that "
        f"template's t = {t:.3g}, f = {f:.3g}"
    )


def _coalition_line(cat: Category, cfg, level: float) -> str:
    indep = math.fsum(t.epsilon for t in cfg.tiers.values() if t.ladder == cat.ladder_name)
    return (
        f"guarantee per row: these reports are {realised(cat, level):.3g}-LDP; the ladder's "
        f"tiers pooling their reports learn at most ε {top(cat):.3g} (one perturbation per "
        f"row), not Σε = {indep:g}"
    )


def scan_sql(plan: SubsetPlan, cat: Category, level: float, dialect: str | SQLDialect) -> str:
    """The Subset scan, written in the backend's ``text_dialect`` and read as the backend
    reads it (``SQLDialect.from_text``: Spark's is transpiled from Postgres spelling)."""
    d = dialects.get(dialect)
    return d.from_text(subset_sql(plan, cat, level, d.text_dialect))


async def answer_subset(conn, plan: SubsetPlan, fetch):
    """Answer a Subset plan for the connecting role's tier: (Result, "ldp", 0.0)."""
    gw = conn.gw
    stored = await ensure_reports(gw, plan.layout)
    cat = stored.category(plan.category)
    level, tname, tier = serve_level(gw.config, conn.role, cat, stored.name)
    cells = await fetch(conn, scan_sql(plan, cat, level, gw.backend.dialect))
    rows, hw, n, widths = subset_answer(plan, cat, level, cells)
    many = " (max over rows)" if plan.public_keys else ""
    count, k = next((o.name, k) for k, o in enumerate(plan.outputs) if o.source == "aggregate")
    # each returned count against its cell's half-width (the additive rule; post-processing)
    warn = warning_line([(count, additive_each([r[k] for r in rows], widths))])
    msg = (
        f"dpgate: ε charged 0 (local table {stored.name}: {cat.name} perturbed once per row at "
        f"ingestion by the multi-tier Subset mechanism; answers are post-processing, no budget "
        f"is used); {n:,} reports; 95% half-width: {count} ±{hw:.3g}{many}; "
        f"{_tier_line(cat, level, tname, tier)}; {_coalition_line(cat, gw.config, level)}"
    )
    msg = f"{warn}\n{msg}" if warn else msg
    cols = [Column(o.name, {"int": 20, "float": 701, "text": 25, "bool": 16}[o.type]) for o in plan.outputs]
    return Result(f"SELECT {len(rows)}", cols, rows, notices=[msg]), "ldp", 0.0


async def explain_subset(conn, plan: SubsetPlan) -> Result:
    """EXPLAIN of a Subset plan for the connecting role (nothing runs, nothing is charged)."""
    gw = conn.gw
    stored = await ensure_reports(gw, plan.layout)
    cat = stored.category(plan.category)
    level, tname, tier = serve_level(gw.config, conn.role, cat, stored.name)
    alg = {1: "Alg. 3", 2: "Alg. 5"}[cat.variant]
    lines = [
        f" dpgate answer over local table {stored.name}: Subset reports of {cat.name} in "
        f"{stored.reports}; post-processing, ε 0 charged",
        f"   multi-tier Subset (Wang et al. 2026 §5, Alg. 2 with {alg} templates, Alg. 4 matching)",
        f"   {_tier_line(cat, level, tname, tier)}",
        "   count per category: (Σ bits − n·f)/(t − f), unbiased (multi-tier spec §4.2); 95% "
        "half-width 1.96·√(n·max(t(1−t), f(1−f)))/(t − f): "
        + ", ".join(
            f"±{tier_template(ladder_of(cat), level, n)['half_width']:.3g} at n = {n:,}"
            for n in (1_000, 10_000, 100_000)
        )
        + " reports",
        f"   {_coalition_line(cat, gw.config, level)}",
        " backend SQL (one scan):",
        "   " + scan_sql(plan, cat, level, gw.backend.dialect),
    ]
    return Result("EXPLAIN", [Column("QUERY PLAN", 25)], [(line,) for line in lines])


def subset_coalition_rows(gw) -> list[tuple]:
    """Rows of ``dpgate.coalition`` (COALITION_COLUMNS) for every Subset column: the loss per
    row of the ladder's tiers together (max level: one perturbation) vs Σε of independent ones."""
    cfg, out = gw.config, []
    for name, table in cfg.tables.items():
        if table.mode != "local":
            continue
        lay = layout(name, table, cfg.tiers)
        lay = stored_layout(gw, lay)  # as stored, once known
        for cat in lay.categories:
            tiers = [(n, t) for n, t in cfg.tiers.items() if t.ladder == cat.ladder_name]
            held = sorted(
                (
                    (n, cat.stored_level(t.epsilon), t.epsilon)
                    for n, t in tiers
                    if cat.stored_level(t.epsilon) is not None
                ),
                key=lambda x: (-x[1], x[0]),
            )
            released = ", ".join(
                f"{n} {lv:g}" + (f" (ε {ep:g})" if ep > lv + 1e-12 else "") for n, lv, ep in held
            )
            roles = ", ".join(
                sorted(r for r, spec in cfg.roles.items() if spec.tier in {n for n, _, _ in held})
            )
            loss = round(top(cat), 12)
            indep = math.fsum(ep for _, _, ep in held)
            out.append(
                (
                    cat.ladder_name,
                    f"LDP {name}.{cat.name}: Subset reports, each row perturbed "
                    "once at ingestion (loss per row)",
                    None,
                    _levels(cat),
                    released,
                    roles,
                    len(held),
                    loss,
                    indep,
                    round(indep - loss, 12),
                    None,
                )
            )
    return out
