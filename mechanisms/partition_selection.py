"""DP partition selection: which GROUP BY keys (no public domain) may appear in a release.

A key is released or not from n = its count of distinct privacy units; a key absent from the
data (n = 0) is never released, so no key is ever invented. Add-remove of ONE unit moves n by 1
in at most k keys (k = max_groups_per_unit: L0 = k, L-inf = 1). Pure math: no SQL, no I/O.

**Truncated geometric ("magic") selection** (:class:`TruncatedGeometricSelection`; Desfontaines,
Voss, Gipson, Mandayam, "Differentially private partition selection", PoPETs 2022, §3: the
optimal mechanism and its optimality theorem). For k = 1 a key's output is one coin, so
(ε, δ)-DP is exactly, for every n >= 0, with x = e^ε:
    π(n+1) <= x π(n) + δ    and    1 - π(n) <= x (1 - π(n+1)) + δ,    π(0) = 0,
and the pointwise largest such π is the paper's recursion
    π(n) = min(x π(n-1) + δ,  1 - (1 - π(n-1) - δ)/x,  1).
Closed form (derived here). The first branch is the smaller iff π(n-1) <= (1-δ)/(x+1); while it
is, π(n) = δ (x^n - 1)/(x - 1) (geometric growth), i.e. for n <= n* with
    n* = 1 + max{m >= 0 : x^m <= B},   B = (x + 2δ - 1)/((x + 1) δ)   (B >= 1 as δ <= 1).
After it, 1 - π(n) = (1 - π(n-1) - δ)/x, whose fixed point is -c, c = δ/(x - 1), so
    π(n) = 1 + c - (1 - π(n*) + c) x^-(n-n*)        (n* < n < n1: the δ-driven decay of 1 - π),
and π(n) = 1 from n1 = the least n > n* where that reaches 1 (then π stays 1).
Exactness: x is the rational base r = floor(2^64 L)/2^64 for a rigorous lower bound L <= e^ε
(:func:`exp_bounds`), so every π(n) is an exact Fraction and the mechanism is (ln r, δ)-DP with
ln r <= ε (it is charged ε); r is within 2^-62 e^ε of e^ε, a negligible loss of optimality.
The coin is an exact Bernoulli(π(n)) (:func:`_bernoulli`: lazy comparison of uniform bits).
Each key needs O(64 n)-bit integers for n < n1 (~2 ln(1/δ)/ε); keys past n1 cost nothing.
For k > 1 each key is selected at (ε/k, δ/k): the keys' coins are independent, so one unit's
effect on its <= k keys composes to (ε, δ) (basic composition).

**Geometric thresholding** (:class:`GeometricThresholdSelection`; Korolova et al. 2009, Wilson
et al. 2020 "Differentially private SQL with bounded user contribution" §3). Noisy count
n + Z, Z two-sided geometric P(Z = z) ∝ α^|z|, α = e^-(ε/k) (exact sampler
:func:`mechanisms.samplers.discrete_laplace`, scale k/ε); released iff n + Z >= T. Sensitivity:
one unit moves the vector of per-key counts by 1 in at most k coordinates (L1 <= k), so the
noisy counts of the keys present with and without the unit are ε-DP together. A key going
0 -> 1 is the only other difference: with n = 0 the key is never output, with n = 1 it is output
with probability P(1 + Z >= T) = α^(T-1)/(1 + α) (tail: P(Z >= m) = α^m/(1+α), m >= 0). T is
the least T >= 1 with α^(T-1)/(1 + α) <= δ/k, so the <= k new keys are output with probability
<= δ in all: (ε, δ)-DP. Per key this is the (ε/k, δ/k) pair of inequalities above with x = 1/α.
The released noisy count IS the DP COUNT(DISTINCT unit) of a kept key: (kept, noisy) is one
measurement and the argument above covers it, so reusing it costs nothing more (it is biased
upward given kept: noisy >= T). The noisy count of a dropped key must never be released.
"""

from __future__ import annotations

import decimal
import math
import numbers
from fractions import Fraction

from .measurements import as_epsilon
from .once import single_flight
from .rng import RandomSource, default_source
from .samplers import discrete_laplace
from .scalars import RealLike

__all__ = [
    "TruncatedGeometricSelection",
    "GeometricThresholdSelection",
    "exp_bounds",
    "keep_probability",
    "select",
    "threshold",
    "release",
]

BASE_BITS = 64  # r = floor(2^64 L)/2^64 (module doc)
ALPHA_BITS = 160  # e^(ε/k) known within 2^-160 for the threshold's α


def exp_bounds(x: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """Rigorous lo <= e^x <= hi for rational x >= 0, both multiples of 2^-bits, hi - lo tiny.

    x is rounded down / up to ``prec`` digits (ROUND_FLOOR / ROUND_CEILING); Decimal.exp is
    correctly rounded (within half an ulp), and one whole ulp is taken off / added."""
    x = Fraction(x)
    if x < 0:
        raise ValueError(f"exp_bounds needs x >= 0, got {x}")
    prec = 12 + int((bits + 1.4427 * float(x)) * 0.30103)
    lo_ctx = decimal.Context(
        prec=prec, rounding=decimal.ROUND_FLOOR, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN
    )
    hi_ctx = lo_ctx.copy()
    hi_ctx.rounding = decimal.ROUND_CEILING
    num, den = decimal.Decimal(x.numerator), decimal.Decimal(x.denominator)
    e_lo = lo_ctx.exp(lo_ctx.divide(num, den))
    e_hi = hi_ctx.exp(hi_ctx.divide(num, den))

    def ulp(d: decimal.Decimal) -> Fraction:
        return Fraction(10) ** (d.adjusted() - prec + 1)

    scale = 1 << bits
    lo = Fraction(e_lo) - ulp(e_lo)
    hi = Fraction(e_hi) + ulp(e_hi)
    return Fraction(math.floor(lo * scale), scale), Fraction(math.ceil(hi * scale), scale)


def _as_delta(delta: RealLike) -> Fraction:
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0 < delta < 1:
        raise ValueError(f"delta must be a number in (0, 1), got {delta!r}")
    return Fraction(delta)


def _as_k(k: int) -> int:
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"max_groups_per_unit must be an integer >= 1, got {k!r}")
    return int(k)


def _as_n(n: int) -> int:
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"n (distinct units of a key) must be an integer >= 0, got {n!r}")
    return int(n)


def _bernoulli(num: int, den: int, source: RandomSource) -> bool:
    """Exact Bernoulli(p), p = num/den in [0, 1]: U = 0.b1b2... read 64 bits at a time is compared
    with p until [u, u + 2^-bits) lies on one side of p (1 round but with probability ~2^-63)."""
    u, bits = 0, 0
    while True:
        u = (u << 64) | source.getrandbits(64)
        bits += 64
        target = num << bits  # p · 2^bits · den
        if (u + 1) * den <= target:
            return True
        if u * den >= target:
            return False


class _Selection:
    """Shared parameters, privacy map and repr: (ε, δ) for the whole release, k groups per unit."""

    def __init__(self, epsilon: RealLike, delta: RealLike, k: int = 1) -> None:
        self.eps, self.delta_exact, self.k = as_epsilon(epsilon), _as_delta(delta), _as_k(k)

    @property
    def epsilon(self) -> float:
        return float(self.eps)

    @property
    def delta(self) -> float:
        return float(self.delta_exact)

    def privacy_map(self, d_in: int = 1) -> tuple[float, float]:
        """(ε, δ) for d_in added/removed units: d ε and d e^((d-1)ε) δ (group privacy)."""
        d = _as_n(d_in)
        return d * self.epsilon, d * math.exp((d - 1) * self.epsilon) * self.delta if d else 0.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon!r}, delta={self.delta!r}, k={self.k})"


class TruncatedGeometricSelection(_Selection):
    """Optimal (ε, δ)-DP selection of a key from its count of distinct units (module doc).

    ``k`` = max_groups_per_unit: each key is then selected at (ε/k, δ/k)."""

    name = "partition_selection_truncated_geometric"

    def __init__(self, epsilon: RealLike, delta: RealLike, k: int = 1) -> None:
        super().__init__(epsilon, delta, k)
        e, d = self.eps / self.k, self.delta_exact / self.k
        r, _ = exp_bounds(e, BASE_BITS)
        if r <= 1:
            raise ValueError(f"epsilon/k = {float(e)!r} is too small (e^(ε/k) rounds to 1)")
        self.base, self.step = r, d  # x and δ of the per-key recursion
        bound = (r + 2 * d - 1) / ((r + 1) * d)
        m = max(0, math.floor(math.log(bound) / math.log1p(float(r - 1))))
        while m > 0 and r**m > bound:
            m -= 1
        while r ** (m + 1) <= bound:
            m += 1
        self.n_star = m + 1
        self.pi_star = d * (r**self.n_star - 1) / (r - 1)
        self.c = d / (r - 1)
        gap = (1 - self.pi_star + self.c) / self.c  # need r^(n1 - n*) >= gap
        j = max(1, math.ceil(math.log(gap) / math.log1p(float(r - 1))) - 1)
        while j > 1 and r ** (j - 1) >= gap:
            j -= 1
        while r**j < gap:
            j += 1
        self.n_one = self.n_star + j

    def ratio(self, n: int) -> tuple[int, int]:
        """π(n) = num/den as integers, not reduced (no gcd: that dominates at large n). With
        r = a/2^P, δ = δn/δd: growth num/den = δn (a^n - 2^(Pn)) / (δd 2^(P(n-1)) (a - 2^P));
        decay π = 1 + c - K 2^(Pj)/a^j, j = n - n*, K = 1 - π(n*) + c."""
        n = _as_n(n)
        if n == 0:
            return 0, 1
        if n >= self.n_one:
            return 1, 1
        a, P = self.base.numerator, self.base.denominator.bit_length() - 1
        dn, dd = self.step.numerator, self.step.denominator
        if n <= self.n_star:
            return dn * (a**n - (1 << (P * n))), dd * (a - (1 << P)) << (P * (n - 1))
        j = n - self.n_star
        big_k, one_c = 1 - self.pi_star + self.c, 1 + self.c
        aj = a**j
        num = one_c.numerator * big_k.denominator * aj - (big_k.numerator * one_c.denominator << (P * j))
        return num, one_c.denominator * big_k.denominator * aj

    def keep_probability(self, n: int) -> Fraction:
        """π(n), exactly (module doc: growth up to n*, decay of 1 - π up to n1, then 1)."""
        return Fraction(*self.ratio(n))

    def select(self, n: int, source: RandomSource | None = None) -> bool:
        """Keep the key? Exact Bernoulli(π(n)); n = 0 and n >= n1 draw nothing."""
        num, den = self.ratio(n)
        if num == 0 or num == den:
            return num != 0
        return _bernoulli(num, den, source if source is not None else default_source())

    def describe(self) -> str:
        """One line for the NOTICE."""
        kk = f", {self.k} groups per unit" if self.k > 1 else ""
        return f"partition selection: truncated geometric, ε={self.epsilon:g}, δ={self.delta:g}{kk}"


class GeometricThresholdSelection(_Selection):
    """Noisy distinct-unit count n + DLap(k/ε) kept iff >= T (module doc)."""

    name = "partition_selection_geometric_threshold"

    def __init__(self, epsilon: RealLike, delta: RealLike, k: int = 1) -> None:
        super().__init__(epsilon, delta, k)
        self.scale = Fraction(self.k) / self.eps
        lo, hi = exp_bounds(self.eps / self.k, ALPHA_BITS)
        self.alpha_lo, self.alpha_hi = 1 / hi, 1 / lo  # α = e^-(ε/k) lies in [alpha_lo, alpha_hi]
        self.threshold = self._threshold()

    def tail_bounds(self, m: int) -> tuple[Fraction, Fraction]:
        """[lo, hi] around P(Z >= m): α^m/(1+α) for m >= 0 (increasing in α when m >= 1,
        decreasing when m = 0), 1 - P(Z >= 1 - m) for m < 0."""
        a_lo, a_hi = self.alpha_lo, self.alpha_hi
        if m < 0:
            lo, hi = self.tail_bounds(1 - m)
            return 1 - hi, 1 - lo
        if m == 0:
            return 1 / (1 + a_hi), 1 / (1 + a_lo)
        return a_lo**m / (1 + a_lo), a_hi**m / (1 + a_hi)

    def _threshold(self) -> int:
        """Least T >= 1 whose upper bound of P(1 + Z >= T) is <= δ/k."""
        target = self.delta_exact / self.k
        a = float(self.alpha_hi)
        m = max(0, math.ceil(math.log(float(target) * (1 + a)) / math.log(a)) - 1)
        while m > 0 and self.tail_bounds(m - 1)[1] <= target:
            m -= 1
        while self.tail_bounds(m)[1] > target:
            m += 1
        return m + 1

    def keep_probability_bounds(self, n: int) -> tuple[Fraction, Fraction]:
        """Rigorous [lo, hi] around P(keep | n) = P(n + Z >= T); (0, 0) for n = 0."""
        n = _as_n(n)
        return (Fraction(0), Fraction(0)) if n == 0 else self.tail_bounds(self.threshold - n)

    def keep_probability(self, n: int) -> float:
        lo, hi = self.keep_probability_bounds(n)
        return float((lo + hi) / 2)

    def release(self, n: int, source: RandomSource | None = None) -> tuple[bool, int]:
        """(kept, noisy count); n = 0 is (False, 0) with no draw. Release ``noisy`` only if kept."""
        n = _as_n(n)
        if n == 0:
            return False, 0
        noisy = n + discrete_laplace(self.scale, source if source is not None else default_source())
        return noisy >= self.threshold, noisy

    def describe(self) -> str:
        """One line for the NOTICE."""
        return (
            f"partition selection: geometric threshold T={self.threshold}, scale "
            f"{float(self.scale):g}, ε={self.epsilon:g}, δ={self.delta:g}, {self.k} groups per unit"
        )


@single_flight(maxsize=64)
def _truncated(eps: Fraction, delta: Fraction, k: int) -> TruncatedGeometricSelection:
    return TruncatedGeometricSelection(eps, delta, k)


@single_flight(maxsize=64)
def _thresholding(eps: Fraction, delta: Fraction, k: int) -> GeometricThresholdSelection:
    return GeometricThresholdSelection(eps, delta, k)


def keep_probability(n: int, eps: RealLike, delta: RealLike) -> Fraction:
    """π(n) of the truncated geometric selection (k = 1), exactly."""
    return _truncated(as_epsilon(eps), _as_delta(delta), 1).keep_probability(n)


def select(n: int, eps: RealLike, delta: RealLike, rng: RandomSource | None = None) -> bool:
    """Release a key with n distinct units (k = 1)? True with probability π(n), exactly."""
    return _truncated(as_epsilon(eps), _as_delta(delta), 1).select(n, rng)


def threshold(eps: RealLike, delta: RealLike, k: int = 1) -> int:
    """T of the geometric thresholding: least T with P(1 + Z >= T) <= δ/k, Z ~ DLap(k/ε)."""
    return _thresholding(as_epsilon(eps), _as_delta(delta), _as_k(k)).threshold


def release(
    n: int, eps: RealLike, delta: RealLike, k: int = 1, rng: RandomSource | None = None
) -> tuple[bool, int]:
    """(kept, noisy distinct-unit count) of the geometric thresholding (module doc)."""
    return _thresholding(as_epsilon(eps), _as_delta(delta), _as_k(k)).release(n, rng)
