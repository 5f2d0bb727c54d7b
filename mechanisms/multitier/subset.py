"""Multi-tier Subset mechanism for categorical local DP (paper Sec. 5; spec 4).

One row x in [d] (0-based here) is perturbed ONCE per ladder: s = {x} is
pushed through a fixed, data-independent program of Expansion (Lemma 5.1)
and Rescale (Lemma 5.2 with the CORRECTED beta, erratum E1) steps, Alg. 2
with Alg. 3 (variant 1) or Alg. 5 (variant 2) as template generator, E3
applied; Alg. 4 matches each tier to the highest template level <= its eps.

Exactness: levels are carried as rationals rho = e^level. A tier eps uses
rho = a float just below e^eps (so the level is <= eps); template levels
d/k - 1 and expansion updates are rational; beta is an exact Fraction and
every coin is ``source.bernoulli`` / ``source.randbelow``. Template match
allows the spec's 1e-12 tolerance (pitfall 8).

Debias each tier with its matched (level, k) (pitfall 10): :func:`estimate_counts`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..rng import RandomSource, default_source
from ..scalars import RealLike
from .ladder import descending_levels

__all__ = [
    "subset_t_f",
    "subset_variance",
    "optimal_k",
    "rescale_beta",
    "rescale_beta_paper",
    "expand_rho",
    "expansion",
    "rescale",
    "uniform_subset",
    "subset_sample",
    "uniform_subsets",
    "expansion_many",
    "Template",
    "SubsetLadder",
    "estimate_counts",
]

INF = None  # rho = +inf: the deterministic initial s = {x}


def rho_of(eps: float) -> Fraction:
    """A rational just below e^eps (so the realised level never exceeds eps)."""
    if eps > 700:
        raise ValueError("eps > 700: use rho = +inf semantics (pitfall 2)")
    return Fraction(math.nextafter(math.exp(eps), 0.0))


def subset_t_f(rho: RealLike | None, k: int, d: int) -> tuple[RealLike, RealLike]:
    """t = P(x in S), f = P(j in S), j != x, for Subset(k) at e^eps = rho (Sec. 5.2)."""
    if rho is INF:
        return 1, Fraction(k - 1, d - 1)
    a = k * rho + d - k
    return k * rho / a, k * ((k - 1) * rho + d - k) / ((d - 1) * a)


def subset_variance(eps: float, k: int, d: int) -> float:
    """V(eps, k) = E||xhat - x||^2, closed form of spec 4.2."""
    e = math.exp(eps)
    return (
        (d - 1)
        * (k - d + (d - k) ** 2 + 2 * e * (d - k) * k + e * e * (k - 1) * k)
        / (math.expm1(eps) ** 2 * (d - k) * k)
    )


def optimal_k(eps: float, d: int) -> int:
    """k* = argmin_{1 <= k <= floor(d/2)} V(eps, k) (brute force, spec 4.2)."""
    ks = range(1, max(1, d // 2) + 1)
    return min(ks, key=lambda k: subset_variance(eps, k, d))


def rescale_beta(rho: RealLike | None, rho_new: RealLike, k: int, d: int) -> Fraction:
    """Corrected Rescale probability (erratum E1):
    beta = (e' - 1)(k rho + d - k) / ((rho - 1)(k e' + d - k)); rho = inf limit k(e'-1)/(k e' + d - k)."""
    new = Fraction(rho_new)
    if rho is INF:
        beta = k * (new - 1) / (k * new + d - k)
    else:
        old = Fraction(rho)
        if new == old:
            return Fraction(1)
        beta = (new - 1) * (k * old + d - k) / ((old - 1) * (k * new + d - k))
    if not 0 <= beta <= 1:
        raise ValueError(f"Rescale target e^eps'={float(new)} not reachable from {rho} (beta={float(beta)})")
    return beta


def rescale_beta_paper(rho: float, rho_new: float, k: int, d: int) -> float:
    """The paper's (WRONG) beta, Sec. 5.2 / Alg. 2: (e'-1)(k rho + d - k)/(d(rho - e')). Tests only."""
    return (rho_new - 1) * (k * rho + d - k) / (d * (rho - rho_new))


def expand_rho(rho: RealLike | None, k: int) -> Fraction | None:
    """Lemma 5.1: rho' = (k rho + 1)/(k + 1); rho = inf stays inf."""
    return INF if rho is INF else (k * Fraction(rho) + 1) / (k + 1)


def uniform_subset(n: int, k: int, source: RandomSource) -> set[int]:
    """Uniform k-subset of range(n) (Floyd's algorithm, k draws)."""
    s: set[int] = set()
    for j in range(n - k, n):
        t = source.randbelow(j + 1)
        s.add(j if t in s else t)
    return s


def expansion(s: set[int], d: int, source: RandomSource) -> set[int]:
    """Expansion (Lemma 5.1): s plus one uniform element of [d] \\ s."""
    while True:
        j = source.randbelow(d)
        if j not in s:
            return s | {j}


def rescale(s: set[int], beta: Fraction, d: int, source: RandomSource) -> set[int]:
    """Rescale (Lemma 5.2): keep s w.p. beta, else a uniform |s|-subset of [d]."""
    if source.bernoulli(beta.numerator, beta.denominator):
        return s
    return uniform_subset(d, len(s), source)


def subset_sample(x: int, k: int, rho: RealLike | None, d: int, source: RandomSource) -> set[int]:
    """Base Subset(x, k, eps) (Sec. 2.2): w.p. t, {x} + uniform (k-1)-subset of [d]\\{x};
    else a uniform k-subset of [d]\\{x}. Used for the independent baseline."""
    t_in, _ = subset_t_f(rho, k, d)
    t = Fraction(t_in)
    inc = source.bernoulli(t.numerator, t.denominator)
    rest = uniform_subset(d - 1, k - 1 if inc else k, source)
    out = {j + (j >= x) for j in rest}
    return out | {x} if inc else out


def uniform_subsets(m: int, d: int, k: int, source: RandomSource) -> np.ndarray:
    """``m`` independent uniform k-subsets of range(d) as an (m, d) bool matrix
    (Floyd's algorithm run on all rows at once: the draws at step j share the bound j + 1)."""
    out = np.zeros((m, d), dtype=bool)
    rows = np.arange(m)
    for j in range(d - k, d):
        t = source.randbelow_array(m, j + 1)
        t = np.where(out[rows, t], j, t)
        out[rows, t] = True
    return out


def expansion_many(S: np.ndarray, k: int, source: RandomSource) -> None:
    """Expansion (Lemma 5.1) of every row of S (bool (n, d), k members each) in place:
    one uniform element of the row's complement (the r-th free column, r uniform below d - k)."""
    n, d = S.shape
    r = source.randbelow_array(n, d - k)
    free = np.cumsum(~S, axis=1, dtype=np.int16)
    S[np.arange(n), (free > r[:, None].astype(np.int16)).argmax(axis=1)] = True


@dataclass(frozen=True)
class Template:
    """A chain entry: realised level ln(rho), subset size k, position in the program."""

    rho: Fraction
    k: int
    step: int  # number of program ops applied before this entry

    @property
    def level(self) -> float:
        return math.log(self.rho)

    def t_f(self, d: int) -> tuple[RealLike, RealLike]:
        return subset_t_f(self.rho, self.k, d)

    def variance(self, d: int) -> float:
        return subset_variance(self.level, self.k, d)


class SubsetLadder:
    """Alg. 2 (E1, E3 fixed) with Alg. 3 (``variant=1``) or Alg. 5 (``variant=2``) and Alg. 4.

    The program (ops list) and templates depend only on (d, L): built once.
    """

    def __init__(self, d: int, epsilons: Sequence[float], variant: int = 2) -> None:
        if d < 2:
            raise ValueError("need d >= 2 categories")
        if variant not in (1, 2):
            raise ValueError("variant must be 1 (Alg. 3) or 2 (Alg. 5)")
        self.d, self.variant = int(d), variant
        self.tiers = tuple(float(e) for e in epsilons)
        self.levels = descending_levels(epsilons)
        self.ops: list[tuple[Any, ...]] = []  # ("expand",) or ("rescale", beta)
        self.templates: list[Template] = []
        self._build()
        self.match = {e: self._match(e) for e in self.levels}

    # -- program construction ---------------------------------------------------
    def _rescale(self, rho: Fraction | None, k: int, target: RealLike) -> Fraction:
        self.ops.append(("rescale", rescale_beta(rho, target, k, self.d)))
        self.templates.append(Template(Fraction(target), k, len(self.ops)))
        return Fraction(target)

    def _expand(self, rho: Fraction | None, k: int, record: bool) -> tuple[Fraction | None, int]:
        self.ops.append(("expand",))
        expanded = expand_rho(rho, k)
        if record:
            assert expanded is not None  # recorded expansions follow the first Rescale (finite rho)
            self.templates.append(Template(expanded, k + 1, len(self.ops)))
        return expanded, k + 1

    def _build(self) -> None:
        d = self.d
        L = [rho_of(e) for e in self.levels]
        rho: Fraction | None = INF
        k = 1
        for r in L:  # Step 1: e^eps > d - 1 (k* = 1)
            if r > d - 1:
                rho = self._rescale(rho, k, r)
        kmax = (d - 1) // 2
        if self.variant == 1:  # Step 2, Alg. 3
            for kk in range(1, kmax + 1):
                if kk > k:
                    rho, k = self._expand(rho, k, record=False)
                rho = self._rescale(rho, k, Fraction(d, kk) - 1)
        else:  # Step 2, Alg. 5
            extra = {Fraction(d, kk) - 1 for kk in range(1, kmax + 1)}
            extra |= {Fraction(d + 1, kk) - 1 for kk in range(1, kmax + 1)}
            Lp = sorted(set(L) | extra, reverse=True)
            for kk in range(1, kmax + 1):
                if kk > k:
                    rho, k = self._expand(rho, k, record=True)
                for r in Lp:
                    if Fraction(d - 1, kk) - 1 <= r and (rho is INF or r < rho):
                        if kk != kmax or r >= Fraction(d, kmax) - 1:
                            rho = self._rescale(rho, k, r)
        if d % 2 == 0 and k < d // 2:  # Step 3 (E3: even d only)
            rho, k = self._expand(rho, k, record=True)
        for r in L:  # Step 4
            if rho is INF or r < rho:
                rho = self._rescale(rho, k, r)

    def _match(self, eps: float) -> Template:
        """Alg. 4: the first (highest) template with level <= eps (+1e-12)."""
        for tpl in self.templates:
            if tpl.level <= eps + 1e-12:
                return tpl
        raise AssertionError("no template matched")  # Step 4 guarantees one

    # -- per row -------------------------------------------------------------------
    def perturb(
        self, x: int, source: RandomSource | None = None
    ) -> dict[float, tuple[frozenset[int], Template]]:
        """Run the program once on {x}; tier eps -> (report subset, matched template)."""
        if not 0 <= x < self.d:
            raise ValueError(f"category {x} outside [0, {self.d})")
        source = source if source is not None else default_source()
        need = {tpl.step for tpl in self.match.values()}
        snap: dict[int, frozenset[int]] = {}
        s = {x}
        for i, op in enumerate(self.ops, start=1):
            s = expansion(s, self.d, source) if op[0] == "expand" else rescale(s, op[1], self.d, source)
            if i in need:
                snap[i] = frozenset(s)
        return {e: (snap[t.step], t) for e, t in self.match.items()}

    def perturb_many(
        self, xs: ArrayLike, source: RandomSource | None = None, *, chunk: int = 32_768
    ) -> dict[float, np.ndarray]:
        """:meth:`perturb` for many rows: tier eps -> (n, d) bool report matrix.

        Every row runs the same program once, independently, with the same exact coins
        (``bernoulli_array``/``randbelow_array``: Rescale keeps a row w.p. beta, else a
        uniform |s|-subset; Expansion adds a uniform free element), so each row has
        exactly :meth:`perturb`'s joint law; the program is stepped for all rows at once
        (``chunk`` rows at a time, bounding memory)."""
        rows = np.asarray(xs, dtype=np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.d):
            bad = int(rows[(rows < 0) | (rows >= self.d)][0])
            raise ValueError(f"category {bad} outside [0, {self.d})")
        source = source if source is not None else default_source()
        out = {e: np.zeros((rows.size, self.d), dtype=bool) for e in self.match}
        for lo in range(0, rows.size, chunk):
            for e, bits in self._perturb_chunk(rows[lo : lo + chunk], source).items():
                out[e][lo : lo + len(bits)] = bits
        return out

    def _perturb_chunk(self, xs: np.ndarray, source: RandomSource) -> dict[float, np.ndarray]:
        n, d = xs.size, self.d
        need = {tpl.step for tpl in self.match.values()}
        S = np.zeros((n, d), dtype=bool)
        S[np.arange(n), xs] = True
        k = 1
        snap: dict[int, np.ndarray] = {}
        for i, op in enumerate(self.ops, start=1):
            if op[0] == "expand":
                expansion_many(S, k, source)
                k += 1
            else:
                beta = op[1]
                redo = np.flatnonzero(~source.bernoulli_array(n, beta.numerator, beta.denominator))
                if redo.size:
                    S[redo] = uniform_subsets(redo.size, d, k, source)
            if i in need:
                snap[i] = S.copy()
        return {e: snap[t.step] for e, t in self.match.items()}

    def privacy_map(self, released: Iterable[float] | None = None) -> float:
        """eps-LDP of any coalition: max over released tiers (templates <= tier eps)."""
        rel = self.levels if released is None else list(released)
        return max(rel) if rel else 0.0

    def tier_variance(self, eps: float) -> float:
        return self.match[float(eps)].variance(self.d)

    def estimate_counts(self, reports: Iterable[Iterable[int]], eps: float) -> np.ndarray:
        """COUNT(*) GROUP BY cat for tier ``eps`` from its reports (matched (t, f))."""
        tpl = self.match[float(eps)]
        return estimate_counts(reports, self.d, tpl.rho, tpl.k)


def estimate_counts(reports: Iterable[Iterable[int]], d: int, rho: RealLike | None, k: int) -> np.ndarray:
    """chat_j = (count_j - n f) / (t - f) with the template's (t, f) (spec 4.2, 10)."""
    counts, n = np.zeros(d), 0
    for s in reports:
        counts[list(s)] += 1
        n += 1
    t, f = (float(v) for v in subset_t_f(rho, k, d))
    return (counts - n * f) / (t - f)
