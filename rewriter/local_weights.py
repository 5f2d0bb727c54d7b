"""Bucket weights for local (metric-LDP) tables: a predicate or expression over ONE
private column becomes a weight per bucket — its average over the bucket's possible
values ("interpolate" edge policy, metric-LDP spec §8; "whole" rounds a predicate's weights up to
1 on every bucket it touches; see :mod:`rewriter.local`).

This module only reads the SQL: it checks the expression and compiles it to a SQL-free
:class:`Weight` (a tree of plain tuples) that the proxy evaluates numerically with
:func:`mechanisms.metric_ldp.weights.bucket_weights` (the rewriter imports no
mechanism code). :class:`LocalQuery` is a separable query (spec §3.5) described by such
factors per dimension.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from .args import understood
from .errors import DATATYPE_MISMATCH, Refusal
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .plan import ColumnType
from .scope import Ctx
from .values import literal_value

if TYPE_CHECKING:
    from .local_layout import Layout

LOCAL_ALLOWED = (
    "Allowed on a local table: SELECT [public group columns,] COUNT(*), SUM(x), AVG(x), "
    "percentile_disc(p) / percentile_cont(p) WITHIN GROUP (ORDER BY private column) "
    "FROM it [WHERE ranges on private columns AND predicates on public columns] "
    "[GROUP BY public columns with a declared domain] [ORDER BY outputs] [LIMIT n]."
)

_CMP: dict[type[exp.Expression], str] = {
    exp.EQ: "eq",
    exp.NEQ: "ne",
    exp.GT: "gt",
    exp.GTE: "ge",
    exp.LT: "lt",
    exp.LTE: "le",
}
_ARITH: dict[type[exp.Expression], str] = {exp.Add: "add", exp.Sub: "sub", exp.Mul: "mul"}


@dataclass(frozen=True)
class Weight:
    """Per-bucket weight of a predicate (``kind = "truth"``) or expression (``"value"``) over
    private column ``column``: its average over each bucket's values, the points cut at the
    constants ``breaks``; ``edges = "whole"`` (predicates): 1 on every bucket it touches (§8).
    ``tree`` is the SQL-free form read by :func:`mechanisms.metric_ldp.weights.evaluate`."""

    column: str
    tree: tuple[Any, ...]
    kind: str
    breaks: tuple[float, ...] = ()
    edges: str = "interpolate"


@dataclass(frozen=True)
class Prefix:
    """The weight of the prefix "bucket ≤ k" (percentile prefixes, spec §3.10)."""

    k: int


#: per dimension of a joint group, the factors whose product is its bucket weight
Factors = tuple[tuple[Weight | Prefix, ...], ...]


@dataclass(frozen=True)
class LocalQuery:
    """A separable query over one joint group (spec §3.5): per dimension, the factors whose
    product is its bucket weight (none: weight 1). ``private_weight``: the SUM of the private
    weight column (paper §4.3.2, spec §3.9), Δ·ĉ(R × [2,2]), applied by the proxy."""

    factors: Factors = ()
    private_weight: bool = False

    @property
    def trivial(self) -> bool:
        """Weight 1 everywhere: the exact (public) count."""
        return not self.private_weight and all(not f for f in self.factors)


def refuse_local(msg: str, state: str = UNSUPPORTED) -> Refusal:
    """A refusal of a local-table SELECT, with the hint of what such a SELECT may say."""
    return Refusal(state, msg, hint=LOCAL_ALLOWED)


class _Compile:
    """Check an expression / predicate over ONE private column and compile it to a tree."""

    def __init__(self, ctx: Ctx, col: str, col_type: ColumnType):
        self.ctx, self.col, self.col_type = ctx, col, col_type
        self.breaks: list[float] = []

    def const(self, node: exp.Expression) -> float | None:
        """A number (literal or $n), or None if ``node`` is not a constant."""
        while isinstance(node, exp.Paren):
            node = node.this
        ok, v = literal_value(node)
        if ok:
            if v is None or isinstance(v, (bool, str)):
                raise refuse_local(
                    f"{node.sql('postgres')} is not a number; private column {self.col} "
                    "is compared with numbers only.",
                    DATATYPE_MISMATCH,
                )
            return float(v)
        if isinstance(node, exp.Parameter):
            t = self.ctx.settle(self.ctx.param(node), self.col_type)
            if not t.is_literal:
                return 0.0  # describe: the value is not known yet
            if t.value is None:
                raise refuse_local(
                    f"parameter ${t.param} is NULL; compare {self.col} with numbers.", DATATYPE_MISMATCH
                )
            return float(t.value)
        if isinstance(node, exp.Neg):
            v = self.const(node.this)
            return None if v is None else -v
        return None

    def collect(self, node: exp.Expression) -> None:
        for n in node.walk():
            if isinstance(n, (exp.Literal, exp.Parameter, exp.Neg)):
                v = self.const(n)
                if v is not None:
                    self.breaks.append(v)

    def value(self, node: exp.Expression) -> tuple[Any, ...]:
        while isinstance(node, exp.Paren):
            node = understood(node).this
        if type(node) in (exp.Neg, exp.Case, exp.If, exp.Div, *_ARITH):
            understood(node)
        c = self.const(node)
        if c is not None:
            return ("const", c)
        if isinstance(node, exp.Column):
            return ("x",)
        if isinstance(node, exp.Neg):
            return ("neg", self.value(node.this))
        if type(node) in _ARITH:
            return (_ARITH[type(node)], self.value(node.this), self.value(node.expression))
        if isinstance(node, exp.Div):
            d = self.const(node.expression)
            if d is None or d == 0:
                raise refuse_local(
                    "division in an expression over a private column needs a non-zero number as divisor."
                )
            return ("div", self.value(node.this), d)
        if isinstance(node, exp.Case):
            if node.this is not None:
                raise refuse_local("CASE x WHEN … is not supported here; write CASE WHEN x = … THEN ….")
            if not node.args.get("default"):
                raise refuse_local(
                    "CASE over a private column needs an ELSE branch (NULL is not summed here)."
                )
            ifs = tuple(
                (self.truth(understood(b).this), self.value(b.args["true"]))
                for b in node.args.get("ifs") or []
            )
            return ("case", ifs, self.value(node.args["default"]))
        if isinstance(node, exp.If):
            if node.args.get("false") is None:
                raise refuse_local("IF over a private column needs an else value.")
            return (
                "case",
                ((self.truth(node.this), self.value(node.args["true"])),),
                self.value(node.args["false"]),
            )
        raise refuse_local(
            f"{node.sql('postgres')} is not supported in an expression over private "
            f"column {self.col}; use the column, numbers, + - * /, and CASE WHEN."
        )

    def truth(self, node: exp.Expression) -> tuple[Any, ...]:
        while isinstance(node, exp.Paren):
            node = understood(node).this
        if isinstance(node, (exp.And, exp.Or, exp.Not, exp.Between, exp.In, *_CMP)):
            understood(node)
        if isinstance(node, exp.Boolean):
            return ("bool", bool(node.this))
        if isinstance(node, (exp.And, exp.Or)):
            return (
                "and" if isinstance(node, exp.And) else "or",
                self.truth(node.this),
                self.truth(node.expression),
            )
        if isinstance(node, exp.Not):
            return ("not", self.truth(node.this))
        if type(node) in _CMP:
            if isinstance(node, (exp.EQ, exp.NEQ)):
                self._exact("=" if isinstance(node, exp.EQ) else "<>")
            return (_CMP[type(node)], self.value(node.this), self.value(node.expression))
        if isinstance(node, exp.Between):
            if node.args.get("symmetric"):
                raise refuse_local("BETWEEN SYMMETRIC is not supported.")
            return (
                "between",
                self.value(node.this),
                self.value(node.args["low"]),
                self.value(node.args["high"]),
            )
        if isinstance(node, exp.In):
            if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
                raise refuse_local("IN takes a list of numbers here.", DENIED)
            self._exact("IN")
            items = []
            for item in node.expressions:
                c = self.const(item)
                if c is None:
                    raise refuse_local("IN (…) on a private column takes numbers only.")
                items.append(c)
            return ("in", self.value(node.this), tuple(items))
        if isinstance(node, exp.Is):
            raise refuse_local(
                f"private column {self.col} is never NULL in the reports (NULLs follow "
                "the table's null_policy at ingestion); IS [NOT] NULL is not served."
            )
        raise refuse_local(
            f"{node.sql('postgres')} is not a supported condition on private column "
            f"{self.col}; use comparisons with numbers, BETWEEN, AND/OR/NOT."
        )

    def _exact(self, what: str) -> None:
        if self.col_type != "int":
            raise refuse_local(
                f"{what} on the continuous private column {self.col} is not served "
                "(spec §8): its values are only known to a bucket; use a range such as "
                f"{self.col} BETWEEN a AND b."
            )


def compile_weight(
    ctx: Ctx, lay: Layout, col: str, node: exp.Expression, kind: str, edges: str = "interpolate"
) -> Weight:
    """The :class:`Weight` of a predicate (kind "truth") or expression (kind "value") over
    private column ``col``, checked (a refusal says what is allowed)."""
    comp = _Compile(ctx, col, lay.table.columns[col].type)
    comp.collect(node)
    tree = comp.truth(node) if kind == "truth" else comp.value(node)
    return Weight(col, tree, kind, tuple(comp.breaks), edges)
