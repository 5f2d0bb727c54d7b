"""How a local (metric-LDP) table is stored (Xiang et al. 2020, metric-LDP spec §3.1; Subset
columns: multi-tier release, Wang et al. 2026 §5): its joint groups of private columns, their dimensions and report columns, the public
columns kept as-is, and its categorical Subset columns with the tier levels their reports were
made for. Built from the config alone (:func:`layout`); the planners
(:mod:`rewriter.local`, :mod:`rewriter.local_subset`) and the writers of the scan read it.
SQL only: plain data, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from config import Table, Tier

__all__ = [
    "SQL_TYPES",
    "Category",
    "Dim",
    "Group",
    "Layout",
    "eps_tag",
    "layout",
    "make_categories",
    "resolve_stored",
]

SQL_TYPES = {"int": "BIGINT", "float": "DOUBLE PRECISION", "text": "TEXT", "bool": "BOOLEAN"}


@dataclass(frozen=True)
class Dim:
    """One private column as a dimension (metric-LDP spec §1.3): public [lo, hi], m buckets of width
    g = (hi - lo)/m, ε per bucket step; ``kind = "weight"``: the private weight of paper §4.3.2
    (m = 2, lo = 0, hi = Δ). Plain numbers (the proxy builds the mechanism's DimSpec)."""

    lo: float
    hi: float
    m: int
    epsilon: float
    name: str = ""
    kind: str = "value"

    @property
    def g(self) -> float:
        """Bucket width (hi - lo)/m: the granularity ε protects (spec 1.3)."""
        return (self.hi - self.lo) / self.m


@dataclass(frozen=True)
class Group:
    """One joint group (M4 reports, spec §3.1): its private columns (in dimension order), their
    dimensions and the prefix of its report columns."""

    index: int
    columns: tuple[str, ...]
    dims: tuple[Dim, ...]
    prefix: str

    def dim_columns(self) -> tuple[tuple[str, ...], ...]:
        """Per dimension d, its report columns ``{prefix}_{d}_{j}``, j = 1..m_d (the bit
        "bucket_d ≤ j", spec §3.1; bit m_d is kept, spec §7.12)."""
        return tuple(
            tuple(f"{self.prefix}_{d}_{j}" for j in range(1, dim.m + 1)) for d, dim in enumerate(self.dims)
        )

    def report_columns(self) -> list[tuple[str, str]]:
        """(name, SQL type) of the group's report columns, in report-array order."""
        return [(c, "SMALLINT") for cols in self.dim_columns() for c in cols]


@dataclass(frozen=True)
class Layout:
    """How a local table is stored: public columns as-is, reports per joint group."""

    name: str
    table: Table
    reports: str
    groups: tuple[Group, ...]
    where: dict[str, tuple[int, int]]  # private column -> (group index, dimension)
    public: tuple[str, ...]
    estimator: str
    weight: str | None  # the private weight column, if any
    categories: tuple[
        Category, ...
    ] = ()  # Subset columns (Category; multi-tier release, Wang et al. 2026 §5)

    def is_private(self, col: str) -> bool:
        return col in self.where

    def category(self, col: str) -> Category | None:
        return next((c for c in self.categories if c.name == col), None)

    def dim(self, col: str) -> Dim:
        g, d = self.where[col]
        return self.groups[g].dims[d]

    def col_type(self, col: str) -> str:
        return self.table.columns[col].type

    def report_schema(self) -> list[tuple[str, str]]:
        """(column, SQL type) of the report table: public columns, then report bits."""
        out = [(c, SQL_TYPES[self.col_type(c)]) for c in self.public]
        for g in self.groups:
            out += g.report_columns()
        for c in self.categories:
            out += c.report_schema()
        return out


_LAYOUTS: dict[tuple[object, ...], Layout] = {}


def layout(name: str, table: Table, tiers: dict[str, Tier] | None = None) -> Layout:
    """The storage layout of local table ``name`` (validated; cached per Table object and
    ladder). ``tiers`` (the config's) is needed for categorical Subset columns."""
    cats = table.local.categories if table.local is not None else {}
    ladders = tuple(
        sorted(
            (c.ladder, tuple(sorted(t.epsilon for t in (tiers or {}).values() if t.ladder == c.ladder)))
            for c in cats.values()
        )
    )
    key = (name, id(table), ladders)
    hit = _LAYOUTS.get(key)
    if hit is not None and hit.table is table:
        return hit
    lay = _make_layout(name, table, tiers)
    _LAYOUTS[key] = lay
    return lay


def _make_layout(name: str, table: Table, tiers: dict[str, Tier] | None = None) -> Layout:
    pol = table.local
    if table.mode != "local" or pol is None:
        raise ValueError(f"table {name} is not a local table")
    priv = pol.columns
    for c in priv:
        if table.columns[c].type not in ("int", "float"):
            raise ValueError(f"tables.{name}.local.columns.{c}: a private column must be int or float")
    seen: set[str] = set()
    groups_cols: list[list[str]] = []
    for grp in pol.joint:
        for c in grp:
            if c not in priv:
                raise ValueError(
                    f"tables.{name}.local.joint: {c} is not a private column "
                    f"(local.columns: {', '.join(priv)})"
                )
            if c in seen:
                raise ValueError(
                    f"tables.{name}.local.joint: {c} is in two groups; a column is "
                    "collected once (collecting it twice adds the guarantees)"
                )
            seen.add(c)
        if grp:
            groups_cols.append(list(grp))
    groups_cols += [[c] for c in priv if c not in seen]
    wcol = pol.weight
    private_weight = None
    if wcol is not None:
        if wcol not in table.columns:
            raise ValueError(f"tables.{name}.local.weight: {wcol} is not a declared column")
        if table.columns[wcol].type not in ("int", "float"):
            raise ValueError(f"tables.{name}.local.weight: {wcol} must be numeric")
        if wcol in priv:
            lc = priv[wcol]
            if lc.lo != 0 or lc.buckets != 2:
                raise ValueError(
                    f"tables.{name}.local.columns.{wcol}: a private weight has lo = 0, "
                    "buckets = 2 and hi = Δ (its largest value)"
                )
            private_weight = wcol
    groups, where = [], {}
    for k, cols in enumerate(groups_cols):
        dims = []
        for d, c in enumerate(cols):
            lc = priv[c]
            dims.append(
                Dim(
                    lc.lo, lc.hi, lc.buckets, lc.epsilon, c, kind="weight" if c == private_weight else "value"
                )
            )
            where[c] = (k, d)
        groups.append(Group(k, tuple(cols), tuple(dims), f"g{k}"))
    cats = make_categories(name, table, tiers)
    public = tuple(c for c in table.columns if c not in priv and c not in pol.categories)
    lay = Layout(
        name,
        table,
        pol.reports or f"{name}_reports",
        tuple(groups),
        where,
        public,
        pol.estimator,
        private_weight,
        cats,
    )
    names = [c for c, _ in lay.report_schema()]
    if len(set(names)) != len(names):
        raise ValueError(
            f"tables.{name}: a public column name clashes with a report column "
            "(g<k>_<d>_<j> or <category>_v<n>_e<ε>_<j>); rename it"
        )
    return lay


# ---------------------------------------------------------------------------- Subset columns
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
    domain: tuple[Any, ...]
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


def _category(
    name: str, domain: tuple[Any, ...], ladder: str, variant: int, levels: Iterable[float]
) -> Category:
    levels = tuple(sorted({float(e) for e in levels}, reverse=True))
    return Category(name, domain, ladder, variant, levels)


def make_categories(table_name: str, table: Table, tiers: dict[str, Tier] | None) -> tuple[Category, ...]:
    """The Subset columns of a local table; the ladder's tier ε come from ``tiers`` (config)."""
    cats = table.local.categories if table.local is not None else {}
    if cats and tiers is None:
        raise ValueError(f"tables.{table_name}.local.categories needs the config's tiers")
    tiers = tiers or {}
    out = []
    for col, spec in cats.items():
        eps = sorted({t.epsilon for t in tiers.values() if t.ladder == spec.ladder}, reverse=True)
        if not eps:
            raise ValueError(
                f"tables.{table_name}.local.categories.{col}.ladder: no tier has ladder = {spec.ladder!r}"
            )
        domain = table.columns[col].public_domain
        assert domain is not None  # (the config requires a Subset column's domain)
        cat = _category(col, domain, spec.ladder, spec.variant, eps)
        long = [c for c, _ in cat.report_schema() if len(c.encode()) > PG_MAX_IDENT]
        if long:
            raise ValueError(
                f"tables.{table_name}.local.categories.{col}: report column {long[0]} "
                f"is longer than {PG_MAX_IDENT} bytes; use a shorter column name"
            )
        out.append(cat)
    return tuple(out)


def resolve_stored(lay: Layout, have: list[str]) -> Layout:
    """``lay`` with each Subset column's levels taken from an existing reports table's columns
    (``have``) when they differ from the config's ladder, same d and variant (a tier was added or
    removed after ingestion). Rows keep being perturbed with, and served from, the stored program."""
    cats = []
    for cat in lay.categories:
        pat = re.compile(rf"^{re.escape(cat.name)}_v{cat.variant}_e([0-9pme]+)_(\d+)$")
        found: dict[str, set[int]] = {}
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
