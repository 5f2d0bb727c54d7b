"""Budget composition helpers (pure eps-DP, add-remove model).

* Sequential composition (several aggregates over the SAME rows, e.g. one SQL
  statement with k aggregates): eps adds up -- :func:`compose`, :func:`split`.
* Parallel composition (aggregates over DISJOINT rows, e.g. the cells of a
  GROUP BY on a public/fixed key set): one added or removed row touches one
  cell, so the cost is the MAX over cells, not the sum -- :func:`parallel_epsilon`.
  This assumes the set of released group keys does not itself depend on the
  data (otherwise key release needs its own mechanism, e.g. thresholding).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

from .measurements import Measurement, Release, as_epsilon
from .rng import RandomSource, default_source
from .scalars import RealLike

__all__ = ["Sequential", "compose", "split", "parallel_epsilon"]


class Sequential:
    """Sequential composition of measurements on the same input.

    privacy_map(d_in) = sum_i map_i(d_in) (basic composition theorem).
    """

    name = "sequential"

    def __init__(self, measurements: Iterable[Measurement]) -> None:
        self.measurements = tuple(measurements)

    def privacy_map_exact(self, d_in: int) -> Fraction:
        return sum((m.privacy_map_exact(d_in) for m in self.measurements), Fraction(0))

    def privacy_map(self, d_in: int) -> float:
        return float(self.privacy_map_exact(d_in))

    @property
    def epsilon(self) -> float:
        return self.privacy_map(1)

    def release(self, true_values: Sequence[Any], source: RandomSource | None = None) -> tuple[Release, ...]:
        """Release each measurement on its own true value, in order."""
        if len(true_values) != len(self.measurements):
            raise ValueError("need one true value per measurement")
        src = source if source is not None else default_source()
        return tuple(m.release(v, src) for m, v in zip(self.measurements, true_values))

    def __repr__(self) -> str:
        return f"Sequential({list(self.measurements)!r})"


def compose(measurements: Iterable[Measurement]) -> Sequential:
    """Sequential composition; ``compose(ms).epsilon`` is the total eps (sum)."""
    return Sequential(measurements)


def parallel_epsilon(measurements: Iterable[Measurement], d_in: int = 1) -> float:
    """eps of measurements on DISJOINT partitions of the rows: the max.

    With d_in rows changed spread over cells as d_1 + ... = d_in and linear
    (pure-DP) maps, the total sum_i eps_i d_i <= max_i eps_i * d_in.
    """
    return max((m.privacy_map(d_in) for m in measurements), default=0.0)


def split(epsilon: RealLike, k: int) -> list[Fraction] | list[float]:
    """Split eps into k equal parts whose exact sum is <= eps.

    Fractions are split exactly; a float part is nudged down (``nextafter``)
    until k * part <= eps holds in exact arithmetic.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    total = as_epsilon(epsilon)
    if isinstance(epsilon, Fraction):
        return [total / k] * k
    part = float(epsilon) / k
    while k * Fraction(part) > total:
        part = math.nextafter(part, 0.0)
    return [part] * k
