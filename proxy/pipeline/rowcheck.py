"""The row check of a MAX/MIN/percentile release: a noisy count of each group's rows, released
with it so that the NOTICE can say when the answer is mostly noise.

A rank-error mechanism (the shifted or capped rank, the exponential mechanism for a quantile,
recursive splitting) is useful only on groups of at least its useful size — its own error law,
:mod:`mechanisms.snr` — and a group's size is private: only a released count may say it. When a
statement releases a MAX/MIN/percentile of a column for which it releases no COUNT (neither
COUNT of that column nor COUNT(*)), dpgate also releases, per group, a noisy count of the rows
the mechanism ranks (the column's non-NULL values the privacy unit's bounds keep: the total of
the histogram the scan returns, no other scan) at :data:`SHARE` of the statement's budget; the
statement's other releases run at the rest (sequential composition). The count is a DP
release: the warning line and the NOTICE read it (post-processing); it is not a result column.

Its calibration is the COUNT path's: one privacy unit moves the count of its kept rows by at
most k = :func:`rewriter.unit.factor` (R rows in each of min(G, cells) groups), so the
two-sided geometric runs at ε/k (its map at distance k is the share); on a zCDP tier the tier's
count mechanism, the discrete Gaussian at the unit's L2 sensitivity Δ₂² = min(G, cells)·R²
(:func:`.release.contributions_sq`; Canonne, Kamath & Steinke 2020), ρ = Δ₂²/(2σ²). The
statement's cost (:class:`RowCheck`.cost) is the rank releases' ε (with the partition
selection's δ) composed with the counts' privacy maps by the accountant
(:mod:`mechanisms.accounting`).

``SET dpgate.row_check = off`` (default ``on``) releases no count and gives the whole budget to
the other releases; a lone MAX/percentile then states its useful size only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from mechanisms.accounting import ZCDP, Cost, compose, dp_reading, pure_epsilon, share_of, unit_epsilon
from mechanisms.discrete_gaussian import GaussianCount
from mechanisms.measurements import GeometricCount
from rewriter.plan import Plan
from rewriter.unit import factor

from ..wire.api import SqlError
from .common import fmt
from .release import contributions_sq

__all__ = [
    "SETTING",
    "SHARE",
    "RowCheck",
    "enabled",
    "explain_text",
    "measure",
    "notice_text",
    "plan_check",
    "row_counts",
    "setting_on",
    "zcdp_line",
]

SETTING = "dpgate.row_check"
SHARE = Fraction(1, 20)
"""The row counts' share of the statement's ε (ρ on a zCDP tier); the other releases share the rest."""

_ON = ("on", "true", "yes", "1")
_OFF = ("off", "false", "no", "0")


def setting_on(value: object) -> bool:
    """``dpgate.row_check``'s value as a boolean, spelled as Postgres spells booleans (empty:
    the default, on); ValueError for anything else."""
    raw = str(value if value is not None else "").strip().lower()
    if raw in ("", *_ON):
        return True
    if raw in _OFF:
        return False
    raise ValueError(f"{SETTING} must be on or off, not {raw!r}")


def enabled(conn) -> bool:
    """Whether this connection's statements release the row check (its session setting)."""
    settings = getattr(getattr(conn, "session", None), "settings", None) or {}
    try:
        return setting_on(settings.get(SETTING))
    except ValueError as e:
        raise SqlError("22023", str(e), hint=f"SET {SETTING} = on (the default) or off.") from None


@dataclass(frozen=True)
class RowCheck:
    """The row counts of one statement: one per column in ``columns``, each by ``m`` (the
    geometric count at ε/k, or the discrete Gaussian) at ``amount`` (ε or ρ, the tier's unit);
    ``rest``: the pure ε the statement's other releases run at (partition selection included);
    ``cost``: the whole statement's, from the privacy maps."""

    columns: tuple[str, ...]
    m: Any
    amount: float
    unit: str
    rest: float
    cost: Cost


def plan_check(plan: Plan, tier, columns: Sequence[str], delta: float = 0.0) -> RowCheck | None:
    """The row check of ``columns`` (None: none to count) on ``tier``: :data:`SHARE` of its ε (or
    ρ) split equally over the columns' counts, the rest as a pure ε for the other releases."""
    if not columns:
        return None
    n = len(columns)
    if tier.accounting == ZCDP:
        total = Fraction(tier.rho)
        each = share_of(total * SHARE, n)
        m: Any = GaussianCount(each, contributions_sq=contributions_sq(plan))
        counts = compose(Cost.zcdp(m.privacy_map_exact(1)) for _ in columns)
        # the rank releases at the largest ε with ε²/2 ≤ ρ − the counts' maps (Bun & Steinke 2016 Prop 1.4)
        rest = pure_epsilon(total - counts.amount)
        unit = "ρ"
    else:
        total = Fraction(tier.epsilon)
        each = share_of(total * SHARE, n)
        k = factor(plan)
        m = GeometricCount(unit_epsilon(each, k))  # group privacy: ε/k per row, the share per unit
        counts = compose(Cost.pure(m.privacy_map_exact(k)) for _ in columns)
        rest = share_of(total - counts.amount, 1)  # the largest float ≤ ε − the counts' maps
        unit = "ε"
    return RowCheck(tuple(columns), m, each, unit, rest, Cost.pure(rest, delta) + counts)


def measure(check: RowCheck, totals: Sequence[Sequence[int]], source) -> dict:
    """The released row counts: ``totals[i][c]`` the rows of column ``check.columns[i]`` in
    cell ``c`` (the histogram's total), each plus its noise. What the answer stores."""
    return {
        "columns": list(check.columns),
        "counts": [[int(check.m.release(int(n), source).value) for n in col] for col in totals],
        "amount": float(check.amount),
        "unit": check.unit,
        "mechanism": check.m.name,
        "half_width": float(check.m.half_width()),
    }


def row_counts(answer: dict) -> dict[str, list] | None:
    """A stored answer's released row counts by column (None: no row check was released)."""
    rc = answer.get("row_check")
    if not rc:
        return None
    return dict(zip(rc["columns"], rc["counts"]))


def _share_words(unit: str, n: int) -> str:
    each = "each, " if n > 1 else ""
    return f"{each}{SHARE.numerator}/{SHARE.denominator} of the statement's {unit}"


def notice_text(answer: dict) -> str:
    """The NOTICE's statement of the released row counts (empty: none released)."""
    rc = answer.get("row_check")
    if not rc:
        return ""
    texts = []
    for col, counts in zip(rc["columns"], rc["counts"]):
        shown = [max(int(c), 0) for c in counts]  # a count is ≥ 0 (post-processing)
        if len(shown) == 1:
            texts.append(f"COUNT({col}) ≈ {shown[0]:,}")
        elif shown:
            texts.append(f"COUNT({col}) ≈ {min(shown):,} to {max(shown):,} over the {len(shown)} groups")
    n = len(rc["columns"])
    return (
        f"row count: {', '.join(texts) or 'no group'} (released at {rc['unit']} {fmt(rc['amount'])} for this "
        f"check, {_share_words(rc['unit'], n)}, by {rc['mechanism']}: 95% half-width ±{fmt(rc['half_width'])}; "
        f"SET {SETTING} = off gives that share back)"
    )


def explain_text(check: RowCheck, what: str) -> str:
    """EXPLAIN's statement of the split, before anything is charged (``what``: the releases
    the rest goes to)."""
    n = len(check.columns)
    cols = ", ".join(f"COUNT({c})" for c in check.columns)
    return (
        f"row check: no COUNT of the ranked rows in this statement, so {cols} of each group is released too, at "
        f"{check.unit} {fmt(check.amount)} ({_share_words(check.unit, n)}; {check.m.name}, 95% half-width "
        f"±{fmt(float(check.m.half_width()))}), and {what} at ε {check.rest:g}; the NOTICE warns (mostly noise) "
        f"when a group's released count is below the useful size; SET {SETTING} = off: no count, the whole "
        f"{check.unit} to {what}"
    )


def zcdp_line(check: RowCheck, tier) -> str:
    """EXPLAIN's first line on a zCDP tier (in place of the pipeline's, which assumes every
    mechanism runs at ε = √(2ρ)): what the rank mechanisms and the row counts are charged."""
    rho = float(check.cost.amount)
    return (
        f"dpgate: accounting zCDP: this release's mechanisms are pure ε-DP but the row count: they run at "
        f"ε = {check.rest:g} (the largest with ε²/2 ≤ ρ {fmt(float(tier.rho))} less the count's share) and are "
        f"charged ε²/2 (Bun & Steinke 2016 Prop 1.4); the row count by {check.m.name} at ρ {fmt(check.amount)} "
        f"{'each ' if len(check.columns) > 1 else ''}(ρ = Δ₂²/(2σ²)); charged ρ {rho:g} in all (alone "
        f"{dp_reading(rho, tier.conversion_delta)})"
    )
