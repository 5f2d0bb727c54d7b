"""The plan of a statement on a local (metric-LDP) table (:func:`rewriter.local.plan_local`):
its public predicate, private bucket weights, group keys and aggregates, as plain data the
proxy evaluates (:mod:`proxy.pipeline.local_bind`) and :func:`rewriter.local_sql.to_sql`
writes the one scan from. SQL only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from .local_clauses import LocalOutput
from .local_layout import Layout
from .local_options import LocalOptions
from .local_weights import LocalQuery
from .plan import GroupKey

__all__ = ["LocalAgg", "LocalPlan"]


@dataclass(frozen=True)
class LocalAgg:
    """One output aggregate.

    kind: "exact" (public columns only: plain SQL, e.g. COUNT(*) = number of reports),
    "est" (one separable query, ``query`` over group ``group``), "avg" (``query`` /
    ``den``), "pct" (percentile of dimension ``dim`` of ``group``: prefix queries
    ``prefixes`` over ``den``).
    """

    kind: str
    label: str
    out_type: str  # int | float
    group: int | None = None
    query: LocalQuery | None = None
    den: LocalQuery | None = None
    row_weight: str | None = None  # public weight SQL (dialect-independent)
    den_weight: str | None = None
    exact_sql: str | None = None
    dim: int | None = None
    p: float | None = None
    cont: bool = False
    prefixes: tuple[Any, ...] = ()
    column: str | None = None  # the private column of a percentile / value sum
    represent: str = "mid"
    func: str = "count"


@dataclass(frozen=True)
class LocalPlan:
    layout: Layout
    where: exp.Expression | None  # public predicate (validated, rewriter AST)
    private: dict[str, Any] = field(default_factory=dict)  # private column -> bucket weights
    group_by: tuple[GroupKey, ...] = ()
    aggs: tuple[LocalAgg, ...] = ()
    outputs: tuple[LocalOutput, ...] = ()
    order_by: tuple[Any, ...] = ()  # (output index, desc)
    limit: int | None = None
    offset: int = 0
    param_types: tuple[Any, ...] = ()  # type of $1..$n (describe)
    options: LocalOptions = LocalOptions()  # query-time post-processing (spec §8)

    @property
    def n_cells(self) -> int:
        n = 1
        for g in self.group_by:
            n *= len(g.domain or ())  # (a local table's keys have public domains)
        return n
