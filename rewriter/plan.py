"""The validated, typed, dialect-neutral query plan.

A :class:`Plan` says what ONE backend scan must compute per cell and which DP
aggregate each output column is. It holds no dialect-specific SQL: the WHERE
predicate is a sqlglot expression over unqualified declared column names, and
:mod:`rewriter.emit` turns the plan into DuckDB or Postgres SQL.

Cells: the cartesian product of the public domains of the GROUP BY keys (one cell
when there is no GROUP BY), less the key tuples public tables exclude (``key_tuples``:
:mod:`rewriter.lookup_domains`). The backend returns exactly one row per cell,
``(key_1, …, key_k, measure_1, …, measure_j)``, empty cells included (counts and
sums 0), so a cell's presence never depends on the data.

``unit``: the table's privacy unit and contribution bounds (:mod:`rewriter.unit`), or
None (row-level). Room to grow without a rewrite: ``joins`` (public tables) is carried
by the plan and defaults to none; the emitter and the mechanisms key on ``Measure``/``Aggregate`` kinds, so a
new kind is a new rule, not a new plan.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres

ColumnType = Literal["int", "float", "text", "bool", "date", "timestamp"]


@dataclass(frozen=True)
class GroupKey:
    """A GROUP BY column with its declared public domain, or a derived key
    (:mod:`rewriter.keys`): ``expr`` is the checked scan expression, ``column`` its
    canonical text, ``domain`` the values it can take, derived from the config alone;
    None: no public domain — the released keys are chosen by partition selection."""

    column: str
    type: ColumnType
    domain: tuple[Any, ...] | None
    expr: exp.Expression | None = None


@dataclass(frozen=True)
class LookupDomain:
    """The values the group keys at ``keys`` (positions in :attr:`Plan.group_by`) can take,
    read from public tables: ``query`` (``SELECT DISTINCT k… FROM <public tables joined as
    the statement joins them> WHERE <its conjuncts over their columns>``, built by
    :mod:`rewriter.lookup_domains`) returns them; the proxy runs it and restricts the
    keys' domains (:func:`rewriter.lookup_domains.apply`)."""

    keys: tuple[int, ...]
    query: exp.Select


@dataclass(frozen=True)
class Measure:
    """One exact number the backend computes per cell (never sent to a client).

    ``count_rows`` is COUNT(*); ``count`` is COUNT(column) (non-NULL rows);
    ``sum`` is SUM of the column clamped to [lower, upper] inside the scan;
    ``csum`` / ``csumsq`` are the centred moments of VAR/STDDEV (:mod:`rewriter.stats`);
    ``count_distinct`` is COUNT(DISTINCT column).
    """

    kind: Literal["count_rows", "count", "sum", "csum", "csumsq", "count_distinct", "count_if"]
    column: str | None = None
    type: ColumnType | None = None
    lower: float | None = None
    upper: float | None = None
    filter: exp.Expression | None = None  # count_if, and FILTER (WHERE …) of count/sum: only rows where
    #                                        this (checked) predicate is true
    scale: int | None = None  # a sum over a column stored as DECIMAL(w ≤ 18, scale): clamped and
    #                           summed in it (rewriter.fixed_point), read as a double


@dataclass(frozen=True)
class Aggregate:
    """One DP release per cell; ``measures`` index into :attr:`Plan.measures`.

    count → (count measure,); sum → (sum measure,); avg → (sum measure, count measure).
    """

    func: Literal["count", "sum", "avg", "count_distinct", "var_pop", "var_samp", "stddev_pop", "stddev_samp"]
    column: str | None
    type: ColumnType | None
    lower: float | None
    upper: float | None
    measures: tuple[int, ...]
    mechanism: str | None = None  # AVG: the configured mean mechanism (config avg_mechanism)
    filter: exp.Expression | None = None  # agg FILTER (WHERE …) / SUM(CASE WHEN … THEN 1 ELSE 0 END)

    @property
    def label(self) -> str:
        if self.func == "count_distinct":
            return f"count(distinct {self.column})"
        if self.filter is not None:
            return (
                f"{self.func}({self.column or '*'}) filter "
                f"(where {_generator().generate(self.filter, copy=True)})"
            )
        return f"{self.func}({self.column or '*'})"


@dataclass(frozen=True)
class Output:
    """An output column: a group key or an aggregate, by index. ``post``: display steps
    applied to the released value (``ROUND(AVG(x), 2)``, ``COUNT(*)::float``): pure
    post-processing, so not part of :meth:`Plan.canonical` (the same release serves
    both spellings); ``type`` is the type after them ("numeric" and "int4" only here)."""

    name: str
    source: Literal["group", "aggregate", "expr"]  # "expr": ``post`` is a tree (rewriter.postprocess)
    index: int
    type: ColumnType | Literal["numeric", "int4"]  # int4: Postgres' integer (ntile)
    post: tuple[Any, ...] = ()


@dataclass(frozen=True)
class OrderItem:
    """A sort key: output column ``output``, or (``output`` -1) ``tree``, an expression over
    the cell's released values that is not in the select list (``ORDER BY COUNT(*) DESC``
    selecting only the key; :mod:`rewriter.postprocess` trees)."""

    output: int
    desc: bool = False
    nulls_first: bool | None = None
    tree: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class Selection:
    """A threshold (HAVING) or top-c shape, answered by the sparse vector technique.

    ``aggregate`` indexes the thresholded COUNT/SUM in :attr:`Plan.aggregates`;
    ``threshold`` is public (None: take it from ``SET dpgate.topc_threshold``);
    ``c`` caps the keys released (LIMIT); ``values``: the select list also asks
    for aggregate values of the released keys (a separate ε).
    """

    kind: Literal["having", "top"]
    aggregate: int
    op: Literal[">", ">="]
    threshold: float | None
    c: int | None
    values: bool
    per_key: tuple[
        Any, ...
    ] = ()  # ((group value, threshold), …): public per-group thresholds; else `threshold`


@dataclass(frozen=True)
class UnitBounds:
    """The privacy unit of a table and its contribution bounds (:mod:`rewriter.unit`):
    per unit at most ``max_groups`` cells, at most ``max_rows`` rows per cell (``total``:
    in all its cells together)."""

    column: str
    max_groups: int
    max_rows: int
    label: str = ""  # how the unit is named to the analyst (e.g. orders.customer_id), if not `column`
    total: bool = False  # max_rows bounds the unit's rows in the statement, not per cell

    @property
    def name(self) -> str:
        return self.label or self.column


@dataclass
class PlanMemo:
    """What is derived from a plan once and kept beside it (plans are cached and shared by
    statements): its canonical text, its backend SQL per dialect, its releases per ε
    (:mod:`proxy.pipeline.release`), its public cells (:mod:`rewriter.cells`) and itself with its
    sums in their columns' fixed-point types (:mod:`rewriter.fixed_point`). A plan made
    from another by ``dataclasses.replace`` starts with an empty memo; a template's filled
    plan (:mod:`rewriter.template`) shares the memos that do not depend on its WHERE."""

    canonical: str | None = None
    sql: dict[str, str] = field(default_factory=dict)  # dialect -> backend SQL (str or ParamSQL)
    releases: dict[Any, Any] = field(default_factory=dict)
    domain: dict[Any, Any] = field(default_factory=dict)
    fixed: dict[Any, Any] = field(default_factory=dict)  # column types -> the plan in them (.fixed_point)


@dataclass(frozen=True)
class UnitLookup:
    """A table's privacy unit read through one reference (``privacy_unit = "orders.o_custkey"``,
    ``references = { l_orderkey = "orders" }``) and nothing else joined: each row's unit is
    ``column`` of the row of ``source`` whose ``key`` equals the row's ``fk``."""

    fk: str
    source: str
    key: str
    column: str


@dataclass(frozen=True)
class Plan:
    table: str
    source: str
    where: exp.Expression | None
    group_by: tuple[GroupKey, ...]
    measures: tuple[Measure, ...]
    aggregates: tuple[Aggregate, ...]
    outputs: tuple[Output, ...]
    order_by: tuple[OrderItem, ...] = ()
    limit: int | None = None
    offset: int = 0
    unit: UnitBounds | None = None  # the privacy unit (None: each row is protected)
    joins: tuple[Any, ...] = field(
        default=()
    )  # lookup joins (rewriter.joins): ((table, column, key, how), …)
    relation: exp.Expression | None = None  # the lookup join's relation (rewriter.joins), else `source`
    unit_lookup: UnitLookup | None = None  # the relation is `source` with its unit looked up, no more
    selection: Selection | None = None
    row_filter: tuple[Any, ...] | None = (
        None  # post-processing filter on released rows (rewriter.postprocess)
    )
    key_filter: tuple[
        str, ...
    ] = ()  # group keys whose domain a WHERE conjunct restricted (rewriter.keyfilter)
    consistent: bool = True  # released values clamped to their public range (the table's `consistent`)
    per_unit: str = ""  # over a per-unit relation (rewriter.histogram): what it protects, in words
    clock: str = ""  # now() / current_date: the instant dpgate read them at (UTC); such a plan is
    #                  planned afresh for each statement, never cached or templated
    lookups: tuple[LookupDomain, ...] = ()  # key domains read from public tables (rewriter.lookup_domains)
    lookups_done: bool = False  # … and applied: the domains below are the public tables' answer
    key_tuples: tuple[tuple[tuple[int, ...], frozenset[tuple[Any, ...]]], ...] = ()
    #  (key positions, the value tuples they can take together): cells outside are not released
    memo: PlanMemo = field(default_factory=PlanMemo, init=False, repr=False, compare=False)

    @property
    def selected(self) -> bool:
        """A key without a public domain: its cells come from the data, by partition selection."""
        return any(g.domain is None for g in self.group_by)

    @property
    def n_cells(self) -> int:
        """The number of public cells (unbounded — 2^31 — when the keys are selected)."""
        if self.selected:
            return 2**31
        if self.key_tuples:
            return len(self.cells)
        n = 1
        for g in self.group_by:
            assert g.domain is not None  # (not selected)
            n *= len(g.domain)
        return n

    @property
    def cells(self) -> list[tuple[Any, ...]]:
        """Every cell of the public domain (one () without GROUP BY), in key order."""
        if self.selected:
            raise ValueError("a plan with selected keys has no public cells")
        if self.key_tuples and "cells" in self.memo.domain:
            kept: list[tuple[Any, ...]] = self.memo.domain["cells"]
            return kept
        doms = [sorted(g.domain or (), key=lambda v: (v is None, v)) for g in self.group_by]
        cells = [tuple(c) for c in itertools.product(*doms)]
        if self.key_tuples:  # the product's cells whose keys can take their values together
            cells = [c for c in cells if all(tuple(c[i] for i in at) in ok for at, ok in self.key_tuples)]
            self.memo.domain["cells"] = cells
        return cells

    def canonical(self) -> str:
        """The measurement this plan releases, as canonical text (computed once).

        Two statements with the same canonical text release the same numbers
        (ORDER BY, LIMIT, aliases and output order are post-processing and are
        left out; conjuncts are sorted; literals are normalised by sqlglot).
        """
        cached = self.memo.canonical
        if cached is not None:
            return cached
        where = _canonical_where(self.where)
        groups = ",".join(g.column for g in self.group_by)
        aggs = ",".join(
            sorted(
                f"{a.label}[{a.lower},{a.upper}]" + (f"/{a.mechanism}" if a.mechanism else "")
                for a in self.aggregates
            )
        )
        u = self.unit
        unit = f"{u.column}:{u.max_groups}:{u.max_rows}" if u is not None else ""
        sel = ""
        if self.selection is not None:
            s = self.selection
            sel = (
                f";select={s.kind}:{self.aggregates[s.aggregate].label}{s.op}{s.threshold!r}"
                f":c={s.c}:values={s.values}:per_key={sorted(s.per_key, key=repr)!r}"
            )
        joins = f";joins={self.joins!r}" if self.joins else ""
        if self.per_unit:  # the per-unit relation (rewriter.histogram) is part of the measurement
            joins += f";units={_generator().generate(self.relation, copy=True)};buckets=" + ",".join(
                f"{g.column}:{len(g.domain or ())}" for g in self.group_by
            )
        text = f"table={self.table};where={where};group={groups};aggs={aggs};unit={unit}{sel}{joins}"
        self.memo.canonical = text
        return text

    def from_(self) -> exp.Expression:
        """The relation the scan reads: the declared source, or the lookup join's subquery."""
        return self.relation.copy() if self.relation is not None else source_relation(self.source)

    def fingerprint(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:32]


def source_relation(source: str) -> exp.Table:
    """A declared table's ``source`` as the relation every scan reads."""
    return exp.to_table(source)


def source_sql(source: str, dialect: str) -> str:
    """The text a scan reads ``source`` as, in ``dialect`` (what the start-up check runs)."""
    return source_relation(source).sql(dialect=dialect)


_LOCAL = threading.local()


def _generator() -> Any:
    """This thread's postgres generator with ``normalize=True`` (what
    ``Expression.sql(dialect="postgres", normalize=True)`` builds per call)."""
    gen = getattr(_LOCAL, "gen", None)
    if gen is None:
        gen = _LOCAL.gen = Postgres().generator(normalize=True)
    return gen


def _canonical_where(where: exp.Expression | None) -> str:
    if where is None:
        return ""
    conjuncts = list(where.flatten()) if isinstance(where, exp.And) else [where]
    gen = _generator()
    return " AND ".join(sorted(gen.generate(c, copy=True) for c in conjuncts))


def conjuncts(node: exp.Expression) -> Iterator[exp.Expression]:
    """The terms of a conjunction, parentheses removed: ``(a AND (b)) AND c`` gives a, b, c."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        yield from conjuncts(node.this)
        yield from conjuncts(node.expression)
    else:
        yield node
