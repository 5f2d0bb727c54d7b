"""A released answer held column by column (a large release without a Python list per
cell).

An answer is a dict: ``keys`` and ``values`` (one list per cell) beside its metadata
(``half_width``, ``mechanism``, ``epsilon``, ``labels``, …). :class:`ColumnarAnswer` is
that dict for a large release as ``noisy_answer`` makes it: the cells are kept as
columns (``key_columns[i][c]`` is ``keys[c][i]``, ``value_columns[j][c]`` is
``values[c][j]``; a column is a list, or a numpy int64/float64 array standing for its
``tolist()``) and the row lists are made only when something asks for them — any
read of ``keys`` or ``values``, or any use of the dict as a whole (iteration, ``items``,
``len``, ``==``, ``dict(answer)``, ``json.dumps``, copy, pickle). From then on it is
the plain dict it stands for, its entries in the order ``noisy_answer`` always wrote
them (``keys``, ``values``, then the metadata). The hot readers take the columns
instead: ``release_codec.encode_answer`` (the stored bytes are the same) and
``rows.answer_rows``. Columns are never modified in place.
"""

from __future__ import annotations

from typing import Any, Self

__all__ = ["ColumnarAnswer", "cell_count"]

_ROWS = ("keys", "values")


class ColumnarAnswer(dict):
    """An answer whose ``keys``/``values`` rows are made from columns on first use
    (module doc); ``columns`` is ``(key_columns, value_columns)`` until then, None after."""

    __slots__ = ("columns", "n")

    def __init__(self, key_columns: list[list], value_columns: list[list], n: int, **meta) -> None:
        super().__init__(meta)
        self.columns: tuple[list[list], list[list]] | None = (key_columns, value_columns)
        self.n = n

    def materialize(self) -> ColumnarAnswer:
        """Make the ``keys`` and ``values`` rows (once); the columns are dropped."""
        cols = self.columns
        if cols is not None:
            self.columns = None
            n = self.n
            keys, values = (
                [list(r) for r in zip(*map(_listed, part))] if part else [[] for _ in range(n)]
                for part in cols
            )
            meta = list(dict.items(self))
            dict.clear(self)
            dict.update(self, keys=keys, values=values)
            dict.update(self, meta)
        return self

    def column_list(self, part: int):
        """``i -> `` key column ``i`` (``part`` 0) or value column ``i`` (1) as a list."""
        if self.columns is None:  # callers read columns only before the rows are made
            raise ValueError("the answer's rows are made: read its keys and values")
        cols = self.columns[part]
        return lambda i: _listed(cols[i])

    # -- every read of the dict as a whole, or of its rows, sees them made ----------
    def __missing__(self, key):
        if key in _ROWS and self.columns is not None:
            return dict.__getitem__(self.materialize(), key)
        raise KeyError(key)

    def get(self, key, default=None):
        if key in _ROWS:
            self.materialize()
        return dict.get(self, key, default)

    def __contains__(self, key) -> bool:
        return (key in _ROWS and self.columns is not None) or dict.__contains__(self, key)

    def __iter__(self):
        return dict.__iter__(self.materialize())

    def __len__(self) -> int:
        return dict.__len__(self.materialize())

    def keys(self):
        return dict.keys(self.materialize())

    def values(self):
        return dict.values(self.materialize())

    def items(self):
        return dict.items(self.materialize())

    def __eq__(self, other) -> bool:
        if isinstance(other, ColumnarAnswer):
            other.materialize()
        return dict.__eq__(self.materialize(), other)

    def __ne__(self, other) -> bool:
        return not self == other

    __hash__ = None

    def __repr__(self) -> str:
        return dict.__repr__(self.materialize())

    def copy(self) -> dict:
        return dict(self.items())

    def __reduce_ex__(self, protocol):  # copy, deepcopy, pickle: the plain dict
        return dict, (dict(self.items()),)

    def __setitem__(self, key, value) -> None:
        if key in _ROWS:
            self.materialize()
        dict.__setitem__(self, key, value)

    def __delitem__(self, key) -> None:
        if key in _ROWS:
            self.materialize()
        dict.__delitem__(self, key)

    def update(self, *a, **kw) -> None:
        dict.update(self.materialize(), *a, **kw)

    def __ior__(self, other: Any) -> Self:  # type: ignore[misc]  # dict's |= (its | is dict's own)
        dict.update(self.materialize(), other)
        return self

    def popitem(self):
        return dict.popitem(self.materialize())

    def clear(self) -> None:
        dict.clear(self.materialize())

    def pop(self, key, *default):
        self.materialize()
        return dict.pop(self, key, *default)

    def setdefault(self, key, default=None):
        self.materialize()
        return dict.setdefault(self, key, default)


def _listed(col) -> list:
    """A column as a list of Python values (a numpy column: its ``tolist()``)."""
    tolist = getattr(col, "tolist", None)  # numpy, without importing it here
    return tolist() if tolist is not None else col


def cell_count(answer: dict) -> int:
    """The number of cells (rows of ``keys``) of ``answer``, without making a columnar
    answer's rows."""
    if isinstance(answer, ColumnarAnswer) and answer.columns is not None:
        return answer.n
    return len(answer.get("keys") or ())
