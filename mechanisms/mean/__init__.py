"""AVG (with free SUM/COUNT) in the add-remove model: Kulesza, Suresh, Wang 2024,
"Mean estimation in the add-remove model of differential privacy"
(arXiv:2312.06658); spec /work/shared/specs/001_mean_addremove.md.

Use :func:`make_mean`; every measurement takes ``(clamped_sum, count)`` of one
cell and returns a :class:`MeanRelease` (value = AVG, ``.sum``/``.count`` =
SUM and COUNT from the same draw, charged once).
"""

from __future__ import annotations

from typing import Literal

from ..scalars import RealLike
from .common import POLICY, GridMean, MeanRelease, mean_from_ratio
from .constants import gamma_star, gamma_tilde, mse_leading, sigma2, st2d_a2, st2d_coord_var, staircase_var
from .grid import GridHourglass
from .noise import DiscreteLaplace, Hourglass, Laplace, Staircase, Staircase2D
from .shifted import ShiftedLaplaceMean
from .transformed import HourglassMean, LaplaceTransformedMean

__all__ = [
    "make_mean",
    "MEAN_KINDS",
    "MeanRelease",
    "GridMean",
    "POLICY",
    "mean_from_ratio",
    "HourglassMean",
    "LaplaceTransformedMean",
    "ShiftedLaplaceMean",
    "GridHourglass",
    "Laplace",
    "DiscreteLaplace",
    "Staircase",
    "Hourglass",
    "Staircase2D",
    "gamma_star",
    "sigma2",
    "staircase_var",
    "st2d_a2",
    "st2d_coord_var",
    "gamma_tilde",
    "mse_leading",
]

MEAN_KINDS: dict[str, type[GridMean]] = {
    "hourglass": HourglassMean,
    "laplace_transformed": LaplaceTransformedMean,
    "shifted_laplace": ShiftedLaplaceMean,
}

MeanKind = Literal["hourglass", "laplace_transformed", "shifted_laplace"]


def make_mean(
    kind: MeanKind,
    epsilon: RealLike,
    lower: RealLike,
    upper: RealLike,
    integer: bool = False,
    clamp: bool = True,
) -> GridMean:
    """AVG measurement of the given kind; ``.name`` names it for NOTICE/EXPLAIN.

    ``hourglass`` (default in the proxy; optimal, Thm 3), ``laplace_transformed``
    (Alg. 3 + Laplace, Thm 1), ``shifted_laplace`` (Alg. 2). All cost ``epsilon``.
    Alg. 1 (independent noise, SmartNoise's method) is a baseline of the benches:
    ``bench.baselines.mean``. ``clamp = False``: the AVG unclamped (:class:`GridMean`).
    """
    try:
        cls = MEAN_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown mean mechanism {kind!r}; choose one of {sorted(MEAN_KINDS)}") from None
    m = cls(epsilon, lower, upper, integer)
    m.clamp = bool(clamp)
    return m
