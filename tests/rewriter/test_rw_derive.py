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


def test_a_coarser_group_by_sums_every_cell_of_the_rolled_up_key(cfg):
    m = _map(
        "SELECT sex, COUNT(*) FROM pums GROUP BY sex",
        "SELECT sex, educ, COUNT(*) FROM pums GROUP BY 1, 2",
        cfg,
    )
    assert m is not None and [len(c) for c in m.cells] == [16, 16] and m.rolled == ("educ",)


def test_a_where_on_a_key_chooses_cells(cfg):
    m = _map(
        "SELECT sex, COUNT(*) FROM pums WHERE educ IN (3, 4) AND state <> 'ny' GROUP BY sex",
        "SELECT sex, educ, state, COUNT(*) FROM pums GROUP BY 1, 2, 3",
        cfg,
    )
    assert m is not None and [len(c) for c in m.cells] == [4, 4] and m.filtered == ("educ", "state")


def test_a_where_on_a_derived_key_by_its_own_expression(cfg):
    m = _map(
        "SELECT floor(age / 10) * 10 AS d, COUNT(*) FROM pums WHERE floor(age / 10) * 10 >= 50 GROUP BY 1",
        "SELECT floor(age / 10) * 10 AS d, sex, COUNT(*) FROM pums GROUP BY 1, 2",
        cfg,
    )
    assert m is not None and all(len(c) == 2 for c in m.cells) and len(m.cells) == 6  # 50 … 100


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
    release = f"SELECT {BAND} AS b, sex, COUNT(*) FROM pums GROUP BY 1, 2"
    split = _map(f"SELECT {BAND} AS b, COUNT(*) FROM pums WHERE age < 40 GROUP BY 1", release, cfg)
    assert split is None  # age < 40 keeps part of 'old': its cell holds rows on both sides
    whole = _map(f"SELECT {BAND} AS b, COUNT(*) FROM pums WHERE age >= 30 GROUP BY 1", release, cfg)
    assert whole is not None and [len(c) for c in whole.cells] == [2]  # 'old' only, over sex


def test_a_key_the_release_has_not_got_refuses(cfg):
    assert (
        _map(
            "SELECT state, COUNT(*) FROM pums GROUP BY state",
            "SELECT sex, COUNT(*) FROM pums GROUP BY sex",
            cfg,
        )
        is None
    )
