"""The refusal corpus (refusals.txt): each statement is refused with its SQLSTATE."""

from __future__ import annotations

from pathlib import Path

import pytest

import rewriter
from rewriter.errors import ExtremeAggregate, Refusal

CORPUS = Path(__file__).with_name("refusals.txt")


def _cases():
    for line in CORPUS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            state, sql = (s.strip() for s in line.split("|", 1))
            yield pytest.param(state, sql, id=sql[:60])


CASES = list(_cases())


def test_corpus_is_large():
    assert len(CASES) >= 60


@pytest.mark.parametrize("state,sql", CASES)
def test_refused(config, state, sql):
    with pytest.raises(Refusal) as err:
        rewriter.build_plan(rewriter.parse(sql), config)
    r = err.value
    assert r.sqlstate == state, r.message
    assert r.message.strip()
    if state.startswith(("42", "0A")) and state not in ("42601", "42P01", "42703", "42P10"):
        assert r.hint, "policy refusals carry the ALLOWED hint"


def test_percentiles_refusal_says_where_they_are_answered(config):
    """Percentiles are their own release (rewriter.extreme): build_plan routes them there,
    saying where they are answered."""
    with pytest.raises(ExtremeAggregate) as err:
        rewriter.build_plan(
            rewriter.parse("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY age) FROM pums"), config
        )
    assert err.value.sqlstate == "0A000" and "central tables, each its own release" in err.value.message
