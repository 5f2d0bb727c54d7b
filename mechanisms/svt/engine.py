"""The SVT loop (Alg. 1 / Alg. 2 with APPEND as bounded passes; SVT spec Sec. 1.2, 2.1, 2.4).

One pass compares every still-negative candidate, in a fixed data-independent order, against the
current noisy threshold: q_i + v_i >= T_i + rho + r. A positive answer (top) is final; negatives are
re-asked in the next pass with fresh noise (APPEND, Sec. 4.4). Halts at c positives, after
``k_max`` comparisons (checked after every comparison, SVT spec Sec. 1.2 note) or after
``max_passes`` passes (SVT spec Sec. 6 item 11).

Noise is drawn a pass (segment) at a time; the draws are i.i.d. and the output is a function of
the draws actually compared, so this has exactly the law of the one-at-a-time loop. With RESAMPLE
the threshold noise is redrawn after every positive and the rest of the pass is re-drawn.
Only the transcript (which candidates were positive, when) leaves this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Transcript", "run_passes"]


@dataclass
class Transcript:
    """Everything derived from the released bit stream (free post-processing).

    ``selected``: positions (into ``values``) answered top, in answer order;
    ``passes_used``: passes started; ``comparisons``: n_a; ``reason``: 'cutoff' | 'k_max' |
    'passes' | 'exhausted'; ``per_pass``: number selected after each completed pass."""

    selected: list[int]
    passes_used: int
    comparisons: int
    reason: str
    per_pass: list[int] = field(default_factory=list)

    @property
    def incomplete(self) -> bool:
        """True if the run stopped before every candidate got ``max_passes`` chances
        (cutoff c or k_max reached with candidates still unanswered)."""
        return self.reason in ("cutoff", "k_max")


def run_passes(
    values: np.ndarray,
    thresholds: np.ndarray,
    order: np.ndarray,
    *,
    c: int,
    r: float,
    draw_rho: Callable[[], object],
    draw_noise: Callable[[int], np.ndarray],
    max_passes: int,
    k_max: int,
    resample: bool = False,
) -> Transcript:
    """Run SVT over ``order`` (a data-independent permutation of positions).

    ``values``/``thresholds``: arrays indexed by position (float, or object arrays of Python
    ints for the exact path); ``r``: public correction added to the noisy threshold."""
    if c < 1 or max_passes < 1 or k_max < 1:
        raise ValueError("need c, max_passes, k_max >= 1")
    remaining = np.asarray(order, dtype=np.int64)
    selected: list[int] = []
    per_pass: list[int] = []
    n_a = 0
    rho = draw_rho()
    passes = 0
    for _ in range(max_passes):
        if remaining.size == 0:
            return Transcript(selected, passes, n_a, "exhausted", per_pass)
        if n_a >= k_max:
            return Transcript(selected, passes, n_a, "k_max", per_pass)
        passes += 1
        todo = remaining[: k_max - n_a]
        keep = np.ones(todo.size, dtype=bool)
        start = 0
        while start < todo.size:
            seg = todo[start:]
            top = values[seg] + draw_noise(seg.size) >= thresholds[seg] + rho + r
            hits = np.flatnonzero(top)
            need = c - len(selected)
            if resample:
                hits = hits[:1]
            if hits.size >= need:  # cutoff reached inside this segment
                take = hits[:need]
                selected.extend(int(i) for i in seg[take])
                n_a += int(take[-1]) + 1
                return Transcript(selected, passes, n_a, "cutoff", per_pass)
            selected.extend(int(i) for i in seg[hits])
            keep[start + hits] = False
            if resample and hits.size:
                n_a += int(hits[0]) + 1
                start += int(hits[0]) + 1
                rho = draw_rho()
            else:
                n_a += seg.size
                start = todo.size
        per_pass.append(len(selected))
        if todo.size < remaining.size:  # truncated by k_max
            return Transcript(selected, passes, n_a, "k_max", per_pass)
        remaining = todo[keep]
    reason = "exhausted" if remaining.size == 0 else "passes"
    return Transcript(selected, passes, n_a, reason, per_pass)
