"""EXPLAIN states a 95% half-width (or a rank error) for every output before any
data is read — AVG (hourglass, Kulesza et al. 2024), per-record (Chen et al. 2025), local tables (Xiang et al. 2020) and
ladder tiers included. Each figure is derived here again from its formula."""

from __future__ import annotations

import math
import re

import psycopg

from mechanisms.mean.quantiles import hourglass_abs_quantile
from mechanisms.mean.transformed import HourglassMean


def explain(svc, sql: str, role: str = "analyst") -> str:
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        return "\n".join(r[0] for r in c.execute("EXPLAIN " + sql).fetchall())


def _figures(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"±([0-9.e+-]+) at n = ", line)]


def test_avg_half_width_from_the_hourglass_quantile(duck_service):
    """AVG(age) over [0, 100] at ε 1: w'·q/n with q the 95% quantile of |Z1 − αK| (exact
    hourglass law) at the worst α (an endpoint: α = 0 after folding), Kulesza et al. 2024 Lemma 1."""
    text = explain(duck_service, "SELECT AVG(age) FROM pums")
    line = next(x for x in text.splitlines() if "avg(age)" in x.lower() and "half-width" in x)
    m = HourglassMean(1.0, 0, 100, integer=True)
    q = float(hourglass_abs_quantile(m.noise.eps, m.noise.gamma, [0.0], 0.95)[0])
    want = [min(m.w_t * q / n, 100.0) for n in (100, 1_000, 10_000)]
    got = _figures(line)
    assert len(got) == 3 and all(math.isclose(g, w, rel_tol=1e-3) for g, w in zip(got, want)), (line, want)
    assert "depends on the noisy count" not in text


def test_ladder_avg_states_a_half_width(duck_service):
    text = explain(duck_service, "SELECT AVG(age) FROM pums", role="silver")
    line = next(x for x in text.splitlines() if "avg(age)" in x.lower() and "half-width" in x)
    got = _figures(line)
    assert len(got) == 3 and got[0] > got[1] > got[2] and math.isclose(got[0], 100 * got[2], rel_tol=0.01)


def test_per_record_count_and_max(duck_service):
    """COUNT: noise <= Σ_{i>=ℓ} k_i, error <= 2·Σ_{i>=ℓ-1} k_i (Thm 5.1); MAX: rank 2·k0(ℓ)
    with k0 = ⌈(2/ε₂) ln((U+1)/(β/2))⌉ (Thm 6.1) — recomputed from the mechanism's levels."""
    from mechanisms.per_record import PrDPCount
    from proxy.pipeline.per_record import policy_of

    text = explain(duck_service, "SELECT COUNT(*) FROM accounts")
    line = next(x for x in text.splitlines() if "accuracy at 1 − β" in x)
    assert "accuracy at 1 − β = 99%" in line  # the demo policy's β = 0.01
    nums = [int(x.replace(",", "")) for x in re.findall(r"±([0-9,]+)", line)]
    pol = policy_of(duck_service.gw, "accounts")
    k = list(PrDPCount(pol.levels, pol.beta, weight=1.0).scan.k)  # analyst: ε 1 per query
    assert nums == [sum(k), k[-1], 2 * sum(k), 2 * sum(k[len(k) - 2 :])], (line, k)
    text = explain(duck_service, "SELECT MAX(balance) FROM accounts")
    line = next(x for x in text.splitlines() if "accuracy at 1 − β" in x)
    assert "rank error" in line and re.search(r"at most [0-9,]+ \+ [0-9,]+ left out", line)


def test_local_estimates_and_percentiles(duck_service):
    """COUNT over a private range: ±1.96·σ_max(n) with σ_max² = variance_bounds(n)[1] ∝ n
    (metric-LDP spec §4.2), so the figure grows as √n; a percentile states a rank error ∝ 1/√n."""
    text = explain(
        duck_service,
        "SELECT COUNT(*), AVG(distance), percentile_cont(0.5) WITHIN GROUP "
        "(ORDER BY distance) FROM trips WHERE hour BETWEEN 7 AND 9",
    )
    lines = text.splitlines()
    count = next(x for x in lines if x.strip().lower().startswith("count"))
    got = _figures(count)
    assert len(got) == 3 and math.isclose(got[1] / got[0], math.sqrt(10), rel_tol=0.02)
    avg = next(x for x in lines if x.strip().lower().startswith("avg"))
    a = _figures(avg)
    assert len(a) == 3 and math.isclose(a[0] / a[1], math.sqrt(10), rel_tol=0.02)  # ∝ 1/√n
    pct = next(x for x in lines if "percentile" in x.lower())
    r = [float(x) for x in re.findall(r"([0-9.]+)% at n = ", pct)]
    assert len(r) == 3 and math.isclose(r[0] / r[1], math.sqrt(10), rel_tol=0.05)
