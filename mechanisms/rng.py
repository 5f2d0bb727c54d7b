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
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

if TYPE_CHECKING:  # numpy is imported where an array is drawn, not when the module loads
    import numpy as np
    from numpy.typing import NDArray

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

    # -- vectorised forms (one coin per row, rows independent; the same exact laws) --------
    def bits64(self, n: int) -> NDArray[np.uint64]:
        """``n`` independent uniform 64-bit words (numpy uint64)."""
        import numpy as np

        return np.fromiter((self.getrandbits(64) for _ in range(n)), dtype=np.uint64, count=n)

    def randbelow_array(self, size: int, m: int) -> NDArray[np.int64]:
        """``size`` independent exactly uniform integers in ``[0, m)`` (int64), ``m <= 2**63``:
        rejection sampling on ``bit_length(m - 1)`` bits, redrawing only the rejected rows."""
        import numpy as np

        m = self._check_n(m)
        k = (m - 1).bit_length()
        if k > 63:
            raise ValueError(f"randbelow_array needs m <= 2**63, got {m}")
        out = np.zeros(size, dtype=np.int64)
        if k == 0:
            return out
        todo = np.arange(size)
        while todo.size:
            r = (self.bits64(todo.size) >> np.uint64(64 - k)).astype(np.int64)
            ok = r < m
            out[todo[ok]] = r[ok]
            todo = todo[~ok]
        return out

    def bernoulli_array(self, size: int, num: int, den: int) -> NDArray[np.bool_]:
        """``size`` independent exact Bernoulli(num/den) coins (bool): with U uniform in [0, 1)
        and u its first 64 bits, U < num/den is decided by u against P = floor(2^64 num/den)
        unless u == P (probability 2^-64), where the remaining bits decide it exactly
        (:meth:`bernoulli` on the remainder 2^64 num/den - P)."""
        import numpy as np

        num, den = operator.index(num), operator.index(den)
        if den < 1 or not 0 <= num <= den:
            raise ValueError(f"need 0 <= num <= den, den >= 1; got {num}/{den}")
        if num == den:
            return np.ones(size, dtype=bool)
        P = (num << 64) // den  # < 2^64 since num < den
        u = self.bits64(size)
        out = u < np.uint64(P)
        for i in np.flatnonzero(u == np.uint64(P)):
            out[i] = self.bernoulli((num << 64) - P * den, den)
        return out

    def generator(self) -> np.random.Generator:
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


_FORK = [0]  # bumped in a forked child: its buffers must not repeat the parent's bytes
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

    ``bits64`` of a whole release (``_STREAM_WORDS`` words or more: :mod:`mechanisms.batch`'s
    samplers) reads the ChaCha20 keystream under a fresh 256-bit key from ``os.urandom``
    (RFC 8439; the construction of the kernel's own generator): one system call per release
    instead of one per block (``bench.cells`` measures it), indistinguishable from uniform bytes
    as long as ChaCha20 is a PRF, the assumption ``os.urandom`` already rests on. The key
    is used once and dropped, so nothing outlives the call and a fork cannot repeat it.
    """

    _BLOCK = 4096
    _STREAM_WORDS = 512

    def __init__(self) -> None:
        self._local = threading.local()

    def _take(self, k: int) -> bytes:
        st = getattr(self._local, "s", None)  # [block, position, fork generation]
        if st is None or st[1] + k > len(st[0]) or st[2] != _FORK[0]:
            st = self._local.s = [os.urandom(max(self._BLOCK, k)), 0, _FORK[0]]
        block: bytes = st[0]
        pos = st[1]
        st[1] = pos + k
        return block[pos : pos + k]

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
        st = getattr(self._local, "s", None)  # the block read inline (hot: exact samplers)
        while True:
            if st is None or st[1] + nbytes > len(st[0]) or st[2] != _FORK[0]:
                st = self._local.s = [os.urandom(max(self._BLOCK, nbytes)), 0, _FORK[0]]
            pos = st[1]
            st[1] = pos + nbytes
            r = (st[0][pos] if nbytes == 1 else int.from_bytes(st[0][pos : pos + nbytes], "little")) >> shift
            if r < n:
                return r

    def bits64(self, n: int) -> NDArray[np.uint64]:
        import numpy as np

        if n >= self._STREAM_WORDS:
            cipher = Cipher(algorithms.ChaCha20(os.urandom(32), bytes(16)), mode=None)
            data = cipher.encryptor().update(bytes(8 * n))
        else:
            data = os.urandom(8 * n)
        return np.frombuffer(data, dtype="<u8").astype(np.uint64)

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
