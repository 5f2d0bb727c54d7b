"""Multi-tier DP release: one chain answers every tier (multi-tier spec, paper arXiv:2606.15543).

Central DP: :func:`make_ladder` (Alg. 1 with tsg / msdlap / laplace / gaussian /
skellam residuals; DG and staircase refused), :class:`VectorLadder` (AVG via
seed-001 Algorithm 3, full eps per coordinate), bridge insertion (spec 9).
Local DP: :class:`SubsetLadder` (Alg. 2-5 with corrected beta, E1/E3).
Coalition loss of any set of tiers = max eps (Thm 4.1, DPI).
"""

from .continuous import Gaussian, Laplace, Skellam
from .families import REFUSED, TSG, MSDLap, NoiseFamily, tsg_residual, tsg_residual_weights
from .ladder import Ladder, SumGrid, VectorLadder, descending_levels, make_ladder, nearest_lower_level
from .registry import get_family
from .subset import (
    SubsetLadder,
    Template,
    estimate_counts,
    expansion,
    optimal_k,
    rescale,
    rescale_beta,
    rescale_beta_paper,
    subset_sample,
    subset_t_f,
    subset_variance,
)

__all__ = [
    "NoiseFamily",
    "TSG",
    "MSDLap",
    "Laplace",
    "Gaussian",
    "Skellam",
    "REFUSED",
    "get_family",
    "tsg_residual",
    "tsg_residual_weights",
    "Ladder",
    "make_ladder",
    "VectorLadder",
    "SumGrid",
    "nearest_lower_level",
    "descending_levels",
    "SubsetLadder",
    "Template",
    "estimate_counts",
    "expansion",
    "rescale",
    "rescale_beta",
    "rescale_beta_paper",
    "subset_sample",
    "subset_t_f",
    "subset_variance",
    "optimal_k",
]
