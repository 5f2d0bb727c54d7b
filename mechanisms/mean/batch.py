"""The grid input (A, n) of many AVG cells at once, exactly (add-remove mean spec sections 3, 6.7).

:meth:`~mechanisms.mean.common.GridMean.grid_input` is A = floor(M s1 + 1/2),
s1 = (S - n l')/w', in exact rational arithmetic. :func:`grid_inputs` gives the same A for
a whole column:

* integer columns (l' = c and w' = e integers): A = (2 M (S - n c) + e) // (2e) in int64, for
  rows with 0 <= S - n c <= n e, when the maxima leave int64 room (checked with Python ints);
* float columns: x = M (S - n l')/w' + 1/2 in float64 with a PROVED error bound, and A =
  floor(x) only where the bound cannot cross an integer. With u = 2^-53, L = fl(l'),
  W = fl(w') and n < 2^53 exact: |fl(nL) - n l'| <= 2.01 u n|l'|; the difference d has
  |d - (S - n l')| <= u|S| + 3.02 u n|l'|; times M is exact (M = 2^k); dividing by W adds
  2.02 u relative; adding 1/2 adds u|x|. So |x~ - x| <= 6.1 u B + u <= 2^-50 (B + 1),
  B = M(|S| + n|l'|)/w'. A row is taken when floor(x~ - e) == floor(x~ + e) with
  e = 2^-48 (B~ + 1) (B~, B in floats, is within 6u of B: e exceeds the bound 3.9 times;
  B~ < 2^50 keeps e above 8 ulps of x~, so x~ +- e are computed within an ulp), and
  1 <= A <= M n - 1 (then s1 is in (0, n), where the exact path takes its fast branch);
  an empty cell (n = 0, S = 0) has A = 0.

Every other row (out of range, ambiguous, not a plain int/float, too large) goes through the
exact scalar ``grid_input`` -- which also raises for sums outside [n l, n u] as it does
today. Hence A is exactly the scalar A for every row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..measurements import int_column

__all__ = ["grid_inputs"]

_ROOM = 1 << 62

# The exact scalar ``grid_input``: (sum, count) -> (A, n).
GridInput = Callable[[tuple[Any, Any]], tuple[int, int]]


def _each(
    sums: Any, counts: Any, one: GridInput, a: np.ndarray, n: np.ndarray, rows: Sequence[int] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The exact scalar ``one`` for ``rows`` (numpy columns read as their Python values:
    ``tolist()``'s, made for the rows asked only when they are few — usually a handful of
    many, where converting whole columns would cost more than the rows)."""
    if len(rows) * 8 < len(counts):

        def value(col: Any, r: int) -> Any:
            return col[r].item() if isinstance(col, np.ndarray) else col[r]

        for r in rows:
            a[r], n[r] = one((value(sums, r), value(counts, r)))
        return a, n
    sums = sums.tolist() if isinstance(sums, np.ndarray) else sums
    counts = counts.tolist() if isinstance(counts, np.ndarray) else counts
    for r in rows:
        a[r], n[r] = one((sums[r], counts[r]))
    return a, n


def grid_inputs(
    sums: Any, counts: Any, grid: int, ratios: tuple[int, int, int, int], integer: bool, one: GridInput
) -> tuple[np.ndarray, np.ndarray]:
    """(A, n) int64 arrays for cells (sums[c], counts[c]); ``ratios`` = (c, d, e, f) with
    l' = c/d and w' = e/f; ``one`` is the exact scalar ``grid_input`` (module doc)."""
    size = len(counts)
    a = np.zeros(size, dtype=np.int64)
    n = int_column(counts)
    if n is None or (size and (int(n.min()) < 0 or int(n.max()) >= 1 << 53)):
        return _each(sums, counts, one, a, np.zeros(size, dtype=np.int64), range(size))
    n = n.copy()
    if not size:
        return a, n
    c, d, e, f = ratios
    if integer:
        s = int_column(sums)
        n_max = int(n.max())
        if (
            s is None
            or d != 1
            or f != 1
            or (int(np.abs(s).max()) + n_max * abs(c) + 1) * 2 * grid + e >= _ROOM
            or n_max * e >= _ROOM
        ):
            return _each(sums, counts, one, a, n, range(size))
        num = s - n * c
        ok = (num >= 0) & (num <= n * e)
        a = (2 * grid * num + e) // (2 * e)
    else:
        arr = np.asarray(sums)
        if (
            arr.ndim != 1
            or arr.dtype.kind not in "if"
            or (arr.dtype.kind == "i" and int(np.abs(arr).max()) >= 1 << 53)
        ):
            return _each(sums, counts, one, a, n, range(size))
        s = arr.astype(np.float64)
        big_l, big_w, nf = c / d, e / f, n.astype(np.float64)
        with np.errstate(all="ignore"):
            x = (s - nf * big_l) * grid / big_w + 0.5
            bound = (np.abs(s) + nf * abs(big_l)) * grid / big_w
            err = 2.0**-48 * (bound + 1.0)
            lo, hi = np.floor(x - err), np.floor(x + err)
            ok = np.isfinite(x) & (bound < 2.0**50) & (lo == hi)
            ok &= (lo >= 1) & (lo <= nf * grid - 1)
            empty = (n == 0) & (s == 0)  # an empty cell: A = 0 exactly
        a = np.where(ok, lo, 0).astype(np.int64)
        ok |= empty
    return _each(sums, counts, one, a, n, np.flatnonzero(~ok))
