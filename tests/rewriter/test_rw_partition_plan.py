"""Planning GROUP BY a column without a public domain: the plan's keys are
selected, not enumerated; only one such key per statement; the scan floor drops exactly
the keys whose keep probability is at most the slack it is charged for."""

from __future__ import annotations

import tomllib
from fractions import Fraction

import pytest

import rewriter
from config import parse_config
from mechanisms.partition_selection import TruncatedGeometricSelection
from proxy.demo import demo_config_path
from proxy.pipeline.partitions import scan_floor, selection_plan
from rewriter.errors import Refusal


def test_selected_keys(config):
    plan = rewriter.build_plan(rewriter.parse("SELECT name, COUNT(*) FROM pums GROUP BY name"), config)
    assert plan.selected and plan.group_by[0].domain is None
    assert rewriter.build_plan(rewriter.parse("SELECT DISTINCT name FROM pums"), config).selected
    both = rewriter.build_plan(
        rewriter.parse("SELECT name, sex, COUNT(*) FROM pums GROUP BY name, sex"), config
    )
    assert both.selected and [g.domain is None for g in both.group_by] == [True, False]  # tuples selected
    with pytest.raises(Refusal):  # a date has its own spelling (date_trunc), not selection
        rewriter.build_plan(rewriter.parse("SELECT MAX(age) FROM pums GROUP BY name"), config)


@pytest.mark.parametrize("eps,delta,k", [(1.0, 1e-6, 1), (0.5, 1e-7, 10), (0.1, 1e-9, 3)])
def test_scan_floor_drops_only_keys_within_the_slack(eps, delta, k):
    sel = TruncatedGeometricSelection(eps, delta / 2, k=k)
    slack = Fraction(delta) / 2 / k
    f = scan_floor(sel, slack)
    assert all(sel.keep_probability(n) <= slack for n in range(1, f))
    assert sel.keep_probability(f) > slack


def test_selection_splits_epsilon_only_when_values_are_asked(config):
    counts = rewriter.build_plan(rewriter.parse("SELECT name, COUNT(*) FROM pums GROUP BY name"), config)
    keys = rewriter.build_plan(rewriter.parse("SELECT DISTINCT name FROM pums"), config)
    assert selection_plan(counts, 1.0, 1e-6).eps_measures == 0.5
    assert selection_plan(keys, 1.0, 1e-6).eps_measures == 0.0


def test_a_per_unit_column_counts_each_person_in_one_group():
    raw = tomllib.loads(demo_config_path().read_text())
    raw["server"] = {"auth": "trust"}
    for r in raw["roles"].values():
        r.pop("scram", None)
    cfg = parse_config(raw)
    g = lambda sql: rewriter.build_plan(rewriter.parse(sql), cfg).unit.max_groups
    assert g("SELECT city, COUNT(*) FROM purchases GROUP BY city") == 1  # city: per_unit = true
    assert g("SELECT store, COUNT(*) FROM purchases GROUP BY store") == 10
    assert g("SELECT city, store, COUNT(*) FROM purchases GROUP BY city, store") == 10
