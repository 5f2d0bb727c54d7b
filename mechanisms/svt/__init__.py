"""Sparse vector technique with exponential noise, SVT-Exp (Liu et al. 2024, arXiv 2407.20068;
SVT spec). Pure math: threshold/top-c key selection releasing only top/bottom decisions.

* :func:`svt_select` -- serving entry point (HAVING COUNT(*) > T, approximate top-c).
* :class:`SvtExp` -- Alg. 2 with its privacy map (Thm. 3), exact-integer or real-valued noise.
* :func:`r_op`, :func:`r_op_numerical` -- optimal correction (Eq. 9; Alg. 3/4), cached.
* :func:`gamma_cdf` -- CDF of Exp - Lap (Eq. 40); :func:`allocation` -- Table 4/6 split.
The SVT-Lap / SVT-Gum / SVT-Gau baselines the benches compare with are ``bench.baselines.svt``.
"""

from .correction import correction_term, log_success_probability, r_op, r_op_numerical
from .engine import Transcript, run_passes
from .exact import geometric
from .gamma import allocation, allocation_ratio, comparison_variance, gamma_cdf, gamma_logcdf, gamma_logsf
from .select import DEFAULT_MAX_PASSES, QueryShape, SvtResult, svt_select
from .svt_exp import SvtExp, shuffle_order

__all__ = [
    "svt_select",
    "SvtResult",
    "QueryShape",
    "DEFAULT_MAX_PASSES",
    "SvtExp",
    "shuffle_order",
    "Transcript",
    "run_passes",
    "geometric",
    "r_op",
    "r_op_numerical",
    "correction_term",
    "log_success_probability",
    "gamma_cdf",
    "gamma_logcdf",
    "gamma_logsf",
    "allocation",
    "allocation_ratio",
    "comparison_variance",
]
