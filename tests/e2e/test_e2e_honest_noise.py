"""Every release knows its signal-to-noise (mechanisms/snr.py): on the audit's cases — small
groups with a privacy unit (G 2, R 3) at ε 1 — the NOTICE begins with a one-line warning that
names the rule and the smallest useful group, EXPLAIN says the same before anything is
charged, and ``consistent = false`` returns the AVG unclamped. A MAX/percentile released
without a COUNT is judged by the row check's released count (proxy/pipeline/rowcheck.py)."""

from __future__ import annotations

import math
from fractions import Fraction

import duckdb
import psycopg
import pytest

from mechanisms import SeededSource
from mechanisms.accounting import pure_epsilon, unit_epsilon
from mechanisms.discrete_gaussian import GaussianCount
from mechanisms.extreme import ExtremeGrid
from mechanisms.mean import make_mean
from mechanisms.snr import mean_useful_from
from proxy.pipeline.common import fmt
from proxy.pipeline.extreme import extreme_mechanism, quantile_mechanism
from proxy.pipeline.notice import WARNING
from support.service import Service, make_config

UNIT = {"privacy_unit": "person", "max_groups_per_unit": 2, "max_rows_per_unit": 3}
SIZES = (5, 7, 9, 12, 6, 10, 8, 11)  # rows of the small AVG cells
BIG = 100_000
RHO = 0.5  # role `other`: a zCDP tier (ε = √(2ρ) = 1)
ZC_RHO = 0.05  # role `analyst`'s zCDP tier: ρ per query


def _load(path) -> None:
    """``small``: 8 cells of 5–12 rows, values 2 or 3 (cell averages ≈ 2.6 on [0, 500]);
    ``audit``: 4 groups of 40 rows with values 20..60 on [0, 100]; one row per person."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE small (person INTEGER, c INTEGER, v INTEGER)")
    rows, p = [], 0
    for c, n in enumerate(SIZES, start=1):
        for i in range(n):
            p += 1
            rows.append((p, c, 3 if i % 5 < 3 else 2))
    con.executemany("INSERT INTO small VALUES (?, ?, ?)", rows)
    con.execute("CREATE TABLE audit (person INTEGER, g INTEGER, x INTEGER)")
    rows = [(g * 1000 + i, g, 20 + i) for g in range(1, 5) for i in range(41)]
    con.executemany("INSERT INTO audit VALUES (?, ?, ?)", rows)
    con.execute(
        f"CREATE TABLE big AS SELECT i AS person, i % 101 AS x FROM range({BIG}) t(i)"
    )  # one group of 100,000 rows over [0, 100]
    con.close()


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    path = tmp_path_factory.mktemp("duck") / "honest.duckdb"
    _load(path)
    cfg = make_config({"kind": "duckdb", "path": str(path)})
    cfg["tables"]["small"] = {
        **UNIT,
        "columns": {
            "person": {"type": "int"},
            "c": {"type": "int", "domain_range": [1, len(SIZES)]},
            "v": {"type": "int", "lower": 0, "upper": 500},
        },
    }
    cfg["tables"]["audit"] = {
        **UNIT,
        "columns": {
            "person": {"type": "int"},
            "g": {"type": "int", "domain_range": [1, 4]},
            "x": {"type": "int", "lower": 0, "upper": 100},
        },
    }
    cfg["tables"]["big"] = {
        **UNIT,
        "columns": {"person": {"type": "int"}, "x": {"type": "int", "lower": 0, "upper": 100}},
    }
    cfg["tiers"]["half"] = {"epsilon": 1.0, "budget": 1000.0, "period": "day"}  # role `half`: ε 1
    cfg["tiers"]["z"] = {"accounting": "zcdp", "rho": RHO, "budget": 1000.0, "period": "day"}
    cfg["roles"]["other"]["tier"] = "z"
    cfg["tiers"]["tiny"] = {"epsilon": 1.0, "budget": 1000.0, "period": "day", "consistent": False}
    cfg["tiers"]["zc"] = {"accounting": "zcdp", "rho": ZC_RHO, "budget": 1000.0, "period": "day"}
    cfg["roles"]["analyst"]["tier"] = "zc"  # role `analyst`: a zCDP tier at ρ 0.05
    s = Service(cfg, tmp_path_factory.mktemp("state"), source=SeededSource(4242)).start()
    yield s
    s.close()


def _ask(svc, sql, role="half"):
    notes: list[str] = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        rows = c.execute(sql).fetchall()
    return rows, notes


def test_avg_of_small_cells_near_a_bound_is_warned(svc):
    """AVG ≈ 2.6 on [0, 500] in cells of 5–12 rows at ε 1 over G·R = 6: every half-width is
    capped at the whole range. The warning leads the NOTICE, names the rule and the smallest
    useful group — the mechanism's own (ε/6 per unit) — and charges as usual."""
    rows, notes = _ask(svc, "SELECT c, AVG(v) FROM small GROUP BY c")
    assert len(rows) == len(SIZES) and all(0 <= a <= 500 for _, a in rows)
    first = notes[0].splitlines()[0]
    need = mean_useful_from(make_mean("hourglass", 1.0 / 6, 0, 500, integer=True))
    assert first.startswith(WARNING) and "avg(v)" in first
    assert "half-width ≥ (upper − lower)/4" in first and f"from groups of {need:,} rows" in first
    assert notes[0].splitlines()[1].startswith("dpgate: ε charged 1")


def test_explain_says_it_before_anything_is_charged(svc):
    before = svc.gw.ledger.spent("half", "day")
    rows, _ = _ask(svc, "EXPLAIN SELECT c, COUNT(*), AVG(v) FROM small GROUP BY c")
    text = "\n".join(r[0] for r in rows)
    need = mean_useful_from(make_mean("hourglass", 1.0 / 12, 0, 500, integer=True))  # ε/2 each, /6
    assert f"mostly noise when half-width ≥ (upper − lower)/4; useful from groups of {need:,} rows" in text
    assert "mostly noise when half-width ≥ |value|" in text
    assert "biased toward the middle by more than h/10" in text
    assert svc.gw.ledger.spent("half", "day") == before


def test_large_groups_carry_no_warning(svc):
    """COUNT(*) of 164 rows at ε 1 over R = 3 (one group): its half-width ±9 is far below it."""
    rows, notes = _ask(svc, "SELECT COUNT(*) FROM audit")
    assert rows[0][0] > 100 and not notes[0].startswith(WARNING)


def test_consistent_false_returns_the_avg_unclamped(svc):
    """Role `tiny` (a tier with ``consistent = false``): some cell's AVG lies outside [0, 500]
    (noise of ±500 around 2.6: below 0 with probability about one half per cell); the
    consistent role's rows of the same statement are clamped."""
    raw, notes = _ask(svc, "SELECT c, AVG(v) FROM small GROUP BY c", role="tiny")
    assert any(a < 0 or a > 500 for _, a in raw)
    assert "clamped to [0, 500]" not in notes[0]


@pytest.mark.parametrize(
    "agg",
    ["MAX(x)", "percentile_cont(0.9) WITHIN GROUP (ORDER BY x)"],
)
def test_max_and_percentile_of_small_groups_with_their_count_are_warned(svc, agg):
    """The audit's case: 4 groups of 41 rows, values 20..60 of [0, 100], ε 1, unit (G 2, R 3).
    With COUNT(*) released beside it the groups' sizes are known (noisy): each is below the
    mechanism's useful size, so the warning names it. Without a count the NOTICE states the
    useful size (the mechanism's law) and EXPLAIN says it before the release."""
    rows, notes = _ask(svc, f"SELECT g, {agg}, COUNT(*) FROM audit GROUP BY g")
    assert len(rows) == 4
    first = notes[0].splitlines()[0]
    assert (
        first.startswith(WARNING)
        and "released row counts up to" in first
        and "useful from groups of" in first
    )


def test_a_lone_percentile_states_its_useful_group_size(svc):
    """EXPLAIN (free) and the NOTICE state from which group size the chosen mechanism's own law
    makes the answer useful (19/20 of ε 1 over R = 3, one group: the row check has the rest)."""
    m = _mech("percentile_cont(0.9) WITHIN GROUP (ORDER BY x)", RANK_EPS)
    sql = "SELECT percentile_cont(0.9) WITHIN GROUP (ORDER BY x) FROM audit WHERE g = 2"
    before = svc.gw.ledger.spent("half", "day")
    plan, _ = _ask(svc, "EXPLAIN " + sql)
    assert svc.gw.ledger.spent("half", "day") == before
    _, notes = _ask(svc, sql)
    said = f"from about {m.useful_from()} rows per group"
    assert any(said in r[0] for r in plan) and said in notes[0]


def test_a_ladder_tier_is_warned_by_its_level_law(svc):
    """A data-market ladder's values come from its own chain, whose level at ε is the
    two-sided geometric at ε (Wang et al. 2026): the warning names the smallest useful group
    by that law (h + 1 rows) and EXPLAIN says it before anything is charged. Role `bronze`
    (ε 0.1, one COUNT: level share 0.1): PUMS over 80 by education, a handful of people per cell."""
    from mechanisms import GeometricCount

    need = int(GeometricCount(0.1).half_width()) + 1
    sql = "SELECT educ, COUNT(*) FROM pums WHERE age > 80 GROUP BY educ"
    plan, _ = _ask(svc, "EXPLAIN " + sql, role="bronze")
    assert any(
        f"mostly noise when half-width ≥ |value|; useful from groups of {need:,} rows" in r[0] for r in plan
    )
    _, notes = _ask(svc, sql, role="bronze")
    first = notes[0].splitlines()[0]
    assert (
        first.startswith(WARNING) and "count(*)" in first and f"useful from groups of {need:,} rows" in first
    )
    assert "multitier_geometric_count" in notes[0]
    _, notes = _ask(svc, "SELECT COUNT(*) FROM pums", role="bronze")  # 1,000 rows against ±30
    assert not notes[0].startswith(WARNING)


def test_the_warning_judges_the_rows_the_statement_returns(svc):
    """Counts of 5–12 rows at ε/6 (±18) are mostly noise; an outer WHERE that keeps none of
    the released rows returns nothing to warn about (the same release, a repeat)."""
    inner = "SELECT c, COUNT(*) AS n FROM small GROUP BY c"
    _, notes = _ask(svc, inner)
    assert notes[0].startswith(WARNING) and "count(*)" in notes[0].splitlines()[0]
    rows, notes = _ask(svc, f"SELECT c, n FROM ({inner}) t WHERE n > 100000")
    assert rows == [] and "repeat" in notes[0] and not notes[0].startswith(WARNING)


def test_a_limit_is_judged_on_the_rows_it_returns(svc):
    """ORDER BY … LIMIT returns the largest released counts: the warning judges those rows."""
    from mechanisms import GeometricCount

    h = GeometricCount(1.0 / 6).half_width()  # the count's 95% half-width at ε/6
    rows, notes = _ask(svc, "SELECT c, COUNT(*) AS n FROM small GROUP BY c ORDER BY n DESC LIMIT 1")
    _, notes_all = _ask(svc, "SELECT c, COUNT(*) AS n FROM small GROUP BY c")  # the same release
    assert len(rows) == 1 and notes_all[0].startswith(WARNING)
    assert notes[0].startswith(WARNING) == (abs(rows[0][1]) <= h)


# -- the row check: a MAX/percentile released without a COUNT --------------------------------

SHARE = Fraction(1, 20)  # the row count's share of ε (proxy.pipeline.rowcheck.SHARE)
RANK_EPS = unit_epsilon(1 - SHARE, 3)  # the rank mechanism: the rest of ε 1, over R = 3 (one group)
COUNT_EPS = unit_epsilon(SHARE, 3)  # the row count's geometric, per row
LONE = ["MAX(x)", "percentile_cont(0.9) WITHIN GROUP (ORDER BY x)"]
GRID = ExtremeGrid.for_column("int", 0, 100)


def _mech(agg: str, epsilon: float):
    """The mechanism the error laws choose for ``agg`` at ``epsilon`` (public inputs only)."""
    if agg.startswith("MAX"):
        return extreme_mechanism(epsilon, GRID, "max")
    return quantile_mechanism(epsilon, GRID, Fraction(9, 10))


def _session(svc, sqls, role="half"):
    """Several statements on one connection (a SET holds for the ones after it)."""
    out = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        notes: list[str] = []
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        for sql in sqls:
            notes.clear()
            cur = c.execute(sql)
            out.append((cur.fetchall() if cur.description else [], list(notes)))
    return out


def _not_warned(n: int, need: int, epsilon: float) -> float:
    """P(the released count n + Z ≥ need), Z two-sided geometric, P(Z = z) ∝ α^|z|, α = e^−ε:
    P(Z ≥ t) = α^t/(1 + α) for t ≥ 1 (the count's law)."""
    a = math.exp(-epsilon)
    return a ** (need - n) / (1 + a) if need > n else 1.0


def _least_warned(releases: int, p_warn: float, tail: float = 1e-6) -> int:
    """The largest w with P(Binomial(releases, p_warn) < w) ≤ tail: fewer warned is that unlikely."""
    cdf, w = 0.0, 0
    for k in range(releases + 1):
        cdf += math.comb(releases, k) * p_warn**k * (1 - p_warn) ** (releases - k)
        if cdf > tail:
            break
        w = k + 1
    return w


@pytest.mark.parametrize("agg", LONE)
def test_a_lone_max_or_percentile_of_a_small_group_is_warned(svc, agg):
    """The audit's case without a COUNT: 41 rows, values 20..60 of [0, 100], ε 1, unit G 2 R 3.
    The row check releases the group's count at ε/20 (ε/60 per row): the warning leads the NOTICE
    in at least as many of 20 releases (distinct statements, a fixed seed) as the count's law
    allows — P(warned) = 1 − α^(need − 41)/(1 + α), α = e^(−1/60), need the mechanism's useful
    size at the other 19/20 — naming the released count and the smallest useful group."""
    need = _mech(agg, RANK_EPS).useful_from()
    p_warn = 1 - _not_warned(41, need, COUNT_EPS)
    runs = 20
    warned = 0
    for i in range(runs):
        _, notes = _ask(svc, f"SELECT {agg} FROM audit WHERE g = 2 AND x > -{i + 1}")
        first = notes[0].splitlines()[0]
        said = first.startswith(WARNING)
        warned += said
        if said:
            assert "released row count" in first and f"useful from groups of {need:,} rows" in first
        assert "row count: COUNT(x) ≈" in notes[0] and f"ε {fmt(float(SHARE))} for this check" in notes[0]
    assert p_warn > 0.9 and warned >= _least_warned(runs, p_warn)


def test_a_lone_max_of_a_large_group_is_not_warned(svc):
    """100,000 rows (ε 1, R 3): the released count misses the useful size (hundreds of rows) with
    probability α^(100,000 − need + 1)/(1 + α), below 10^-500: no warning; the count is stated."""
    rows, notes = _ask(svc, "SELECT MAX(x) FROM big")
    assert 0 <= rows[0][0] <= 100 and not notes[0].startswith(WARNING)
    assert "row count: COUNT(x) ≈" in notes[0]


def test_a_group_by_max_without_count_is_warned_and_its_repeat_says_the_same(svc):
    """GROUP BY with MAX and no COUNT(*): the row check counts each group; the repeat is free and
    its NOTICE is the first's (the counts are part of the stored release)."""
    sql = "SELECT g, MAX(x) FROM audit GROUP BY g"
    rows, notes = _ask(svc, sql)
    again, notes2 = _ask(svc, sql)
    assert len(rows) == 4 and again == rows and notes[0].startswith(WARNING)
    assert "over the 4 groups" in notes[0] and "repeat" in notes2[0]
    first, body = notes[0].split("\n", 1)
    first2, body2 = notes2[0].split("\n", 1)
    assert first2 == first and body2.split("; ", 2)[2] == body.split("; ", 2)[2]  # after charged/left


def test_row_check_off_gives_the_whole_epsilon_back(svc):
    """``SET dpgate.row_check = off``: no count, no warning, the mechanism at the whole ε (its
    useful size the one at ε/3), and EXPLAIN states the split only when it is on; both charge ε 1."""
    sql = "SELECT MAX(x) FROM audit WHERE g = 3"
    full, rest = _mech("MAX(x)", unit_epsilon(1, 3)), _mech("MAX(x)", RANK_EPS)
    _, (plan_off, _), (_, off) = _session(svc, ["SET dpgate.row_check = off", "EXPLAIN " + sql, sql])
    [(plan_on, _), (_, on)] = _session(svc, ["EXPLAIN " + sql, sql])
    text_off, text_on = "\n".join(r[0] for r in plan_off), "\n".join(r[0] for r in plan_on)
    assert "row check" not in text_off and "row check" in text_on and "MAX(x) at ε 0.95" in text_on
    assert not off[0].startswith(WARNING) and "row count" not in off[0]
    assert (
        f"from about {full.useful_from()} rows" in off[0] and f"from about {rest.useful_from()} rows" in on[0]
    )
    assert on[0].startswith(WARNING)
    charged = [r["epsilon"] for r in svc.gw.ledger.releases("half", limit=2)]
    assert charged == [pytest.approx(1.0), pytest.approx(1.0)]
    with pytest.raises(psycopg.Error) as e:
        _session(svc, ["SET dpgate.row_check = sometimes"])
    assert e.value.sqlstate == "22023"


def test_on_a_zcdp_tier_the_count_is_the_discrete_gaussian(svc):
    """Role `other` (ρ 0.5): the count by the tier's count mechanism, the discrete Gaussian at
    ρ/20 (Δ₂² = R² = 9), the MAX at ε = √(2·19ρ/20); charged ρ, the sum of the two maps."""
    rows, notes = _ask(svc, "SELECT MAX(x) FROM audit WHERE g = 4", role="other")
    assert notes[0].startswith(WARNING) and "discrete_gaussian_count" in notes[0]
    assert "ρ 0.025 for this check" in notes[0]
    rel = svc.gw.ledger.releases("other", limit=1)[0]
    rho = (
        GaussianCount(RHO / 20, contributions_sq=9).privacy_map_exact(1)
        + Fraction(pure_epsilon(Fraction(RHO) * 19 / 20)) ** 2 / 2
    )
    assert rel["unit"] == "rho" and rel["epsilon"] == pytest.approx(float(rho), abs=1e-9)


def test_a_zcdp_tier_is_warned_by_the_discrete_gaussian(svc):
    """Role `analyst` (ρ 0.05, one COUNT over G 2, R 3: Δ₂² = min(G, cells)·R² = 18): the discrete
    Gaussian's half-width h (Canonne, Kamath & Steinke 2020) is far above counts of 5–12 rows,
    so the warning names h + 1 rows and the least ρ; EXPLAIN names the same useful group, and an
    AVG's (the ratio of a Gaussian SUM and COUNT at ρ/2 each) from the ratio's bound. One group
    of 164 rows (Δ₂² = 9) carries no warning."""
    from mechanisms.discrete_gaussian import GaussianCount
    from mechanisms.gaussian_stats import GaussianMean

    h = GaussianCount(ZC_RHO, 18).half_width()
    sql = "SELECT c, COUNT(*) FROM small GROUP BY c"
    before = svc.gw.ledger.spent("analyst", "day")
    plan, _ = _ask(svc, "EXPLAIN " + sql, role="analyst")
    assert svc.gw.ledger.spent("analyst", "day") == before
    said = f"mostly noise when half-width ≥ |value|; useful from groups of {int(h) + 1:,} rows"
    assert any(said in r[0] for r in plan)
    _, notes = _ask(svc, sql, role="analyst")
    first = notes[0].splitlines()[0]
    assert first.startswith(WARNING) and f"useful from groups of {int(h) + 1:,} rows" in first
    assert "at ρ ≥" in first and "discrete_gaussian_count" in notes[0]
    plan, _ = _ask(svc, "EXPLAIN SELECT c, COUNT(*), AVG(v) FROM small GROUP BY c", role="analyst")
    need = mean_useful_from(GaussianMean(ZC_RHO / 2, 0, 500, integer=True, contributions_sq=18))
    assert any(f"(upper − lower)/4; useful from groups of {need:,} rows" in r[0] for r in plan)
    _, notes = _ask(svc, "SELECT COUNT(*) FROM audit", role="analyst")
    assert not notes[0].startswith(WARNING)


SVT_AGGS = "COUNT(*) AS n, COUNT(married), COUNT(age), COUNT(sex), COUNT(race)"  # five releases: the sparse vector wins


def test_sparse_vector_values_are_judged_by_their_own_mechanism(svc):
    """HAVING by the sparse vector (Liu et al.): the passing keys' values are released at a
    separate half of ε, each aggregate by its own mechanism at its share (ε 1 · ½ · ⅕ per
    COUNT: h of the two-sided geometric at ε 1/10). Over-80s by education (a handful per key)
    are mostly noise; keys over 100 rows are not."""
    from mechanisms import GeometricCount

    h = GeometricCount(1.0 / 10).half_width()
    small = f"SELECT educ, {SVT_AGGS} FROM pums WHERE age > 80 GROUP BY educ HAVING COUNT(*) >= 0 LIMIT 1"
    plan, _ = _ask(svc, "EXPLAIN " + small)
    text = "\n".join(r[0] for r in plan)
    assert "sparse vector (Liu et al.), the lower error here" in text
    assert "n: count(*) via geometric_count, ε 0.1," in text  # its value's share, not the cells'
    assert f"mostly noise when half-width ≥ |value|; useful from groups of {int(h) + 1:,} rows" in text
    rows, notes = _ask(svc, small)
    assert len(rows) == 1 and "sparse vector" in notes[0]
    first = notes[0].splitlines()[0]
    assert first.startswith(WARNING) and f"from groups of {int(h) + 1:,} rows" in first
    large = f"SELECT educ, {SVT_AGGS} FROM pums GROUP BY educ HAVING COUNT(*) >= 100 LIMIT 1"
    rows, notes = _ask(svc, large)
    assert rows and all(abs(v) > h for r in rows for v in r[1:]) and "sparse vector" in notes[0]
    assert not notes[0].startswith(WARNING)


def test_per_record_values_are_judged_by_their_levels_noise(svc):
    """Per-record DP (Chen et al. 2025) on the demo's accounts: each group's COUNT is judged
    against the noise of the levels it kept (the bound the NOTICE states, at 1 − β), useful
    from that bound + 1 rows; a MAX beside a COUNT against the group's released row count
    (its 2·k0 rank margin). Balances over 990,000,000 (a handful per branch) are mostly
    noise; all accounts of a branch (about 20,000) are not."""
    import re

    _, notes = _ask(svc, "SELECT branch, COUNT(*) FROM accounts WHERE balance > 990000000 GROUP BY branch")
    first, body = notes[0].splitlines()[:2]
    noise = int(re.search(r"±(\d+) of noise", body).group(1))  # Σ_{i≥ℓ} k_i: an integer
    assert first.startswith(WARNING) and "count(*)" in first and "99% half-width" in first
    assert f"useful from groups of {noise + 1:,} rows" in first
    # EXPLAIN (free) states the range over the level ℓ the scan may select; the release's lies in it
    plan, _ = _ask(
        svc, "EXPLAIN SELECT branch, COUNT(*) FROM accounts WHERE balance > 990000000 GROUP BY branch"
    )
    said = next(r[0] for r in plan if "a count useful from groups of" in r[0])
    low, high = (int(x.replace(",", "")) for x in re.findall(r"([\d,]+) (?:\(ℓ|rows \(ℓ)", said))
    assert low <= noise + 1 <= high
    both = "SELECT branch, COUNT(*), MAX(balance) FROM accounts WHERE balance > 990000000 GROUP BY branch"
    plan, _ = _ask(svc, "EXPLAIN " + both)
    said = next(r[0] for r in plan if "rank margin reaches the group's rows" in r[0])
    low, high = (int(x.replace(",", "")) for x in re.findall(r"([\d,]+) (?:\(ℓ|rows \(ℓ)", said))
    _, notes = _ask(svc, both)
    first = notes[0].splitlines()[0]
    assert (
        first.startswith(WARNING)
        and "max(balance)" in first
        and "rows beyond the answer ≥ the group's rows" in first
    )
    need = int(
        re.search(r"max\(balance\):.*useful from groups of ([\d,]+) rows", first).group(1).replace(",", "")
    )
    assert low <= need <= high  # 2·k0 + 1 at the released level, within EXPLAIN's range over ℓ
    rows, notes = _ask(svc, "SELECT branch, COUNT(*) FROM accounts GROUP BY branch")
    assert all(n > 10_000 for _, n in rows) and not notes[0].startswith(WARNING)


def test_local_estimates_are_judged_by_the_estimators_variance(svc):
    """A local (metric-LDP) table's answer is post-processing of private reports: each
    returned row's estimate is judged at its own 95% half-width (z·σ, σ from the estimator's
    variance over the reports, spec §4.2). A COUNT over a few hundred reports where hardly
    any match, and an AVG of distance on [0, 30] there, are mostly noise; counts of
    thousands are not."""
    sql = (
        "SELECT vendor, COUNT(*), AVG(distance) FROM trips WHERE hour = 3 AND passengers = 6 GROUP BY vendor"
    )
    plan, _ = _ask(svc, "EXPLAIN " + sql)
    assert any("mostly noise when half-width ≥ |value|" in r[0] for r in plan)
    _, notes = _ask(svc, sql)
    first = notes[0].splitlines()[0]
    assert first.startswith(WARNING) and "count:" in first and "half-width ≥ |value|" in first
    assert "half-width ≥ (upper − lower)/4" in first and "[0, 30]" in first
    assert "ε charged 0 (local table trips" in notes[0].splitlines()[1]
    rows, notes = _ask(svc, "SELECT vendor, COUNT(*) FROM trips WHERE hour < 12 GROUP BY vendor")
    assert all(n > 1_000 for _, n in rows) and not notes[0].startswith(WARNING)


@pytest.mark.parametrize(
    ("role", "where"), [("bronze", "WHERE passengers = 6"), ("bronze", ""), ("gold", "")]
)
def test_subset_counts_are_judged_at_their_half_width(svc, role, where):
    """A local table's categorical (multi-tier Subset, Wang et al. 2026 §5) counts: each
    returned count against the 95% half-width of its tier's template at the cell's n
    reports (one cell here: the half-width the NOTICE states); exactly the counts whose
    interval holds 0 are called mostly noise."""
    import re

    rows, notes = _ask(svc, f"SELECT zone, COUNT(*) FROM trips {where} GROUP BY zone", role=role)
    lines = notes[0].splitlines()
    body = lines[-1]
    h = float(re.search(r"95% half-width: count ±(\S+);", body).group(1))  # stated to 3 digits
    noisy = [v for _, v in rows if abs(v) <= h * (1 - 1e-3)]
    clear = [v for _, v in rows if abs(v) > h * (1 + 1e-3)]
    warned = lines[0].startswith(WARNING)
    if len(noisy) + len(clear) == len(rows):  # no count within the stated rounding of h
        assert warned == bool(noisy)
        assert not noisy or f"{len(noisy)} of {len(rows)} groups" in lines[0]
    if role == "bronze" and where:  # 429 reports at ε 0.1: every count is mostly noise
        assert warned and len(noisy) == len(rows)


def test_a_derived_answer_is_judged_at_its_stated_half_width(svc):
    """An answer derived at ε 0 from this role's earlier release (a WHERE on a key of a GROUP
    BY released before: post-processing) is judged by its aggregate's rule at the half-width
    the NOTICE states for it. Role `tiny`: counts of 5–12 rows at ε 1/6 (±18)."""
    from mechanisms import GeometricCount

    h = GeometricCount(1.0 / 6).half_width()
    _ask(svc, "SELECT c, COUNT(*) FROM small GROUP BY c", role="tiny")
    rows, notes = _ask(svc, "SELECT COUNT(*) FROM small WHERE c = 2", role="tiny")
    first = notes[0].splitlines()[0]
    assert "ε charged 0" in notes[0] and "release #" in notes[0]  # derived, not released anew
    assert abs(rows[0][0]) <= h  # 7 rows against ±18 (fixed seed)
    assert first.startswith(WARNING) and f"95% half-width ±{h:,} ≥ |value|" in first


def test_a_scalar_subquerys_warning_leads_the_statements_notice(svc):
    """A scalar subquery released first (its share of ε 1): the AVG of a 5-row cell on
    [0, 500] is mostly noise at any share (its half-width is capped at the whole range), so the
    statement's NOTICE begins with the warning line, naming the subquery; the subquery's own
    NOTICE keeps its warning, and the charge line follows."""
    _, notes = _ask(svc, "SELECT COUNT(*) FROM audit WHERE x < (SELECT AVG(v) FROM small WHERE c = 1)")
    first, second = notes[0].splitlines()[:2]
    assert first.startswith(WARNING) and "(scalar subquery 1" in first and "avg(v)" in first
    assert second.startswith("dpgate: ε charged")
    assert any(n.startswith(f"(scalar subquery 1) {WARNING}") for n in notes[1:])
