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

from .plan import Plan

__all__ = ["complete"]


def complete(plan: Plan, rows) -> list[tuple]:
    """The rows of ``plan``'s backend SQL (``rows``) as one row per public cell:
    ``(k1..kk, m1..mj)`` in key order, measures 0 for a cell with no rows and for a
    NULL measure (``COALESCE(m, 0)``)."""
    k = len(plan.group_by)
    if k == 0:                                       # one aggregate row: SUM of no rows is 0
        return [tuple(0 if m is None else m for m in r) for r in rows]
    types = [g.type for g in plan.group_by]
    found: dict[tuple, tuple] = {}
    for r in rows:
        found[tuple(_norm(v, t) for v, t in zip(r[:k], types))] = tuple(r[k:])
    zeros = (0,) * len(plan.measures)
    out = []
    for cell in plan.cells:
        key = tuple(_norm(v, t) for v, t in zip(cell, types))
        measures = found.get(key, zeros)
        out.append((*(_typed(v, t) for v, t in zip(cell, types)), *(0 if m is None else m for m in measures)))
    return out


def _norm(v, typ: str):
    """A key as SQL's ``=`` sees it (``IS NOT DISTINCT FROM`` for NULL)."""
    if v is None:
        return None
    if typ in ("date", "timestamp"):
        if isinstance(v, str):
            v = dt.datetime.fromisoformat(v)
        return v if isinstance(v, dt.datetime) else dt.datetime(v.year, v.month, v.day)
    if typ == "float":
        f = float(v)
        return "NaN" if math.isnan(f) else f      # NaN = NaN in DuckDB and Postgres
    if typ == "text":
        return str(v)
    return v                                      # int, bool, Decimal: Python's numeric equality


def _typed(v, typ: str):
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
