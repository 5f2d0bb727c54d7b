"""The ingestion-side Subset functions (local DP categorical columns): one
perturbation per row for the whole ladder, per-tier reports, debiased counts."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from mechanisms.multitier import SubsetLadder
from mechanisms.rng import SeededSource
from proxy.ingest.subset_ingest import estimate_from_counts, report_key, subset_bits, tier_template
from proxy.pipeline.multitier import estimate_group_counts, perturb_row_subset


def _laws(lad: SubsetLadder, x: int):
    """Exact joint law of (snapshot at every template step) for input x, by
    propagating the program's kernels on subsets (Fractions, no sampling)."""
    from itertools import combinations

    d = lad.d
    need = sorted({t.step for t in lad.match.values()})
    dist = {(frozenset([x]), ()): Fraction(1)}  # (current, snapshots so far) -> prob
    for i, op in enumerate(lad.ops, start=1):
        new: dict = {}
        for (s, snaps), p in dist.items():
            if op[0] == "expand":
                rest = [j for j in range(d) if j not in s]
                outs = [(s | {j}, Fraction(1, len(rest))) for j in rest]
            else:
                beta = op[1]
                allk = [frozenset(c) for c in combinations(range(d), len(s))]
                outs = [(s, beta)] + [(c, (1 - beta) / len(allk)) for c in allk]
            for s2, q in outs:
                key = (s2, snaps + ((s2,) if i in need else ()))
                new[key] = new.get(key, 0) + p * q
        dist = new
    joint: dict = {}
    for (_, snaps), p in dist.items():
        joint[snaps] = joint.get(snaps, 0) + p
    return need, joint


@pytest.mark.parametrize("d", [4, 5])
def test_each_tier_exactly_its_template_level_and_coalition_max(d):
    tiers = [2.5, 1.0, 0.3]
    lad = SubsetLadder(d, tiers, variant=2)
    laws = {x: _laws(lad, x) for x in range(d)}
    need = laws[0][0]
    for eps in tiers:
        tpl = lad.match[eps]
        assert tpl.level <= eps + 1e-12
        idx = need.index(tpl.step)
        marg = {}
        for x in range(d):
            m: dict = {}
            for snaps, p in laws[x][1].items():
                m[snaps[idx]] = m.get(snaps[idx], 0) + p
            marg[x] = m
        ratio = max(marg[x][s] / marg[y][s] for x in range(d) for y in range(d) for s in marg[x])
        assert ratio == tpl.rho  # corrected β: exactly e^level, as a rational
    # the coalition of all tiers: the joint law's ratio is the top template's
    top = max(lad.match[e].rho for e in tiers)
    joint_ratio = max(laws[x][1][s] / laws[y][1][s] for x in range(d) for y in range(d) for s in laws[x][1])
    assert joint_ratio == top


def test_reports_per_tier_and_unbiased_counts():
    domain = ["north", "south", "east", "west", "central"]
    lad = SubsetLadder(len(domain), [2.0, 0.5, 0.1], variant=2)
    src = SeededSource(11)
    truth = {"north": 900, "south": 600, "east": 300, "west": 150, "central": 50}
    reports = []
    for v, c in truth.items():
        for _ in range(c):
            rep = perturb_row_subset(lad, v, source=src, domain=domain)
            reports.append(rep)
    assert set(reports[0]) == {report_key(e) for e in (2.0, 0.5, 0.1)}
    e = reports[0][report_key(0.5)]
    assert set(e) == {"subset", "rho", "k", "level", "d"} and e["d"] == 5  # no raw value stored
    assert e["level"] <= 0.5 and Fraction(e["rho"]) == lad.match[0.5].rho
    n = len(reports)
    for eps in (2.0, 0.5, 0.1):
        est = estimate_group_counts(reports, eps, domain=domain)
        hw = tier_template(lad, eps, n)["half_width"]
        assert math.isclose(sum(est.values()), n, rel_tol=1e-9)  # t + (d-1) f = k
        for v in domain:
            assert abs(est[v] - truth[v]) < 2.5 * hw, (eps, v, est[v], truth[v], hw)
    # from backend-side counts: the same numbers
    tpl = lad.match[0.5]
    counts = np.sum([subset_bits(r, 0.5) for r in reports], axis=0)  # what a backend SUM would give
    direct = estimate_from_counts(list(counts), n, 5, tpl.rho, tpl.k)
    assert np.allclose(direct, list(estimate_group_counts(reports, 0.5, domain=domain).values()))


def test_tier_added_after_ingestion_uses_the_nearest_lower_level():
    lad = SubsetLadder(4, [2.0, 0.5], variant=1)
    src = SeededSource(12)
    reports = [perturb_row_subset(lad, i % 4, source=src) for i in range(400)]
    assert estimate_group_counts(reports, 1.0) == estimate_group_counts(reports, 0.5)
    assert estimate_group_counts(reports, 9.0) == estimate_group_counts(reports, 2.0)
    with pytest.raises(ValueError, match="no stored level"):
        estimate_group_counts(reports, 0.1)
    with pytest.raises(ValueError, match="not in the column's declared domain"):
        perturb_row_subset(lad, "x", source=src, domain=["a", "b", "c", "d"])
