"""What one backend's SQL needs that the others' does not: the seam between the emitter
(:mod:`rewriter.emit`, :mod:`rewriter.params` and the text writers) and a backend.

A :class:`SQLDialect` is registered under its backend's kind (:mod:`rewriter.dialects`);
its ``name`` is also the sqlglot dialect the backend's SQL is generated in. Everything a
dialect answers is the spelling of one meaning, so a plan's scan returns the same cells on
every backend:

* identifiers: :meth:`quote`;
* the privacy unit's keyed hash (:mod:`rewriter.unit`): :meth:`keyed_hash`, :meth:`keyed_int`,
  :meth:`int_div` — any deterministic hash of the arguments will do (the ε guarantee rests on
  the bound, not on the hash);
* the plan of the privacy unit's bounded scan (:attr:`unit_heavy_apart`): the same cells by the
  plan the backend runs faster (measured per backend by ``python -m bench.user_level --backend``);
* named parameters (:mod:`rewriter.params`): :meth:`marker` and :meth:`param_key`, how the
  backend reads a value bound beside the text;
* :meth:`rewrite`: the few tree rewrites the backend needs to mean what the plan means
  (Spark's TRUNC/FLOOR/CEIL and table aliases, DuckDB's double literals);
* ``text_dialect`` and :meth:`from_text`: the text emitters (per-record levels, local reports,
  Subset) write in ``text_dialect``; a backend that reads another spelling transpiles it;
* ``prepares_templates``: the backend runs a plan template's text prepared
  (:class:`rewriter.params.ParamSQL` with a tuple of values).

SQL only: no I/O."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from ..errors import FEATURE_NOT_SUPPORTED, Refusal


def not_null_spelling(tree: exp.Expr) -> exp.Expr:
    """``NOT (x IS NULL)`` written ``x IS NOT NULL``, in place. sqlglot reads the second as
    the first and writes it back as ``NOT x IS NULL``; the two mean the same everywhere, but
    DuckDB's optimizer makes only the second its NOT NULL filter (on the privacy unit's lookup
    join it then builds its hash table on the filtered side). The tree made here
    (``Is(x, Not(Null))``) is only ever generated, never planned again."""

    def spell(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Not):
            return node
        test = node.this
        while isinstance(test, exp.Paren):
            test = test.this
        if isinstance(test, exp.Is) and isinstance(test.expression, exp.Null):
            return exp.Is(this=test.this, expression=exp.Not(this=exp.Null()))
        return node

    out: exp.Expr = tree.transform(spell, copy=False)
    return out


class SQLDialect:
    """A backend's SQL (module doc). A subclass sets ``name`` and overrides what its backend
    spells otherwise; what it lacks is refused (SQLSTATE 0A000), never guessed."""

    name: str = ""
    """The backend kind it is registered under, and sqlglot's name for its SQL."""
    text_dialect: str = ""
    """The dialect the text emitters write in for this backend (default: its own)."""
    prepares_templates: bool = False
    """The backend runs a plan template (``ParamSQL`` with a tuple) prepared."""
    unit_heavy_apart: bool = True
    """The privacy unit's bounded scan aggregates per (unit, cell) only the heavy units' rows
    (those with more rows than a bound lets through) and takes every other unit's rows from
    the analyst's own aggregate (:func:`rewriter.unit.per_unit_scan`): the same cells, by
    the plan this backend runs faster."""

    def __init__(self) -> None:
        if not self.text_dialect:
            self.text_dialect = self.name

    def __repr__(self) -> str:
        return f"<SQL dialect {self.name}>"

    # -- identifiers and text --------------------------------------------------------
    def quote(self, name: str) -> str:
        """``name`` as a quoted identifier."""
        return exp.to_identifier(name, quoted=True).sql(dialect=self.name)

    def sql(self, tree: exp.Expr) -> str:
        """``tree`` as this backend's text, every identifier quoted, after :meth:`rewrite`."""
        return self.rewrite(tree).sql(dialect=self.name, identify=True)

    def rewrite(self, tree: exp.Expr) -> exp.Expr:
        """The tree as this backend must read it to mean what the plan means (in place);
        every backend: ``NOT (x IS NULL)`` spelled ``x IS NOT NULL``."""
        return not_null_spelling(tree)

    def from_text(self, sql: str) -> str:
        """SQL a text emitter wrote in ``text_dialect``, for this backend: unchanged when
        the two agree, else parsed and generated again with :meth:`rewrite`. Literals keep
        their text, so float-exact bounds ``CAST('…' AS DOUBLE)`` stay exact."""
        if self.text_dialect == self.name:
            return sql
        return self.sql(sqlglot.parse_one(sql, read=self.text_dialect))

    # -- the privacy unit's keyed hash -----------------------------------------------
    def keyed_hash(self, args: list[exp.Expr]) -> exp.Expr:
        """``DPGATE_HASH(salt, …)``: deterministic for equal arguments (ties are broken by
        the values in the ORDER BY after it). A dialect without one refuses the statements
        that bound a privacy unit."""
        raise self._lacks("keyed hash, which bounds a privacy unit's contribution")

    def keyed_int(self, n: exp.Expr, args: list[exp.Expr]) -> exp.Expr:
        """The keyed hash of ``args`` as an integer in [0, n) (n > 0)."""
        raise self._lacks("keyed hash, which bounds a privacy unit's contribution")

    def int_div(self, a: exp.Expr, b: exp.Expr) -> exp.Expr:
        """Integer division truncated toward zero (sqlglot spells ``IntDiv`` per dialect:
        DuckDB ``//``, Postgres and Spark ``DIV``)."""
        return exp.IntDiv(this=exp.Paren(this=a), expression=exp.Paren(this=b))

    # -- named parameters (rewriter.params) -------------------------------------------
    def param_key(self, name: str) -> str:
        """The name under which the backend binds parameter ``name``."""
        return name

    def marker(self, name: str) -> exp.Expr:
        """Parameter ``name`` (a string) as the backend reads it, bound beside the text."""
        raise self._lacks("named parameters, which carry the privacy unit's key")

    def _lacks(self, what: str) -> Refusal:
        return Refusal(
            FEATURE_NOT_SUPPORTED,
            f"the {self.name} backend has no {what}",
            hint="Declare the table without a privacy unit, or use a backend that has it.",
        )
