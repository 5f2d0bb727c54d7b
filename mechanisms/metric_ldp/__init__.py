"""Local tables under metric LDP (E_L1-LDP): range, multi-dim range, linear and quantile
queries (Xiang, Ding, He, Zhou 2020; metric-LDP spec).

* :mod:`.spec` -- DimSpec/GroupSpec, bucketing, report table schema, guarantee.
* :mod:`.randomizer` -- standalone client randomizer (numpy + RandomSource only).
* :mod:`.queries`, :mod:`.estimators` -- separable queries -> affine terms of ONE aggregate
  (printed as SQL by :mod:`rewriter.local_sql`), numpy reference, exact variance, bounds and
  variance estimate.
* :mod:`.quantiles` -- all prefixes in one query + binary search (paper 4.4).
* :mod:`.postprocess` -- optional clip / isotonic CDF (spec 3.12, 8).
* :mod:`.laplace` -- M2/M3 alternatives; :mod:`.matrix` -- paper matrix form (tests).
  The eps-LDP baselines the benches compare with are ``bench.baselines.metric_ldp``.

No budget is charged at query time: reports are perturbed once at ingestion and every
query is post-processing (spec 7.9).
"""

from .estimators import (
    ESTIMATORS,
    affine_terms,
    dim_affine,
    estimate_numpy,
    notice_std,
    variance,
    variance_bounds,
    variance_estimate_numpy,
    variance_queries,
)
from .postprocess import clip_counts, isotonic, pava
from .quantiles import (
    QuantileResult,
    prefix_estimates_numpy,
    prefix_queries,
    prefix_width,
    quantile,
    quantile_error,
    quantile_error_bound,
    search,
)
from .queries import (
    POLICIES,
    Query,
    bucket_range_weights,
    linear_query,
    private_weight_sum_query,
    range_query,
    range_weights,
    value_range_query,
)
from .randomizer import perturb, perturb_buckets, report_probability, thermometer
from .spec import DimSpec, GroupSpec, bucketize, guarantee, guarantee_text, report_columns

__all__ = [
    "DimSpec",
    "GroupSpec",
    "bucketize",
    "report_columns",
    "guarantee",
    "guarantee_text",
    "thermometer",
    "perturb",
    "perturb_buckets",
    "report_probability",
    "Query",
    "POLICIES",
    "range_query",
    "linear_query",
    "range_weights",
    "value_range_query",
    "bucket_range_weights",
    "private_weight_sum_query",
    "ESTIMATORS",
    "dim_affine",
    "affine_terms",
    "estimate_numpy",
    "variance",
    "variance_bounds",
    "variance_queries",
    "variance_estimate_numpy",
    "notice_std",
    "prefix_queries",
    "prefix_width",
    "prefix_estimates_numpy",
    "quantile",
    "search",
    "QuantileResult",
    "quantile_error",
    "quantile_error_bound",
    "clip_counts",
    "isotonic",
    "pava",
]
