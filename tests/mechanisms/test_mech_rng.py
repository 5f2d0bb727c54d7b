import pytest

from mechanisms import RandomSource, SeededSource, SystemRandomSource, default_source


def test_default_source_is_system_csprng():
    src = default_source()
    assert type(src) is SystemRandomSource
    assert isinstance(src, RandomSource)
    assert not hasattr(src, "seed")  # unseedable by construction


def test_fresh_system_sources_give_different_streams():
    a, b = default_source(), default_source()
    # 128-bit draws collide with probability 2^-128.
    assert a.getrandbits(128) != b.getrandbits(128)
    assert a.randbelow(1 << 128) != b.randbelow(1 << 128)


def test_system_source_reads_os_urandom(monkeypatch):
    import os

    calls = []

    def fake(n):
        calls.append(n)
        return bytes([0x2A]) * n

    monkeypatch.setattr(os, "urandom", fake)
    src = SystemRandomSource()
    assert src.getrandbits(8) == 0x2A and src.getrandbits(4) == 0x2
    assert src.randbelow(7) == 0x2A >> 5  # 3 bits of 0x2A = 0b001
    assert calls == [SystemRandomSource._BLOCK]  # one kernel read serves many draws


def test_system_source_block_refill_and_uniformity(monkeypatch):
    """randbelow(7) over several 4 KiB blocks: chi-square with 6 df stays below its
    0.999 quantile (22.46); a biased reduction (e.g. byte % 7) would fail at this n.
    The kernel's bytes are replaced by seeded uniform bytes, so the test is fixed."""
    import os
    import random

    monkeypatch.setattr(os, "urandom", random.Random(20261123).randbytes)
    src = SystemRandomSource()
    n = 70_000
    counts = [0] * 7
    for _ in range(n):
        counts[src.randbelow(7)] += 1
    chi2 = sum((c - n / 7) ** 2 / (n / 7) for c in counts)
    assert chi2 < 22.46


def test_system_source_forked_child_does_not_reuse_parent_bytes():
    import os

    src = SystemRandomSource()
    src.getrandbits(8)  # the parent now holds a partly used block
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next draw
        os.close(r)
        os.write(w, src.getrandbits(128).to_bytes(16, "little"))
        os._exit(0)
    os.close(w)
    child = int.from_bytes(os.read(r, 16), "little")
    os.waitpid(pid, 0)
    assert child != src.getrandbits(128)  # equal only if the block were shared (or p = 2^-128)


def test_seeded_source_is_deterministic():
    a, b, c = SeededSource(42), SeededSource(42), SeededSource(43)
    xa = [a.randbelow(10**30) for _ in range(5)]
    assert xa == [b.randbelow(10**30) for _ in range(5)]
    assert xa != [c.randbelow(10**30) for _ in range(5)]


def test_seeded_source_requires_int_seed():
    with pytest.raises(TypeError):
        SeededSource()  # no implicit seed
    with pytest.raises(TypeError):
        SeededSource(1.5)


@pytest.mark.parametrize("src", [SeededSource(0), SystemRandomSource()])
def test_randbelow_range_and_big_ints(src):
    n = (1 << 200) + 12345
    xs = [src.randbelow(n) for _ in range(200)]
    assert all(type(x) is int and 0 <= x < n for x in xs)
    assert max(xs) > n // 2  # P(fail) = 2^-200
    assert {src.randbelow(3) for _ in range(200)} == {0, 1, 2}
    with pytest.raises(ValueError):
        src.randbelow(0)


def test_bernoulli_exact_and_validated():
    src = SeededSource(1)
    n = 200_000
    freq = sum(src.bernoulli(1, 3) for _ in range(n)) / n
    # 5 binomial standard errors: 5 * sqrt(p (1-p) / n)
    assert abs(freq - 1 / 3) < 5 * (1 / 3 * 2 / 3 / n) ** 0.5
    assert src.bernoulli(0, 5) is False and src.bernoulli(5, 5) is True
    for num, den in [(-1, 2), (3, 2), (1, 0)]:
        with pytest.raises(ValueError):
            src.bernoulli(num, den)
    with pytest.raises(TypeError):
        src.bernoulli(0.5, 1)


def test_system_source_randbelow_reads_each_byte_once(monkeypatch):
    """randbelow takes its bytes from the block in order, each once (1-byte, multi-byte
    and > 64-byte draws), refilling the block when it runs out."""
    import os

    blocks = []

    def counting(n):
        blocks.append(n)
        base = len(blocks) * 7
        return bytes((base + i) % 256 for i in range(n))

    monkeypatch.setattr(os, "urandom", counting)
    monkeypatch.setattr(SystemRandomSource, "_BLOCK", 8)
    src = SystemRandomSource()
    first = bytes((7 + i) % 256 for i in range(8))
    assert src.randbelow(256) == first[0]
    assert src.randbelow(1 << 16) == int.from_bytes(first[1:3], "little")
    assert src.randbelow(1 << 40) == int.from_bytes(first[3:8], "little")
    assert src.randbelow(256) == 14 and len(blocks) == 2  # a fresh block's first byte
    big = src.randbelow(1 << 800)  # 100 bytes: one read of its own
    assert blocks[-1] == 100 and big == int.from_bytes(bytes((21 + i) % 256 for i in range(100)), "little")


def test_system_source_forked_child_randbelow_differs():
    import os

    src = SystemRandomSource()
    src.randbelow(1000)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, src.randbelow(1 << 128).to_bytes(16, "little"))
        os._exit(0)
    os.close(w)
    child = int.from_bytes(os.read(r, 16), "little")
    os.waitpid(pid, 0)
    assert child != src.randbelow(1 << 128)


# -- vectorised draws (bits64, randbelow_array, bernoulli_array) ---------------------------------
def test_randbelow_array_uniform_and_exact_in_range(monkeypatch):
    """randbelow_array(n, 7) from seeded kernel bytes: chi-square (6 df) below its 0.999
    quantile 22.46; m = 1 gives zeros, m = 2^63 stays in range, m > 2^63 is refused."""
    import os
    import random

    import numpy as np

    monkeypatch.setattr(os, "urandom", random.Random(7).randbytes)
    src = SystemRandomSource()
    n = 70_000
    r = src.randbelow_array(n, 7)
    assert r.dtype == np.int64 and r.min() >= 0 and r.max() <= 6
    counts = np.bincount(r, minlength=7)
    assert ((counts - n / 7) ** 2 / (n / 7)).sum() < 22.46
    assert not src.randbelow_array(5, 1).any()
    assert (src.randbelow_array(100, 2**63) >= 0).all()
    with pytest.raises(ValueError):
        src.randbelow_array(3, 2**63 + 1)
    s = SeededSource(3).randbelow_array(2000, 5)  # the generic (getrandbits) path
    assert set(s.tolist()) == set(range(5))


class _Words(SeededSource):
    """A source whose 64-bit words are given (to reach the 2^-64 tie branch)."""

    def __init__(self, words):
        super().__init__(0)
        self.words = list(words)
        self.coins = []

    def bits64(self, n):
        import numpy as np

        out, self.words = self.words[:n], self.words[n:]
        return np.array(out, dtype=np.uint64)

    def bernoulli(self, num, den):
        self.coins.append((num, den))
        return num * 2 > den  # decides the tie: a visible, checkable rule


def test_bernoulli_array_decides_on_64_bits_and_ties_exactly():
    """P = floor(2^64 · 1/3): u < P is heads, u > P tails, u == P defers to the exact
    remainder 2^64/3 − P = 1/3 (bernoulli(1, 3))."""
    P = (1 << 64) // 3
    src = _Words([P - 1, P + 1, P, 0, (1 << 64) - 1])
    out = src.bernoulli_array(5, 1, 3)
    assert out.tolist() == [True, False, False, True, False]
    assert src.coins == [((1 << 64) - 3 * P, 3)] == [(1, 3)]
    src = _Words([(2 << 64) // 3])  # p = 2/3: remainder 2/3, heads
    assert src.bernoulli_array(1, 2, 3).tolist() == [True] and src.coins == [(2, 3)]
    assert SeededSource(1).bernoulli_array(4, 5, 5).all()
    assert not SeededSource(1).bernoulli_array(4, 0, 5).any()
    with pytest.raises(ValueError):
        SeededSource(1).bernoulli_array(4, 6, 5)


def test_bernoulli_array_rate(monkeypatch):
    """Bernoulli(1/3) on 90,000 seeded words: within 4.5 binomial sds of n/3."""
    import math
    import os
    import random

    monkeypatch.setattr(os, "urandom", random.Random(11).randbytes)
    n = 90_000
    hits = int(SystemRandomSource().bernoulli_array(n, 1, 3).sum())
    assert abs(hits - n / 3) < 4.5 * math.sqrt(n * (1 / 3) * (2 / 3))
