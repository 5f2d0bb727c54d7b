"""M7: quantiles by binary search over the corrected prefix estimate (paper 4.4, spec 3.10).

sigma(x) = (1/n) sum_i 1[x_i <= x]; the p-quantile x* has sigma(x*-1) < p <= sigma(x*).
The proxy issues ONE query with all prefixes (COUNT(*) then Phat_1..Phat_{m-1}, each a SUM
over the report columns: :func:`prefix_queries`, printed by :func:`rewriter.local_sql.quantile_sql`),
then :func:`quantile` runs the
invariant-based search of spec 3.10 on sigmahat = Phat/n with sigmahat(0) := 0 and
sigmahat(m) := 1 (known-n convention; spec 7.11: sigmahat need not be monotone).

Accuracy [DERIVED from Lemma 1/Thm 5 with the errata of spec 7.2 and 4.4]: each per-record
prefix term lies in an interval of width w (2 kappa for "paper", kappa for "known_n" in
1-D), so by two-sided Hoeffding and a union bound over the m-1 prefixes (a fixed set, so
valid although the search is adaptive), with probability >= 1 - delta every sigmahat is
within t = w sqrt(ln(2(m-1)/delta)/(2n)) and Err[xhat] <= t.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .estimators import dim_affine, estimate_numpy
from .queries import Query, bucket_range_weights
from .spec import GroupSpec

__all__ = [
    "prefix_queries",
    "prefix_estimates_numpy",
    "search",
    "quantile",
    "QuantileResult",
    "quantile_error",
    "quantile_error_bound",
    "prefix_width",
]


def prefix_queries(spec: GroupSpec, d: int) -> list[Query]:
    """[1, k] on dimension d (others trivial), k = 1..m_d - 1."""
    m = spec.dims[d].m
    out = []
    for k in range(1, m):
        ws: list[np.ndarray | None] = [None] * spec.D
        ws[d] = bucket_range_weights(m, 1, k)
        out.append(Query(tuple(ws)))
    return out


def prefix_estimates_numpy(
    reports: np.ndarray, spec: GroupSpec, d: int, estimator: str = "known_n"
) -> list[float]:
    """Numpy reference of the one prefix query's row (n, Phat_1..Phat_{m-1})."""
    return [float(len(reports))] + [
        estimate_numpy(reports, spec, q, estimator) for q in prefix_queries(spec, d)
    ]


def search(sigma: np.ndarray, p: float) -> tuple[int, int]:
    """Spec 3.10 search over sigma[0..m] (sigma[0] = 0, sigma[m] = 1 enforced).
    Invariant sigma(lo) < p <= sigma(hi); returns (xhat, number of sigma evaluations)."""
    if not 0.0 < p <= 1.0:
        raise ValueError("p must be in (0, 1]")
    s = np.asarray(sigma, dtype=float).copy()
    m = len(s) - 1
    s[0], s[m] = 0.0, 1.0
    lo, hi, evals = 0, m, 0
    while hi - lo > 10:
        mid = (lo + hi + 1) // 2
        evals += 1
        if s[mid] < p:
            lo = mid
        else:
            hi = mid
    for x in range(lo + 1, hi + 1):
        evals += 1
        if s[x] >= p:
            return x, evals
    return hi, evals


@dataclass(frozen=True)
class QuantileResult:
    value: float  # mapped back to the value domain
    bucket: int  # xhat, 1-based
    sigma: tuple[float, ...]  # sigmahat(0..m) used


def quantile(
    row: Sequence[Any], p: float, spec: GroupSpec, d: int, kind: str = "disc", represent: str = "mid"
) -> QuantileResult:
    """p-quantile from the one prefix query's row (n, Phat_1..Phat_{m-1}).

    kind "disc" (percentile_disc): the bucket's lower edge, midpoint or upper edge
    (``represent``; "lower" is exact for integer data with integer-aligned buckets).
    kind "cont" (percentile_cont): linear interpolation inside xhat (spec 8),
    lo + (xhat-1) g + g (p - sigmahat(xhat-1)) / (sigmahat(xhat) - sigmahat(xhat-1)); the
    search guarantees sigmahat(xhat-1) < p <= sigmahat(xhat), so the ratio is in (0, 1]
    (the midpoint fallback of spec 8 is kept as a guard only).
    """
    dim = spec.dims[d]
    n = float(row[0])
    if n <= 0:
        raise ValueError("no reports")
    sig = np.concatenate([[0.0], np.asarray(row[1:], dtype=float) / n, [1.0]])
    x, _ = search(sig, p)
    low = dim.lo + (x - 1) * dim.g
    if kind == "cont":
        den = sig[x] - sig[x - 1]
        f = 0.5 if den <= 0 else min(1.0, max(0.0, (p - sig[x - 1]) / den))
        return QuantileResult(low + f * dim.g, x, tuple(sig))
    if kind != "disc":
        raise ValueError("kind must be 'disc' or 'cont'")
    off = {"lower": 0.0, "mid": 0.5, "upper": 1.0}[represent]
    return QuantileResult(low + off * dim.g, x, tuple(sig))


def quantile_error(true_buckets: np.ndarray, xhat: int, p: float) -> float:
    """Err[xhat] = max(0, sigma(xhat-1) - p, p - sigma(xhat)) (closed interval, spec 3.10)."""
    x = np.asarray(true_buckets)
    s_hi = float(np.mean(x <= xhat))
    s_lo = float(np.mean(x <= xhat - 1))
    return max(0.0, s_lo - p, p - s_hi)


def _range(aff: tuple[float, dict[int, float]]) -> tuple[float, float]:
    c, cs = aff
    return (c + sum(min(0.0, a) for a in cs.values()), c + sum(max(0.0, a) for a in cs.values()))


def prefix_width(spec: GroupSpec, queries: Iterable[Query], estimator: str = "known_n") -> float:
    """Largest range of one record's term over the prefix ``queries`` (the Hoeffding width
    w of the module doc): interval arithmetic over the dims' affine terms."""
    width = 0.0
    for q in queries:
        lo, hi = 1.0, 1.0
        for e in range(spec.D):
            a, b = _range(dim_affine(spec, e, q.weight(spec, e), estimator))
            prods = (lo * a, lo * b, hi * a, hi * b)
            lo, hi = min(prods), max(prods)
        width = max(width, hi - lo)
    return width


def quantile_error_bound(spec: GroupSpec, d: int, n: int, delta: float, estimator: str = "known_n") -> float:
    """t such that P[Err > t] <= delta (module doc); per-record ranges by interval
    arithmetic over the dims' affine terms (covers joint groups and the paper estimator)."""
    if spec.mechanism != "M4":
        raise ValueError("the Hoeffding bound needs bounded (M4 bit) reports")
    width = prefix_width(spec, prefix_queries(spec, d), estimator)
    T = max(1, spec.dims[d].m - 1)
    return width * math.sqrt(math.log(2.0 * T / delta) / (2.0 * n))
