"""From the scan's groups to the public cells: the empty-cell completion, done by the proxy.

The backend SQL of a GROUP BY (:func:`rewriter.emit.to_sql`) returns one row per group
the data has — keys ``k1..kk``, measures ``m1..mj`` — and no more: joining it to the
public domain in SQL (a ``VALUES`` relation and a LEFT JOIN) cost DuckDB about as
much again as the scan on small tables. :func:`complete` does that join here, with
the same meaning: every cell of the public domain, in key order, each with its
measures or zeros (COALESCE); a group whose key is NULL or outside the domain matches
no cell and is dropped (a NULL bin, where the domain has one, matches NULL). Keys are
matched as SQL compares them — numbers by value whatever their Python type (int,
float, Decimal), a DATE equal to the TIMESTAMP at its midnight — and written from the
domain, never from the scan, so the released set of cells and their key values never
depend on the data.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

from .plan import Plan

__all__ = ["cell_positions", "complete", "domain_index", "sql_key"]


def complete(plan: Plan, rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """The rows of ``plan``'s backend SQL (``rows``) as one row per public cell:
    ``(k1..kk, m1..mj)`` in key order, measures 0 for a cell with no rows and for a
    NULL measure (``COALESCE(m, 0)``)."""
    k = len(plan.group_by)
    if k == 0:  # one aggregate row: SUM of no rows is 0
        return [tuple(0 if m is None else m for m in r) for r in rows]
    types = [g.type for g in plan.group_by]
    nkeys, typed = domain_index(plan)
    found = dict(zip(_sql_keys(types, [map(itemgetter(i), rows) for i in range(k)]), rows))
    # one key: scalar keys, no per-row tuple
    cell_keys: Sequence[Any] = [key[0] for key in nkeys] if k == 1 else nkeys
    zeros = (0,) * len(plan.measures)
    out: list[tuple[Any, ...]] = []
    for key, cell in zip(cell_keys, typed):
        r = found.get(key)
        if r is None:
            out.append(cell + zeros)
        else:
            m = r[k:] if type(r) is tuple else tuple(r[k:])
            out.append(cell + (m if None not in m else tuple(0 if x is None else x for x in m)))
    return out


Cells = tuple[tuple[Any, ...], ...]


def domain_index(plan: Plan) -> tuple[Cells, Cells]:
    """The public cells of ``plan`` as (keys as SQL's ``=`` sees them, keys as the backend
    returns them), in key order; computed once per plan from the config's domains (a plan
    filled from a template shares its template's: only WHERE differs). Tuples, not lists:
    the cyclic garbage collector stops tracking a tuple of plain values, so these long-lived
    memos (10,000 cells: 20,000 references) are not walked again by every full collection."""
    memo = plan.memo.domain  # shared with the template's plan
    hit: tuple[Cells, Cells] | None = memo.get("index")
    if hit is None:
        types = [g.type for g in plan.group_by]
        cells = plan.cells
        hit = memo["index"] = (
            tuple(tuple(_norm(v, t) for v, t in zip(cell, types)) for cell in cells),
            tuple(tuple(_typed(v, t) for v, t in zip(cell, types)) for cell in cells),
        )
    return hit


def cell_positions(plan: Plan, key_columns: Sequence[Sequence[Any]]) -> list[int] | None:
    """The completion by positions (for a scan fetched column by column): for each row of
    the scan, given as its key columns (``key_columns[i][r]``: key ``i`` of row ``r``), the
    position of the public cell it fills in ``plan.cells`` (key order), or -1 for a row that
    fills none (a NULL key without a NULL bin, a key outside the domain); keys matched as
    :func:`complete` matches them. None if two cells of the domain are equal as SQL
    compares them (each would take the same row: :func:`complete` handles that)."""
    index = _position_index(plan)
    if index is None:
        return None
    keys = _sql_keys([g.type for g in plan.group_by], key_columns)
    return list(map(index.get, keys, repeat(-1)))


def _sql_keys(types: Sequence[str], key_columns: Sequence[Iterable[Any]]) -> list[Any]:
    """Each scanned row's key as SQL's ``=`` sees it — a scalar for one key, a tuple of
    several — from its key columns (``key_columns[i]``: key ``i`` of every row, any iterable)."""
    if len(types) == 1:
        t, col = types[0], key_columns[0]
        if t == "int":  # _norm is the identity on ints (and bool, Decimal)
            return list(col)
        if t == "text":
            return [v if type(v) is str else _norm(v, t) for v in col]
        return [_norm(v, t) for v in col]
    return [tuple(_norm(v, t) for v, t in zip(r, types)) for r in zip(*key_columns)]


def _position_index(plan: Plan) -> dict[Any, int] | None:
    """{key as SQL's ``=`` sees it (a tuple of several): its cell's position}, once per
    plan (shared with the template's plan, like :func:`domain_index`); None if two cells'
    keys are equal."""
    memo = plan.memo.domain
    if "positions" not in memo:
        nkeys = domain_index(plan)[0]
        keys: Sequence[Any] = [key[0] for key in nkeys] if len(plan.group_by) == 1 else nkeys
        index = {key: i for i, key in enumerate(keys)}
        memo["positions"] = index if len(index) == len(keys) else None
    positions: dict[Any, int] | None = memo["positions"]
    return positions


def sql_key(v: Any, typ: str) -> Any:
    """A key value (from the domain or from a backend) as SQL's ``=`` compares it."""
    return _norm(v, typ)


def _norm(v: Any, typ: str) -> Any:
    """A key as SQL's ``=`` sees it (``IS NOT DISTINCT FROM`` for NULL)."""
    if v is None:
        return None
    if typ in ("date", "timestamp"):
        if isinstance(v, str):
            v = dt.datetime.fromisoformat(v)
        return v if isinstance(v, dt.datetime) else dt.datetime(v.year, v.month, v.day)
    if typ == "float":
        f = float(v)
        return "NaN" if math.isnan(f) else f  # NaN = NaN in DuckDB and Postgres
    if typ == "text":
        return str(v)
    return v  # int, bool, Decimal: Python's numeric equality


def _typed(v: Any, typ: str) -> Any:
    """A domain value as the backend returns a value of the key's SQL type."""
    if v is None:
        return None
    if typ == "date":
        return v.date() if isinstance(v, dt.datetime) else v
    if typ == "timestamp":
        return v if isinstance(v, dt.datetime) else dt.datetime(v.year, v.month, v.day)
    if typ == "float":
        return float(v)
    return v
