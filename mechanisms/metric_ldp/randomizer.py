"""Client-side randomizer (data producer side): no server, no SQL, no I/O.

Only numpy + a :class:`mechanisms.rng.RandomSource`. Perturb each record ONCE and keep
only the report (spec 7.9); queries over reports are post-processing.

M4 (paper 4.1, spec 3.1): per dimension d, thermometer bits t_d[j] = 1[bucket_d <= j],
j = 1..m_d (the paper's b_d = 2t - 1 in {-1,+1}), each flipped independently with
probability q~ = Q/2^32 >= 1/(e^eps_d + 1) (see :mod:`.spec`). Output: uint8 array of
shape (n, sum_d m_d) in :func:`report_columns` order. Privacy (Prop. 4): exactly
|x_d - x'_d| thermometer positions differ in dimension d, each contributing a likelihood
ratio of at most (1-q~)/q~ <= e^eps_d, so the loss is <= sum_d eps_d |x_d - x'_d|.

M3 / M2 (paper 3.3 / 3.2) are 1-D alternatives in :mod:`.laplace` (dispatched here).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ..rng import RandomSource, default_source
from .laplace import perturb_laplace
from .spec import FLIP_BITS, GroupSpec, bucketize

__all__ = ["thermometer", "perturb", "perturb_buckets", "round_weights", "report_probability", "CHUNK_ROWS"]

CHUNK_ROWS = 1 << 16  # rows per vectorised chunk (bounds memory at ~4 bytes * width * chunk)


def thermometer(buckets: np.ndarray, m: int) -> np.ndarray:
    """(n, m) uint8 with t[i, j-1] = 1[buckets[i] <= j] (spec 3.1 step 1, 0/1 form)."""
    b = np.asarray(buckets, dtype=np.int64).reshape(-1, 1)
    return (b <= np.arange(1, m + 1, dtype=np.int64)[None, :]).astype(np.uint8)


def _flip_mask(shape: tuple[int, ...], flip_num: int, gen: np.random.Generator) -> np.ndarray:
    """Independent flips: U < Q with U exactly uniform on [0, 2^32) (numpy masked rejection)."""
    u = gen.integers(0, 1 << FLIP_BITS, size=shape, dtype=np.uint32)
    flips: np.ndarray = u < np.uint32(flip_num)
    return flips


def round_weights(w: np.ndarray, delta: float, gen: np.random.Generator) -> np.ndarray:
    """Private weight -> bucket in {1, 2}: 2 with probability clip(w, 0, Delta)/Delta
    (paper 4.3.2, spec 3.9); E[Delta * 1[bucket = 2]] = w, so Delta*c(R x [2,2]) is unbiased."""
    w = np.clip(np.asarray(w, dtype=float), 0.0, delta)
    if np.isnan(w).any():
        raise ValueError("NaN/NULL weights cannot be rounded; exclude them first")
    return np.where(gen.random(w.shape) < w / delta, 2, 1).astype(np.int64)


def _m4_chunk(x: np.ndarray, spec: GroupSpec, gen: np.random.Generator) -> np.ndarray:
    parts = []
    for d, dim in enumerate(spec.dims):
        t = thermometer(x[:, d], dim.m)
        parts.append(t ^ _flip_mask(t.shape, dim.flip_num, gen).view(np.uint8))
    return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]


def perturb_buckets(
    buckets: np.ndarray,
    spec: GroupSpec,
    source: RandomSource | None = None,
    gen: np.random.Generator | None = None,
) -> np.ndarray:
    """Randomise records already mapped to buckets (n x D ints, 1-based) -> reports.

    ``gen`` is for callers that already hold a generator drawn from a source (e.g.
    :func:`perturb`); otherwise a fresh one is drawn from ``source`` (CSPRNG if None).
    """
    x = np.asarray(buckets, dtype=np.int64)
    if x.ndim == 1:
        x = x[:, None]
    if x.shape[1] != spec.D:
        raise ValueError(f"expected {spec.D} columns, got {x.shape[1]}")
    for d, dim in enumerate(spec.dims):
        if x.size and (x[:, d].min() < 1 or x[:, d].max() > dim.m):
            raise ValueError(f"bucket out of 1..{dim.m} in dimension {d}")
    if gen is None:
        gen = (source if source is not None else default_source()).generator()
    if spec.mechanism != "M4":
        return perturb_laplace(x[:, 0], spec, gen)
    out = np.empty((x.shape[0], sum(spec.report_widths())), dtype=np.uint8)
    for s in range(0, x.shape[0], CHUNK_ROWS):
        out[s : s + CHUNK_ROWS] = _m4_chunk(x[s : s + CHUNK_ROWS], spec, gen)
    return out


def perturb(values: np.ndarray, spec: GroupSpec, source: RandomSource | None = None) -> np.ndarray:
    """Bucket raw values (n x D; NaN refused, out-of-domain clamped) and randomise.

    Weight dimensions (``kind="weight"``) take the raw weight in [0, Delta] and are
    rounded at random first. Returns the reports (see :func:`.spec.report_columns`).
    """
    v = np.asarray(values, dtype=float)
    if v.ndim == 1:
        v = v[:, None]
    if v.shape[1] != spec.D:
        raise ValueError(f"expected {spec.D} columns, got {v.shape[1]}")
    gen = (source if source is not None else default_source()).generator()
    cols = []
    for d, dim in enumerate(spec.dims):
        if dim.kind == "weight":
            cols.append(round_weights(v[:, d], dim.hi, gen))
        else:
            cols.append(bucketize(v[:, d], dim))
    return perturb_buckets(np.stack(cols, axis=1), spec, gen=gen)


def report_probability(buckets: Sequence[int], report: Sequence[int], spec: GroupSpec) -> Fraction:
    """Exact P[M4 report = ``report`` | record in ``buckets``] under the realised q~ = Q/2^32.

    The law of :func:`perturb_buckets` (thermometer + independent threshold flips);
    used by the privacy-ratio enumeration tests.
    """
    if spec.mechanism != "M4":
        raise ValueError("report_probability is for M4")
    prob = Fraction(1)
    for d, dim in enumerate(spec.dims):
        q = Fraction(dim.flip_num, 2**FLIP_BITS)
        t = thermometer(np.array([buckets[d]]), dim.m)[0]
        r = np.asarray(report[spec.column_slices()[d]], dtype=np.uint8)
        flips = int(np.sum(t != r))
        prob *= q**flips * (1 - q) ** (dim.m - flips)
    return prob
