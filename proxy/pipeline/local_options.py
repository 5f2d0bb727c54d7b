"""The query-time options of local tables at answer time (metric-LDP spec §8, §3.12; options
resolved by :mod:`rewriter.local_options`). Post-processing only: no budget, no change
to the stored reports or the guarantee."""

from __future__ import annotations

import math

from mechanisms.metric_ldp import clip_counts, isotonic
from rewriter.local_options import session_overrides

__all__ = ["overrides_of", "count_value", "prefix_values", "disc_value"]


def overrides_of(conn) -> tuple:
    """The connection's ``SET dpgate.local_*`` overrides (22023 if a value is invalid)."""
    session = getattr(conn, "session", None)
    return session_overrides(getattr(session, "settings", None))


def count_value(opts, v: float, n: int) -> float:
    """A COUNT estimate, clipped into [0, n] under ``clip`` (n: reports of the cell)."""
    return float(clip_counts([v], n)[0]) if opts.clip else v


def prefix_values(opts, prefix: list, den: float) -> list:
    """P̂_1..P̂_{m−1} for the §3.10 search: isotonic onto [0, den] (``isotonic_cdf``, which
    also clips) or clipped into [0, den] (``clip``), else as estimated."""
    if opts.isotonic_cdf:
        return [float(x) for x in isotonic(prefix, den)]
    if opts.clip:
        return [float(x) for x in clip_counts(prefix, den)]
    return prefix


def disc_value(a, v: float) -> float:
    """percentile_disc of an int column under ``quantile_point = "upper"``: the largest
    integer of the bucket (its upper edge lo + x̂·g already belongs to the next bucket)."""
    if a.out_type == "int" and a.represent == "upper" and not a.cont:
        return float(math.ceil(v - 1e-9) - 1)
    return v
