"""Multi-tier ladders: one chain answers every tier (paper Alg. 1, Thm 4.1; spec 2.3, 9, 10).

``make_ladder(family, epsilons, sensitivity).release(q, source)`` draws the
root q + eta(max eps) (the only data access) and derives each lower level as
previous + fresh residual. Every coalition's view is a post-processing of its
highest-eps member, so its loss is max eps (Def. 3.1/3.2): :meth:`Ladder.privacy_map`.

Values are RAW chain values; clamping/rounding is per-tier post-processing and
must never be fed back (pitfall 3). Family validity is checked at
configuration time (``make_ladder`` refuses DG/staircase).

SUM over a fixed-point grid (spec 10): clip to [lo, hi], scale by 10^s and
round to integers; ``sensitivity = c * max(|lo|, |hi|) * 10^s`` (add/remove,
``c`` rows per user) in grid units; chain with ``tsg`` (or ``msdlap`` when
eps > 1 and Delta is small); divide released values by 10^s. See :class:`SumGrid`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ..measurements import Release, as_epsilon
from ..rng import RandomSource, default_source
from ..scalars import RealLike
from .chain_array import chain_fits, tsg_chain_array
from .families import NoiseFamily
from .registry import get_family

__all__ = [
    "Ladder",
    "make_ladder",
    "nearest_lower_level",
    "VectorLadder",
    "SumGrid",
    "descending_levels",
    "tsg_bridge_closed",
]


def descending_levels(epsilons: Sequence[RealLike]) -> tuple[float, ...]:
    """Validated, de-duplicated levels in descending order (pitfall 9)."""
    eps = [float(as_epsilon(e)) for e in epsilons]
    if not eps:
        raise ValueError("need at least one tier epsilon")
    return tuple(sorted(set(eps), reverse=True))


def nearest_lower_level(levels: Iterable[float], eps: float) -> float | None:
    """App. H default for a tier not in the ladder: the largest level <= eps (None if none)."""
    below = [l for l in levels if l <= eps]
    return max(below) if below else None


def _uniform01(source: RandomSource) -> float:
    return (source.getrandbits(53) + 0.5) / 2.0**53


class Ladder:
    """A multi-tier chain for one query (spec 2.3). ``tiers``: input order, may repeat."""

    def __init__(self, family: NoiseFamily, epsilons: Sequence[RealLike]) -> None:
        self.family = family
        self.tiers = tuple(float(e) for e in epsilons)
        self.levels = descending_levels(epsilons)

    @property
    def epsilon(self) -> float:
        """Coalition loss of the whole ladder (= the root level)."""
        return self.levels[0]

    def privacy_map(self, d_in: int = 1, released: Sequence[RealLike] | None = None) -> float:
        """Coalition loss of the released tiers: d_in * max eps (Thm 4.1 + group privacy).

        Unreleased levels (incl. the root) do not count (spec 1.4). For
        ``gaussian`` the guarantee is (this, family.delta) for d_in = 1; for
        ``skellam`` it is the RDP curve ``family.rdp(alpha, this)`` (E5).
        """
        rel = self.levels if released is None else [float(e) for e in released]
        if not rel:
            return 0.0
        if d_in != 1 and not self.family.pure:
            raise ValueError(f"{self.family.name}: group privacy only for d_in = 1 here")
        return int(d_in) * max(rel)

    def independent_loss(self) -> float:
        """What fresh noise per tier would cost a full coalition: sum of eps (spec 1.3)."""
        return sum(self.levels)

    def release_levels(self, true_value: Any, source: RandomSource | None = None) -> dict[float, Any]:
        """Raw chain values for every level (descending), Alg. 1."""
        source = source if source is not None else default_source()
        fam, out = self.family, {}
        prev_eps, value = None, None
        for eps in self.levels:
            if prev_eps is None:
                value = fam.root(true_value, eps, source)
            else:
                value = value + fam.residual(prev_eps, eps, source)
            out[eps] = value
            prev_eps = eps
        return out

    def release(self, true_value: Any, source: RandomSource | None = None) -> dict[float, Any]:
        """dict tier eps -> raw noisy value (duplicate tiers share one value)."""
        return self.release_levels(true_value, source)

    def release_many(
        self, true_values: Iterable[Any], source: RandomSource | None = None
    ) -> dict[float, np.ndarray]:
        """:meth:`release_levels` for many cells at once: level -> int64 array (tsg, as numpy
        over CSPRNG words: :mod:`.chain_array`), or -> object array of the cell-by-cell draws
        (other families, or values beyond int64)."""
        source = source if source is not None else default_source()
        values, fam = list(true_values), self.family
        if fam.name == "tsg" and all(isinstance(v, (int, np.integer)) for v in values):
            try:
                arr = np.array(values, dtype=np.int64)
            except OverflowError:  # beyond int64: cell by cell
                arr = None
            rates = [as_epsilon(e) / Fraction(fam.sensitivity) for e in self.levels]
            if arr is not None and chain_fits(arr, rates):
                return dict(zip(self.levels, tsg_chain_array(arr, rates, source)))
        per = [self.release_levels(v, source) for v in values]
        return {e: np.array([p[e] for p in per] if per else [], dtype=object) for e in self.levels}

    def releases(self, true_value: Any, source: RandomSource | None = None) -> dict[float, Release]:
        """dict tier eps -> :class:`Release` (value, eps, 95% half-width, family, scale)."""
        vals = self.release_levels(true_value, source)
        fam = self.family
        return {
            e: Release(v, e, fam.half_width(e), f"multitier_{fam.name}", fam.scale(e))
            for e, v in vals.items()
        }

    def variance(self, eps: float) -> float:
        """Variance of the chain's value at a level, composed from the root and the
        residual variances actually used (analytic utility; equals the single-tier
        variance when the residuals are right)."""
        i = self.levels.index(eps)
        v = self.family.variance(self.levels[0])
        for hi, lo in zip(self.levels[:i], self.levels[1 : i + 1]):
            v += self.family.residual_variance(hi, lo)
        return v

    # -- dynamic tiers (spec 9) -------------------------------------------------
    def bridge_insert(
        self,
        existing_levels: Mapping[float, Any],
        new_epsilon: RealLike,
        source: RandomSource | None = None,
    ) -> Any:
        """Raw value for a level added after generation, without data access (spec 9a/9b).

        Below the lowest level: one forward residual. Strictly between two
        stored levels: exact bridge P(y | v_a, v_b) ~ P_s(a->new)(y - v_a) P_s(new->b)(v_b - y).
        The bridge is a data-independent kernel of stored values, so Def. 3.2
        holds whatever its numerical accuracy. Above the root: refused (9c).
        """
        source = source if source is not None else default_source()
        e = float(as_epsilon(new_epsilon))
        if e in existing_levels:
            return existing_levels[e]
        levels = sorted(existing_levels, reverse=True)
        if not levels:
            raise ValueError("no stored levels")
        if e > levels[0]:
            raise ValueError(
                f"eps {e} is above the stored root {levels[0]}: this needs the true value of the "
                "same snapshot (spec 9c, Ladder.loosen) or a fresh release"
            )
        if e < levels[-1]:
            return existing_levels[levels[-1]] + self.family.residual(levels[-1], e, source)
        ea = min(l for l in levels if l > e)
        eb = max(l for l in levels if l < e)
        return self._bridge(existing_levels[ea], existing_levels[eb], ea, e, eb, source)

    def _bridge(self, va: Any, vb: Any, ea: float, enew: float, eb: float, source: RandomSource) -> Any:
        fam = self.family
        if fam.name == "gaussian":  # Brownian bridge in variance time
            sa, sn, sb = fam.variance(ea), fam.variance(enew), fam.variance(eb)
            tau = (sn - sa) / (sb - sa)
            return float(
                source.generator().normal(va + (vb - va) * tau, math.sqrt(tau * (1 - tau) * (sb - sa)))
            )
        if fam.name != "tsg":
            raise ValueError(
                f"bridge insertion is implemented for tsg and gaussian, not {fam.name}; "
                "serve the nearest lower level (App. H, nearest_lower_level)"
            )
        lo, hi = min(va, vb), max(va, vb)
        T = int(math.ceil(40 * fam.sensitivity / eb)) + 1
        if 2 * T + hi - lo > 200_000:  # large grids (SUM/AVG): closed form, O(1)
            return tsg_bridge_closed(fam, int(va), int(vb), ea, enew, eb, source)
        y = np.arange(lo - T, hi + T + 1)
        w = fam.residual_pmf(ea, enew, y - va) * fam.residual_pmf(enew, eb, vb - y)
        return int(self._inverse_cdf(y, w, source))

    def loosen(
        self,
        existing_levels: Mapping[float, Any],
        new_epsilon: RealLike,
        true_value: int,
        source: RandomSource | None = None,
    ) -> int:
        """Spec 9c (tsg only): a new root above the stored one, using q(X) of the SAME
        snapshot: y ~ P_eta(new)(y - q) P_s(new->1)(v_1 - y). The ladder's coalition
        loss becomes ``new_epsilon`` (the caller must account for it)."""
        source = source if source is not None else default_source()
        fam = self.family
        if fam.name != "tsg":
            raise ValueError("loosening is implemented for the tsg family only")
        e, top = float(as_epsilon(new_epsilon)), max(existing_levels)
        if e <= top:
            inserted: int = self.bridge_insert(existing_levels, e, source)
            return inserted
        v1, q = existing_levels[top], int(true_value)
        T = int(math.ceil(40 * fam.sensitivity / top)) + 1
        y = np.arange(min(q, v1) - T, max(q, v1) + T + 1)
        w = fam.pmf(e, y - q) * fam.residual_pmf(e, top, v1 - y)
        return int(self._inverse_cdf(y, w, source))

    @staticmethod
    def _inverse_cdf(y: np.ndarray, w: np.ndarray, source: RandomSource) -> Any:
        c = np.cumsum(w)
        return y[min(int(np.searchsorted(c, _uniform01(source) * c[-1])), len(y) - 1)]

    def __repr__(self) -> str:
        return f"Ladder({self.family.name}, levels={list(self.levels)})"


def _log_tsg_norm(lam: float) -> float:
    """log((1 - e^-lam)/(1 + e^-lam)) = log tanh(lam/2): the TSG pmf at 0."""
    return math.log(math.tanh(lam / 2))


def tsg_bridge_closed(
    fam: NoiseFamily, va: int, vb: int, ea: float, enew: float, eb: float, source: RandomSource
) -> int:
    """Exact-law bridge draw for TSG chains in closed form (spec 9b), any sensitivity.

    P(y) is proportional to f1(y - va) f2(vb - y), f1 = w0 [0] + w1 TSG(new),
    f2 = w0' [0] + w1' TSG(b) (Eq. (1) residuals). Expanding gives atoms at va
    and vb plus w1 w1' TSG_new(y - va) TSG_b(vb - y), a product of two
    two-sided geometric kernels: geometric tails left of min(va, vb) and right
    of max(va, vb) with ratio e^-(lam_new + lam_b), and a truncated geometric
    between them. Segment masses are summed in log space and each segment is
    sampled by inverse CDF, so the cost does not depend on |vb - va| or on the
    sensitivity (the enumeration in :meth:`Ladder._bridge` is O(Delta/eps)).
    Floating point is used for the segment choice and the inverse CDFs: the
    draw is a data-independent kernel of stored values (post-processing), so
    this only affects how exactly the new level's marginal matches
    TSG(enew), never the coalition guarantee.
    """
    D = fam.sensitivity
    ln, lb = enew / D, eb / D  # lam = eps / Delta, theta = e^-lam
    w0a, w1a = fam.residual_weights(ea, enew)
    w0b, w1b = fam.residual_weights(enew, eb)
    dist = abs(vb - va)
    lo, hi = min(va, vb), max(va, vb)
    lam_lo, lam_hi = (ln, lb) if va <= vb else (lb, ln)  # lam of the kernel anchored at lo / hi
    if va == vb:
        lam_lo, lam_hi = ln, lb
    comps: list[tuple[float, tuple[Any, ...]]] = []  # (log weight, kind)

    def add(logw: float, kind: tuple[Any, ...]) -> None:
        if math.isfinite(logw):
            comps.append((logw, kind))

    logc = _log_tsg_norm(ln) + _log_tsg_norm(lb)
    if va == vb and w0a > 0 and w0b > 0:
        add(math.log(w0a) + math.log(w0b), ("atom", va))
    if w0a > 0 and w1b > 0:
        add(math.log(w0a) + math.log(w1b) + _log_tsg_norm(lb) - lb * dist, ("atom", va))
    if w1a > 0 and w0b > 0:
        add(math.log(w1a) + math.log(w0b) + _log_tsg_norm(ln) - ln * dist, ("atom", vb))
    if w1a > 0 and w1b > 0:
        base = math.log(w1a) + math.log(w1b) + logc
        lam = ln + lb
        tail = -lam - math.log(-math.expm1(-lam))  # log sum_{j>=1} e^(-lam j)
        add(base - lam_hi * dist + tail, ("left",))
        add(base - lam_lo * dist + tail, ("right",))
        delta = lam_lo - lam_hi  # weight at lo + j: e^(-lam_hi D - delta j)
        top = -lam_hi * dist if delta > 0 else -lam_lo * dist
        ad = abs(delta)
        mid = math.log(-math.expm1(-ad * (dist + 1))) - math.log(-math.expm1(-ad))
        add(base + top + mid, ("mid", delta))
    if not comps:
        raise ValueError("bridge has no mass (levels must be strictly ordered)")
    m = max(w for w, _ in comps)
    ws = [math.exp(w - m) for w, _ in comps]
    u = _uniform01(source) * sum(ws)
    kind = comps[-1][1]
    for w, (_, k) in zip(ws, comps):
        if u < w:
            kind = k
            break
        u -= w
    if kind[0] == "atom":
        return int(kind[1])
    if kind[0] in ("left", "right"):
        j = max(1, math.ceil(-math.log(_uniform01(source)) / (ln + lb)))
        return lo - j if kind[0] == "left" else hi + j
    delta = kind[1]
    ad = abs(delta)
    mass = -math.expm1(-ad * (dist + 1))
    j = math.ceil(math.log1p(-_uniform01(source) * mass) / -ad) - 1
    j = min(max(j, 0), dist)
    drawn: int = lo + j if delta > 0 else hi - j
    return drawn


def make_ladder(
    family: str | NoiseFamily, epsilons: Sequence[RealLike], sensitivity: RealLike = 1, **kw: Any
) -> Ladder:
    """Configuration-time constructor; refuses DG/staircase with a ValueError (spec 3.6-3.7, 10)."""
    return Ladder(get_family(family, sensitivity, **kw), epsilons)


class VectorLadder:
    """Independent chains on each coordinate of a vector query with l1 sensitivity Delta.

    For AVG via Algorithm 3 of the add-remove mean (Kulesza et al. 2024; add-remove mean spec 3.3): q = (s1, s2), neighbour
    shifts +-(t, 1-t), ||.||_1 = 1, so iid Laplace(1/eps) per coordinate is eps-DP
    at FULL eps (no split). Per coordinate a chain; the vector of chains is the
    vector mechanism at every level, and the joint over tiers is a post-processing
    of the top vector, so the coalition loss is max eps. Families with an l1
    guarantee only: ``laplace`` or ``tsg`` (integer grid coordinates).
    """

    def __init__(
        self, family: str | NoiseFamily, epsilons: Sequence[RealLike], sensitivity: RealLike = 1, dim: int = 2
    ) -> None:
        fam = get_family(family, sensitivity)
        if fam.name not in ("laplace", "tsg"):
            raise ValueError("VectorLadder needs an l1 family (laplace or tsg)")
        self.dim = int(dim)
        self.ladder = Ladder(fam, epsilons)
        self.levels = self.ladder.levels

    @property
    def epsilon(self) -> float:
        return self.ladder.epsilon

    def privacy_map(self, d_in: int = 1, released: Sequence[RealLike] | None = None) -> float:
        return self.ladder.privacy_map(d_in, released)

    def release(
        self, true_value: Sequence[Any], source: RandomSource | None = None
    ) -> dict[float, tuple[Any, ...]]:
        source = source if source is not None else default_source()
        if len(true_value) != self.dim:
            raise ValueError(f"expected a vector of length {self.dim}")
        per = [self.ladder.release_levels(v, source) for v in true_value]
        return {e: tuple(c[e] for c in per) for e in self.levels}

    def release_many(
        self, true_values: Iterable[Sequence[Any]], source: RandomSource | None = None
    ) -> dict[float, list[np.ndarray]]:
        """:meth:`release` for many cells (a sequence of vectors): level -> one array per
        coordinate (:meth:`Ladder.release_many` per coordinate)."""
        source = source if source is not None else default_source()
        rows = list(true_values)
        if any(len(v) != self.dim for v in rows):
            raise ValueError(f"expected vectors of length {self.dim}")
        per = [self.ladder.release_many([v[c] for v in rows], source) for c in range(self.dim)]
        return {e: [p[e] for p in per] for e in self.levels}


@dataclass(frozen=True)
class SumGrid:
    """Fixed-point grid for SUM ladders (spec 10): value v -> round(clip(v) * 10^decimals).

    ``sensitivity`` is in grid units: c * max(|lo|, |hi|) * 10^decimals (add/remove),
    plus 1 per row only if the grid does not contain lo/hi exactly (it does here,
    since lo/hi are rounded to the grid first).
    """

    lo: float
    hi: float
    decimals: int = 2
    contributions: int = 1

    @property
    def unit(self) -> int:
        unit: int = 10**self.decimals
        return unit

    def _g(self, v: float) -> int:
        return int(Fraction(str(v)) * self.unit)  # exact decimal, truncated toward 0

    @property
    def sensitivity(self) -> int:
        return self.contributions * max(abs(self._g(self.lo)), abs(self._g(self.hi)))

    def to_grid(self, values: Iterable[Any]) -> int:
        glo, ghi = self._g(self.lo), self._g(self.hi)
        return sum(min(max(int(round(Fraction(str(v)) * self.unit)), glo), ghi) for v in values)

    def from_grid(self, raw: int) -> float:
        return raw / self.unit
