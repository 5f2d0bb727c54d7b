"""Values that reach the backend beside the SQL text, never inside it.

A secret the scan needs — the privacy unit's bounding key (:mod:`.unit`) — is a *named
parameter* of the statement: the tree holds ``exp.Placeholder(name)``, :func:`spell`
writes it as the backend binds it, and :func:`bound` returns the text as a
:class:`ParamSQL` carrying the values. The text therefore never holds the value: not in
the database's statement log, not in ``pg_stat_activity``, not in EXPLAIN or our own
logs. Per backend (its dialect's ``marker`` and ``param_key``, :mod:`rewriter.dialects`):

* DuckDB: ``CAST($name AS VARCHAR)``, bound by the Python API (``execute(text, params)``).
* Spark Connect: ``:name``, bound by ``spark.sql(text, args={name: value})``.
* Postgres: ``current_setting('dpgate.name')``, a session setting the backend gives its
  connections in the startup packet (libpq ``options='-c dpgate.name=value'``). A bound
  parameter (psycopg's server-side bind) would not do: with ``log_statement = 'all'``
  Postgres logs every bound value (``DETAIL: parameters: $1 = '…'``, unless
  ``log_parameter_max_length = 0``, which only a superuser may set); the startup
  packet's options are logged by no setting and shown in no view. A connection without
  the setting fails the statement (``current_setting`` of an unknown name is an error):
  the scan never runs with another key.

Each is the same value of the same type as the string literal it replaces, so the rows
a hash keeps are the same as with the literal.
SQL only: no I/O.
"""

from __future__ import annotations

from sqlglot import exp

from . import dialects
from .dialects import SQLDialect

__all__ = ["ParamSQL", "bound", "key", "marker", "needs", "rebound", "spell"]


class ParamSQL(str):
    """Backend SQL with values bound beside it. ``template`` is what the backend runs and
    ``params`` the values of its parameters:

    * a ``tuple`` (a plan template, :mod:`.template`): the ``str`` itself is the SQL with
      every literal in place, ``template`` the same with the integer slots as
      ``CAST($k AS INTEGER)`` — a backend may run either (DuckDB prepares the template);
    * a ``dict`` (named parameters, :func:`bound`): the ``str`` is ``template``, with the
      parameters' markers (:func:`marker`) and without their values; ``params`` maps each
      backend-side name (:func:`key`) to its value, and a backend must bind them (the
      text alone does not run).

    ``needs``: relations the text reads that are not the database's own — ``(name, select)``
    pairs, each a relation the backend makes from ``select`` (in its dialect) and keeps under
    ``name`` before it runs the text (the privacy unit's heavy units, :func:`rewriter.unit.heavy_set`);
    a backend that keeps no relations refuses such a text."""

    template: str
    params: tuple[int, ...] | dict[str, str]
    needs: tuple[tuple[str, str], ...] = ()


def bound(text: str, params: dict[str, str], needs: tuple[tuple[str, str], ...] = ()) -> ParamSQL:
    """``text`` (with named markers) and the values its backend binds to them; ``needs``: the
    relations it reads that the backend makes (:class:`ParamSQL`)."""
    out = ParamSQL(text)
    out.template, out.params, out.needs = str(text), dict(params), tuple(needs)
    return out


def rebound(text: str, inner: str) -> str:
    """``text`` built around ``inner`` (a scan wrapped in an outer query) with ``inner``'s
    named parameters and the relations it needs, if it has any."""
    params = getattr(inner, "params", None)
    return bound(text, params, getattr(inner, "needs", ())) if isinstance(params, dict) else text


def needs(sql: str) -> tuple[tuple[str, str], ...]:
    """The relations ``sql`` reads that its backend makes first (:class:`ParamSQL`)."""
    return getattr(sql, "needs", ())


def key(name: str, dialect: str | SQLDialect) -> str:
    """The name under which the backend binds parameter ``name`` (:meth:`SQLDialect.param_key`)."""
    return dialects.get(dialect).param_key(name)


def marker(name: str, dialect: str | SQLDialect) -> exp.Expr:
    """Parameter ``name`` (a string) as the backend reads it (:meth:`SQLDialect.marker`)."""
    return dialects.get(dialect).marker(name)


def spell(tree: exp.Expr, dialect: str | SQLDialect) -> tuple[exp.Expr, frozenset[str]]:
    """``tree`` with each named placeholder written as ``dialect`` binds it (in place), and
    the names it has (a backend binds exactly those: DuckDB refuses a value it has no
    parameter for)."""
    d = dialects.get(dialect)
    names: set[str] = set()

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Placeholder) and isinstance(node.this, str) and node.this:
            names.add(node.this)
            return d.marker(node.this)
        return node

    return tree.transform(swap, copy=False), frozenset(names)
