"""Signal-to-noise of a release, from its mechanism's own public error law.

Whether a released value carries information is judged from what is public — the mechanism,
its ε, the column's bounds, the statement's plan — and from released values (post-processing),
never from a true aggregate: a warning that depended on the exact value would be a side channel.
One rule per kind of error law, one function per mechanism (:func:`judge`, dispatched on the
measurement's class):

* **additive noise** (COUNT: two-sided geometric; SUM: discrete Laplace; VAR/STDDEV: the bound
  from the noisy moments) — a released value is *mostly noise* when its 95% half-width h is at
  least its magnitude, h ≥ |value|: the 95% interval holds 0, so not even the sign is known.
  A COUNT is useful from groups of h + 1 rows; at a group's size, from the ε at which h falls
  below the released |value| (h is a function of ε: :func:`epsilon_for`).
  The discrete Gaussian of a zCDP tier (Canonne, Kamath & Steinke 2020) is judged the same
  way, its useful budget stated in ρ (``Signal.unit``). A per-record COUNT/SUM (Chen et al.
  2025) has one half-width per group — the noise of the levels it kept, at 1 − β
  (:func:`additive_each`).
* **AVG** (the add-remove mean of Kulesza, Suresh and Wang 2024, or the split baseline) — mostly
  noise when h ≥ (upper − lower)/4: the 95% interval spans at least half the bounds' range. Its
  h falls as 1/n̂ (the delta method, Lemma 1 of the paper: h = w'·q(α)/n̂), so the rule names the
  smallest group (:func:`mean_useful_from`) at which the worst-placed AVG clears it.
* **rank error, MAX/MIN and percentiles** (the shifted or capped rank, Chen et al. 2025 §6.4;
  the plain or protected exponential mechanism for a quantile, Smith 2011; percentiles drawn
  together by recursive splitting, Kaplan, Schnapp and Stemmer 2022 — whichever the error laws
  chose, :mod:`mechanisms.extreme`, :mod:`mechanisms.quantile`) — the mechanism's own law says
  from which group size n its expected relative rank error (the share of the group's rows
  between the answer and its target rank; 1 outside the group's values) is at most 10%
  (``useful_from()``); a smaller group is mostly noise. Rank errors scale as 1/ε
  (k0 = (2/ε)·ln((U + 1)/β)), so n rows are useful from about ε·need/n. The group's n is a
  released (noisy) count: a COUNT in the same statement, or the row count the proxy releases
  beside a MAX/MIN/percentile that has none (at a stated share of the statement's ε). A
  per-record MAX/MIN states its rank margin at 1 − β instead: mostly noise when it reaches the
  group's released rows. A percentile whose error is stated as a share of the group (a local
  table's) is mostly noise when that share reaches max(q, 1 − q) (:func:`rank_share_rule`).

:class:`Signal` holds the verdict of one released aggregate (over all its groups) and says it
in one line (``reason`` / ``useful``). Other modules call, by name:

* :func:`judge` ``(m, values, half_width, *, n_hats=None, epsilon_scale=1.0, q=None)`` →
  Signal | None (None: no rule for that mechanism);
* :func:`additive` ``(values, half_width)``, :func:`additive_each` ``(values, half_widths)``,
  :func:`mean_rule` ``(values, half_width, lower, upper)``, :func:`rank_share_rule` ``(errors,
  q)`` → a rule alone at stated half-widths (values whose mechanism's law is not here);
* :func:`mean_useful_from` ``(m)`` → an AVG's smallest useful group
  (``judge(m, (), 0.0).useful_rows`` for any mechanism: EXPLAIN);
* :func:`epsilon_for` ``(m, target, epsilon)`` → the least ε at which m's 95% half-width (now at
  ``epsilon``) is below ``target``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import singledispatch
from typing import Any

from .average import SplitAverage
from .discrete_gaussian import GaussianCount, GaussianSum
from .extreme import USEFUL, RankTargetExtreme
from .gaussian_stats import GaussianMean
from .mean.common import GridMean
from .measurements import GeometricCount, LaplaceSum
from .per_record import ExtensionSum, FrameworkMax, FrameworkSum, PrDPCount
from .quantile import ExpMechQuantile, RecursiveQuantiles
from .variance import MomentVariance

__all__ = [
    "Signal",
    "judge",
    "additive",
    "additive_each",
    "mean_rule",
    "rank_share_rule",
    "mean_useful_from",
    "epsilon_for",
    "MEAN_RANGE_FRACTION",
]

MEAN_RANGE_FRACTION = 4
"""An AVG is mostly noise when its 95% half-width is at least (upper − lower)/MEAN_RANGE_FRACTION."""

_MAX_ROWS = 1 << 62

Values = Sequence[Any]  # one released value per group
Counts = Sequence[Any] | None  # one released row count per group, where known


@dataclass(frozen=True)
class Signal:
    """The verdict on one released aggregate over its groups: ``noisy`` groups of ``groups``
    are mostly noise by ``rule``; ``useful_rows``: the smallest group at which it would not
    be (None: no group size helps); ``useful_epsilon``: the ε per query at which the largest
    mostly-noise group would not be (None: not stated)."""

    rule: str
    noisy: int
    groups: int
    detail: str
    useful_rows: int | None = None
    useful_epsilon: float | None = None
    noisiest_only: bool = False  # judged on the noisiest group alone (an AVG's stated half-width)
    unit: str = "ε"  # what ``useful_epsilon`` is in: ε, or ρ on a zCDP tier

    @property
    def noise(self) -> bool:
        return self.noisy > 0

    def reason(self) -> str:
        """Which groups are mostly noise and by which rule (one clause)."""
        which = (
            "the noisiest group: "
            if self.noisiest_only and self.groups > 1
            else ""
            if self.groups <= 1
            else f"{self.noisy} of {self.groups} groups: "
        )
        return f"{which}{self.detail} (rule: {self.rule})"

    def useful(self) -> str:
        """Where the answer would be useful (one clause, or empty)."""
        parts = []
        if self.useful_rows is not None:
            parts.append(f"from groups of {self.useful_rows:,} rows")
        if self.useful_epsilon is not None:
            parts.append(f"at {self.unit} ≥ {_up3(self.useful_epsilon):.3g} per query")
        return "useful " + " or ".join(parts) if parts else ""


def _up3(x: float) -> float:
    """``x`` rounded up to 3 significant digits (a stated least ε must not fall below it)."""
    unit = 10.0 ** (math.floor(math.log10(x)) - 2)
    return math.ceil(x / unit) * unit


def _fmt(x: float) -> str:
    return f"{x:,.4g}" if isinstance(x, float) and not float(x).is_integer() else f"{x:,.0f}"


# -- what a measurement would be at another ε -------------------------------------------------


@singledispatch
def at_epsilon(m: Any, epsilon: float) -> Any:
    """``m`` at ``epsilon`` (the same bounds): its error law at another ε."""
    raise TypeError(f"no error law at another ε for {type(m).__name__}")


@at_epsilon.register
def _(m: GeometricCount, epsilon: float) -> GeometricCount:
    return GeometricCount(epsilon)


@at_epsilon.register
def _(m: LaplaceSum, epsilon: float) -> LaplaceSum:
    return LaplaceSum(epsilon, m.lower, m.upper, integer=m.integer)


@at_epsilon.register
def _(m: GaussianCount, rho: float) -> GaussianCount:
    """The discrete Gaussian at another ρ (its "ε" here is ρ: σ² = Δ₂²/(2ρ))."""
    return GaussianCount(rho, m.contributions_sq)


@at_epsilon.register
def _(m: GaussianSum, rho: float) -> GaussianSum:
    return GaussianSum(rho, m.lower, m.upper, integer=m.integer, contributions_sq=m.contributions_sq)


def epsilon_for(m: Any, target: float, epsilon: float) -> float | None:
    """The least ε' (to 0.1%) at which ``m``'s 95% half-width (at ``epsilon`` now) is below
    ``target``; None when ``target`` ≤ 0 (a half-width is never below 0). The half-width
    falls monotonically in ε (the noise scale is sensitivity/ε), so bisection on log ε."""
    if not target > 0:
        return None
    if float(m.half_width()) < target:
        return epsilon
    lo, hi = math.log(epsilon), math.log(epsilon) + 1.0
    while float(at_epsilon(m, math.exp(hi)).half_width()) >= target:
        lo, hi = hi, hi + 2.0
        if hi > math.log(epsilon) + 60:
            return None
    while hi - lo > 1e-3:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(at_epsilon(m, math.exp(mid)).half_width()) >= target else (lo, mid)
    return math.exp(hi)


# -- additive noise: COUNT, SUM, VAR ----------------------------------------------------------


def additive(
    values: Sequence[Any],
    half_width: float,
    m: Any = None,
    epsilon: float | None = None,
    epsilon_scale: float = 1.0,
    useful_rows: int | None = None,
    unit: str = "ε",
) -> Signal:
    """The additive rule over ``values`` at the stated ``half_width``; with the measurement
    ``m`` at ``epsilon`` (and its scale to the statement's ε) it also names the useful ε (a
    SUM or COUNT derived from an AVG's release has no ``m`` of its own: the rule only);
    ``useful_rows``: the useful group size where the value is one (a COUNT); ``unit``: what
    ``epsilon`` is in (ρ for the discrete Gaussian of a zCDP tier)."""
    h = float(half_width)
    noisy = [abs(float(v)) for v in values if v is not None and abs(float(v)) <= h]
    top = max(noisy, default=0.0)
    eps = None
    if noisy and epsilon is not None and m is not None:
        found = epsilon_for(m, top, epsilon) if top > 0 else None
        eps = found * epsilon_scale if found is not None else None
    detail = (
        f"95% half-width ±{_fmt(h)} ≥ |value|"
        + (f" (|values| up to {_fmt(top)})" if noisy and len(values) > 1 else "")
        if noisy
        else f"95% half-width ±{_fmt(h)}"
    )
    return Signal(
        "half-width ≥ |value|",
        len(noisy),
        len(values),
        detail,
        useful_rows=useful_rows,
        useful_epsilon=eps,
        unit=unit,
    )


def additive_each(
    values: Sequence[Any], half_widths: Sequence[float], level: float = 0.95, count: bool = False
) -> Signal:
    """The additive rule where each value has its own stated half-width at ``level`` (a
    per-record release: each group's noise bound at its released level ℓ); ``count``: the value
    is its group's size, useful from (the largest noisy group's half-width) + 1 rows."""
    noisy = [
        (abs(float(v)), float(h))
        for v, h in zip(values, half_widths)
        if v is not None and abs(float(v)) <= float(h)
    ]
    top = max((h for _, h in noisy), default=max((float(h) for h in half_widths), default=0.0))
    pct = f"{level:.0%}"
    detail = (
        f"{pct} half-width ±{_fmt(top)} ≥ |value|"
        + (f" (|values| up to {_fmt(max(v for v, _ in noisy))})" if len(values) > 1 else "")
        if noisy
        else f"{pct} half-width up to ±{_fmt(top)}"
    )
    useful = math.floor(top) + 1 if count and noisy else None
    return Signal("half-width ≥ |value|", len(noisy), len(values), detail, useful_rows=useful)


@singledispatch
def judge(
    m: Any,
    values: Sequence[Any],
    half_width: float | Sequence[float],
    *,
    n_hats: Sequence[Any] | None = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal | None:
    """The verdict on one released aggregate: its measurement ``m``, its released ``values``
    (one per group), its stated 95% ``half_width`` (for an AVG the largest over the groups; a
    per-record release's, one per group at 1 − β: the bound of its released level),
    ``n_hats``: the groups' released row counts where known (rank-error mechanisms need them),
    ``epsilon_scale``: the statement's ε over ``m``'s (ε shares and a unit's group privacy
    scale both), to state a useful ε per query; ``q``: the quantile judged, of a mechanism
    that draws several. None: no rule for this mechanism."""
    return None


@judge.register
def _(
    m: GeometricCount,
    values: Values,
    half_width: float,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal:
    """A COUNT's value is its group's size: useful from h + 1 rows."""
    h = float(m.half_width())
    return additive(values, half_width, m, float(m.epsilon), epsilon_scale, useful_rows=math.floor(h) + 1)


@judge.register
def _(
    m: LaplaceSum,
    values: Values,
    half_width: float,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal:
    return additive(values, half_width, m, float(m.epsilon), epsilon_scale)


@judge.register
def _(
    m: MomentVariance,
    values: Values,
    half_width: float,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal:
    """A VAR/STDDEV's stated half-width is a bound from the noisy moments: the same rule."""
    return additive(values, half_width)


@judge.register
def _(
    m: GaussianCount,
    values: Values,
    half_width: float,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal:
    """A zCDP COUNT (the discrete Gaussian, Canonne, Kamath & Steinke 2020): useful from h + 1
    rows; at a group's size, from the ρ at which h falls below it (``epsilon_scale``: the
    statement's ρ over this release's)."""
    h = float(m.half_width())
    return additive(
        values, half_width, m, float(m.rho), epsilon_scale, useful_rows=math.floor(h) + 1, unit="ρ"
    )


@judge.register
def _(
    m: GaussianSum,
    values: Values,
    half_width: float,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal:
    return additive(values, half_width, m, float(m.rho), epsilon_scale, unit="ρ")


@judge.register
@judge.register(PrDPCount)
def _(
    m: ExtensionSum | PrDPCount,
    values: Values,
    half_width: Any,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal:
    """A per-record COUNT or extension SUM (Chen et al. 2025 Alg. 1): each group's value against
    the noise of the levels it kept (``half_width``: per group, Σ_{i≥ℓ} k_i at 1 − β for its
    released level ℓ); a COUNT is useful from that bound + 1 rows."""
    widths = half_width if isinstance(half_width, Sequence) else [half_width] * len(values)
    return additive_each(values, widths, 1 - m.scan.beta, count=isinstance(m, PrDPCount))


@judge.register
def _(
    m: FrameworkSum,
    values: Values,
    half_width: Any,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal:
    """A per-record framework SUM (Chen et al. 2025 §6): each group's value against its noise
    bound at 1 − β (the universal sum's at its clipping radius τ)."""
    widths = half_width if isinstance(half_width, Sequence) else [half_width] * len(values)
    return additive_each(values, widths, 1 - m.beta)


@judge.register
def _(
    m: FrameworkMax,
    values: Values,
    half_width: Any,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal | None:
    """A per-record MAX/MIN (Chen et al. 2025 §6.4): ``half_width`` per group, the rows of its
    kept levels that may lie beyond the answer at 1 − β (2·k0 at its level's ε, rank units);
    mostly noise when that is at least the group's released row count ``n_hats`` (a COUNT of
    the same statement): the answer may then lie anywhere among the group's rows, or outside
    them. Useful from groups of more rows than that bound. None without a released count."""
    if n_hats is None:
        return None
    widths = half_width if isinstance(half_width, Sequence) else [half_width] * len(n_hats)
    pairs = [(0.0 if n is None else float(n), float(w)) for n, w in zip(n_hats, widths)]
    noisy = [(n, w) for n, w in pairs if w >= n]
    top = max((w for _, w in noisy), default=max((w for _, w in pairs), default=0.0))
    pct = f"{1 - m.beta:.0%}"
    detail = f"up to {_fmt(top)} rows beyond the answer ({pct})"
    if noisy:
        counts = "released row count" if len(pairs) == 1 else "released row counts up to"
        detail += f"; {counts} {_fmt(max(n for n, _ in noisy))}"
    return Signal(
        "rows beyond the answer ≥ the group's rows",
        len(noisy),
        len(pairs),
        detail,
        useful_rows=math.floor(top) + 1 if noisy else None,
    )


def rank_share_rule(errors: Sequence[float], q: float, level: float = 0.95) -> Signal:
    """A percentile whose error is stated as a share of its group's rows (``errors``: per group,
    the bound on |rank − q·n|/n at ``level``): mostly noise when the bound reaches
    max(q, 1 − q) — the rank interval then holds the group's first or last row, so the answer
    may be anywhere among its values."""
    reach = max(float(q), 1 - float(q))
    noisy = [float(t) for t in errors if float(t) >= reach]
    top = max(noisy, default=max((float(t) for t in errors), default=0.0))
    return Signal(
        "rank error ≥ max(q, 1 − q)",
        len(noisy),
        len(errors),
        f"{level:.0%} rank error up to {top:.0%} of the group at q = {float(q):g}",
    )


# -- AVG ---------------------------------------------------------------------------------------


def mean_useful_from(m: GridMean | SplitAverage | GaussianMean) -> int | None:
    """The smallest group n at which the AVG's 95% half-width, at its worst-placed value (an
    endpoint, where q(α) is largest), is below (upper − lower)/4: bisection on n, the
    half-width falling as 1/n̂ (delta method; the zCDP ratio's interval,
    :meth:`~mechanisms.gaussian_stats.GaussianMean.half_width`, is already its worst over the bounds)."""
    width = float(m.upper) - float(m.lower)
    target = width / MEAN_RANGE_FRACTION
    worst = [float(m.lower), float(m.upper)]

    def hw(n: int) -> float:
        if isinstance(m, GaussianMean):
            return float(m.half_width(0.95, n_hat=n))
        return max(float(m.half_width(0.95, n_hat=n, avg_hat=a)) for a in worst)

    if hw(1) < target:
        return 1
    lo, hi = 1, 2
    while hw(hi) >= target:
        lo, hi = hi, hi * 2
        if hi > _MAX_ROWS:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if hw(mid) < target else (mid, hi)
    return hi


def mean_rule(
    values: Values, half_width: float, lower: float, upper: float, useful_rows: int | None = None
) -> Signal:
    """The AVG rule at a stated (noisiest group's) ``half_width`` over [lower, upper]; with a
    mechanism's law the caller adds the useful group size (:func:`mean_useful_from`)."""
    width = float(upper) - float(lower)
    h = float(half_width)
    noisy = h >= width / MEAN_RANGE_FRACTION
    return Signal(
        f"half-width ≥ (upper − lower)/{MEAN_RANGE_FRACTION}",
        1 if noisy else 0,
        len(values),
        f"95% half-width ±{_fmt(h)} {'≥' if noisy else '<'} {_fmt(width / MEAN_RANGE_FRACTION)}, a quarter "
        f"of the bounds' range [{_fmt(float(lower))}, {_fmt(float(upper))}]",
        useful_rows=useful_rows,
        noisiest_only=True,
    )


@judge.register(GridMean)
@judge.register(SplitAverage)
@judge.register(GaussianMean)
def _(
    m: GridMean | SplitAverage | GaussianMean,
    values: Values,
    half_width: float,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal:
    return mean_rule(values, half_width, float(m.lower), float(m.upper), mean_useful_from(m))


# -- rank error: MAX/MIN and quantiles ---------------------------------------------------------


def _rank(
    need: int | None, rule: str, what: str, epsilon: float, n_hats: Counts, epsilon_scale: float
) -> Signal:
    """A rank-error mechanism over the groups whose released counts are ``n_hats``: a group
    below ``need`` rows is mostly noise. The rank error scales as 1/ε (k0 = (2/ε)·ln((U + 1)/β)),
    so a group of n rows is useful from about ε·need/n."""
    if n_hats is None:
        return Signal(rule, 0, 0, what, useful_rows=need)
    counts = [float(n) if n is not None else 0.0 for n in n_hats]
    noisy = [n for n in counts if need is None or n < need]
    eps = None
    if noisy and need is not None and max(noisy) > 0:
        eps = epsilon * epsilon_scale * need / max(noisy)
    detail = what
    if noisy:
        counts_text = "released row count" if len(counts) == 1 else "released row counts up to"
        detail += f"; {counts_text} {_fmt(max(noisy))}"
    return Signal(rule, len(noisy), len(counts), detail, useful_rows=need, useful_epsilon=eps)


@judge.register
def _(
    m: RankTargetExtreme,
    values: Values,
    half_width: float,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal:
    """MAX/MIN by the shifted or the capped rank: the mechanism's own error law says from which
    group its expected relative rank error is ≤ 10% (:meth:`RankTargetExtreme.useful_from`)."""
    return _rank(
        m.useful_from(),
        f"expected relative rank error > {USEFUL:.0%} (the mechanism's law)",
        f"at most {m.rank_half_width()} rows beyond the answer (95%)",
        m.epsilon,
        n_hats,
        epsilon_scale,
    )


@judge.register
def _(
    m: ExpMechQuantile,
    values: Values,
    half_width: float,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal:
    """A percentile by the exponential mechanism (plain or protected): its own error law says
    from which group its expected relative rank error is ≤ 10%
    (:meth:`~mechanisms.quantile.ExpMechQuantile.useful_from`)."""
    return _rank(
        m.useful_from(),
        f"expected relative rank error > {USEFUL:.0%} (the mechanism's law)",
        f"rank within {m.rank_half_width()} rows of {float(m.q):g}·n (95%)",
        m.epsilon,
        n_hats,
        epsilon_scale,
    )


@judge.register
def _(
    m: RecursiveQuantiles,
    values: Values,
    half_width: float,
    *,
    n_hats: Counts = None,
    epsilon_scale: float = 1.0,
    q: Fraction | None = None,
) -> Signal | None:
    """The quantile ``q`` of percentiles drawn together, by the tree's own error estimate
    (:meth:`~mechanisms.quantile.RecursiveQuantiles.useful_from`)."""
    if q is None:
        return None
    return _rank(
        m.useful_from(q),
        f"expected relative rank error > {USEFUL:.0%} (the mechanism's estimate)",
        f"rank within {m.rank_half_width(q)} rows of {float(q):g}·n (95%)",
        m.epsilon,
        n_hats,
        epsilon_scale,
    )
