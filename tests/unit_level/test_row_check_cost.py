"""The row check's split (proxy/pipeline/rowcheck.py) never exceeds the tier: the rank releases'
ε composed with the counts' privacy maps — the geometric count's k·(ε/k) under a unit moving k
rows, or the discrete Gaussian's Δ₂²/(2σ²) on a zCDP tier — is at most the tier's ε (ρ),
exactly (rationals), and within 10⁻¹² of it; the setting reads Postgres's boolean spellings."""

from __future__ import annotations

from fractions import Fraction

import pytest

from config import parse_config
from proxy.pipeline.extreme import check_columns
from proxy.pipeline.rowcheck import SHARE, plan_check, setting_on
from rewriter import parse
from rewriter.extreme import build_extreme_plan
from rewriter.unit import factor
from support.service import make_config

ZTIER = {"z": {"accounting": "zcdp", "rho": 0.05, "budget": 10.0, "period": "day"}}
STATEMENTS = [
    "SELECT MAX(amount) FROM purchases WHERE store = 3",
    "SELECT store, median(amount) FROM purchases GROUP BY store",
    "SELECT MAX(income), MIN(age) FROM pums",  # two columns: two counts, 1/40 each; no unit: k = 1
]


@pytest.fixture(scope="module")
def cfg():
    return parse_config(make_config(tiers=ZTIER), "test")


@pytest.mark.parametrize("sql", STATEMENTS)
@pytest.mark.parametrize("tier_name", ["default", "z"])
def test_the_split_composes_within_the_tier(cfg, sql, tier_name):
    tier = cfg.tiers[tier_name]
    xp = build_extreme_plan(parse(sql), cfg)
    cols = check_columns(xp)
    check = plan_check(xp.plan, tier, cols)
    assert check is not None and check.columns == tuple(cols)
    total = Fraction(tier.rho if tier.accounting == "zcdp" else tier.epsilon)
    assert check.cost.amount <= total and float(total - check.cost.amount) < 1e-12
    if tier.accounting == "zcdp":
        each = check.m.privacy_map_exact(1)  # ρ = Δ₂²/(2σ²) at the unit's Δ₂
        assert Fraction(check.rest) ** 2 / 2 + len(cols) * each == check.cost.amount
    else:
        each = check.m.privacy_map_exact(factor(xp.plan))  # ε/k per row, at the unit's distance k
        assert Fraction(check.rest) + len(cols) * each == check.cost.amount
    assert float(len(cols) * each) == pytest.approx(float(total * SHARE), rel=1e-12)


def test_a_statement_with_its_count_has_no_row_check(cfg):
    xp = build_extreme_plan(parse("SELECT MAX(amount), COUNT(*) FROM purchases WHERE store = 3"), cfg)
    assert check_columns(xp) == [] and plan_check(xp.plan, cfg.tiers["default"], []) is None


def test_the_setting_reads_booleans():
    assert all(setting_on(v) for v in ("", None, "on", "ON", "true", "yes", "1"))
    assert not any(setting_on(v) for v in ("off", "false", "no", "0"))
    with pytest.raises(ValueError):
        setting_on("sometimes")
