"""Multi-tier Subset mechanism for categorical columns of local (LDP) tables
(multi-tier release, Wang et al. 2026 §5; multi-tier spec §4 and §10 "LDP categorical columns").

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

import functools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from fractions import Fraction

import numpy as np

from mechanisms.multitier import SubsetLadder, subset_t_f, subset_variance
from mechanisms.rng import RandomSource

from .values import IngestError, bits_matrix, public_value

__all__ = [
    "ladder_of",
    "realised",
    "top",
    "perturb_row_subset",
    "estimate_group_counts",
    "estimate_from_counts",
    "tier_template",
    "report_key",
    "subset_bits",
    "perturb_rows_subset",
    "category_indices",
    "encode_categories",
    "categories_from_bits",
    "categories_to_bits",
]


@functools.lru_cache(maxsize=256)
def _ladder(d: int, levels: tuple, variant: int) -> SubsetLadder:
    return SubsetLadder(d, levels, variant)


def ladder_of(cat) -> SubsetLadder:
    """The Subset program of a :class:`rewriter.local_subset.Category` (its d, stored levels
    and variant; built once per such triple)."""
    return _ladder(cat.d, tuple(cat.levels), int(cat.variant))


def realised(cat, eps: float) -> float:
    """The matched template's level (≤ ε) of stored level ε: the row's ε-LDP for that tier."""
    return ladder_of(cat).match[eps].level


def top(cat) -> float:
    """What any coalition of the ladder's tiers learns about a row: the highest stored level."""
    return max(realised(cat, e) for e in cat.levels)


def report_key(eps: float) -> str:
    """The key of a tier level in a stored report (repr of the float ε)."""
    return repr(float(eps))


def _frac(s: str) -> Fraction:
    return Fraction(s)


def perturb_row_subset(
    ladder: SubsetLadder, value, *, source: RandomSource, domain: Sequence | None = None
) -> dict:
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
        out[report_key(eps)] = {
            "subset": sorted(subset),
            "rho": f"{tpl.rho.numerator}/{tpl.rho.denominator}",
            "k": tpl.k,
            "level": tpl.level,
            "d": ladder.d,
        }
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


def estimate_group_counts(
    reports: Iterable[dict], tier_eps: float, *, domain: Sequence | None = None
) -> dict:
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
    out = {
        "level": tpl.level,
        "k": tpl.k,
        "t": t,
        "f": f,
        "variance": subset_variance(tpl.level, tpl.k, ladder.d),
    }
    if n is not None:
        out["half_width"] = 1.96 * math.sqrt(n * max(t * (1 - t), f * (1 - f))) / (t - f)
    return out


# ---------------------------------------------------------------------------- local-table ingestion
def perturb_rows_subset(ladder: SubsetLadder, indices, *, source: RandomSource) -> dict:
    """Batch form of :func:`perturb_row_subset` for the reports table: each row (0-based
    category index) runs the exact program ONCE (``ladder.perturb_many``: every coin from
    ``source``, the program stepped for all rows at once); returns {tier ε: (n, d) uint8 bits},
    bit j = category j is in that tier's subset."""
    return {e: bits.view(np.uint8) for e, bits in ladder.perturb_many(indices, source).items()}


def category_indices(values, cat, typ: str, null_policy: str, n: int):
    """Raw values of a Subset column (declared type ``typ``) -> 0-based indices into its domain
    (int64). Outside the domain: 22023; NULL: 23502 under null_policy 'refuse', else index 0."""
    index = {v: i for i, v in enumerate(cat.domain)}
    values = [None] * n if values is None else values
    out = np.empty(n, dtype=np.int64)
    for r, v in enumerate(values):
        exact = isinstance(v, str) == (typ == "text") and isinstance(v, bool) == (typ == "bool")
        i = index.get(v) if exact and v is not None else None
        if i is None:  # a string from a CSV, a NULL, or not in the domain
            v = public_value(v.item() if hasattr(v, "item") else v, typ, cat.name, None)
            if v is None:
                if null_policy != "lo":
                    raise IngestError(
                        "23502",
                        f"NULL in private categorical column {cat.name} (row "
                        f"{r + 1} of the batch); this table's null_policy is 'refuse'",
                        f"Give a value, or set null_policy = 'lo' (NULL is then reported "
                        f"as {cat.domain[0]!r}, the first domain value).",
                    )
                v = cat.domain[0]
            i = index.get(v)
            if i is None:
                shown = ", ".join(map(repr, cat.domain[:8])) + (", …" if cat.d > 8 else "")
                raise IngestError(
                    "22023",
                    f"value {v!r} for categorical column {cat.name} is not in its declared domain ({shown})",
                )
        out[r] = i
    return out


def encode_categories(lay, cols: dict, n: int, source: RandomSource, null_policy: str) -> dict:
    """Report-table columns of every Subset column: d bits per stored level, from raw values."""
    out = {}
    for cat in lay.categories:
        idx = category_indices(cols.get(cat.name), cat, lay.col_type(cat.name), null_policy, n)
        bits = perturb_rows_subset(ladder_of(cat), idx, source=source)
        for e in cat.levels:
            for j, name in enumerate(cat.columns(e)):
                out[name] = bits[e][:, j]
    return out


def categories_to_bits(lay, cols: dict, n: int, source: RandomSource, null_policy: str) -> dict:
    """Producer side (reports CSV): ``<col>_bits`` = the L·d bits, levels in descending ε."""
    enc = encode_categories(lay, cols, n, source, null_policy)
    out = {}
    for cat in lay.categories:
        block = np.stack([enc[c] for e in cat.levels for c in cat.columns(e)], axis=1) + 48
        out[f"{cat.name}_bits"] = [row.tobytes().decode() for row in block.astype(np.uint8)]
    return out


def categories_from_bits(lay, cols: dict, n: int) -> dict:
    """Report-table columns of the Subset columns from a reports CSV batch (``<col>_bits``)."""
    out = {}
    for cat in lay.categories:
        bits = bits_matrix(
            cols,
            f"{cat.name}_bits",
            n,
            len(cat.levels) * cat.d,
            f" ({len(cat.levels)} levels × {cat.d} categories)",
        )
        names = [c for e in cat.levels for c in cat.columns(e)]
        for i, name in enumerate(names):
            out[name] = bits[:, i]
    return out
