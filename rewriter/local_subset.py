"""Categorical Subset columns of local tables (multi-tier release, Wang et al. 2026 §5; multi-tier
spec §4, §10 "LDP categorical columns"): the plan of ``COUNT(*) … GROUP BY cat`` and its scan; their storage layout and
tier → stored level are :class:`rewriter.local_layout.Category`'s.

Storage: a column ``c`` with domain of d values declared for the tiers of ladder ``L`` is
perturbed ONCE per row by the program of :class:`mechanisms.multitier.SubsetLadder` (built by
the proxy, :func:`proxy.ingest.subset_ingest.ladder_of`, from the ladder's tier ε, descending); the row's report for each tier level ε is a
k-subset of the domain, stored as d SMALLINT bits ``c_v{variant}_e{ε}_{j}`` (j = index in the
domain; ε written with ``p`` for the point, ``m`` for minus). The raw value is never stored.
The column names carry the ε set the reports were made for, so the template of each stored
level is rebuilt exactly even after the config's ladder has changed (:func:`resolve_stored`).

Serving (:class:`SubsetPlan`): a tier reads only its level's bits — its own ε if stored, else the
nearest LOWER stored level (a tier added after ingestion, App. H), never a higher one. One scan
sums those d bit columns (per public group cell); the estimate is post-processing with the
MATCHED template's (t, f) (pitfall 10), done by the proxy.

This module is SQL only: a :class:`Category` is plain data (domain, ladder name,
variant, stored levels); the Subset program and its templates are the proxy's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from . import predicate
from .errors import GROUPING_ERROR, Refusal
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .local_clauses import LocalOutput, columns_in, plan_group_by, plan_limit, plan_order_by
from .local_layout import Category, Layout, eps_tag, make_categories, resolve_stored
from .plan import GroupKey
from .scope import Ctx

__all__ = [
    "Category",
    "make_categories",
    "resolve_stored",
    "SubsetPlan",
    "plan_subset",
    "subset_sql",
    "SUBSET_ALLOWED",
    "eps_tag",
]

SUBSET_ALLOWED = (
    "Allowed for a categorical (Subset) column c of a local table: SELECT c, COUNT(*) "
    "FROM t [WHERE predicates on public columns] GROUP BY c [, public columns] "
    "[ORDER BY outputs] [LIMIT n], by a role whose tier is on c's ladder."
)


# ---------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class SubsetPlan:
    """``COUNT(*) … GROUP BY cat [, public keys]`` over one Subset column."""

    layout: Layout
    category: str
    where: exp.Expression | None  # public predicate (validated)
    group_by: tuple[GroupKey, ...] = ()  # GroupKeys (sorted), the category among them
    cat_key: int = 0  # index of the category in group_by
    outputs: tuple[LocalOutput, ...] = ()  # aggregate outputs are the count
    order_by: tuple[tuple[int, bool], ...] = ()
    limit: int | None = None
    offset: int = 0
    param_types: tuple[str | None, ...] = ()

    @property
    def public_keys(self) -> tuple[GroupKey, ...]:
        return tuple(g for i, g in enumerate(self.group_by) if i != self.cat_key)

    @property
    def domains(self) -> tuple[tuple[Any, ...], ...]:
        """The declared domain of each GROUP BY key (every key of a Subset plan has one)."""
        return tuple(_domain(g) for g in self.group_by)

    @property
    def public_domains(self) -> tuple[tuple[Any, ...], ...]:
        """The declared domain of each public GROUP BY key (the category left out)."""
        return tuple(_domain(g) for g in self.public_keys)


def _domain(key: GroupKey) -> tuple[Any, ...]:
    if key.domain is None:  # plan_group_by refuses a key without a public domain
        raise ValueError(f"GROUP BY key {key.column} has no declared domain")
    return key.domain


def _refuse(msg: str, state: str = "0A000") -> Refusal:
    return Refusal(state, msg, hint=SUBSET_ALLOWED)


def plan_subset(select: exp.Select, ctx: Ctx, lay: Layout, cat_names: set[str]) -> SubsetPlan:
    """Validate a SELECT that mentions Subset column(s) ``cat_names`` (already resolved)."""
    if len(cat_names) > 1:
        raise _refuse(
            f"{', '.join(sorted(cat_names))} are perturbed independently; query one "
            "categorical column at a time."
        )
    cat = next(iter(cat_names))
    w = select.args.get("where")
    where = None
    if w is not None:
        if w.this.find(exp.AggFunc):
            raise Refusal(GROUPING_ERROR, "aggregate functions are not allowed in WHERE.")
        bad = sorted(c for c in columns_in(w.this, ctx) if c not in lay.public)
        if bad:
            raise _refuse(
                f"WHERE on {', '.join(bad)} is not served with GROUP BY {cat}: only public "
                f"columns can filter the {cat} reports."
            )
        where = predicate.where(w.this, ctx)
    groups = plan_group_by(select, ctx, lay)
    names = [g.column for g in groups]
    if cat not in names:
        raise _refuse(
            f"{cat} is a private categorical column; it is only served as "
            f"SELECT {cat}, COUNT(*) … GROUP BY {cat}.",
            DENIED,
        )
    if any(n != cat and n not in lay.public for n in names):
        raise _refuse(f"GROUP BY {cat} takes public columns only besides {cat}.")
    gidx = {g: i for i, g in enumerate(names)}
    outs: list[LocalOutput] = []
    for item in select.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = item.unalias()
        if isinstance(node, exp.Column) and not node.is_star and ctx.column(node).node.name in gidx:
            col = ctx.column(node).node.name
            outs.append(LocalOutput(alias or col, "group", gidx[col], groups[gidx[col]].type))
            continue
        if (
            isinstance(node, exp.Count)
            and not isinstance(node.this, exp.Distinct)
            and (
                isinstance(node.this, exp.Star)
                or (isinstance(node.this, exp.Column) and ctx.column(node.this).node.name == cat)
            )
        ):
            outs.append(LocalOutput(alias or "count", "aggregate", 0, "int"))
            continue
        raise _refuse(
            f"{node.sql('postgres')} is not served with GROUP BY {cat}: select {cat}, "
            "public group columns and COUNT(*).",
            DENIED if not node.find(exp.AggFunc) else "0A000",
        )
    if not any(o.source == "aggregate" for o in outs):
        raise _refuse(f"select COUNT(*) with GROUP BY {cat}.")
    order = plan_order_by(select, outs)
    limit, offset = plan_limit(select, ctx)
    ctx.check_count()
    ptypes = tuple(ctx.types.get(i) for i in range(1, max(ctx.used, default=0) + 1))
    return SubsetPlan(lay, cat, where, groups, gidx[cat], tuple(outs), order, limit, offset, ptypes)


def subset_sql(plan: SubsetPlan, cat: Category, level: float, dialect: str) -> str:
    """ONE scan: public keys, COUNT(*), then SUM of the d bits of stored level ``level``."""

    def q(n: str) -> str:
        return '"' + n.replace('"', '""') + '"'

    keys = [q(g.column) for g in plan.public_keys]
    sel = keys + ["COUNT(*)"] + [f"SUM({q(c)})" for c in cat.columns(level)]
    sql = f"SELECT {', '.join(sel)} FROM {q(plan.layout.reports)}"
    if plan.where is not None:
        sql += f" WHERE {plan.where.sql(dialect=dialect, identify=True)}"
    if keys:
        sql += " GROUP BY " + ", ".join(keys)
    return sql
