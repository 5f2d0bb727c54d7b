"""Randomness sources for DP mechanisms.

Every mechanism draws randomness *only* through a :class:`RandomSource` passed
to it. Sources expose integer-valued primitives only (no ``random()`` float
method), so exact samplers can be checked to be float-free.

* :class:`SystemRandomSource` -- CSPRNG (``secrets`` / ``os.urandom``); the only
  source to use when serving. :func:`default_source` returns one.
* :class:`SeededSource` -- deterministic, seeded; for tests/reproducibility
  only, never for serving (a known seed makes the noise removable).
"""

from __future__ import annotations

import operator
import random
import secrets
from abc import ABC, abstractmethod

__all__ = ["RandomSource", "SystemRandomSource", "SeededSource", "default_source"]


class RandomSource(ABC):
    """Integer-only randomness interface (arbitrary-size Python ints)."""

    @abstractmethod
    def randbelow(self, n: int) -> int:
        """Exactly uniform integer in ``[0, n)``; ``n >= 1``."""

    @abstractmethod
    def getrandbits(self, k: int) -> int:
        """Uniform integer in ``[0, 2**k)``."""

    def bernoulli(self, num: int, den: int) -> bool:
        """Exact Bernoulli(num/den) for integers ``0 <= num <= den``, ``den >= 1``."""
        num, den = operator.index(num), operator.index(den)
        if den < 1 or not 0 <= num <= den:
            raise ValueError(f"need 0 <= num <= den, den >= 1; got {num}/{den}")
        return self.randbelow(den) < num

    def generator(self):
        """A numpy ``Generator`` (PCG64) seeded with 256 bits drawn from this source,
        for continuous noise and simulations. Make a fresh one per release: its
        state then never outlives the draw, and with the system source its seed
        comes from the OS CSPRNG."""
        import numpy as np
        return np.random.Generator(np.random.PCG64(self.getrandbits(256)))

    @staticmethod
    def _check_n(n: int) -> int:
        n = operator.index(n)
        if n < 1:
            raise ValueError(f"randbelow needs n >= 1, got {n}")
        return n


class SystemRandomSource(RandomSource):
    """Cryptographically secure source backed by the OS CSPRNG (``secrets``).

    Stateless and unseedable by design.
    """

    def randbelow(self, n: int) -> int:
        return secrets.randbelow(self._check_n(n))

    def getrandbits(self, k: int) -> int:
        return secrets.randbits(operator.index(k))

    def __repr__(self) -> str:
        return "SystemRandomSource()"


class SeededSource(RandomSource):
    """Deterministic source wrapping ``random.Random(seed)`` -- TESTS ONLY.

    ``Random.randrange`` uses rejection sampling on ``getrandbits``, so
    ``randbelow`` is exactly uniform for arbitrary-size ``n``.
    """

    def __init__(self, seed: int) -> None:
        self.seed = operator.index(seed)
        self._rng = random.Random(self.seed)

    def randbelow(self, n: int) -> int:
        return self._rng.randrange(self._check_n(n))

    def getrandbits(self, k: int) -> int:
        return self._rng.getrandbits(operator.index(k))

    def __repr__(self) -> str:
        return f"SeededSource(seed={self.seed})"


def default_source() -> SystemRandomSource:
    """The serving source: a fresh OS-CSPRNG-backed :class:`SystemRandomSource`."""
    return SystemRandomSource()
