"""Shared helpers for tests/mechanisms (kept out of conftest on purpose)."""

from __future__ import annotations

import numpy as np
from scipy import stats

from mechanisms import RandomSource, SeededSource, dlap_cdf, dlap_pmf

ALLOWED = {"randbelow", "getrandbits", "bernoulli"}


class RecordingSource(RandomSource):
    """Seeded source that logs every call and refuses any other attribute
    (e.g. a float ``random()``), so float use is detectable."""

    def __init__(self, seed: int) -> None:
        object.__setattr__(self, "_inner", SeededSource(seed))
        object.__setattr__(self, "calls", [])

    def randbelow(self, n):
        self.calls.append(("randbelow", n))
        return self._inner.randbelow(n)

    def getrandbits(self, k):
        self.calls.append(("getrandbits", k))
        return self._inner.getrandbits(k)

    def bernoulli(self, num, den):
        self.calls.append(("bernoulli", num, den))
        return super().bernoulli(num, den)

    def __getattr__(self, name):  # only reached for attributes that do not exist
        raise AssertionError(f"mechanism asked the source for {name!r}")


def dlap_chisq_pvalue(samples, scale) -> float:
    """Chi-square GOF p-value of integer samples vs DLap(scale).

    Bins: each z in [-K, K] plus two pooled tails (z < -K, z > K); K is the
    largest value keeping every expected count >= 5 (Cochran's rule).
    """
    x = np.asarray(samples, dtype=np.int64)
    n = x.size
    k = 0
    while n * dlap_pmf(k + 1, scale) >= 5 and n * (1 - dlap_cdf(k + 1, scale)) >= 5:
        k += 1
    z = np.arange(-k, k + 1)
    probs = np.concatenate([[dlap_cdf(-k - 1, scale)], dlap_pmf(z, scale), [1 - dlap_cdf(k, scale)]])
    expected = n * probs / probs.sum()
    inner = np.bincount(x[np.abs(x) <= k] + k, minlength=2 * k + 1)
    observed = np.concatenate([[np.sum(x < -k)], inner, [np.sum(x > k)]])
    return float(stats.chisquare(observed, expected).pvalue)
