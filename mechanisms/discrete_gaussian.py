"""The discrete Gaussian N_Z(0, σ²) and its zCDP measurements (Canonne, Kamath, Steinke 2020,
"The Discrete Gaussian for Differential Privacy", NeurIPS; CKS below).

P[Z = z] = exp(-z²/(2σ²)) / C(σ²) on the integers, C(σ²) = sum_y exp(-y²/(2σ²)).

Privacy (CKS Thm. 4): adding N_Z(0, σ²) to an integer vector query whose L2 sensitivity is Δ₂
is ρ-zCDP with ρ = Δ₂²/(2σ²) (Bun & Steinke 2016 Def. 1.1; the same ρ as the continuous
Gaussian). zCDP composes by adding ρ and converts to (ε, δ)-DP (CKS Cor. 13; Bun & Steinke 2016
Prop. 1.3, ε = ρ + 2 sqrt(ρ log(1/δ))); that conversion belongs to the accountant, not here.
Every privacy map in this module returns ρ, never ε: its unit is :data:`UNIT`.

Sampling is exact and float-free (CKS Algorithms 1-3), from the CSPRNG through the exact
integer samplers of :mod:`mechanisms.samplers` and :mod:`mechanisms.batch`: with
t = floor(σ) + 1, draw Y from the discrete Laplace of scale t (P[Y = y] proportional to
exp(-|y|/t)), accept it with probability exp(-(|Y| - σ²/t)²/(2σ²)) (an exact
Bernoulli(exp(-γ)) of rational γ, CKS Alg. 1), else draw again (CKS Alg. 3). The accepted Y
has exactly the law N_Z(0, σ²): exp(-|y|/t) exp(-(|y| - σ²/t)²/(2σ²)) =
exp(-y²/(2σ²)) exp(-σ²/(2t²)), proportional to the target. With σ² = p/q the acceptance is
exp(-a/b), a = (|y| q t - p)², b = 2 p q t², in integers.

The pmf, cdf, tails, variance and half-widths are analysis (floating point, never used to
sample), with the normalising constant by Poisson summation (C(σ²) = sqrt(2π) σ
sum_k exp(-2π²σ²k²) over all integers k) where σ² >= 1 and by direct summation below.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache, partial
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .batch import discrete_laplace_array, fill_by_rejection, fits_int64, words32
from .exact_real import LazyUniform, exp_neg_interval
from .measurements import BatchRelease, Release, int_column, sum_grid
from .rng import RandomSource, default_source
from .samplers import bernoulli_exp, discrete_laplace
from .scalars import RationalLike, RealLike

__all__ = [
    "UNIT",
    "DiscreteGaussian",
    "discrete_gaussian_array",
    "fits_array",
    "sigma2_for",
    "rho_of",
    "dgauss_pmf",
    "dgauss_cdf",
    "dgauss_tail",
    "dgauss_variance",
    "dgauss_half_width",
    "GaussianCount",
    "GaussianSum",
]

UNIT = "rho"  # the privacy maps of this module return ρ of ρ-zCDP (Bun & Steinke 2016)

_SIGMA2_DEN = 1 << 32  # sigma2_for rounds σ² UP to this grid when its exact denominator is larger
_INT_ROOM = 1 << 62


# -- parameters ------------------------------------------------------------------------------
def _as_rational(x: RationalLike, what: str) -> Fraction:
    """An int or Fraction, > 0, exactly (floats refused: a float's noise parameter is inexact)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Rational):
        raise TypeError(f"{what} must be an int or Fraction, got {type(x).__name__}")
    f = Fraction(x)
    if f <= 0:
        raise ValueError(f"{what} must be > 0, got {f}")
    return f


def _as_rho(rho: RealLike) -> Fraction:
    """ρ > 0 exactly (a float is taken as its exact binary rational)."""
    if isinstance(rho, bool) or not isinstance(rho, numbers.Real):
        raise TypeError(f"rho must be a real number, got {type(rho).__name__}")
    if not (math.isfinite(rho) and rho > 0):
        raise ValueError(f"rho must be finite and > 0, got {rho!r}")
    return Fraction(rho)


def _l2_squared(l2: RationalLike | None, l2_squared: RationalLike | None) -> Fraction:
    """Δ₂² from exactly one of Δ₂ (rational) or Δ₂² (rational: √G·R is irrational, G·R² is not)."""
    if (l2 is None) == (l2_squared is None):
        raise TypeError("give exactly one of l2 and l2_squared")
    if l2 is not None:
        return _as_rational(l2, "l2") ** 2
    assert l2_squared is not None
    return _as_rational(l2_squared, "l2_squared")


def sigma2_for(
    rho: RealLike, l2: RationalLike | None = None, *, l2_squared: RationalLike | None = None
) -> Fraction:
    """σ² = Δ₂²/(2ρ), the least variance parameter at which the discrete Gaussian is ρ-zCDP for
    L2 sensitivity Δ₂ (CKS Thm. 4), as a Fraction. Exact when its denominator is at most 2^32;
    otherwise rounded UP to a multiple of 2^-32 (more noise: ``rho_of`` of the result is at most
    ``rho``, and below it by a relative 2^-32 σ^-2 at most), which keeps the sampler's integers small."""
    s2 = _l2_squared(l2, l2_squared) / (2 * _as_rho(rho))
    if s2.denominator > _SIGMA2_DEN:
        s2 = Fraction(-((-s2.numerator * _SIGMA2_DEN) // s2.denominator), _SIGMA2_DEN)
    return s2


def rho_of(
    sigma2: RationalLike, l2: RationalLike | None = None, *, l2_squared: RationalLike | None = None
) -> Fraction:
    """ρ = Δ₂²/(2σ²): the zCDP cost of one discrete Gaussian release of variance parameter σ²
    on a query of L2 sensitivity Δ₂ (CKS Thm. 4), exactly."""
    return _l2_squared(l2, l2_squared) / (2 * _as_rational(sigma2, "sigma2"))


def _t_of(sigma2: Fraction) -> int:
    """t = floor(σ) + 1 (CKS Alg. 3): floor(sqrt(x)) = isqrt(floor(x)) for real x >= 0."""
    return math.isqrt(sigma2.numerator // sigma2.denominator) + 1


# -- exact sampling ----------------------------------------------------------------------------
class DiscreteGaussian:
    """N_Z(0, σ²) for rational σ² > 0, sampled exactly (CKS Alg. 3; module doc)."""

    __slots__ = ("sigma2", "t", "_p", "_q")

    def __init__(self, sigma2: RationalLike) -> None:
        self.sigma2 = _as_rational(sigma2, "sigma2")
        self.t = _t_of(self.sigma2)
        self._p, self._q = self.sigma2.numerator, self.sigma2.denominator

    def sample(self, source: RandomSource | None = None) -> int:
        """One exact draw (a Python int); ``source=None`` means the CSPRNG."""
        src = source if source is not None else default_source()
        p, q, t = self._p, self._q, self.t
        b = 2 * p * q * t * t
        while True:
            y = discrete_laplace(t, src)
            if bernoulli_exp(Fraction((abs(y) * q * t - p) ** 2, b), src):
                return y

    def sample_array(self, size: int, source: RandomSource | None = None) -> NDArray[np.int64]:
        """``size`` exact draws at once (:func:`discrete_gaussian_array`)."""
        return discrete_gaussian_array(size, self.sigma2, source if source is not None else default_source())

    def __repr__(self) -> str:
        return f"DiscreteGaussian(sigma2={self.sigma2!r})"


def fits_array(sigma2: RationalLike) -> bool:
    """Whether :func:`discrete_gaussian_array` draws at ``sigma2`` into int64."""
    return fits_int64(_t_of(_as_rational(sigma2, "sigma2")))


_exp_interval = exp_neg_interval.__wrapped__  # uncached: these arguments are rarely repeated
_BUCKET_BITS = 8  # a bucket spans w = max(1, floor(σ) >> 8) values of |y|


class _Buckets:
    """Integer bounds on the acceptance A(s) = exp(-(s - σ²/t)²/(2σ²)) over buckets of
    s = |y|: bucket j holds s in [j w, j w + w - 1]. A falls as |s - σ²/t| grows, so over a
    bucket it lies between its values at the two ends (at most 1 where the bucket holds σ²/t):
    lo_j <= 2^32 min A and 2^32 max A <= hi_j. A's slope in s is at most e^(-1/2)/σ, so a bucket
    moves A by at most 0.61 w/σ <= 0.61 * 2^-8: a row's first 32 bits u decide it by the bucket
    (u < lo_j: U < A; u >= hi_j: U >= A) except with probability about 2^-8, and those rows
    are decided exactly on their own threshold. With w = 1 (σ < 2^9) a bucket is one value and
    its bounds are that value's interval. Bounds are computed once per bucket met and kept."""

    __slots__ = ("p", "q", "t", "b", "w", "known")

    def __init__(self, p: int, q: int, t: int) -> None:
        self.p, self.q, self.t = p, q, t
        self.b = 2 * p * q * t * t
        self.w = max(1, (t - 1) >> _BUCKET_BITS)
        self.known: dict[int, tuple[int, int]] = {}

    def _end(self, s: int) -> tuple[int, int]:
        return _exp_interval((s * self.q * self.t - self.p) ** 2, self.b, 32)

    def _bounds(self, j: int) -> tuple[int, int]:
        s0, s1 = j * self.w, j * self.w + self.w - 1
        c0, c1 = s0 * self.q * self.t - self.p, s1 * self.q * self.t - self.p  # sign of s - σ²/t
        if c0 >= 0:  # the bucket lies above σ²/t: A is largest at s0
            return self._end(s1)[0], self._end(s0)[1]
        if c1 <= 0:  # below σ²/t: largest at s1
            return self._end(s0)[0], self._end(s1)[1]
        return min(self._end(s0)[0], self._end(s1)[0]), 1 << 32  # holds σ²/t: A <= 1

    def bounds(self, absy: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(lo, hi) per row: the bounds of its bucket."""
        js, inv = np.unique(absy // self.w, return_inverse=True)
        known = self.known
        rows = []
        for j in js.tolist():
            got = known.get(j)
            if got is None:
                got = known[j] = self._bounds(j)
            rows.append(got)
        both = np.array(rows, dtype=np.int64).reshape(-1, 2)
        return both[inv.reshape(-1), 0], both[inv.reshape(-1), 1]


@lru_cache(maxsize=64)
def _buckets(p: int, q: int, t: int) -> _Buckets:
    return _Buckets(p, q, t)


def _accepted(absy: NDArray[np.int64], p: int, q: int, t: int, source: RandomSource) -> NDArray[np.bool_]:
    """Per row, an exact coin [U < exp(-a/b)], a = (|y| q t - p)², b = 2 p q t² (module doc): U's
    first 32 bits u against its bucket's integer bounds (:class:`_Buckets`), the rows between
    them on their own threshold by :class:`~mechanisms.exact_real.LazyUniform` (more bits of
    the same U)."""
    lo, hi = _buckets(p, q, t).bounds(absy)
    u = words32(absy.size, source)
    out: NDArray[np.bool_] = u < lo
    b = 2 * p * q * t * t
    for i in np.flatnonzero((u >= lo) & (u < hi)):
        a = (int(absy[i]) * q * t - p) ** 2
        out[i] = LazyUniform(int(u[i]), 32, source).below(partial(_exp_interval, a, b))
    return out


def discrete_gaussian_array(size: int, sigma2: RationalLike, source: RandomSource) -> NDArray[np.int64]:
    """``size`` independent exact draws of N_Z(0, σ²) (int64), the law of
    :meth:`DiscreteGaussian.sample` row by row: discrete Laplace proposals of scale t drawn as
    one array (:func:`~mechanisms.batch.discrete_laplace_array`), each accepted by an exact
    Bernoulli(exp(-γ)) coin, the first ``size`` accepted kept
    (:func:`~mechanisms.batch.fill_by_rejection`: accepted terms of an iid proposal sequence are
    iid from the accepted law). A proposal is accepted with probability
    C(σ²) exp(-σ²/(2t²)) tanh(1/(2t)), above 2/5 at every σ² (about 0.76 at large σ; the tests
    check it on a grid), which only sizes the batches."""
    s2 = _as_rational(sigma2, "sigma2")
    size = operator.index(size)
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    p, q, t = s2.numerator, s2.denominator, _t_of(s2)
    if not fits_int64(t):
        raise ValueError(
            f"sigma2 {s2} is beyond the batch sampler's int64 range (use DiscreteGaussian.sample)"
        )

    def propose(k: int) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
        y = discrete_laplace_array(k, t, source)
        return y, _accepted(np.abs(y), p, q, t, source)

    return fill_by_rejection(size, propose, Fraction(2, 5))


# -- analysis (floating point; never used to sample) ---------------------------------------------
def _s2(sigma2: RealLike) -> float:
    s2 = float(sigma2)
    if not (s2 > 0 and math.isfinite(s2)):
        raise ValueError(f"sigma2 must be finite and > 0, got {sigma2!r}")
    return s2


_POISSON_MIN = 1.0  # σ² at and above which the Poisson-summation forms are used (terms e^-2π²σ²k²)
_DIRECT_SIGMA = float(1 << 12)  # tails summed term by term up to this σ, by Euler-Maclaurin above
_TAIL_SIGMAS = 40  # exp(-(40σ)²/(2σ²)) = e^-800 underflows: the terms beyond are 0 in float


def _normaliser(s2: float) -> float:
    """C(σ²) = sum over the integers of exp(-y²/(2σ²))."""
    if s2 >= _POISSON_MIN:
        a = 2 * math.pi**2 * s2
        return math.sqrt(2 * math.pi * s2) * (1 + 2 * sum(math.exp(-a * k * k) for k in range(1, 4)))
    y = np.arange(1, int(_TAIL_SIGMAS * math.sqrt(s2)) + 2, dtype=np.float64)
    return float(1 + 2 * np.exp(-(y * y) / (2 * s2)).sum())


def _upper_sum(a: int, s2: float) -> float:
    """S(a) = sum over y >= a of exp(-y²/(2σ²)), integer a >= 0: term by term while σ <= 2^12;
    above, Euler-Maclaurin, S(a) = int_a^inf f + f(a)/2 - f'(a)/12 + R with f' = -x f/σ² and
    |R| <= max over [a, inf) of |f'''|/720, about f(a) (1 + (a/σ)³)/(720 σ³); against
    S(a) >= f(a) σ²/(a + σ) that is below 1e-11 relative for σ > 2^12 and a <= 40σ (further
    out f underflows to 0)."""
    sigma = math.sqrt(s2)
    if sigma <= _DIRECT_SIGMA:
        y = np.arange(a, a + int(_TAIL_SIGMAS * sigma) + 2, dtype=np.float64)
        return float(np.exp(-(y * y) / (2 * s2)).sum())
    fa = math.exp(-a * a / (2 * s2))
    integral = sigma * math.sqrt(math.pi / 2) * math.erfc(a / (sigma * math.sqrt(2)))
    return integral + fa / 2 + (a / s2) * fa / 12


def dgauss_pmf(z: ArrayLike, sigma2: RealLike) -> NDArray[np.float64]:
    """P[Z = z] (vectorised over integer ``z``)."""
    s2 = _s2(sigma2)
    zf = np.asarray(z, dtype=np.float64)
    out: NDArray[np.float64] = np.exp(-(zf * zf) / (2 * s2)) / _normaliser(s2)
    return out


def dgauss_cdf(z: int, sigma2: RealLike) -> float:
    """P[Z <= z] for integer ``z``: S(-z)/C for z < 0, 1 - S(z + 1)/C for z >= 0 (symmetry)."""
    s2 = _s2(sigma2)
    z = math.floor(z)
    c = _normaliser(s2)
    return _upper_sum(-z, s2) / c if z < 0 else 1 - _upper_sum(z + 1, s2) / c


def dgauss_tail(k: int, sigma2: RealLike) -> float:
    """P[|Z| > k] = 2 S(k + 1)/C for integer k >= 0 (1 for k < 0)."""
    s2 = _s2(sigma2)
    if k < 0:
        return 1.0
    return min(1.0, 2 * _upper_sum(math.floor(k) + 1, s2) / _normaliser(s2))


def dgauss_variance(sigma2: RealLike) -> float:
    """Var[Z] (= E[Z²], the law is symmetric); below σ² (CKS Prop. 19). Poisson summation for
    σ² >= 1: Var = σ² sum_k (1 - 4π²σ²k²) e^(-2π²σ²k²) / sum_k e^(-2π²σ²k²); term by term below."""
    s2 = _s2(sigma2)
    if s2 >= _POISSON_MIN:
        a = 2 * math.pi**2 * s2
        num = 1 + 2 * sum((1 - 4 * math.pi**2 * s2 * k * k) * math.exp(-a * k * k) for k in range(1, 4))
        den = 1 + 2 * sum(math.exp(-a * k * k) for k in range(1, 4))
        return s2 * num / den
    y = np.arange(1, int(_TAIL_SIGMAS * math.sqrt(s2)) + 2, dtype=np.float64)
    return float(2 * (y * y * np.exp(-(y * y) / (2 * s2))).sum() / _normaliser(s2))


def dgauss_half_width(sigma2: RealLike, level: float = 0.95) -> int:
    """The smallest integer h >= 0 with P[|Z| <= h] >= ``level``: started at the continuous
    Gaussian's quantile σ Φ^-1((1 + level)/2) and moved by one against :func:`dgauss_tail`
    until it is the least such h."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    s2 = _s2(sigma2)
    alpha = 1.0 - level
    h = max(0, math.ceil(math.sqrt(s2) * NormalDist().inv_cdf((1 + level) / 2)) - 1)
    while h > 0 and dgauss_tail(h - 1, s2) <= alpha:
        h -= 1
    while dgauss_tail(h, s2) > alpha:
        h += 1
    return h


# -- measurements -------------------------------------------------------------------------------
Column = Sequence[Any] | NDArray[Any]


class _GaussianMeasurement:
    """An integer query on a grid of step ``grid``: value/grid + N_Z(0, σ²) grid units, ρ-zCDP
    with ρ = Δ₂²/(2σ²) (CKS Thm. 4), Δ₂² = ``contributions_sq`` x (one row's bound in grid
    units)². ``contributions_sq`` is the squared L2 norm of one privacy unit's largest
    contribution vector counted in rows: 1 for one row; ``min(G, cells) R²`` for a unit bounded to
    R rows in each of at most G groups, of which ``cells`` are released (per-cell mode:
    Δ₂ = sqrt(min(G, cells)) R); ``R²`` in total mode (one released cell).

    The measurement protocol of :class:`mechanisms.measurements.Measurement` (draw/apply,
    draw_many/apply_many, half_width), but its privacy map is in ρ: ``privacy_map_exact(d_in)``
    = d_in² Δ₂²/(2σ²) (d_in privacy units: the sensitivity scales by d_in; Bun & Steinke 2016
    Prop. 1.9), ``rho`` at d_in = 1, ``unit`` = "rho". A Release's ``epsilon`` field carries
    ρ (its ``mechanism`` names the discrete Gaussian)."""

    name = "discrete_gaussian"
    unit = UNIT
    grid: float = 1

    def _init_noise(self, rho: RealLike, row_bound: int, contributions_sq: RationalLike) -> None:
        self.row_bound = row_bound
        self.contributions_sq = _as_rational(contributions_sq, "contributions_sq")
        self.l2_squared = self.contributions_sq * row_bound * row_bound
        self.sigma2 = sigma2_for(rho, l2_squared=self.l2_squared)
        self.noise = DiscreteGaussian(self.sigma2)
        self.rho = rho_of(self.sigma2, l2_squared=self.l2_squared)
        self._hw95 = dgauss_half_width(self.sigma2, 0.95)

    def privacy_map_exact(self, d_in: int) -> Fraction:
        """ρ (exact) for inputs at distance ``d_in`` privacy units."""
        d_in = operator.index(d_in)
        if d_in < 0:
            raise ValueError(f"d_in must be >= 0, got {d_in}")
        return d_in * d_in * self.rho

    def privacy_map(self, d_in: int) -> float:
        return float(self.privacy_map_exact(d_in))

    def draw(self, source: RandomSource | None = None) -> int:
        """The noise of one release (grid units), drawn before the data is known."""
        return self.noise.sample(source)

    def draw_many(self, n: int, source: RandomSource | None = None) -> NDArray[np.int64] | None:
        """``n`` draws (int64), the law of ``n`` :meth:`draw` calls; None beyond int64."""
        if not fits_array(self.sigma2):
            return None
        return discrete_gaussian_array(n, self.sigma2, source if source is not None else default_source())

    def release(self, true_value: Any, source: RandomSource | None = None) -> Release:
        return self.apply(true_value, self.draw(source))

    def apply(self, true_value: Any, noise: int | None, source: RandomSource | None = None) -> Release:
        raise NotImplementedError

    def half_width(self, level: float = 0.95) -> float:
        k = self._hw95 if level == 0.95 else dgauss_half_width(self.sigma2, level)
        return k * self.grid

    @property
    def noise_variance(self) -> float:
        """Variance of the added noise in output units (below σ² grid², CKS Prop. 19)."""
        return dgauss_variance(self.sigma2) * float(self.grid) ** 2

    @property
    def output_scale(self) -> float:
        """σ in output units."""
        return math.sqrt(float(self.sigma2)) * self.grid

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rho={self.rho}, sigma2={self.sigma2})"


class GaussianCount(_GaussianMeasurement):
    """COUNT + N_Z(0, σ²), σ² = contributions_sq/(2ρ): one row moves a count by 1. Output: int."""

    name = "discrete_gaussian_count"

    def __init__(self, rho: RealLike, contributions_sq: RationalLike = 1) -> None:
        self._init_noise(rho, 1, contributions_sq)

    def apply(self, true_value: Any, noise: int | None, source: RandomSource | None = None) -> Release:
        if noise is None:
            return self.release(true_value, source)
        value = operator.index(true_value) + noise
        return Release(value, float(self.rho), float(self._hw95), self.name, self.output_scale)

    def apply_many(self, values: Column, noises: Any) -> BatchRelease:
        v = int_column(values)
        if v is None or int(np.abs(noises).max(initial=0)) >= _INT_ROOM:
            vals = values.tolist() if isinstance(values, np.ndarray) else values
            return BatchRelease(
                [operator.index(x) + int(z) for x, z in zip(vals, noises)], float(self._hw95), self.name
            )
        return BatchRelease(v + noises, float(self._hw95), self.name)


class GaussianSum(_GaussianMeasurement):
    """SUM of values clamped to [lower, upper] + discrete Gaussian noise on a fixed grid, as
    :class:`~mechanisms.measurements.LaplaceSum`: one row moves the sum by at most
    D = max(|lower|, |upper|). ``integer=True``: grid 1, Δ₂² = contributions_sq D². Otherwise
    the grid g = 2^k with D/g in [2^20, 2^21), the released value g (round(S/g) + Z), one row's
    bound D_g = floor(D/g) + 1 grid units (rounding moves a sum by at most one more unit)."""

    name = "discrete_gaussian_sum"

    def __init__(
        self,
        rho: RealLike,
        lower: RealLike,
        upper: RealLike,
        integer: bool = False,
        contributions_sq: RationalLike = 1,
    ) -> None:
        self.integer = bool(integer)
        self.lower, self.upper, self.delta, self.grid, units = sum_grid(lower, upper, self.integer)
        self._init_noise(rho, units, contributions_sq)

    def apply(self, true_value: Any, noise: int | None, source: RandomSource | None = None) -> Release:
        if noise is None:
            return self.release(true_value, source)
        value: float
        if self.integer:
            value = operator.index(true_value) + noise
        else:
            s = float(true_value)
            if not math.isfinite(s):
                raise ValueError(f"sum must be finite, got {s}")
            value = float(round(s / self.grid) + noise) * self.grid
        return Release(value, float(self.rho), self.half_width(), self.name, self.output_scale)

    def apply_many(self, values: Column, noises: Any) -> BatchRelease:
        """As :meth:`apply` per cell: the int path adds in int64 (exact below 2^62); the float
        path is round(S/g) + Z times g, g = 2^k: S/g is exact, ``np.rint`` rounds half to even
        as ``round`` does, and int64 -> float64 rounds to nearest even as ``float(int)`` does
        (the same arithmetic as :meth:`LaplaceSum.apply_many
        <mechanisms.measurements.LaplaceSum.apply_many>`); anything else cell by cell."""
        hw = float(self.half_width())
        big = int(np.abs(noises).max(initial=0)) >= _INT_ROOM
        if self.integer:
            v = int_column(values)
            if v is not None and not big:
                return BatchRelease(v + noises, hw, self.name)
            return BatchRelease(self._cells(values, noises), hw, self.name)
        arr = np.asarray(values) if len(values) else np.zeros(0)
        ok = not big and arr.ndim == 1
        ok = ok and (
            arr.dtype.kind == "f"
            or (arr.dtype.kind == "i" and bool(arr.size) and int(np.abs(arr).max()) < 1 << 53)
        )
        if ok:
            q = arr.astype(np.float64) / self.grid
            ok = bool(np.isfinite(q).all()) and (not q.size or float(np.abs(q).max()) < 2.0**61)
        if not ok:
            return BatchRelease(self._cells(values, noises), hw, self.name)
        out = (np.rint(q).astype(np.int64) + noises).astype(np.float64) * self.grid
        return BatchRelease(out, hw, self.name)

    def _cells(self, values: Column, noises: Any) -> list[Any]:
        vals = values.tolist() if isinstance(values, np.ndarray) else values
        return [self.apply(x, int(z)).value for x, z in zip(vals, noises)]
