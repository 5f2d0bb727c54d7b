"""Multi-tier Subset mechanism for categorical columns of local (LDP) tables
(seed 000 §5, spec §4 and §10 "LDP categorical columns").

What the ingestion path calls, per row and categorical column:

    ladder = SubsetLadder(d=len(domain), epsilons=<the ladder's tier ε>, variant=2)   # once, config time
    report = perturb_row_subset(ladder, value, source=gw.source, domain=domain)      # per row, ONCE
    # store ``report`` (JSON) instead of the value; discard the value

``report`` maps every tier level to that tier's k-subset and the matched
template (level as the exact rational rho = e^level, k, d). The row is pushed
through ONE data-independent program (Expansion / Rescale with the corrected
β, erratum E1), so every tier's report is a post-processing of the highest
one: any coalition of tiers learns at most the highest ε it holds (ε-LDP per
row). Re-randomising a row later would be an independent release and compose.

What the query path calls for ``COUNT(*) … GROUP BY cat`` of a role's tier:

    estimate_group_counts(reports, tier_eps, domain=domain)      # {value: estimate}

debiased with the matched template's (t, f), never with the nominal tier ε
(pitfall 10). :func:`estimate_from_counts` does the same from per-category
counts (e.g. computed by the backend) and :func:`tier_template` gives the
metadata (level, k, t, f, variance) for EXPLAIN / NOTICE.
"""
from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction
from typing import Iterable, Sequence

from mechanisms.multitier import SubsetLadder, subset_t_f, subset_variance
from mechanisms.rng import RandomSource

__all__ = ["perturb_row_subset", "estimate_group_counts", "estimate_from_counts", "tier_template",
           "report_key", "subset_bits"]


def report_key(eps: float) -> str:
    """The key of a tier level in a stored report (repr of the float ε)."""
    return repr(float(eps))


def _frac(s: str) -> Fraction:
    return Fraction(s)


def perturb_row_subset(ladder: SubsetLadder, value, *, source: RandomSource,
                       domain: Sequence | None = None) -> dict:
    """Perturb one categorical value ONCE for the whole ladder → a JSON-able report.

    ``value`` is a member of ``domain`` (or a 0-based index when ``domain`` is
    None). Returns ``{repr(tier ε): {"subset": [indices], "rho": "p/q", "k": k,
    "level": float, "d": d}}``; the raw value is not in it."""
    if domain is not None:
        try:
            x = list(domain).index(value)
        except ValueError:
            raise ValueError(f"{value!r} is not in the column's declared domain") from None
        if len(domain) != ladder.d:
            raise ValueError(f"domain has {len(domain)} values but the ladder has d = {ladder.d}")
    else:
        x = int(value)
    out = {}
    for eps, (subset, tpl) in ladder.perturb(x, source).items():
        out[report_key(eps)] = {"subset": sorted(subset), "rho": f"{tpl.rho.numerator}/{tpl.rho.denominator}",
                                "k": tpl.k, "level": tpl.level, "d": ladder.d}
    return out


def subset_bits(report: dict, tier_eps: float) -> list[int]:
    """A tier's report as d bits (bit j = category j is in the subset), for a
    reports table with one 0/1 column per (tier, category): the backend then
    sums the bits per category and :func:`estimate_from_counts` debiases them."""
    e = _entry(report, float(tier_eps))
    bits = [0] * e["d"]
    for j in e["subset"]:
        bits[j] = 1
    return bits


def _entry(report: dict, tier_eps: float) -> dict:
    """The report entry a tier may use: its own level, else the nearest lower one
    (a tier added after ingestion, App. H); never a higher level."""
    k = report_key(tier_eps)
    if k in report:
        return report[k]
    below = [float(e) for e in report if float(e) <= tier_eps]
    if not below:
        raise ValueError(f"no stored level <= ε {tier_eps:g} in this report")
    return report[report_key(max(below))]


def estimate_from_counts(counts: Sequence[float], n: int, d: int, rho, k: int) -> list[float]:
    """chat_j = (count_j − n f)/(t − f) with the template's (t, f) (spec §4.2)."""
    t, f = (float(v) for v in subset_t_f(Fraction(rho), k, d))
    return [(c - n * f) / (t - f) for c in counts]


def estimate_group_counts(reports: Iterable[dict], tier_eps: float, *, domain: Sequence | None = None) -> dict:
    """``COUNT(*) GROUP BY cat`` for tier ``tier_eps`` from stored reports.

    Rows are grouped by the template they were debiased with (a ladder change
    between ingestions gives several); each group's estimate is unbiased, so
    their sum is. Returns ``{domain value (or index): estimated count}``."""
    groups: dict = defaultdict(lambda: None)
    d = None
    for rep in reports:
        e = _entry(rep, float(tier_eps))
        d = e["d"] if d is None else d
        if e["d"] != d:
            raise ValueError("reports of different domain sizes cannot be combined")
        key = (e["rho"], e["k"])
        acc = groups[key]
        if acc is None:
            acc = groups[key] = [[0] * d, 0]
        for j in e["subset"]:
            acc[0][j] += 1
        acc[1] += 1
    if d is None:
        d = len(domain) if domain is not None else 0
    total = [0.0] * d
    for (rho, k), (counts, n) in groups.items():
        for j, v in enumerate(estimate_from_counts(counts, n, d, _frac(rho), k)):
            total[j] += v
    labels = list(domain) if domain is not None else list(range(d))
    return dict(zip(labels, total))


def tier_template(ladder: SubsetLadder, tier_eps: float, n: int | None = None) -> dict:
    """Metadata of a tier's matched template: realised level ≤ tier ε, k, t, f,
    per-user variance V(level, k), and for ``n`` rows a 95% half-width bound of
    each category's count (normal approximation, worst case over the category's
    true count)."""
    tpl = ladder.match[float(tier_eps)]
    t, f = (float(v) for v in tpl.t_f(ladder.d))
    out = {"level": tpl.level, "k": tpl.k, "t": t, "f": f, "variance": subset_variance(tpl.level, tpl.k, ladder.d)}
    if n is not None:
        out["half_width"] = 1.96 * math.sqrt(n * max(t * (1 - t), f * (1 - f))) / (t - f)
    return out
