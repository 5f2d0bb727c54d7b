"""Reference approaches for the multi-tier bench only (spec 1.3, 6). NOT for serving.

* Independent release: fresh noise per tier; optimal per-tier MSE, coalition
  loss sum(eps) -- violates Def. 3.1.
* Gradual release: budgets b_m = eps_m, b_j = eps_j - eps_{j+1}; tier j is the
  inverse-variance-weighted mean of the increments l >= j (MSE 1/sum 1/V(b_l));
  coalition loss eps_1.
* Koufogiannis et al. 2016 = the Laplace chain (``make_ladder("laplace", ...)``).
* Subset analogues: ideal (Subset at k*), gradual over Subset increments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mechanisms.multitier.families import NoiseFamily
from mechanisms.multitier.ladder import Ladder, descending_levels
from mechanisms.multitier.registry import get_family
from mechanisms.multitier.subset import optimal_k, subset_variance
from mechanisms.rng import RandomSource, default_source

__all__ = [
    "gradual_budgets",
    "gradual_mse",
    "independent_mse",
    "independent_release",
    "gradual_release",
    "koufogiannis_ladder",
    "subset_ideal_variance",
    "subset_gradual_mse",
]


def gradual_budgets(epsilons: Sequence[float]) -> list[float]:
    """Increments b_j = eps_j - eps_{j+1} (descending levels), b_m = eps_m."""
    L = descending_levels(epsilons)
    return [a - b for a, b in zip(L, L[1:])] + [L[-1]]


def gradual_mse(epsilons: Sequence[float], V: Callable[[float], float]) -> dict[float, float]:
    """Tier eps_j -> 1 / sum_{l >= j} 1/V(b_l) (spec 5, last row)."""
    L, b = descending_levels(epsilons), gradual_budgets(epsilons)
    out, acc = {}, 0.0
    for j in range(len(L) - 1, -1, -1):
        acc += 1.0 / V(b[j])
        out[L[j]] = 1.0 / acc
    return out


def independent_mse(epsilons: Sequence[float], V: Callable[[float], float]) -> dict[float, float]:
    return {e: V(e) for e in descending_levels(epsilons)}


def independent_release(
    family, epsilons: Sequence[float], true_value, sensitivity=1, source: RandomSource | None = None
) -> dict[float, object]:
    """Fresh q + eta(eps) per tier (coalition loss sum eps)."""
    fam: NoiseFamily = get_family(family, sensitivity)
    source = source if source is not None else default_source()
    return {e: fam.root(true_value, e, source) for e in descending_levels(epsilons)}


def gradual_release(
    family, epsilons: Sequence[float], true_value, sensitivity=1, source: RandomSource | None = None
) -> dict[float, float]:
    """Fresh increments at budgets b_l, inverse-variance weighted per tier (floats)."""
    fam: NoiseFamily = get_family(family, sensitivity)
    source = source if source is not None else default_source()
    L, b = descending_levels(epsilons), gradual_budgets(epsilons)
    parts = [(fam.root(true_value, bl, source), 1.0 / fam.variance(bl)) if bl > 0 else None for bl in b]
    out, num, den = {}, 0.0, 0.0
    for j in range(len(L) - 1, -1, -1):
        if parts[j] is not None:
            num += parts[j][0] * parts[j][1]
            den += parts[j][1]
        out[L[j]] = num / den
    return out


def koufogiannis_ladder(epsilons: Sequence[float], sensitivity=1) -> Ladder:
    """Koufogiannis et al. 2016 gradual-release Laplace = Alg. 1 with the Laplace residual."""
    return Ladder(get_family("laplace", sensitivity), epsilons)


def subset_ideal_variance(eps: float, d: int) -> float:
    """V(eps, k*(eps)): the optimal single-tier Subset MSE per user."""
    return subset_variance(eps, optimal_k(eps, d), d)


def subset_gradual_mse(epsilons: Sequence[float], d: int) -> dict[float, float]:
    return gradual_mse(epsilons, lambda b: subset_ideal_variance(b, d))
