"""Exact output (transcript) probabilities of SVT-Exp on tiny inputs (SVT spec Sec. 1.6 check).

A transcript is the full sequence of (candidate, bit) comparisons in the fixed order 0..n-1 with
APPEND as passes -- the finest thing the mechanism can reveal; every released quantity (selected
set, passes, incomplete flag) is a function of it. Given rho = t the comparisons are independent:
P[top] = S(T_i + t + r - q_i), S(x) = P[v >= x] = exp(-max(x, 0)/theta) (geometric on the integers,
Exp on the reals). The threshold noise is summed (DLap, exact path) or integrated (Laplace).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.integrate import quad

from mechanisms import dlap_pmf


def transcripts(n: int, c: int, passes: int):
    """All transcripts of the engine's loop (order 0..n-1, cutoff c, ``passes`` passes)."""
    out = []

    def rec(p, todo, i, kept, nc, prefix):
        if i == len(todo):
            if p + 1 == passes or not kept:
                out.append(tuple(prefix))
            else:
                rec(p + 1, kept, 0, [], nc, prefix)
            return
        cand = todo[i]
        if nc + 1 >= c:
            out.append(tuple(prefix + [(cand, 1)]))
        else:
            rec(p, todo, i + 1, kept, nc + 1, prefix + [(cand, 1)])
        rec(p, todo, i + 1, kept + [cand], nc, prefix + [(cand, 0)])

    rec(0, list(range(n)), 0, [], 0, [])
    return out


def _segments(tr, resample):
    """Split after every top when the threshold noise is redrawn (RESAMPLE)."""
    if not resample:
        return [tr]
    segs, cur = [], []
    for x in tr:
        cur.append(x)
        if x[1]:
            segs.append(cur)
            cur = []
    return segs + ([cur] if cur else [])


def prob_discrete(tr, q, T, b, theta, r, resample=False):
    """Exact P[transcript] for the integer path: sum over rho in [-M, M] of DLap(b) pmf."""
    m = int(80 * b) + 50
    t = np.arange(-m, m + 1)
    w = dlap_pmf(t, b)
    total = 1.0
    for seg in _segments(tr, resample):
        f = np.ones_like(w)
        for i, bit in seg:
            s = np.exp(-np.maximum(T[i] + t + r - q[i], 0) / theta)
            f = f * (s if bit else 1.0 - s)
        total *= float(np.sum(w * f))
    return total


def prob_continuous(tr, q, T, b, theta, r):
    """P[transcript] for the real-valued mechanism (RESAMPLE=False): integral over rho ~ Lap(b)."""

    def integrand(t):
        f = math.exp(-abs(t) / b) / (2 * b)
        for i, bit in tr:
            s = math.exp(-max(T[i] + t + r - q[i], 0.0) / theta)
            f *= s if bit else 1.0 - s
        return f

    kinks = sorted({q[i] - T[i] - r for i in range(len(q))} | {0.0})
    lo, hi = -80 * b + min(kinks), 80 * b + max(kinks)
    val, _ = quad(integrand, lo, hi, points=kinks, limit=400, epsabs=0, epsrel=1e-11)
    return val


def max_log_ratio(prob, trs, q, shifts):
    """max over transcripts and neighbours q + d (d in ``shifts``) of |log P(q) - log P(q+d)|."""
    base = [prob(tr, q) for tr in trs]
    worst = 0.0
    for d in shifts:
        q2 = [a + e for a, e in zip(q, d)]
        for tr, p in zip(trs, base):
            worst = max(worst, abs(math.log(p) - math.log(prob(tr, q2))))
    return worst
