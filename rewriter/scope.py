"""Typing context shared by the expression rules: typed nodes, column lookup and
parameter binding.

A parameter ``$n`` is *pending* until its context gives it a type; then the
binder either replaces it with the converted literal (``build_plan``) or records
the type (``param_types``, where no values are known).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from config import Table

from . import datetimes
from .args import understood
from .errors import UNDEFINED_COLUMN, UNDEFINED_TABLE, Refusal
from .plan import ColumnType
from .values import coerce, natural_type, to_node

NUMERIC = ("int", "float")
COLUMN_TYPES: tuple[ColumnType, ...] = ("int", "float", "text", "bool", "date", "timestamp")
INT_MAG = (1.0, 2.0**63)  # |x| of a non-zero 64-bit integer
UNKNOWN_MAG = (0.0, math.inf)  # a float column: anything, incl. ±inf and tiny values
NOVALUE = object()
PROTOCOL_VIOLATION = "08P01"


@dataclass(frozen=True)
class T:
    """A checked, rewritten expression with its type.

    ``mag`` bounds |x| over the NON-ZERO values x can take (numeric only);
    ``value`` is the plan-time value of a literal; ``param`` an unbound $n; ``f8``: the
    node computes in float8 although its SQL type (``type``) is ``int`` (integer
    arithmetic, made total, see :mod:`rewriter.arith`); ``numeric``: a ``float`` that
    Postgres computes as ``numeric`` (a decimal literal such as ``2.5``, or arithmetic
    of integers with one) — exact decimal, rounding half away from zero; ``approx``: such a
    numeric whose float8 value is only the nearest double (``age / 10.0``): it may be
    compared, floored or rounded, but not computed with further as numeric.
    """

    node: exp.Expression
    type: ColumnType | None
    mag: tuple[float, float] = UNKNOWN_MAG
    value: Any = NOVALUE
    param: int | None = None
    f8: bool = False
    numeric: bool = False
    approx: bool = False

    @property
    def is_literal(self) -> bool:
        return self.value is not NOVALUE

    @property
    def pending(self) -> bool:
        return self.param is not None and self.type is None


Check = Callable[[exp.Expression, "Ctx"], T]
"""The expression checker a rule calls on its operands."""
Rule = Callable[[Any, "Ctx", Check], T]
"""A rule for one node type, found by the node's exact type (so its node is that type)."""


def literal(value: Any) -> T:
    mag = UNKNOWN_MAG
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        mag = (abs(value), abs(value)) if value else (math.inf, 0.0)
    return T(to_node(value), natural_type(value), mag, value)


@dataclass
class Ctx:
    """What the expression rules need: the table, its qualifiers, and the binder."""

    name: str
    table: Table
    qualifiers: set[str]
    params: list[Any] | None  # None: infer mode (param_types)
    # infer mode: each parameter's type, a ColumnType or "<type>[]" (an array: = ANY($n))
    types: dict[int, str | None] = field(default_factory=dict)
    used: set[int] = field(default_factory=set)
    owners: dict[str, set[str]] | None = (
        None  # a lookup join: column -> the qualifiers it may carry (rewriter.joins)
    )
    # a date part in a row predicate, checked as the derived group key of the same expression
    # (rewriter.keys.date_part): None where a statement's rules do not allow it
    date_part: Callable[[exp.Extract, Ctx], T] | None = None
    # EXISTS / IN (SELECT …) in a row predicate, read as a semi-join along the privacy unit's
    # path (rewriter.semijoin): None where a statement's rules do not allow it
    semijoin: Callable[[exp.Exists | exp.In, Ctx, Check], T] | None = None

    @property
    def infer(self) -> bool:
        return self.params is None

    def column(self, node: exp.Column) -> T:
        understood(node)
        db = node.args.get("db")
        schema_ok = db is None or (db.name == "public" and node.table == self.name)  # public.t.col
        if node.args.get("catalog") or not schema_ok or (node.table and node.table not in self.qualifiers):
            raise Refusal(
                UNDEFINED_TABLE,
                f"missing FROM-clause entry for {node.table!r}; "
                f"qualify columns with {' or '.join(sorted(self.qualifiers))} or "
                "not at all.",
                hint=None,
            )
        name = node.name
        col = self.table.columns.get(name)
        if col is not None and node.table and self.owners is not None and node.table not in self.owners[name]:
            raise Refusal(
                UNDEFINED_COLUMN,
                f"column {node.table}.{name} does not exist; {name} is a column of "
                f"{' / '.join(sorted(self.owners[name]))}.",
                hint=None,
            )
        if col is None or isinstance(node.this, exp.Star):
            if isinstance(node.this, exp.Star):
                raise Refusal("42501", "SELECT * returns raw rows and is not allowed.")
            raise Refusal(
                UNDEFINED_COLUMN,
                f"column {name} is not declared for table "
                f"{self.name}; declared columns: "
                f"{', '.join(c for c in self.table.columns if not c.startswith('__dpgate'))}.",
                hint=None,
            )
        mag = INT_MAG if col.type == "int" else UNKNOWN_MAG
        return T(exp.column(name, quoted=True), col.type, mag)

    def param(self, node: exp.Parameter) -> T:
        return T(node, None, param=self.param_number(node))

    def param_number(self, node: exp.Parameter) -> int:
        """``n`` of ``$n``, recorded as used."""
        ok = isinstance(node.this, exp.Literal) and node.this.is_int and int(node.this.this) >= 1
        if not ok:
            raise Refusal("42601", f"invalid parameter {node.sql('postgres')}; use $1, $2, …", hint=None)
        n = int(node.this.this)
        self.used.add(n)
        return n

    def settle(self, t: T, type_: ColumnType | None) -> T:
        """Give a pending parameter (or a string literal) the type its context wants."""
        n = t.param
        if n is not None and t.type is None:  # pending
            params = self.params
            if params is None:  # infer mode
                if self.types.get(n) is None:
                    self.types[n] = type_
                return replace(t, type=type_ or _column_type(self.types.get(n)))
            if n > len(params):
                raise Refusal(
                    PROTOCOL_VIOLATION,
                    f"the statement uses ${n} but only {len(params)} parameter(s) were supplied.",
                    hint=None,
                )
            if type_ == "date" or type_ == "timestamp":
                v = params[n - 1]
                return (
                    T(exp.Null(), type_, value=None)
                    if v is None
                    else _time_literal(datetimes.parse(v, type_, f"parameter ${n}"))
                )
            return literal(coerce(params[n - 1], type_, f"parameter ${n}"))
        if t.is_literal and t.type == "text" and (type_ == "date" or type_ == "timestamp"):
            # '2025-01-31' compared with a date column
            return _time_literal(datetimes.parse(t.value, type_))
        if t.is_literal and t.type == "text" and type_ in ("int", "float", "bool"):
            return literal(coerce(t.value, type_, "literal"))
        return t

    def check_count(self) -> None:
        params = self.params
        if params is None:  # infer mode
            return
        if not self.used:
            if params:
                self._mismatch(params)
            return
        if len(params) != max(self.used):
            self._mismatch(params)

    def _mismatch(self, params: list[Any]) -> None:
        need = max(self.used) if self.used else 0
        raise Refusal(
            PROTOCOL_VIOLATION,
            f"the statement has {need} parameter(s) but {len(params)} were supplied.",
            hint=None,
        )


def _column_type(name: str | None) -> ColumnType | None:
    """``name`` if it is a column type (not an array parameter's ``"int[]"``)."""
    for typ in COLUMN_TYPES:
        if name == typ:
            return typ
    return None


def _time_literal(v: dt.date) -> T:
    return T(datetimes.node(v), datetimes.type_of(v), value=v)
