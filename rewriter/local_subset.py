"""Categorical Subset columns of local tables (multi-tier release, Wang et al. 2026 §5; multi-tier spec §4, §10 "LDP categorical
columns"): storage layout, tier → stored level, and the plan of ``COUNT(*) … GROUP BY cat``.

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

import re
from dataclasses import dataclass, replace

from sqlglot import exp

from . import predicate
from .errors import GROUPING_ERROR, Refusal
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .local_clauses import LocalOutput, columns_in, plan_group_by, plan_limit, plan_order_by
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
PG_MAX_IDENT = 63


def eps_tag(eps: float) -> str:
    """ε in a column name: repr with '.' → 'p', '-' → 'm' (exactly invertible)."""
    return repr(float(eps)).replace(".", "p").replace("-", "m").replace("+", "")


def _untag(tag: str) -> float:
    return float(tag.replace("p", ".").replace("m", "-"))


@dataclass(frozen=True)
class Category:
    """One Subset column: its domain, ladder, and the tier ε its reports are made for."""

    name: str
    domain: tuple
    ladder_name: str
    variant: int
    levels: tuple[float, ...]  # tier ε (descending) of the program the reports come from

    @property
    def d(self) -> int:
        return len(self.domain)

    def column(self, eps: float, j: int) -> str:
        return f"{self.name}_v{self.variant}_e{eps_tag(eps)}_{j}"

    def columns(self, eps: float) -> list[str]:
        return [self.column(eps, j) for j in range(self.d)]

    def report_schema(self) -> list[tuple[str, str]]:
        return [(c, "SMALLINT") for e in self.levels for c in self.columns(e)]

    def stored_level(self, tier_eps: float) -> float | None:
        """The stored level a tier of ε ``tier_eps`` reads: its own, else the nearest lower."""
        below = [e for e in self.levels if e <= tier_eps + 1e-12]
        return max(below) if below else None


def _category(name: str, domain: tuple, ladder: str, variant: int, levels) -> Category:
    levels = tuple(sorted({float(e) for e in levels}, reverse=True))
    return Category(name, domain, ladder, variant, levels)


def make_categories(table_name: str, table, tiers: dict | None) -> tuple[Category, ...]:
    """The Subset columns of a local table; the ladder's tier ε come from ``tiers`` (config)."""
    cats = table.local.categories if table.local is not None else {}
    if cats and tiers is None:
        raise ValueError(f"tables.{table_name}.local.categories needs the config's tiers")
    out = []
    for col, spec in cats.items():
        eps = sorted({t.epsilon for t in tiers.values() if t.ladder == spec.ladder}, reverse=True)
        if not eps:
            raise ValueError(
                f"tables.{table_name}.local.categories.{col}.ladder: no tier has ladder = {spec.ladder!r}"
            )
        cat = _category(col, table.columns[col].public_domain, spec.ladder, spec.variant, eps)
        long = [c for c, _ in cat.report_schema() if len(c.encode()) > PG_MAX_IDENT]
        if long:
            raise ValueError(
                f"tables.{table_name}.local.categories.{col}: report column {long[0]} "
                f"is longer than {PG_MAX_IDENT} bytes; use a shorter column name"
            )
        out.append(cat)
    return tuple(out)


def resolve_stored(lay, have: list[str]):
    """``lay`` with each Subset column's levels taken from an existing reports table's columns
    (``have``) when they differ from the config's ladder, same d and variant (a tier was added or
    removed after ingestion). Rows keep being perturbed with, and served from, the stored program."""
    cats = []
    for cat in lay.categories:
        pat = re.compile(rf"^{re.escape(cat.name)}_v{cat.variant}_e([0-9pme]+)_(\d+)$")
        found: dict[str, set] = {}
        for c in have:
            m = pat.match(c)
            if m:
                found.setdefault(m.group(1), set()).add(int(m.group(2)))
        levels = [_untag(t) for t, js in found.items() if js == set(range(cat.d))]
        if not levels or set(levels) == set(cat.levels):
            cats.append(cat)
        else:
            cats.append(_category(cat.name, cat.domain, cat.ladder_name, cat.variant, levels))
    return replace(lay, categories=tuple(cats)) if cats != list(lay.categories) else lay


# ---------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class SubsetPlan:
    """``COUNT(*) … GROUP BY cat [, public keys]`` over one Subset column."""

    layout: object  # rewriter.local.Layout
    category: str
    where: exp.Expression | None  # public predicate (validated)
    group_by: tuple = ()  # GroupKeys (sorted), the category among them
    cat_key: int = 0  # index of the category in group_by
    outputs: tuple = ()  # LocalOutput; aggregate outputs are the count
    order_by: tuple = ()
    limit: int | None = None
    offset: int = 0
    param_types: tuple = ()

    @property
    def public_keys(self) -> tuple:
        return tuple(g for i, g in enumerate(self.group_by) if i != self.cat_key)


def _refuse(msg: str, state: str = "0A000") -> Refusal:
    return Refusal(state, msg, hint=SUBSET_ALLOWED)


def plan_subset(select: exp.Select, ctx: Ctx, lay, cat_names: set[str]) -> SubsetPlan:
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
    outs = []
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

    def q(n):
        return '"' + n.replace('"', '""') + '"'

    keys = [q(g.column) for g in plan.public_keys]
    sel = keys + ["COUNT(*)"] + [f"SUM({q(c)})" for c in cat.columns(level)]
    sql = f"SELECT {', '.join(sel)} FROM {q(plan.layout.reports)}"
    if plan.where is not None:
        sql += f" WHERE {plan.where.sql(dialect=dialect, identify=True)}"
    if keys:
        sql += " GROUP BY " + ", ".join(keys)
    return sql
