"""Per-record differential privacy (PrDP): Chen, Sun, Xu, Dong, "A General Framework
for Per-record Differential Privacy", SIGMOD 2025; spec /work/shared/specs/003_per_record.md.

Each record r has a public budget FUNCTION E(r) in [eps_min, eps_max] (its value is
private).  Records are partitioned by budget into L = ceil(log2(eps_max/eps_min))
domains (levels); noise in level i is calibrated to lo_i = 2^(i-1) eps_min <= E(r).

* privacy.py   -- E(v) shortcuts (inverse, sqrt, log) (their SQL: rewriter.per_record_sql)
* levels.py    -- levels and value buckets
* count.py     -- Algorithm 1 (PrDPCount), sum extension (ExtensionSum)
* framework.py -- Algorithm 2: FrameworkSum, FrameworkMax (two rounds)
* local.py     -- PrLDP, Algorithms 3-5

The naive and PDP baselines the benches compare with are ``bench.baselines.per_record``.
"""

from .core import LevelHistogram, PrRelease, first_passing
from .count import ExtensionSum, PrDPCount
from .framework import EpsTauEstimator, FrameworkMax, FrameworkSum, shifted_rank_max, universal_sum
from .levels import Levels, ValueBuckets
from .local import PrLDPCount, PrLDPFramework
from .privacy import PrivacyFunction, inverse_function, log_function, sqrt_function

__all__ = [
    "PrivacyFunction",
    "inverse_function",
    "sqrt_function",
    "log_function",
    "Levels",
    "ValueBuckets",
    "LevelHistogram",
    "PrRelease",
    "first_passing",
    "PrDPCount",
    "ExtensionSum",
    "EpsTauEstimator",
    "FrameworkSum",
    "FrameworkMax",
    "universal_sum",
    "shifted_rank_max",
    "PrLDPCount",
    "PrLDPFramework",
]
