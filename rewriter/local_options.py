"""Query-time options of a local (metric-LDP) table (metric-LDP spec §8, §3.12).

All are post-processing of the stored reports, so none changes ingestion or the
per-record guarantee, and none costs budget:

* ``edges``: a WHERE range that cuts a bucket counts it with the fraction inside
  the range ("interpolate", a linear query §3.11) or as a whole ("whole", the §3.5
  range estimate over every bucket the range touches);
* ``quantile_point``: the value percentile_disc returns for its bucket x̂: "auto"
  (the bucket's integer when it holds one, else its midpoint), "midpoint", or
  "upper" (lo + x̂·g; for int columns the largest integer of the bucket);
* ``isotonic_cdf``: PAVA of the prefix estimates P̂_1..P̂_{m−1} onto [0, n] before
  the §3.10 search (a monotone CDF: x̂ is its first crossing of p, not any crossing
  of a non-monotone σ̂, spec §7.11);
* ``clip``: COUNT estimates and the prefix estimates clipped to [0, n].

Precedence: ``SET dpgate.local_<option>`` (session) > ``[tables.T.local.columns.c]``
(``edges`` only) > ``[tables.T.local]`` > default (the current behaviour).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import INVALID_PARAMETER, Refusal

if TYPE_CHECKING:
    from config.models import LocalPolicy

__all__ = ["LocalOptions", "SESSION_KEYS", "session_overrides", "resolve"]

EDGES = ("interpolate", "whole")
POINTS = ("auto", "midpoint", "upper")
SESSION_KEYS = {
    "edges": "dpgate.local_edges",
    "quantile_point": "dpgate.local_quantile_point",
    "isotonic_cdf": "dpgate.local_isotonic_cdf",
    "clip": "dpgate.local_clip",
}
_TRUE, _FALSE = ("on", "true", "yes", "1"), ("off", "false", "no", "0")


@dataclass(frozen=True)
class LocalOptions:
    """The options in effect for one statement (``edges`` per private column)."""

    edges: dict[str, str] = field(default_factory=dict)  # private column -> "interpolate" | "whole"
    default_edges: str = "interpolate"  # the table's (or the session's) policy
    quantile_point: str = "auto"
    isotonic_cdf: bool = False
    clip: bool = False

    def edges_text(self, cols: Iterable[str] | None = None) -> str:
        """ "edge buckets interpolated" / "… whole" / "… x whole, y interpolated" for the
        private WHERE columns ``cols`` (none: the table's policy)."""
        word = {"interpolate": "interpolated", "whole": "whole"}
        names = sorted(cols or ())
        used = {self.edges[c] for c in names} or {self.default_edges}
        if len(used) == 1:
            return f"edge buckets {word[used.pop()]}"
        return "edge buckets " + ", ".join(f"{c} {word[self.edges[c]]}" for c in names)

    def text(self, cols: Iterable[str] | None = None, all_options: bool = False) -> str:
        """The options as one phrase: the edge policy, then (NOTICE) the options that differ
        from the defaults, or (``all_options``, EXPLAIN) every option."""
        parts = [self.edges_text(cols)]
        if all_options or self.quantile_point != "auto":
            parts.append(f"quantile_point {self.quantile_point}")
        if all_options or self.isotonic_cdf:
            parts.append(f"isotonic_cdf {'on' if self.isotonic_cdf else 'off'}")
        if all_options or self.clip:
            parts.append(f"clip {'on' if self.clip else 'off'}")
        return ", ".join(parts)


def session_overrides(settings: Mapping[str, object] | None) -> tuple[tuple[str, str | bool], ...]:
    """The ``dpgate.local_*`` session settings, validated (22023 naming the setting), as a
    hashable tuple of (option, value) for the plan cache."""
    out: list[tuple[str, str | bool]] = []
    for opt, key in SESSION_KEYS.items():
        raw = (settings or {}).get(key)
        if raw in (None, ""):
            continue
        v = str(raw).strip().lower()
        if opt == "edges" and v in EDGES or opt == "quantile_point" and v in POINTS:
            out.append((opt, v))
        elif opt in ("isotonic_cdf", "clip") and v in _TRUE + _FALSE:
            out.append((opt, v in _TRUE))
        else:
            allowed = {"edges": EDGES, "quantile_point": POINTS}.get(opt, ("on", "off"))
            raise Refusal(
                INVALID_PARAMETER,
                f"{key} must be one of {', '.join(allowed)}, not {raw!r}",
                hint=f"RESET {key} returns to the table's configured value.",
            )
    return tuple(out)


def resolve(
    policy: LocalPolicy, private_cols: Iterable[str], overrides: tuple[tuple[str, str | bool], ...] = ()
) -> LocalOptions:
    """Options for a statement over a table with LocalPolicy ``policy``: session
    ``overrides`` (from :func:`session_overrides`) beat the column, then the table."""
    over = dict(overrides)
    edges = _text(over, "edges", "")
    return LocalOptions(
        {c: edges or policy.columns[c].edges or policy.edges for c in private_cols},
        edges or policy.edges,
        _text(over, "quantile_point", policy.quantile_point),
        _flag(over, "isotonic_cdf", policy.isotonic_cdf),
        _flag(over, "clip", policy.clip),
    )


def _text(over: Mapping[str, str | bool], opt: str, default: str) -> str:
    """The session's text value of ``opt`` (edges, quantile_point), else ``default``."""
    value = over.get(opt)
    return value if isinstance(value, str) else default


def _flag(over: Mapping[str, str | bool], opt: str, default: bool) -> bool:
    """The session's on/off value of ``opt`` (isotonic_cdf, clip), else ``default``."""
    value = over.get(opt)
    return value if isinstance(value, bool) else default
