"""dpgate.mechanisms -- pure-math central-DP measurements (add-remove model).

Randomness only via :mod:`mechanisms.rng` sources (CSPRNG for serving);
exact integer samplers in :mod:`mechanisms.samplers`; measurements expose
their privacy map as code. See the add-remove mean spec (/work/shared/specs/001_mean_addremove.md) sections 1.1, 2.1-2.2.
"""

from .average import SplitAverage
from .composition import Sequential, compose, parallel_epsilon, split
from .dlap import dlap_cdf, dlap_half_width, dlap_logpmf, dlap_pmf, dlap_tail, dlap_variance
from .measurements import GeometricCount, LaplaceSum, Measurement, Release, as_epsilon
from .rng import RandomSource, SeededSource, SystemRandomSource, default_source
from .samplers import bernoulli_exp, discrete_laplace

__all__ = [
    "RandomSource",
    "SystemRandomSource",
    "SeededSource",
    "default_source",
    "bernoulli_exp",
    "discrete_laplace",
    "dlap_pmf",
    "dlap_logpmf",
    "dlap_cdf",
    "dlap_tail",
    "dlap_variance",
    "dlap_half_width",
    "Release",
    "Measurement",
    "GeometricCount",
    "LaplaceSum",
    "SplitAverage",
    "as_epsilon",
    "Sequential",
    "compose",
    "parallel_epsilon",
    "split",
]
