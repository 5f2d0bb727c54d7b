"""Clauses of a local-table SELECT that both of its planners read the same way — the
metric-LDP planner (:mod:`rewriter.local`) and the Subset planner
(:mod:`rewriter.local_subset`): output columns, GROUP BY, ORDER BY, LIMIT."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from .args import understood
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .errors import Refusal
from .local_weights import refuse_local
from .plan import GroupKey
from .scope import Ctx
from .select import MAX_CELLS, limit_offset

if TYPE_CHECKING:
    from .local_layout import Layout

__all__ = ["LocalOutput", "columns_in", "plan_group_by", "plan_order_by", "plan_limit"]


@dataclass(frozen=True)
class LocalOutput:
    """One output column of a local-table plan: a group key or an aggregate (by index)."""

    name: str
    source: str  # "group" | "aggregate"
    index: int
    type: str


def columns_in(node: exp.Expression, ctx: Ctx) -> set[str]:
    """The table columns ``node`` mentions (resolved through ``ctx``)."""
    return {ctx.column(c).node.name for c in node.find_all(exp.Column)}


def plan_group_by(select: exp.Select, ctx: Ctx, lay: Layout) -> tuple[GroupKey, ...]:
    """The GROUP BY of a local-table SELECT: public columns with a declared domain (by name,
    alias or position), sorted; refused otherwise, and beyond MAX_CELLS cells (54000)."""
    group = select.args.get("group")
    if group is None:
        return ()
    if any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets")):
        raise refuse_local("GROUP BY ROLLUP/CUBE/GROUPING SETS are not supported.")
    understood(group)
    keys: dict[str, GroupKey] = {}
    sizes: dict[str, int] = {}
    aliases = {i.alias: i.unalias() for i in select.expressions if isinstance(i, exp.Alias)}
    for node in group.expressions:
        if isinstance(node, exp.Literal) and node.is_int:
            pos = int(node.this)
            if not 1 <= pos <= len(select.expressions):
                raise Refusal("42P10", f"GROUP BY position {pos} is not in the select list.")
            node = select.expressions[pos - 1].unalias()
        elif (
            isinstance(node, exp.Column)
            and not node.table
            and node.name in aliases
            and node.name not in lay.table.columns
        ):
            node = aliases[node.name]
        if not isinstance(node, exp.Column):
            raise refuse_local("GROUP BY takes public columns with a declared domain.", DENIED)
        col = ctx.column(node).node.name
        if lay.is_private(col):
            raise refuse_local(
                f"GROUP BY {col} is not served: {col} is private (only perturbed reports "
                "are stored); group by a public column, or ask for ranges of "
                f"{col} in WHERE (or percentile_disc)."
            )
        spec = lay.table.columns[col]
        if spec.public_domain is None:
            raise refuse_local(
                f"GROUP BY {col} is not allowed: column {col} has no public domain; "
                "declare one in the config.",
                DENIED,
            )
        keys[col] = GroupKey(col, spec.type, spec.public_domain)
        sizes[col] = len(spec.public_domain)
    out = tuple(keys[k] for k in sorted(keys))
    cells = 1
    for size in sizes.values():
        cells *= size
    if cells > MAX_CELLS:
        raise Refusal("54000", f"GROUP BY has {cells} cells; at most {MAX_CELLS} are allowed.")
    return out


def plan_order_by(select: exp.Select, outs: list[LocalOutput]) -> tuple[tuple[int, bool], ...]:
    """ORDER BY of a local-table SELECT as (output index, desc) pairs: aliases, positions or
    group column names of ``outs``."""
    order = select.args.get("order")
    if order is None:
        return ()
    res: list[tuple[int, bool]] = []
    for o in understood(order).expressions:
        node = understood(o).this
        idx: int | None = None
        if isinstance(node, exp.Literal) and node.is_int:
            idx = int(node.this) - 1
            if not 0 <= idx < len(outs):
                raise Refusal("42P10", f"ORDER BY position {idx + 1} is not in the select list.")
        elif isinstance(node, exp.Column) and not node.table:
            idx = next((i for i, out in enumerate(outs) if out.name == node.name), None)
        if idx is None:
            raise refuse_local(
                "ORDER BY takes output columns of a local-table query: an alias, a "
                "position or a group column name."
            )
        res.append((idx, bool(o.args.get("desc"))))
    return tuple(res)


def plan_limit(select: exp.Select, ctx: Ctx) -> tuple[int | None, int]:
    """LIMIT / OFFSET of a local-table SELECT (as for central tables)."""
    return limit_offset(select, ctx)
