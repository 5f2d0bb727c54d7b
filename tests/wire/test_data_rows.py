"""The batch DataRow encoder (proxy/wire/rows.py) gives exactly the bytes of one
``DataRow`` message per row built from ``types.encode`` — for the values its short paths
take (int, float, str in their columns) and for everything they leave to ``encode``
(bools, Decimals, dates, NaN and ±Infinity, out-of-range integers, arrays, values of
another type than their column's)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire import messages as m
from proxy.wire import types as t
from proxy.wire.api import ColumnRows, EncodedRows, SqlError
from proxy.wire.rows import data_rows

OIDS = [
    t.INT2,
    t.INT4,
    t.INT8,
    t.OID,
    t.FLOAT4,
    t.FLOAT8,
    t.NUMERIC,
    t.TEXT,
    t.VARCHAR,
    t.BOOL,
    t.DATE,
    t.TIMESTAMP,
    t.UNKNOWN,
    1007,
    1009,
]

values = st.one_of(
    st.none(),
    st.integers(-(2**70), 2**70),
    st.integers(-300, 300),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.booleans(),
    st.decimals(allow_nan=False, places=3, min_value=-(10**6), max_value=10**6),
    st.dates(min_value=dt.date(1990, 1, 1), max_value=dt.date(2100, 1, 1)),
    st.lists(st.one_of(st.none(), st.integers(-100, 100)), max_size=3),
)


def _one_by_one(oids, formats, rows) -> bytes:
    return b"".join(
        m.DataRow(tuple(t.encode(o, v, f) for o, v, f in zip(oids, row, formats))).encode() for row in rows
    )


def _either(fn, *a):
    try:
        return fn(*a)
    except SqlError as e:
        return ("error", e.sqlstate)
    except Exception as e:  # whatever one raises, the other must raise too
        return ("error", type(e).__name__)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_same_bytes_as_one_message_per_row(data):
    width = data.draw(st.integers(1, 4))
    oids = data.draw(st.lists(st.sampled_from(OIDS), min_size=width, max_size=width))
    formats = data.draw(st.lists(st.sampled_from([0, 1]), min_size=width, max_size=width))
    rows = data.draw(st.lists(st.tuples(*[values] * width), max_size=6))
    new, old = _either(data_rows, oids, formats, rows), _either(_one_by_one, oids, formats, rows)
    if isinstance(old, tuple) or isinstance(new, tuple):  # an error: raised by both (columns are
        assert isinstance(old, tuple) and isinstance(new, tuple), (new, old)  # encoded in another order)
    else:
        assert new == old
    if rows:  # the same rows given as columns
        assert _either(data_rows, oids, formats, ColumnRows([list(c) for c in zip(*rows)])) == new


def test_column_rows_are_rows_made_only_when_read():
    rows = ColumnRows([[1, 2, 3], ["a", "b", None]])
    assert len(rows) == 3 and rows._rows is None
    assert rows[1:] == [(2, "b"), (3, None)] and isinstance(rows[1:], ColumnRows) and rows._rows is None
    assert data_rows([t.INT4, t.TEXT], [0, 0], rows) == _one_by_one([t.INT4, t.TEXT], [0, 0], list(rows))
    assert (
        rows[0] == (1, "a")
        and list(rows) == [(1, "a"), (2, "b"), (3, None)]
        and rows == ((1, "a"), (2, "b"), (3, None))
    )
    assert rows != [(1, "a")] and not ColumnRows([]) and ColumnRows([]) == []
    with pytest.raises(ValueError):
        ColumnRows([[1, 2], [1]])
    with pytest.raises(SqlError):  # a width other than the columns'
        data_rows([t.INT4], [0], ColumnRows([[1], [2]]))


@pytest.mark.parametrize("fmt", [0, 1])
def test_the_usual_columns_of_a_release(fmt):
    oids, formats = [t.INT4, t.INT8, t.FLOAT8, t.TEXT], [fmt] * 4
    rows = [(i, -i * 10**12, i / 7 - 3.0, f"g{i}é") for i in range(-50, 50)] + [
        (None, 0, -0.0, ""),
        (1, 2, float("inf"), None),
    ]
    assert data_rows(oids, formats, rows) == _one_by_one(oids, formats, rows)


def test_a_row_of_the_wrong_width_is_an_internal_error():
    with pytest.raises(SqlError) as e:
        data_rows([t.INT4, t.INT4], [0, 0], [(1, 2), (3,)])
    assert e.value.sqlstate == "XX000"


def test_encoded_rows_are_sent_as_given_for_their_formats_and_read_only_for_others():
    """:class:`EncodedRows` (the heavy-statement lane's): for the formats they were encoded
    for, their bytes as they are (here deliberately not the rows' own, so a re-encoding
    would show); for other formats, or any other use, the values, read once."""
    rows = [(1, 2.5, "a"), (2, None, "b")]
    oids = [t.INT4, t.FLOAT8, t.TEXT]
    reads = []

    def values():
        reads.append(1)
        return rows

    enc = EncodedRows(b"as encoded", (0, 0, 0), 2, values)
    assert len(enc) == 2 and data_rows(oids, [0, 0, 0], enc) == b"as encoded" and not reads
    assert data_rows(oids, [1, 1, 1], enc) == _one_by_one(oids, [1, 1, 1], rows) and reads == [1]
    assert enc[1:] == rows[1:] and list(enc) == rows and enc == rows and reads == [1]
    assert data_rows(oids, [0, 0, 0], EncodedRows(b"", (0, 0, 0), 0, list)) == b""
    with pytest.raises(ValueError):  # values other than those encoded
        EncodedRows(b"x", (0,), 3, lambda: [(1,)]).rows()


def test_encoded_rows_are_a_full_sequence():
    """EncodedRows is a ``Sequence``: its mixin methods (``count``, ``index``, ``in``) work on
    the values, as on the list they stand for."""
    enc = EncodedRows(b"x", (0,), 3, lambda: [(1,), (2,), (1,)])
    assert enc.count((1,)) == 2 and enc.index((2,)) == 1 and (2,) in enc and len(enc) == 3
