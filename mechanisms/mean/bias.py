"""The bias of an AVG near its bounds: the value as returned (clamped to [lower, upper]) vs
unclamped (add-remove mean spec sections 3.3, 3.5, 4.1).

Algorithm 3 returns l' + w'·Clip(ŝ1/n̂, [0, 1]). The clamp never increases the error (the
truth is in the range; Clip is a projection, spec App. B), but it is not unbiased: a true AVG
at distance d from the lower bound, with first-order error e (the delta method, Lemma 1:
e ≈ w'(Z1 − αK)/n̂), is returned as μ + max(e, −d), whose mean is μ + E[(−e − d)⁺]. With h the
95% half-width at that AVG (h = w'·q(α)/n̂, q the 95% quantile of |Z1 − αK|) the bias is

    β(t)·h,   β(t) = E[(X − t)⁺],   X = e/h,   t = d/h,

a function of the normalised noise X only: it does not depend on n̂, the bounds or the data, only
on the mechanism and ε (X is symmetric; at a bound α = 0 for the hourglass X = Z1/q(0), Z1 the
staircase with γ*, spec 2.3). Near the upper bound the same holds, mirrored. So one number pair
per (mechanism, ε) says where the clamp matters: β(0)·h is the largest bias (the true AVG at a
bound), and t₁₀ with β(t₁₀) = 1/10 is the distance, in half-widths, inside which the bias
exceeds a tenth of the half-width (:func:`clamp_bias`).

The unclamped value l' + w'·ŝ1/n̂ (``GridMean(clamp=False)``, served when ``consistent = false``)
is unbiased to first order; its second-order bias (the ratio's curvature, E over the noise of
the expansion of (s1 + Z1)/(n + K)) is w'·(α·Var K − Cov(Z1, K))/n², for the hourglass at γ*
w'·σ²(ε)·(2α − 1)/n² (Cov(Z1, Z2) = 0, so Cov(Z1, K) = σ² and Var K = 2σ²; spec 2.4):
:func:`raw_bias_bound` bounds it by w'·σ²/n². A group whose n̂ ≤ 0 is answered with the
midpoint (policy ``midpoint_le0``, spec 3.5) either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import singledispatch

import numpy as np
from scipy.optimize import brentq

from ..once import single_flight
from .common import GridMean
from .constants import sigma2, staircase_a
from .quantiles import hourglass_abs_quantile, laplace_combo_abs_quantile
from .shifted import ShiftedLaplaceMean
from .transformed import HourglassMean, LaplaceTransformedMean

__all__ = [
    "ClampBias",
    "clamp_bias",
    "raw_bias_bound",
    "staircase_abs_tail",
    "staircase_excess",
    "laplace_combo_excess",
]

SHARE = 0.1  # the clamp's bias is stated where it exceeds this share of the half-width


@dataclass(frozen=True)
class ClampBias:
    """In units of the 95% half-width h at a bound: ``at_bound`` = β(0) (the largest bias, the
    true AVG at a bound), ``within`` = t₁₀ (the bias exceeds h/10 for a true AVG closer than
    t₁₀·h to a bound; None when it never does)."""

    at_bound: float
    within: float | None


def staircase_abs_tail(x: float, eps: float, gamma: float) -> float:
    """P(|Z| > x) for the staircase (Δ = 1, spec 2.3): |Z| has density 2a·b^k on [k, k + γ)
    and 2a·b^(k+1) on [k + γ, k + 1), a = a(γ), b = e^-ε; the steps from k + 1 on hold
    2a(γ + (1 − γ)b)·b^(k+1)/(1 − b)."""
    if x <= 0:
        return 1.0
    b, omb = math.exp(-eps), -math.expm1(-eps)
    a2 = 2 * staircase_a(eps, gamma)
    k = math.floor(x)
    f = x - k
    beyond = a2 * (gamma + (1 - gamma) * b) * b ** (k + 1) / omb
    if f < gamma:
        return beyond + a2 * b**k * (gamma - f) + a2 * (1 - gamma) * b ** (k + 1)
    return beyond + a2 * b ** (k + 1) * (1 - f)


def staircase_excess(s: float, eps: float, gamma: float) -> float:
    """E[(|Z| − s)⁺] = ∫_s^∞ P(|Z| > x) dx for the staircase, exactly: the tail is linear
    between the points k and k + γ, so the trapezoid rule on them is exact; the steps are
    summed until their mass is below 1e-17 (b^k ≤ 1e-17)."""
    s = max(s, 0.0)
    last = math.floor(s) + math.ceil(40.0 / eps) + 2
    ks = np.arange(math.floor(s), last + 1, dtype=np.float64)
    pts = np.concatenate(([s], ks, ks + gamma))
    pts = np.unique(pts[pts >= s])
    tail = np.array([staircase_abs_tail(float(x), eps, gamma) for x in pts])
    return float(np.sum((tail[1:] + tail[:-1]) * np.diff(pts)) / 2)


def laplace_combo_excess(s: float, a: float, c: float) -> float:
    """E[(|aX + cY| − s)⁺] = ∫_s^∞ P(|aX + cY| > h) dh, X, Y iid Lap(1), a ≥ c ≥ 0, from
    :func:`~.quantiles.laplace_combo_tail`'s closed forms."""
    a, c = max(abs(a), abs(c)), min(abs(a), abs(c))
    if c < 1e-6 * a:
        return a * math.exp(-s / a)
    if a - c < 1e-6 * a:
        return math.exp(-s / a) * (1.5 * a + 0.5 * s)
    return (a**3 * math.exp(-s / a) - c**3 * math.exp(-s / c)) / (a * a - c * c)


def _from_excess(excess: Callable[[float], float], q: float) -> ClampBias:
    """β(t) = E[(X − t)⁺] = ½·E[(|Z| − t q)⁺]/q for X = Z/q symmetric; t₁₀ by bisection
    (β falls from β(0) to 0)."""

    def beta(t: float) -> float:
        return 0.5 * excess(t * q) / q

    b0 = beta(0.0)
    if b0 <= SHARE:
        return ClampBias(b0, None)
    hi = 1.0
    while beta(hi) > SHARE:
        hi *= 2
    return ClampBias(b0, float(brentq(lambda t: beta(t) - SHARE, 0.0, hi, xtol=1e-6)))


@singledispatch
def clamp_bias(m: GridMean) -> ClampBias | None:
    """The clamp's bias law of ``m`` (module doc); None when not known for its mechanism."""
    return None


@clamp_bias.register
def _(m: HourglassMean) -> ClampBias:
    return _hourglass(m.noise.eps, m.noise.gamma)


@single_flight(maxsize=256)
def _hourglass(eps: float, gamma: float) -> ClampBias:
    """At a bound (α = 0) the error is w'·Z1/n̂, Z1 the staircase: its excess in closed form."""
    q = float(hourglass_abs_quantile(eps, gamma, [0.0], 0.95)[0])
    return _from_excess(lambda s: staircase_excess(s, eps, gamma), q)


@clamp_bias.register
def _(m: LaplaceTransformedMean) -> ClampBias:
    """At a bound the error is w'·Z1/n̂, Z1 ~ Lap(1/ε): β(t) = e^(−t ln 20)/(2 ln 20)."""
    return _laplace(1.0 / m.eps, 0.0)


@clamp_bias.register
def _(m: ShiftedLaplaceMean) -> ClampBias:
    """At a bound (μ − m = ∓w'/2) the error is (Z_s ± (w'/2)·Z_n)/n̂ with Z_s ~ Lap(w'/ε),
    Z_n ~ Lap(2/ε): in units of w', Lap(1/ε) + Lap(1/ε)."""
    return _laplace(1.0 / m.eps, 1.0 / m.eps)


@single_flight(maxsize=256)
def _laplace(a: float, c: float) -> ClampBias:
    q = laplace_combo_abs_quantile(a, c, 0.95)
    return _from_excess(lambda s: laplace_combo_excess(s, a, c), q)


def raw_bias_bound(m: HourglassMean, n: float) -> float:
    """A bound on the hourglass AVG's unclamped second-order bias at a group of n rows
    (module doc): w'·σ²(ε)/n²."""
    return m.w_t * sigma2(m.noise.eps) / n**2
