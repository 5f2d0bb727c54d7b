"""The scans that measure what each privacy unit contributes to a table — the data behind a
bound written ``"auto"`` (:mod:`proxy.pipeline.auto_bounds` releases it with
:mod:`mechanisms.auto_bounds`). Each scan returns a histogram of ONE value per unit,
``(value, units)`` rows, never a unit's identity:

* ``rows``: the unit's number of rows in the table (for ``max_rows_per_unit``);
* ``groups``: the unit's distinct combinations of the given columns (the table's columns with
  a public domain; a NULL is one value) — the cells one unit reaches in a GROUP BY of all of
  them, so in at most that many in a GROUP BY of any of them (for ``max_groups_per_unit``);
* ``max`` / ``min``: the unit's largest / smallest non-NULL value of a column (for a
  column's ``upper`` / ``lower``).

The unit is the one the planner reads the table by (:func:`rewriter.joins.resolve` of
``SELECT * FROM table``: its own column, or a referenced table's through the lookup), and
rows whose unit is NULL belong to no one and are left out, as in the bounded scans
(:mod:`rewriter.unit`). SQL only: no I/O.
"""

from __future__ import annotations

from typing import Literal

from sqlglot import exp

from . import dialects
from .errors import FEATURE_NOT_SUPPORTED, Refusal
from .joins import resolve
from .plan import source_relation
from .shape import Declared

__all__ = ["Measure", "contribution_sql"]

Measure = Literal["rows", "groups", "max", "min"]
VALUE, UNITS = "value", "units"


def contribution_sql(
    config: Declared, table: str, measure: Measure, columns: tuple[str, ...], dialect: str
) -> str:
    """The histogram scan of ``measure`` over ``table`` (module doc): ``SELECT value, units``,
    one row per distinct per-unit value. ``columns``: the grouping columns (``groups``) or
    the one measured column (``max`` / ``min``)."""
    rel = resolve(exp.select(exp.Star()).from_(exp.to_table(table)), config)
    unit = rel.table.privacy_unit
    if unit is None:
        raise Refusal(
            FEATURE_NOT_SUPPORTED,
            f"table {table} has no privacy unit: its bounds cannot be chosen per unit.",
            hint=f"Declare the privacy unit of {table}, or write its bounds as numbers.",
        )
    src: exp.Expr = rel.relation if rel.relation is not None else source_relation(config.source_of(table))
    col = _col
    known = exp.Not(this=exp.Is(this=col(unit), expression=exp.Null()))
    if measure == "groups":  # the unit's distinct combinations (DISTINCT: a NULL is one value)
        if not columns:
            raise ValueError("a groups measure needs the grouping columns")
        cells = exp.select(col(unit), *map(col, columns)).distinct().from_(src).where(known)
        src = exp.Subquery(this=cells, alias=exp.TableAlias(this=exp.to_identifier("__dpgate_g")))
    if measure in ("rows", "groups"):
        per: exp.Expr = exp.Count(this=exp.Star())
    else:
        (name,) = columns
        per = (exp.Max if measure == "max" else exp.Min)(this=col(name))
    inner = exp.select(exp.alias_(per, VALUE, quoted=True)).from_(src).where(known).group_by(col(unit))
    outer = (
        exp.select(col(VALUE), exp.alias_(exp.Count(this=exp.Star()), UNITS, quoted=True))
        .from_(exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("__dpgate_c"))))
        .where(exp.Not(this=exp.Is(this=col(VALUE), expression=exp.Null())))
        .group_by(col(VALUE))
    )
    return dialects.get(dialect).sql(outer)


def _col(name: str) -> exp.Column:
    return exp.column(name, quoted=True)
