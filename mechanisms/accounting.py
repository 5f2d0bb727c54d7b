"""The privacy accountant: the one place a release's privacy cost is computed, composed and
compared with a budget.

A :class:`Cost` is stated in one of two *accountings*:

* ``"pure"``: (ε, δ)-differential privacy. ``amount`` is ε; δ is 0 for a pure ε-DP
  mechanism and the δ of partition selection otherwise. Sequential composition adds ε and
  δ (basic composition, Dwork & Roth 2014 Thm 3.16).
* ``"zcdp"``: ρ-zero-concentrated DP (Bun & Steinke 2016, Def 1.1); with δ > 0,
  δ-approximate ρ-zCDP (Bun & Steinke 2016, §1.2.6). Composition adds ρ (Bun & Steinke
  2016, Lemma 1.7), and δ with it for approximate zCDP (§1.2.6).

Conversions (each names the bound it uses):

* pure ε-DP ⇒ (ε²/2)-zCDP (Bun & Steinke 2016, Prop 1.4); (ε, δ)-DP ⇒ δ-approximate
  (ε²/2)-zCDP (Bun & Steinke 2016, Prop 1.13). So a pure mechanism on a zCDP budget of
  ρ runs at ε = √(2ρ) (:func:`pure_epsilon`).
* ρ-zCDP ⇒ (ε, δ)-DP for every δ > 0 with the conversion of Canonne, Kamath & Steinke
  2020, Corollary 13: δ(ε) = inf_{α>1} exp((α−1)(αρ−ε)) / (α−1) · (1 − 1/α)^α
  (:func:`zcdp_delta`); :func:`zcdp_epsilon` inverts it. It is never looser than
  Bun & Steinke 2016 Prop 1.3 (ε = ρ + 2√(ρ log(1/δ))), which bounds it from above.

Group privacy: a mechanism that is ε-DP for one row is kε-DP for k rows (Dwork & Roth 2014
Thm 2.2); one that is ρ-zCDP is k²ρ-zCDP (Bun & Steinke 2016, Prop 1.9). A privacy unit that
moves at most k rows is protected at ε by running the row-level mechanism at ε/k
(:func:`unit_epsilon`); a Gaussian mechanism is calibrated instead to the L2 sensitivity of
the unit's whole contribution (ρ = Δ₂²/(2σ²), Canonne, Kamath & Steinke 2020 Thm 4/Prop 14).

Amounts are exact rationals; the ledger keeps them as integers of its resolution
(:func:`ledger_units`): nano-ε, nano-ρ, femto-δ.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, TypeAlias

__all__ = [
    "PURE",
    "ZCDP",
    "Accounting",
    "Cost",
    "DEFAULT_CONVERSION_DELTA",
    "LEDGER_RESOLUTION",
    "DELTA_RESOLUTION",
    "compose",
    "fits",
    "from_ledger",
    "gaussian_rho",
    "gaussian_sigma2",
    "ledger_units",
    "pure_epsilon",
    "share_of",
    "shares",
    "unit_epsilon",
    "zcdp_delta",
    "zcdp_epsilon",
]

Accounting = Literal["pure", "zcdp"]
Amount: TypeAlias = "int | float | Fraction"
PURE: Accounting = "pure"
ZCDP: Accounting = "zcdp"

DEFAULT_CONVERSION_DELTA = 1e-6
"""The δ at which a zCDP amount is read as (ε, δ)-DP unless a tier names another."""

LEDGER_RESOLUTION = 10**9  # amounts (ε or ρ) are stored as integers of 10⁻⁹
DELTA_RESOLUTION = 10**15  # δ as integers of 10⁻¹⁵


def _q(x: Amount) -> Fraction:
    """``x`` exactly (a float as its exact binary value)."""
    if isinstance(x, bool):
        raise TypeError("a privacy amount is a number, not a bool")
    q = Fraction(x)
    if q < 0:
        raise ValueError(f"a privacy amount is >= 0, got {x!r}")
    return q


@dataclass(frozen=True)
class Cost:
    """A privacy cost: ``amount`` is ε (``accounting="pure"``) or ρ (``"zcdp"``), with
    ``delta`` its δ (0: pure ε-DP, or plain ρ-zCDP)."""

    accounting: Accounting
    amount: Fraction
    delta: Fraction = Fraction(0)

    def __post_init__(self) -> None:
        if self.accounting not in (PURE, ZCDP):
            raise ValueError(f"unknown accounting {self.accounting!r}")
        object.__setattr__(self, "amount", _q(self.amount))
        object.__setattr__(self, "delta", _q(self.delta))

    @classmethod
    def pure(cls, epsilon: Amount, delta: Amount = 0) -> Cost:
        return cls(PURE, _q(epsilon), _q(delta))

    @classmethod
    def zcdp(cls, rho: Amount, delta: Amount = 0) -> Cost:
        return cls(ZCDP, _q(rho), _q(delta))

    @classmethod
    def zero(cls, accounting: Accounting) -> Cost:
        return cls(accounting, Fraction(0))

    @property
    def epsilon(self) -> Fraction:
        """ε of a pure-accounting cost."""
        if self.accounting != PURE:
            raise ValueError("a zCDP cost has no pure ε; read it with to_dp(δ)")
        return self.amount

    @property
    def rho(self) -> Fraction:
        """ρ of this cost: itself on a zCDP cost, ε²/2 of a pure one (Bun & Steinke 2016 Prop 1.4)."""
        return self.amount if self.accounting == ZCDP else self.amount**2 / 2

    def in_accounting(self, accounting: Accounting) -> Cost:
        """This cost stated in ``accounting``: pure → zCDP by Prop 1.4 / 1.13 of Bun & Steinke
        2016; zCDP → pure has no exact form (a ρ bounds no pure ε) and raises ValueError."""
        if accounting == self.accounting:
            return self
        if accounting == ZCDP:
            return Cost(ZCDP, self.amount**2 / 2, self.delta)
        raise ValueError("a zCDP cost cannot be stated as pure ε-DP")

    def __add__(self, other: Cost) -> Cost:
        """Sequential composition (ε and δ add; ρ and δ add); a pure cost added to a zCDP one
        is first stated in zCDP."""
        if not isinstance(other, Cost):
            return NotImplemented
        acc = ZCDP if ZCDP in (self.accounting, other.accounting) else PURE
        a, b = self.in_accounting(acc), other.in_accounting(acc)
        return Cost(acc, a.amount + b.amount, a.delta + b.delta)

    def group(self, k: int) -> Cost:
        """The cost for a group of ``k`` rows: kε and k·e^{(k−1)ε}·δ (Dwork & Roth 2014 Thm 2.2
        and its approximate form), or k²ρ (Bun & Steinke 2016 Prop 1.9). δ-approximate zCDP
        has no group bound here: ValueError (fail closed)."""
        k = int(k)
        if k < 1:
            raise ValueError(f"a group has at least one row, got {k}")
        if self.accounting == PURE:
            if self.delta == 0 or k == 1:
                return Cost(PURE, k * self.amount, self.delta)
            # e^{(k−1)ε} rounded up to a rational: the δ stated never understates
            grow = Fraction(math.nextafter(math.exp((k - 1) * float(self.amount)), math.inf))
            return Cost(PURE, k * self.amount, k * grow * self.delta)
        if self.delta:
            raise ValueError("no group bound for δ-approximate zCDP")
        return Cost(ZCDP, k * k * self.amount, Fraction(0))

    def to_dp(self, delta: float = DEFAULT_CONVERSION_DELTA) -> tuple[float, float]:
        """(ε, δ)-DP reading: a pure cost as it is; a zCDP one at conversion δ ``delta``
        (Canonne, Kamath & Steinke 2020 Cor 13), its own δ added (Bun & Steinke 2016 Prop 1.13)."""
        if self.accounting == PURE:
            return float(self.amount), float(self.delta)
        return zcdp_epsilon(float(self.amount), delta), float(self.delta) + delta

    def __str__(self) -> str:
        d = f", δ {float(self.delta):g}" if self.delta else ""
        return f"{'ε' if self.accounting == PURE else 'ρ'} {float(self.amount):g}{d}"


def compose(costs: Iterable[Cost]) -> Cost:
    """The sequential composition of ``costs`` (at least one)."""
    it = iter(costs)
    total = next(it)
    for c in it:
        total = total + c  # (Cost.__add__)
    return total


def fits(spent: Cost, cost: Cost, budget: Cost) -> bool:
    """Whether ``cost`` composed with ``spent`` stays within ``budget`` (amount and δ), in
    ``budget``'s accounting, at the ledger's resolution (what is charged is what is compared)."""
    total = spent + cost
    if total.accounting != budget.accounting:
        total = total.in_accounting(budget.accounting)
    t, b = ledger_units(total), ledger_units(budget)
    return t[0] <= b[0] and (cost.delta == 0 or t[1] <= b[1])


def ledger_units(cost: Cost) -> tuple[int, int]:
    """(amount in 10⁻⁹ units, δ in 10⁻¹⁵ units) as the ledger keeps them: rounded to the
    nearest unit (the config refuses amounts below one unit)."""
    return round(cost.amount * LEDGER_RESOLUTION), round(cost.delta * DELTA_RESOLUTION)


def from_ledger(accounting: Accounting, amount: int, delta: int = 0) -> Cost:
    """A cost read back from the ledger's integers."""
    return Cost(accounting, Fraction(int(amount), LEDGER_RESOLUTION), Fraction(int(delta), DELTA_RESOLUTION))


def shares(total: Cost, n: int) -> list[Cost]:
    """``total`` split into ``n`` equal parts whose composition is exactly ``total``
    (sequential composition of the statement's releases)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return [Cost(total.accounting, total.amount / n, total.delta / n)] * n


def unit_epsilon(epsilon: Amount, k: int) -> float:
    """The ε a row-level pure mechanism runs at so that a unit moving at most ``k`` rows is
    protected at ``epsilon`` (group privacy, Dwork & Roth 2014 Thm 2.2): the largest float
    ≤ ε/k."""
    return _float_at_most(_q(epsilon) / max(int(k), 1))


def share_of(amount: Amount, n: int) -> float:
    """One of ``n`` equal shares of ``amount`` (ε or ρ) composed sequentially: the largest float
    ≤ amount/n, so n shares never exceed it."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return _float_at_most(_q(amount) / n)


def pure_epsilon(rho: Amount) -> float:
    """The ε at which a pure ε-DP mechanism is ρ-zCDP (ε²/2 ≤ ρ, Bun & Steinke 2016 Prop 1.4):
    the largest float whose exact square over 2 is ≤ ρ."""
    r = _q(rho)
    e = math.sqrt(2 * float(r))
    while Fraction(e) ** 2 / 2 > r:
        e = math.nextafter(e, 0.0)
    return e


def gaussian_sigma2(rho: Amount, l2_squared: Amount) -> Fraction:
    """σ² of the (discrete) Gaussian mechanism that is ρ-zCDP for an L2 sensitivity Δ₂
    given as Δ₂² (exact even when Δ₂ = √m·R is irrational): σ² = Δ₂²/(2ρ)
    (Canonne, Kamath & Steinke 2020 Thm 4)."""
    r = _q(rho)
    if r == 0:
        raise ValueError("ρ must be > 0")
    return _q(l2_squared) / (2 * r)


def gaussian_rho(sigma2: Amount, l2_squared: Amount) -> Fraction:
    """The privacy map of the discrete Gaussian: ρ = Δ₂²/(2σ²) (Canonne, Kamath & Steinke 2020 Thm 4)."""
    return _q(l2_squared) / (2 * _q(sigma2))


def _float_at_most(q: Fraction) -> float:
    f = float(q)
    while Fraction(f) > q:
        f = math.nextafter(f, 0.0)
    return f


# -- ρ-zCDP → (ε, δ)-DP (Canonne, Kamath & Steinke 2020, Corollary 13) ------------------------


def _log_delta(rho: float, eps: float, alpha: float) -> float:
    """log of exp((α−1)(αρ−ε)) / (α−1) · (1 − 1/α)^α."""
    return (alpha - 1) * (alpha * rho - eps) - math.log(alpha - 1) + alpha * math.log1p(-1 / alpha)


def dp_reading(rho: float, delta: float = DEFAULT_CONVERSION_DELTA) -> str:
    """ρ-zCDP read as (ε, δ)-DP at ``delta`` (:func:`zcdp_epsilon`), as text."""
    return f"(ε {zcdp_epsilon(max(rho, 0.0), delta):.3g}, δ {delta:g})-DP"


def zcdp_delta(rho: float, eps: float) -> float:
    """The δ of Canonne, Kamath & Steinke 2020 Cor 13 for ρ-zCDP at ε: the infimum over α > 1,
    found by golden-section search (the log of the bound is convex in α)."""
    if rho <= 0:
        return 0.0
    lo, hi = 1.0 + 1e-9, max(2.0, (eps + 1) / (2 * rho) + 2)
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = _log_delta(rho, eps, a), _log_delta(rho, eps, b)
    for _ in range(200):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = _log_delta(rho, eps, a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = _log_delta(rho, eps, b)
    return min(1.0, math.exp(min(fa, fb)))


def zcdp_epsilon(rho: float, delta: float = DEFAULT_CONVERSION_DELTA) -> float:
    """The least ε (to 10⁻¹², rounded up) with ρ-zCDP ⇒ (ε, δ)-DP by Canonne, Kamath & Steinke
    2020 Cor 13, never above Bun & Steinke 2016 Prop 1.3's ρ + 2√(ρ log(1/δ))."""
    if not 0 < delta < 1:
        raise ValueError(f"δ must be in (0, 1), got {delta!r}")
    if rho <= 0:
        return 0.0
    hi = rho + 2 * math.sqrt(rho * math.log(1 / delta))  # Prop 1.3: always enough
    lo = 0.0
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = (lo + hi) / 2
        if zcdp_delta(rho, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi
