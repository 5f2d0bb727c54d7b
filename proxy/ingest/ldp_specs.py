"""The mechanism objects of a local table's layout (metric LDP, Xiang et al. 2020:
metric-LDP spec §3.1, §8; Subset columns: multi-tier release, Wang et al. 2026 §5),
built from the rewriter's plain :class:`rewriter.local.Layout` (the rewriter is SQL
only and imports no mechanism code).

* :func:`group_spec`: the :class:`mechanisms.metric_ldp.GroupSpec` of a joint group (M4,
  report columns ``g<k>_<d>_<j>``); built once per group and checked against the rewriter's
  report schema, so the reports written and the columns read can never differ.
* :func:`guarantee`: the per-record guarantee E(x, x') of the layout (spec §8), with the
  Subset columns' coalition level (:func:`proxy.ingest.subset_ingest.top`).
"""

from __future__ import annotations

import functools

from mechanisms.metric_ldp import DimSpec, GroupSpec, report_columns

from .subset_ingest import top

__all__ = ["group_spec", "guarantee", "check_layout"]


@functools.lru_cache(maxsize=1024)
def _spec(dims: tuple, prefix: str) -> GroupSpec:
    return GroupSpec(
        tuple(DimSpec(d.lo, d.hi, d.m, d.epsilon, d.name, kind=d.kind) for d in dims), prefix=prefix
    )


def group_spec(group) -> GroupSpec:
    """The GroupSpec of a :class:`rewriter.local.Group` (ValueError if a dimension is invalid,
    e.g. an ε too small for the 32-bit flip threshold)."""
    spec = _spec(tuple(group.dims), group.prefix)
    if report_columns(spec) != list(group.report_columns()):
        raise ValueError(
            f"group {group.prefix}: the report columns of the layout and of the mechanism differ"
        )
    return spec


def check_layout(lay) -> None:
    """Build every group's GroupSpec (ValueError naming the table if one is invalid)."""
    for g in lay.groups:
        try:
            group_spec(g)
        except ValueError as e:
            raise ValueError(f"tables.{lay.name}.local: {e}") from None


def guarantee(lay) -> str:
    """E(x, x') per record (spec §8: reported when the table is loaded)."""
    parts = []
    for g in lay.groups:
        for c, d in zip(g.columns, g.dims):
            if d.kind == "weight":
                parts.append(f"{d.epsilon:g}·[rounded {c} differs]")
            else:
                parts.append(f"{d.epsilon:g}·|Δbucket({c})|")
    for c in lay.categories:  # the Subset report of the highest level stored
        parts.append(f"{top(c):.3g}·[{c.name} differs]")
    return "E(x,x') = " + " + ".join(parts)
