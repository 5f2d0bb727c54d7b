"""Per-record MAX/MIN from a columnar scan: ``FrameworkMax.release_arrays`` is
``release`` on the same value counts (the same clip to [0, U], counts summed per clipped
value, so the same release from the same seed), and the pipeline's ``_split_columns`` groups
a scan's columns per public cell exactly as ``_split_rows`` groups its rows — or declines
(several keys, a NULL, a non-integer value) and the rows take over."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proxy.pipeline.per_record as pr
from mechanisms.per_record import FrameworkMax, Levels
from mechanisms.rng import SeededSource
from proxy.backends import Columns

FM = FrameworkMax(Levels(0.01, 10.24), U=1000, beta=0.1)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-50, 1100), st.integers(1, 9)), max_size=40),
    st.integers(1, 10),
    st.integers(0, 2**32),
)
def test_release_arrays_is_release(pairs, ell, seed):
    one = FM.release(ell, pairs, SeededSource(seed))
    v = np.array([p[0] for p in pairs], dtype=np.int64)
    c = np.array([p[1] for p in pairs], dtype=np.int64)
    assert FM.release_arrays(ell, v, c, SeededSource(seed)) == one


def test_release_arrays_refuses_what_it_cannot_take_exactly():
    with pytest.raises(TypeError):
        FM.release_arrays(1, np.array([1.5]), np.array([1]), SeededSource(1))
    with pytest.raises(ValueError):
        FM.release_arrays(0, np.array([1]), np.array([1]), SeededSource(1))


def _prp(cells, n_keys=1):
    return SimpleNamespace(cells=cells, plan=SimpleNamespace(group_by=[None] * n_keys))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "zz"]), st.integers(-5, 2000), st.integers(1, 5)),
        max_size=50,
    )
)
def test_columns_split_as_rows_do(rows):
    prp = _prp([("a",), ("b",), ("c",)])  # "zz": outside the public domain
    cols = Columns(
        ["k1", "v", "cnt"],
        [
            np.array([r[0] for r in rows], dtype=object),
            np.array([r[1] for r in rows], dtype=np.int64),
            np.array([r[2] for r in rows], dtype=np.int64),
        ],
    )
    split, by_rows = pr._split_columns(cols, prp, 1000), pr._split_rows(rows, prp)
    assert set(split) == set(by_rows)
    for cell, got in by_rows.items():
        v, n = split[cell]
        assert sorted(zip(v.tolist(), n.tolist())) == sorted((r[0], r[1]) for r in got)


def test_columns_the_split_declines():
    prp = _prp([(1,), (2,)])
    ints = np.array([1, 2], dtype=np.int64)
    assert pr._split_columns(Columns(["k1", "v", "cnt"], [ints, np.array([1.5, 2.0]), ints]), prp, 10) is None
    masked = np.ma.masked_array(ints, mask=[False, True])
    assert pr._split_columns(Columns(["k1", "v", "cnt"], [ints, masked, ints]), prp, 10) is None
    assert pr._split_columns(Columns(["k1", "k2", "v", "cnt"], [ints] * 4), _prp([(1, 1)], 2), 10) is None
    assert pr._split_columns(Columns(["k1", "v", "cnt"], [ints] * 3), prp, 2**62) is None
