"""Bucket weights for local (metric-LDP) tables: a predicate or expression over ONE
private column becomes a weight per bucket — its average over the bucket's possible
values ("interpolate" edge policy, spec 002 §8; see :mod:`rewriter.local`).

This is the numeric half of the local-table rules (evaluation points and a small
expression evaluator); the SQL planning stays in :mod:`rewriter.local`.
"""
from __future__ import annotations

import math

import numpy as np
from sqlglot import exp

from mechanisms.metric_ldp import DimSpec

from typing import TYPE_CHECKING

from .errors import (DATATYPE_MISMATCH, FEATURE_NOT_SUPPORTED as UNSUPPORTED,
                     INSUFFICIENT_PRIVILEGE as DENIED, Refusal)
from .scope import Ctx
from .values import literal_value

if TYPE_CHECKING:
    from .local import Layout

LOCAL_ALLOWED = (
    "Allowed on a local table: SELECT [public group columns,] COUNT(*), SUM(x), AVG(x), "
    "percentile_disc(p) / percentile_cont(p) WITHIN GROUP (ORDER BY private column) "
    "FROM it [WHERE ranges on private columns AND predicates on public columns] "
    "[GROUP BY public columns with a declared domain] [ORDER BY outputs] [LIMIT n].")

FLOAT_STEPS = 64          # evaluation points per bucket of a float column (plus breakpoints)
MAX_INT_POINTS = 1 << 20  # int columns with more integers in [lo, hi) are treated as float


def _refuse(msg: str, state: str = UNSUPPORTED) -> Refusal:
    return Refusal(state, msg, hint=LOCAL_ALLOWED)

def _points(dim: DimSpec, col_type: str, breaks: list[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Evaluation points of a private column: (values, bucket index 0..m-1, weight in bucket).

    Int columns: the integers of [lo, hi), each weighing 1/(integers in its bucket).
    Float columns: FLOAT_STEPS sub-intervals per bucket, also cut at ``breaks``,
    each represented by its midpoint and weighing its share of the bucket width.
    """
    m, lo, hi = dim.m, dim.lo, dim.hi
    if col_type == "int" and math.ceil(hi) - math.ceil(lo) <= MAX_INT_POINTS:
        v = np.arange(math.ceil(lo), math.ceil(hi), dtype=float)
        v = v[v < hi]
        b = np.clip(np.floor((v - lo) * m / (hi - lo)).astype(np.int64), 0, m - 1)
        cnt = np.bincount(b, minlength=m).astype(float)
        return v, b, 1.0 / cnt[b]
    edges = lo + (hi - lo) * np.arange(m * FLOAT_STEPS + 1) / (m * FLOAT_STEPS)
    cuts = np.array([x for x in breaks if lo < x < hi], dtype=float)
    edges = np.unique(np.concatenate([edges, cuts]))
    mid = (edges[:-1] + edges[1:]) / 2
    b = np.clip(np.floor((mid - lo) * m / (hi - lo)).astype(np.int64), 0, m - 1)
    return mid, b, (edges[1:] - edges[:-1]) / dim.g


class _Eval:
    """Evaluate an expression / predicate over ONE private column on its points."""

    def __init__(self, ctx: Ctx, col: str, col_type: str):
        self.ctx, self.col, self.col_type = ctx, col, col_type
        self.breaks: list[float] = []

    def const(self, node: exp.Expression) -> float | None:
        """A number (literal or $n), or None if ``node`` is not a constant."""
        while isinstance(node, exp.Paren):
            node = node.this
        ok, v = literal_value(node)
        if ok:
            if v is None or isinstance(v, (bool, str)):
                raise _refuse(f"{node.sql('postgres')} is not a number; private column {self.col} "
                              "is compared with numbers only.", DATATYPE_MISMATCH)
            return float(v)
        if isinstance(node, exp.Parameter):
            t = self.ctx.settle(self.ctx.param(node), self.col_type)
            if not t.is_literal:
                return 0.0                       # describe: the value is not known yet
            if t.value is None:
                raise _refuse(f"parameter ${t.param} is NULL; compare {self.col} with numbers.",
                              DATATYPE_MISMATCH)
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

    def value(self, node: exp.Expression, x: np.ndarray) -> np.ndarray:
        while isinstance(node, exp.Paren):
            node = node.this
        c = self.const(node)
        if c is not None:
            return np.full(x.shape, c)
        if isinstance(node, exp.Column):
            return x
        if isinstance(node, exp.Neg):
            return -self.value(node.this, x)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            a, b = self.value(node.this, x), self.value(node.expression, x)
            return a + b if isinstance(node, exp.Add) else a - b if isinstance(node, exp.Sub) else a * b
        if isinstance(node, exp.Div):
            d = self.const(node.expression)
            if d is None or d == 0:
                raise _refuse("division in an expression over a private column needs a non-zero "
                              "number as divisor.")
            return self.value(node.this, x) / d
        if isinstance(node, exp.Case):
            if node.this is not None:
                raise _refuse("CASE x WHEN … is not supported here; write CASE WHEN x = … THEN ….")
            out = self.value(node.args["default"], x) if node.args.get("default") else None
            if out is None:
                raise _refuse("CASE over a private column needs an ELSE branch (NULL is not "
                              "summed here).")
            for branch in reversed(node.args.get("ifs") or []):
                cond = self.truth(branch.this, x)
                out = np.where(cond, self.value(branch.args["true"], x), out)
            return out
        if isinstance(node, exp.If):
            if node.args.get("false") is None:
                raise _refuse("IF over a private column needs an else value.")
            return np.where(self.truth(node.this, x), self.value(node.args["true"], x),
                            self.value(node.args["false"], x))
        raise _refuse(f"{node.sql('postgres')} is not supported in an expression over private "
                      f"column {self.col}; use the column, numbers, + - * /, and CASE WHEN.")

    def truth(self, node: exp.Expression, x: np.ndarray) -> np.ndarray:
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Boolean):
            return np.full(x.shape, bool(node.this))
        if isinstance(node, exp.And):
            return self.truth(node.this, x) & self.truth(node.expression, x)
        if isinstance(node, exp.Or):
            return self.truth(node.this, x) | self.truth(node.expression, x)
        if isinstance(node, exp.Not):
            return ~self.truth(node.this, x)
        cmp = {exp.EQ: np.equal, exp.NEQ: np.not_equal, exp.GT: np.greater,
               exp.GTE: np.greater_equal, exp.LT: np.less, exp.LTE: np.less_equal}
        if type(node) in cmp:
            if isinstance(node, (exp.EQ, exp.NEQ)):
                self._exact("=" if isinstance(node, exp.EQ) else "<>")
            return cmp[type(node)](self.value(node.this, x), self.value(node.expression, x))
        if isinstance(node, exp.Between):
            if node.args.get("symmetric"):
                raise _refuse("BETWEEN SYMMETRIC is not supported.")
            v = self.value(node.this, x)
            return (v >= self.value(node.args["low"], x)) & (v <= self.value(node.args["high"], x))
        if isinstance(node, exp.In):
            if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
                raise _refuse("IN takes a list of numbers here.", DENIED)
            self._exact("IN")
            v = self.value(node.this, x)
            out = np.zeros(x.shape, bool)
            for item in node.expressions:
                c = self.const(item)
                if c is None:
                    raise _refuse("IN (…) on a private column takes numbers only.")
                out |= v == c
            return out
        if isinstance(node, exp.Is):
            raise _refuse(f"private column {self.col} is never NULL in the reports (NULLs follow "
                          "the table's null_policy at ingestion); IS [NOT] NULL is not served.")
        raise _refuse(f"{node.sql('postgres')} is not a supported condition on private column "
                      f"{self.col}; use comparisons with numbers, BETWEEN, AND/OR/NOT.")

    def _exact(self, what: str) -> None:
        if self.col_type != "int":
            raise _refuse(f"{what} on the continuous private column {self.col} is not served "
                          "(spec §8): its values are only known to a bucket; use a range such as "
                          f"{self.col} BETWEEN a AND b.")


def bucket_weights(ctx: Ctx, lay: Layout, col: str, node: exp.Expression, kind: str) -> np.ndarray:
    """Per-bucket weight of a predicate (kind "truth") or expression (kind "value") over
    private column ``col``: its average over the bucket's values (edge policy above)."""
    ev = _Eval(ctx, col, lay.col_type(col))
    ev.collect(node)
    dim = lay.dim(col)
    x, b, w = _points(dim, lay.col_type(col), ev.breaks)
    f = ev.truth(node, x).astype(float) if kind == "truth" else ev.value(node, x)
    out = np.bincount(b, weights=f * w, minlength=dim.m)
    return np.where(np.abs(out) < 1e-12, 0.0, out)
