"""A large central release column by column, from the scan to the answer.

:func:`rewriter.complete` turns the scan's rows into one row (a tuple) per public cell.
For a scan fetched as columns (:class:`proxy.backends.Columns`: DuckDB's numpy
result), :func:`complete_columns` does the same completion by positions instead:
:func:`rewriter.cell_positions` tells which cell each scanned group fills, and each
measure column is scattered into a column of the domain's length, zero where a cell
has no group or its measure is NULL (``COALESCE(m, 0)``). The keys are the domain's,
as a release stores them (``cell_key``), made once per plan. The result,
:class:`CellColumns`, is what ``release.noisy_answer`` reads column by column
(``Measurement.apply_many`` on arrays) and turns into a
:class:`~proxy.stores.answer.ColumnarAnswer`.

The same cells as :func:`rewriter.complete` gives, value for value: a measure a row
fetch gives as an int is an int64 here, a float a float64; the one difference, 0.0
where the row form has an int 0 for an empty cell of a float column, is the same
number to every batch sampler (they take the column as a float64 array either way), and
:meth:`CellColumns.column` restores the row form's values for a measurement without
a batch form.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rewriter import cell_positions
from rewriter.plan import Plan

from ..backends import Columns
from .common import cell_key

__all__ = ["CellColumns", "complete_columns", "released_keys"]


class CellColumns:
    """The completed cells of a release as columns: ``keys[i]`` key ``i`` of every cell as
    released (``cell_key``; an int64 array for Python ints, else a tuple), ``measures[j]``
    measure ``j`` as a numpy array (int64 or float64), ``present[j]`` where it came from a
    non-NULL value of a scanned group (None: everywhere; elsewhere the value is 0)."""

    __slots__ = ("keys", "measures", "present", "n")

    def __init__(self, keys: list[list], measures: list, present: list, n: int) -> None:
        self.keys, self.measures, self.present, self.n = keys, measures, present, n

    def __len__(self) -> int:
        return self.n

    def column(self, j: int) -> list:
        """Measure ``j`` as the row form holds it: Python values, the int 0 where absent."""
        col, here = self.measures[j].tolist(), self.present[j]
        if here is None:
            return col
        return [v if p else 0 for v, p in zip(col, here.tolist())]

    def rows(self) -> list[tuple]:
        """The cells as :func:`rewriter.complete` gives them, keys as released."""
        keys = [k.tolist() if isinstance(k, np.ndarray) else k for k in self.keys]
        return list(zip(*keys, *(self.column(j) for j in range(len(self.measures)))))


def released_keys(plan: Plan) -> list:
    """The key columns of ``plan``'s public cells as a release stores them, once per plan
    (kept beside the domain's index, which a plan filled from a template shares): a column
    of Python ints as an int64 array (standing for its ``tolist()``: the codec packs it
    without reading it value by value), any other as a list."""
    memo = plan.memo.domain
    hit = memo.get("released_keys")
    if hit is None:
        cells = plan.cells
        hit = memo["released_keys"] = [
            _as_array([cell_key(c[i]) for c in cells]) for i in range(len(plan.group_by))
        ]
    return hit


def _as_array(col: list):
    """``col`` as an int64 array if every value is a Python int within int64, else as a
    tuple (long-lived: the garbage collector stops walking a tuple of plain values)."""
    if col and all(type(v) is int and -(2**63) <= v < 2**63 for v in col):
        arr = np.array(col, dtype=np.int64)
        arr.flags.writeable = False  # shared by every answer of the plan
        return arr
    return tuple(col)


def complete_columns(plan: Plan, scan: Columns) -> CellColumns | None:
    """:func:`rewriter.complete` of a scan fetched as columns (module doc); None where it
    cannot be done by positions (no GROUP BY, two cells equal as SQL compares them, two
    groups filling one cell): the caller then completes the rows."""
    k, n = len(plan.group_by), plan.n_cells
    if k == 0 or len(scan.arrays) != k + len(plan.measures):
        return None
    pos = _positions(plan, scan.arrays[:k])
    if pos is None:
        return None
    hit = pos >= 0
    rows, cells = np.flatnonzero(hit), pos[hit]
    filled = np.zeros(n, dtype=bool)
    filled[cells] = True
    if np.count_nonzero(filled) != len(cells):  # two groups, one cell: never for distinct keys
        return None
    measures, present = [], []
    for a in scan.arrays[k:]:
        data = np.ma.getdata(a)
        if data.dtype.kind not in "if":
            return None
        col = np.zeros(n, dtype=np.int64 if data.dtype.kind == "i" else np.float64)
        here = filled.copy()
        mask = np.ma.getmask(a)
        if mask is not np.ma.nomask:
            here[cells] = ~mask[rows]
        col[cells[here[cells]]] = data[rows[here[cells]]]
        measures.append(col)
        present.append(None if len(cells) == n and here.all() else here)
    return CellColumns(released_keys(plan), measures, present, n)


def _positions(plan: Plan, keys: list) -> np.ndarray | None:
    """Each scanned group's cell position (-1: none), as an int64 array: for one integer key
    (no NULL in the scan or the domain; ints compare the same in numpy as in SQL and Python)
    by a table over the domain's span, or a binary search in its sorted keys when the span
    is wide; else by :func:`rewriter.cell_positions`."""
    if (
        len(keys) == 1
        and keys[0].dtype.kind == "i"
        and np.ma.getmask(keys[0]) is np.ma.nomask
        and (index := _int_index(plan)) is not None
    ):
        got = np.asarray(keys[0], dtype=np.int64)
        if index[0] == "table":
            lo, table = index[1], index[2]
            off = got - lo  # (|lo| < 2^62: a difference that wraps lands far outside)
            inside = (off >= 0) & (off < len(table))
            return np.where(inside, table[np.where(inside, off, 0)], -1)
        order, ordered = index[1], index[2]
        at = np.minimum(np.searchsorted(ordered, got), len(ordered) - 1)
        return np.where(ordered[at] == got, order[at], -1)
    cells = cell_positions(plan, [a.tolist() for a in keys])
    return None if cells is None else np.fromiter(cells, dtype=np.int64, count=len(cells))


def _int_index(plan: Plan) -> tuple | None:
    """How :func:`_positions` finds a one-key domain's cells, made once per plan (beside the
    domain's index): ``("table", lo, table)`` with ``table[v - lo]`` the position of key ``v``
    (-1: none) when the keys span at most ``4 n + 1024`` integers, else ``("sorted", order,
    ordered)``: positions and keys in key order. None unless every key of the domain is a
    distinct Python int below 2^62 in magnitude (and the scan's keys are int64)."""
    memo = plan.memo.domain
    if "int_index" not in memo:
        index: tuple[Any, ...] | None = None
        keys = [c[0] for c in plan.cells]
        if (
            plan.group_by[0].type == "int"
            and keys
            and all(type(v) is int and -(2**62) < v < 2**62 for v in keys)
            and len(set(keys)) == len(keys)
        ):
            arr = np.array(keys, dtype=np.int64)
            lo, hi = int(arr.min()), int(arr.max())
            if hi - lo < 4 * len(keys) + 1024:
                table = np.full(hi - lo + 1, -1, dtype=np.int64)
                table[arr - lo] = np.arange(len(keys), dtype=np.int64)
                index = ("table", lo, table)
            else:
                order = np.argsort(arr, kind="stable")
                index = ("sorted", order, arr[order])
        memo["int_index"] = index
    return memo["int_index"]
