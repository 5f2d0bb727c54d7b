"""Serving entry point: private HAVING / approximate top-c key selection with SVT-Exp
(SVT spec Sec. 7). Only the set of selected candidate positions (top answers) is released.

    SELECT g FROM t GROUP BY g HAVING COUNT(*) > T  ->  svt_select(counts, T, max_keys, strict=True, ...)
    ... ORDER BY COUNT(*) DESC LIMIT c  (public T)  ->  svt_select(counts, T, c, ...)

``values`` must hold the exact aggregate of EVERY key of a public candidate domain (zero for
absent keys, SVT spec Sec. 7.2), never only the keys present in the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..rng import RandomSource, default_source
from .exact import snap_grid, to_grid
from .svt_exp import SvtExp, shuffle_order

__all__ = ["QueryShape", "SvtResult", "svt_select", "DEFAULT_MAX_PASSES"]

DEFAULT_MAX_PASSES = 5


@dataclass(frozen=True)
class QueryShape:
    """Declared shape of the per-key aggregate, for sensitivity / monotonicity (SVT spec Sec. 7.3).

    aggregate: 'count' | 'count_distinct' | 'sum'; neighbouring: 'add_remove' | 'replace';
    lower/upper: per-row clamp bounds of SUM; cap: max rows one individual contributes per key;
    single_group: every individual touches at most one key (row-level privacy, rows in one group)."""

    aggregate: str = "count"
    neighbouring: str = "add_remove"
    lower: float = 0.0
    upper: float = 1.0
    cap: int = 1
    single_group: bool = True

    def __post_init__(self) -> None:
        if self.aggregate not in ("count", "count_distinct", "sum"):
            raise ValueError(f"unknown aggregate {self.aggregate!r}")
        if self.neighbouring not in ("add_remove", "replace"):
            raise ValueError(f"unknown neighbouring {self.neighbouring!r}")
        if self.lower > self.upper or self.cap < 1:
            raise ValueError("need lower <= upper and cap >= 1")

    @property
    def monotone(self) -> bool:
        """All answers move in one direction on every neighbouring pair (App. A)? Replace-one moves
        one key down and another up: never. Add/remove: COUNT yes; SUM if the clamped values share a
        sign or only one key changes."""
        if self.neighbouring == "replace":
            return False
        if self.aggregate != "sum":
            return True
        return self.single_group or self.lower >= 0 or self.upper <= 0

    @property
    def sensitivity(self) -> float:
        """Per-key Delta: COUNT cap; COUNT DISTINCT user 1; SUM cap*max(|L|,|U|) (add/remove) or
        cap*max(U-L, |L|, |U|) (replace: a row may stay in its key or move to another)."""
        if self.aggregate == "count_distinct":
            return 1.0
        if self.aggregate == "count":
            return float(self.cap)
        m = max(abs(self.lower), abs(self.upper))
        if self.neighbouring == "replace":
            m = max(m, self.upper - self.lower)
        return float(self.cap * m)


@dataclass(frozen=True)
class SvtResult:
    """indices: positions into ``values`` answered top (sorted; the data-independent shuffle
    order is not exposed); passes_used; epsilon: total charged (never depends on how many passed);
    incomplete: stopped at the cutoff c or k_max with candidates unanswered (more keys may pass);
    mechanism; params: public parameters to log (b, theta, r and sensitivity are in grid units
    when ``grid`` != 1)."""

    indices: list[int]
    passes_used: int
    epsilon: float
    incomplete: bool
    mechanism: str
    params: dict[str, Any] = field(default_factory=dict)


def svt_select(
    values: Sequence[float],
    threshold: float | Sequence[float],
    c: int | None,
    epsilon: float,
    sensitivity: float,
    monotone: bool,
    source: RandomSource | None = None,
    max_passes: int = DEFAULT_MAX_PASSES,
    resample: bool = False,
    *,
    strict: bool = False,
    shape: QueryShape | None = None,
    k: int | None = None,
    alpha: float = 0.0,
    k_max: int | None = None,
    exact: bool = True,
) -> SvtResult:
    """SVT-Exp key selection (Alg. 2 + APPEND, Table 4/6 split, optimal correction r_op).

    * candidate i is tested as ``values[i] >= threshold[i]`` (``strict=True``: ``>``);
      ``threshold`` is a scalar or one public threshold per candidate;
    * ``c``: cutoff (max keys returned), clamped to len(values); None means len(values) (correct
      but noisy: theta grows with c); ``epsilon``: total (eps1 + eps2, or c eps1 + eps2 with ``resample``);
    * ``monotone=True`` only if answers move one way on every neighbouring pair; if ``shape`` is
      given, a non-monotone shape with ``monotone=True``, or ``sensitivity`` < shape.sensitivity,
      raises ValueError;
    * candidates are shuffled with ``source`` (CSPRNG by default) -- the caller's order is ignored;
    * ``exact=True`` (default, serving): integer DLap/geometric noise on a grid (exact for integer
      COUNTs; non-integer inputs are snapped to g = 2^j with Delta/g in [1024, 2048), thresholds
      honoured to one grid unit); ``exact=False``: real-valued numpy noise from source.generator().
    """
    if shape is not None:
        if monotone and not shape.monotone:
            raise ValueError(f"monotone scale requested for a non-monotone query shape {shape}")
        if sensitivity < shape.sensitivity:
            raise ValueError(f"sensitivity {sensitivity} below the shape's {shape.sensitivity}")
    if int(max_passes) != max_passes or max_passes < 1:
        raise ValueError(f"max_passes must be an integer >= 1, got {max_passes!r}")
    src = source if source is not None else default_source()
    n = len(values)
    if c is not None and (isinstance(c, bool) or int(c) != c or c < 1):
        raise ValueError(f"c must be None or an integer >= 1, got {c!r}")
    # at most n tops can ever occur (a top is never re-asked), so calibrating to min(c, n) is sound
    c_eff = max(1, n if c is None else min(int(c), n))
    thr: list[Any] = list(threshold) if np.ndim(threshold) else [threshold] * n  # type: ignore[arg-type]
    if len(thr) != n:
        raise ValueError("need one threshold per candidate")
    grid: Fraction | None
    vals: list[Any]
    thr_used: list[Any]
    sens: float
    if exact:
        grid = snap_grid(values, thr, sensitivity)
        vals, thr_used, sens = to_grid(values, thr, sensitivity, strict, grid)
    else:
        if strict:
            thr = [float(np.nextafter(float(t), np.inf)) for t in thr]
        grid, vals, thr_used, sens = None, list(values), thr, sensitivity
    mech = SvtExp(epsilon, c_eff, sens, monotone=monotone, resample=resample, k=k, alpha=alpha, exact=exact)
    params = mech.params()
    params.update(grid=None if grid is None else float(grid), max_passes=int(max_passes))
    if n == 0:
        return SvtResult([], 0, mech.epsilon, False, mech.name, params)
    order = shuffle_order(n, src)
    t = mech.run(vals, thr_used, src, max_passes=int(max_passes), k_max=k_max, order=order)
    params.update(r=mech.correction_for(n), comparisons=t.comparisons, stop=t.reason)
    name = mech.name + ("_discrete" if exact else "")
    return SvtResult(sorted(t.selected), t.passes_used, mech.epsilon, t.incomplete, name, params)
