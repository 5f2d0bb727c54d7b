"""Which planner plans a SELECT on a central table, decided from its parse.

A central statement is planned either as cells (:func:`rewriter.build_plan`: COUNT, SUM,
AVG, VAR/STDDEV per cell of the public domain, one scan) or, when the SELECT whose aggregates
are released asks for MAX, MIN, median or a percentile, by :mod:`rewriter.extreme` (one
histogram scan, each of them its own release). The SELECT whose aggregates are released is
the statement's own, or the inner one when it reads an aggregating derived table (the outer
query is post-processing of that release: a MAX there is over released rows, and the
statement is planned as cells). An aggregate inside a window, a ``FILTER`` or a nested query
is not one of the statement's releases, and the cells' rules refuse it as they refuse any
shape they do not answer; so does :func:`rewriter.aggregates.aggregate` a MAX/MIN that
reaches it (fail closed). SQL only: no I/O.
"""

from __future__ import annotations

from typing import Literal

from sqlglot import exp

from . import inline
from .errors import Refusal

__all__ = ["EXTREME_NODES", "Planner", "extreme_in", "planner_of"]

Planner = Literal["central", "extreme"]

EXTREME_NODES = (exp.Max, exp.Min, exp.Median, exp.WithinGroup)
"""The aggregates :mod:`rewriter.extreme` answers (percentile_cont / percentile_disc are
written ``… WITHIN GROUP (ORDER BY col)``)."""

_NOT_OURS = (exp.Subquery, exp.Select, exp.Window, exp.Filter)  # not a release of this SELECT
_CLAUSES = ("expressions", "having", "order")  # where the rules meet a SELECT's aggregates


def extreme_in(select: exp.Expression) -> bool:
    """Whether ``select``'s select list, HAVING or ORDER BY holds a MAX, MIN, median or
    percentile of its own (not inside a window, a FILTER or a nested query)."""
    if not isinstance(select, exp.Select):
        return False
    stack = [v for k in _CLAUSES for v in _as_list(select.args.get(k))]
    while stack:
        node = stack.pop()
        if isinstance(node, EXTREME_NODES):
            return True
        if isinstance(node, _NOT_OURS):
            continue
        stack.extend(node.iter_expressions())
    return False


def planner_of(tree: exp.Expression) -> Planner:
    """The planner of a parsed SELECT on a central table (module doc); ``tree`` is not
    changed. A statement whose derived tables cannot be read is left to the cells' planner,
    which refuses it with its own words."""
    if tree.find(*EXTREME_NODES) is None:  # nearly every statement: no look further
        return "central"
    try:
        select = inline.inline(inline.expand_ctes(tree.copy()))
        outer = inline.split_outer(select) if isinstance(select, exp.Select) else None
    except Refusal:
        return "central"
    return "extreme" if extreme_in(outer[0] if outer is not None else select) else "central"


def _as_list(value: object) -> list[exp.Expression]:
    if isinstance(value, exp.Expression):
        return [value]
    return [v for v in value if isinstance(v, exp.Expression)] if isinstance(value, list) else []
