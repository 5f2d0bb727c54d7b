"""Randomness sources for DP mechanisms.

Every mechanism draws randomness *only* through a :class:`RandomSource` passed
to it. Sources expose integer-valued primitives only (no ``random()`` float
method), so exact samplers can be checked to be float-free.

* :class:`SystemRandomSource` -- CSPRNG (``os.urandom``, read in blocks); the only
  source to use when serving. :func:`default_source` returns one.
* :class:`SeededSource` -- deterministic, seeded; for tests/reproducibility
  only, never for serving (a known seed makes the noise removable).
"""

from __future__ import annotations

import operator
import os
import random
import threading
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
        if type(num) is not int or type(den) is not int:
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


_FORK = [0]        # bumped in a forked child: its buffers must not repeat the parent's bytes
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _FORK.__setitem__(0, _FORK[0] + 1))


class SystemRandomSource(RandomSource):
    """Cryptographically secure source backed by the OS CSPRNG (``os.urandom``).

    Stateless and unseedable by design. Bytes are read from the kernel in
    blocks of 4 KiB per thread (one system call per ~1,000 draws instead of
    one per draw; an exact sampler makes dozens of draws per release); each
    byte is handed out once, and a forked child never reuses its parent's
    block. ``randbelow`` is exact rejection sampling on ``bit_length(n - 1)``
    bits (expected < 2 tries), like :func:`secrets.randbelow`.
    """

    _BLOCK = 4096

    def __init__(self) -> None:
        self._local = threading.local()

    def _take(self, k: int) -> bytes:
        st = getattr(self._local, "s", None)          # [block, position, fork generation]
        if st is None or st[1] + k > len(st[0]) or st[2] != _FORK[0]:
            st = self._local.s = [os.urandom(max(self._BLOCK, k)), 0, _FORK[0]]
        pos = st[1]
        st[1] = pos + k
        return st[0][pos:pos + k]

    def getrandbits(self, k: int) -> int:
        k = operator.index(k)
        if k <= 0:
            if k < 0:
                raise ValueError("number of bits must be non-negative")
            return 0
        nbytes = (k + 7) >> 3
        return int.from_bytes(self._take(nbytes), "little") >> (8 * nbytes - k)

    def randbelow(self, n: int) -> int:
        if type(n) is not int:
            n = operator.index(n)
        if n < 1:
            raise ValueError(f"randbelow needs n >= 1, got {n}")
        k = (n - 1).bit_length()
        if k == 0:
            return 0
        nbytes = (k + 7) >> 3
        shift = 8 * nbytes - k
        if nbytes > 64:
            return self._randbelow_big(n, nbytes, shift)
        st = getattr(self._local, "s", None)          # the block read inline (hot: exact samplers)
        while True:
            if st is None or st[1] + nbytes > len(st[0]) or st[2] != _FORK[0]:
                st = self._local.s = [os.urandom(max(self._BLOCK, nbytes)), 0, _FORK[0]]
            pos = st[1]
            st[1] = pos + nbytes
            r = (st[0][pos] if nbytes == 1 else int.from_bytes(st[0][pos:pos + nbytes], "little")) >> shift
            if r < n:
                return r

    def _randbelow_big(self, n: int, nbytes: int, shift: int) -> int:
        take, from_bytes = self._take, int.from_bytes
        while True:
            r = from_bytes(take(nbytes), "little") >> shift
            if r < n:
                return r

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
