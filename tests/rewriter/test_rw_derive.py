"""The plan side of answers derived from earlier releases (rewriter.derive): which family a
statement's WHERE may come from, and how its cells map onto a release's — compared on the
plans, never the text. A conjunct is a key filter only when it is true or false of whole
cells; anything else refuses the derivation (the statement is then released fresh)."""

from __future__ import annotations

import pytest
from rw_data import CONFIG

import rewriter
from config import parse_config
from rewriter.derive import cell_map, family, signature, where_variants


@pytest.fixture(scope="module")
def cfg():
    return parse_config(CONFIG)


def _plan(sql, cfg):
    return rewriter.build_plan(rewriter.parse(sql), cfg)


def _release(sql, cfg):
    """A release's signature and its cells' keys (as stored), from its plan."""
    p = _plan(sql, cfg)
    return signature(p), [list(c) for c in p.cells]


def _map(q, r, cfg):
    plan = _plan(q, cfg)
    sig, keys = _release(r, cfg)
    for v in where_variants(plan):
        if v.family() == sig["family"]:
            return cell_map(plan, sig["keys"], keys, v.removed, lambda x: x)
    return None


def test_family_ignores_conjunct_order_spelling_keys_and_aggregates(cfg):
    a = _plan("SELECT sex, COUNT(*) FROM pums WHERE age > 30 AND educ < 9 GROUP BY sex", cfg)
    b = _plan("select avg(income) from pums where educ<9 and 30<age", cfg)
    c = _plan("SELECT COUNT(*) FROM pums WHERE age > 31 AND educ < 9", cfg)
    assert family(a) == family(b) != family(c)


def test_a_coarser_group_by_sums_every_cell_of_a_total_key(cfg):
    m = _map(
        "SELECT sex, COUNT(*) FROM pums GROUP BY sex",
        "SELECT sex, age > 50 AS old, COUNT(*) FROM pums GROUP BY 1, 2",
        cfg,
    )
    assert (
        m is not None and [len(c) for c in m.cells] == [3, 3] and m.rolled == ('"age" > 50',)
    )  # sex 0, 1; each over false, true, NULL
    band = "CASE WHEN age < 30 THEN 'young' ELSE 'old' END"
    m = _map("SELECT COUNT(*) FROM pums", f"SELECT {band} AS b, COUNT(*) FROM pums GROUP BY 1", cfg)
    assert m is not None and [len(c) for c in m.cells] == [2]


def test_a_declared_domain_or_bins_are_not_summed_over(cfg):
    """A row whose educ is outside 1..16, or whose age is beyond its bounds, is in no cell of
    the release; the SQL's COUNT by sex counts it."""
    assert (
        _map(
            "SELECT sex, COUNT(*) FROM pums GROUP BY sex",
            "SELECT sex, educ, COUNT(*) FROM pums GROUP BY 1, 2",
            cfg,
        )
        is None
    )
    bins = "SELECT sex, floor(age / 10) * 10 AS d, COUNT(*) FROM pums GROUP BY 1, 2"
    assert _map("SELECT sex, COUNT(*) FROM pums GROUP BY sex", bins, cfg) is None


def test_a_where_naming_a_keys_values_chooses_cells(cfg):
    m = _map(
        "SELECT sex, COUNT(*) FROM pums WHERE educ IN (3, 4) AND (state = 'ca' OR state = 'tx') GROUP BY sex",
        "SELECT sex, educ, state, COUNT(*) FROM pums GROUP BY 1, 2, 3",
        cfg,
    )
    assert m is not None and [len(c) for c in m.cells] == [4, 4] and m.filtered == ("educ", "state")
    # state <> 'ny' passes a state outside the domain, which no cell holds
    release = "SELECT sex, state, COUNT(*) FROM pums GROUP BY 1, 2"
    assert _map("SELECT sex, COUNT(*) FROM pums WHERE state <> 'ny' GROUP BY sex", release, cfg) is None
    assert (
        _map("SELECT sex, COUNT(*) FROM pums WHERE state IN ('ca', 'zz') GROUP BY sex", release, cfg) is None
    )


def test_a_where_on_a_derived_key_by_its_own_expression(cfg):
    m = _map(
        "SELECT floor(age / 10) * 10 AS d, COUNT(*) FROM pums WHERE floor(age / 10) * 10 >= 50 GROUP BY 1",
        "SELECT floor(age / 10) * 10 AS d, income > 1000 AS rich, COUNT(*) FROM pums GROUP BY 1, 2",
        cfg,
    )
    assert m is not None and all(len(c) == 3 for c in m.cells) and len(m.cells) == 6  # 50 … 100


@pytest.mark.parametrize(
    "where",
    [
        "age > 30",  # not a key of the release
        "educ > 3 OR age > 30",  # reads a key and another column
        "educ + sex > 3",  # two keys in one conjunct
    ],
)
def test_a_conjunct_that_may_split_a_cell_refuses(where, cfg):
    assert (
        _map(
            f"SELECT sex, COUNT(*) FROM pums WHERE {where} GROUP BY sex",
            "SELECT sex, educ, COUNT(*) FROM pums GROUP BY 1, 2",
            cfg,
        )
        is None
    )


BAND = "CASE WHEN age < 30 THEN 'young' ELSE 'old' END"


def test_a_case_key_is_filtered_only_where_no_label_is_split(cfg):
    release = f"SELECT {BAND} AS b, income > 1000 AS rich, COUNT(*) FROM pums GROUP BY 1, 2"
    split = _map(f"SELECT {BAND} AS b, COUNT(*) FROM pums WHERE age < 40 GROUP BY 1", release, cfg)
    assert split is None  # age < 40 keeps part of 'old': its cell holds rows on both sides
    whole = _map(f"SELECT {BAND} AS b, COUNT(*) FROM pums WHERE age >= 30 GROUP BY 1", release, cfg)
    assert whole is not None and [len(c) for c in whole.cells] == [3]  # 'old' only, over income > 1000


def test_a_key_the_release_has_not_got_refuses(cfg):
    assert (
        _map(
            "SELECT state, COUNT(*) FROM pums GROUP BY state",
            "SELECT sex, COUNT(*) FROM pums GROUP BY sex",
            cfg,
        )
        is None
    )
