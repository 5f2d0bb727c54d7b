"""eps-LDP baselines for the benchmark only (spec 5; formulas [EXTERNAL], reconstructed).

Every eps-LDP mechanism is also E_L1-LDP with the same per-step eps (spec 1.1), so these
compete at an equal (in fact stronger) guarantee. Simulation shortcuts are exact in
distribution: OUE column sums are Bin(c_v, 1/2) + Bin(n_v' - c_v, q) (independent bits),
so no n x d bit matrix is built. All take a numpy Generator (simulation, not serving).

* OUE / OLH frequency oracles (Wang et al. [41], spec 5.1).
* HH_B: hierarchical histogram, users sampled over levels, OUE per level, optional Hay et
  al. consistency (Cormode et al. [14], spec 5.2); :class:`HIO2D` is its 2-D
  level-pair analogue (HIO [42], spec 5.5).
* HaarHRR (spec 5.3): Haar coefficients, one level per user, Hadamard randomized response.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "oue_estimate_counts",
    "oue_variance",
    "olh_frequencies",
    "HH",
    "HaarHRR",
    "HIO2D",
    "FlatOUE",
    "fwht",
]


def _q(eps: float) -> float:
    return 1.0 / (math.exp(eps) + 1.0)


def oue_estimate_counts(counts: np.ndarray, eps: float, gen: np.random.Generator) -> np.ndarray:
    """OUE over len(counts) items held by sum(counts) users: simulate the bit sums, return
    c_hat_v = (I_v - n q)/(1/2 - q) (p = 1/2, q = 1/(e^eps+1))."""
    c = np.asarray(counts, dtype=np.int64)
    n, q = int(c.sum()), _q(eps)
    I = gen.binomial(c, 0.5) + gen.binomial(n - c, q)
    return (I - n * q) / (0.5 - q)


def oue_variance(n: int, eps: float, c_v: float = 0.0) -> float:
    """Var c_hat_v = n q(1-q)/(p-q)^2 + c_v (p(1-p) - q(1-q))/(p-q)^2, p = 1/2."""
    q = _q(eps)
    return (n * q * (1 - q) + c_v * (0.25 - q * (1 - q))) / (0.5 - q) ** 2


def olh_frequencies(
    x: np.ndarray, d: int, eps: float, gen: np.random.Generator, chunk: int = 4096
) -> np.ndarray:
    """OLH (per-user simulation, values 0..d-1): g = round(e^eps) + 1, H_i(v) = ((a v + b)
    mod P) mod g, GRR_g on the hash; c_hat_v = (S_v - n/g)/(p - 1/g)."""
    x = np.asarray(x, dtype=np.int64)
    n, g, P = len(x), int(round(math.exp(eps))) + 1, 2_147_483_647
    p = math.exp(eps) / (math.exp(eps) + g - 1)
    a, b = gen.integers(1, P, n), gen.integers(0, P, n)
    h = ((a * x + b) % P) % g
    keep = gen.random(n) < p
    other = (h + gen.integers(1, g, n)) % g  # uniform over the g-1 other hash values
    y = np.where(keep, h, other)
    S = np.zeros(d)
    v = np.arange(d, dtype=np.int64)
    for s in range(0, n, chunk):
        Hv = ((a[s : s + chunk, None] * v[None, :] + b[s : s + chunk, None]) % P) % g
        S += (Hv == y[s : s + chunk, None]).sum(axis=0)
    return (S - n / g) / (p - 1.0 / g)


class FlatOUE:
    """Range = sum of OUE cell estimates (spec 5.1 flat baseline); 1-D or 2-D cell counts."""

    def __init__(self, counts: np.ndarray, eps: float, gen: np.random.Generator):
        c = np.asarray(counts)
        self.est = oue_estimate_counts(c.ravel(), eps, gen).reshape(c.shape)
        self.cum = self.est.cumsum(axis=0)
        for ax in range(1, c.ndim):
            self.cum = self.cum.cumsum(axis=ax)

    def range(self, *lr) -> float:
        """lr = (l1, r1[, l2, r2]) 1-based inclusive."""
        pad = np.pad(self.cum, [(1, 0)] * self.cum.ndim)
        if len(lr) == 2:
            return float(pad[lr[1]] - pad[lr[0] - 1])
        l1, r1, l2, r2 = lr
        return float(pad[r1, r2] - pad[l1 - 1, r2] - pad[r1, l2 - 1] + pad[l1 - 1, l2 - 1])


def _levels(x: np.ndarray, nlev: int, gen: np.random.Generator) -> np.ndarray:
    return gen.integers(0, nlev, len(x))


def _padded_depth(m: int, B: int) -> int:
    """Least h >= 1 with B^h >= m (domain padded to B^h)."""
    h = 1
    while B**h < m:
        h += 1
    return h


class HH:
    """HH_B (spec 5.2) on 1-based values x in [m]; range via consistent leaves or B-adic nodes."""

    def __init__(
        self, x: np.ndarray, m: int, B: int, eps: float, gen: np.random.Generator, consistency: bool = True
    ):
        x0 = np.asarray(x, dtype=np.int64) - 1
        self.B, self.h, self.n = B, _padded_depth(m, B), len(x0)
        h, lev = self.h, _levels(x0, self.h, gen) + 1
        self.est = [np.array([float(self.n)])]
        for l in range(1, h + 1):
            node = x0[lev == l] // B ** (h - l)
            nl = max(1, len(node))
            self.est.append(self.n / nl * oue_estimate_counts(np.bincount(node, minlength=B**l), eps, gen))
        if consistency:
            self._consistency()

    def _consistency(self) -> None:
        B, h = self.B, self.h
        z = {h: self.est[h]}
        for l in range(h - 1, 0, -1):
            i = h - l + 1
            child = z[l + 1].reshape(-1, B).sum(axis=1)
            z[l] = ((B**i - B ** (i - 1)) * self.est[l] + (B ** (i - 1) - 1) * child) / (B**i - 1)
        hb = [np.array([float(self.n)])]
        for l in range(1, h + 1):
            sib = z[l].reshape(-1, B).sum(axis=1)
            hb.append(z[l] + np.repeat(hb[l - 1] - sib, B) / B)
        self.est = hb

    def range(self, l: int, r: int) -> float:
        """B-adic decomposition of [l, r] (1-based) into at most 2(B-1) nodes per level."""
        return float(sum(self.est[lev][i] for lev, i in _nodes(l, r, self.B, self.h)))


def fwht(a: np.ndarray) -> np.ndarray:
    """Fast Walsh-Hadamard transform: H_K a with Sylvester H[j, u] = (-1)^popcount(j & u)."""
    a = np.asarray(a, dtype=float)
    K, h = len(a), 1
    while h < K:
        a = a.reshape(-1, 2, h)
        a = np.stack([a[:, 0] + a[:, 1], a[:, 0] - a[:, 1]], axis=1)
        h *= 2
    return a.reshape(K)


class HaarHRR:
    """HaarHRR (spec 5.3): leaf estimates from Haar details d_u estimated with HRR."""

    def __init__(self, x: np.ndarray, m: int, eps: float, gen: np.random.Generator):
        x0 = np.asarray(x, dtype=np.int64) - 1
        n, h = len(x0), max(1, math.ceil(math.log2(m)))
        M, q = 2**h, _q(eps)
        kap = 1.0 / (1.0 - 2.0 * q)
        lev = _levels(x0, h, gen) + 1
        leaves = np.full(M, n / M)
        xs = np.arange(M)
        for l in range(1, h + 1):
            K, size = 2 ** (l - 1), M // 2 ** (l - 1)
            xl = x0[lev == l]
            u = xl // size
            sigma = np.where(xl % size < size // 2, 1.0, -1.0)
            j = gen.integers(0, K, len(xl))
            y = sigma * (1.0 - 2.0 * (np.bitwise_count(j & u) % 2))
            y = np.where(gen.random(len(xl)) < q, -y, y)
            S = np.bincount(j, weights=y, minlength=K)
            dhat = n / max(1, len(xl)) * kap * fwht(S)
            ul = xs // size
            leaves += np.where(xs % size < size // 2, 1.0, -1.0) * dhat[ul] / size
        self.cum = np.concatenate([[0.0], np.cumsum(leaves)])

    def range(self, l: int, r: int) -> float:
        return float(self.cum[r] - self.cum[l - 1])


def _nodes(l: int, r: int, B: int, h: int) -> list:
    """B-adic nodes (level, index) covering [l, r]; level 0 is the root."""
    out, lo, hi, lev = [], l - 1, r, h
    while lo < hi and lev > 0:
        while lo % B and lo < hi:
            out.append((lev, lo))
            lo += 1
        while hi % B and lo < hi:
            hi -= 1
            out.append((lev, hi))
        lo, hi, lev = lo // B, hi // B, lev - 1
    if lo < hi:
        out.append((0, 0))
    return out


class HIO2D:
    """2-D hierarchy (HIO-style, spec 5.5): each user reports one level pair (l1, l2) != (0, 0)
    with OUE over B^(l1+l2) cells; a box sums the cross product of the 1-D B-adic nodes."""

    def __init__(self, x: np.ndarray, m: int, B: int, eps: float, gen: np.random.Generator):
        x0 = np.asarray(x, dtype=np.int64) - 1
        self.B, self.h, self.n = B, _padded_depth(m, B), len(x0)
        h = self.h
        pairs = [(a, b) for a in range(h + 1) for b in range(h + 1) if (a, b) != (0, 0)]
        lev = _levels(x0, len(pairs), gen)
        self.est = {(0, 0): np.array([[float(self.n)]])}
        for k, (a, b) in enumerate(pairs):
            xs = x0[lev == k]
            i1, i2 = xs[:, 0] // B ** (h - a), xs[:, 1] // B ** (h - b)
            cnt = np.bincount(i1 * B**b + i2, minlength=B ** (a + b))
            e = self.n / max(1, len(xs)) * oue_estimate_counts(cnt, eps, gen)
            self.est[(a, b)] = e.reshape(B**a, B**b)

    def range(self, l1: int, r1: int, l2: int, r2: int) -> float:
        n1, n2 = _nodes(l1, r1, self.B, self.h), _nodes(l2, r2, self.B, self.h)
        return float(sum(self.est[(a, b)][u, v] for a, u in n1 for b, v in n2))
