"""Expressions over released values: post-processing, free of privacy cost.

``SUM(x) / COUNT(*)``, ``COUNT(*) * 100.0 / 7``, ``POWER(AVG(x), 2)``, CASE over
aggregates, constants and ``PI()`` in the select list, ``HAVING`` without GROUP BY,
``SUM(1)`` (a scaled COUNT): each aggregate inside is released once (identical ones
are one :class:`~rewriter.plan.Aggregate`), and the expression is a small tree the
proxy evaluates on the released values (``proxy/postexpr.py``), with Postgres's
result types, NULL rules and division-by-zero error. Nothing here reaches the
backend, and the tree is not part of :meth:`Plan.canonical`: two spellings of one
measurement share one release.

The tree is nested tuples (hashable, so a frozen plan can hold it):

    ("agg", i)              released value of aggregate i     (while parsing: ("aggref", func, col))
    ("key", i)              group key i of the cell          (while parsing: ("col", name))
    ("lit", value, type)    a constant (type int/float/numeric/text/bool, None for NULL)
    ("op", sym, a, b)       + - * / % = <> < <= > >= and or
    ("neg", a) ("not", a) ("isnull", a, negated)
    ("fn", name, a, …)      abs power sqrt greatest least coalesce nullif pi
    ("display", steps, a)   ROUND / FLOOR / CEIL / CAST steps (:func:`rewriter.aggregates.post_steps`)
    ("case", ((cond, value), …), default)
    ("window", fn, args, partition, order, frame)
                            a window function over the released cells (:func:`window`)

A window function whose inputs are released aggregates and group keys
(``SUM(COUNT(*)) OVER (ORDER BY month)``, ``LAG(COUNT(*)) OVER (…)``, ``RANK() OVER
(ORDER BY COUNT(*) DESC)``, ``COUNT(*) * 1.0 / SUM(COUNT(*)) OVER ()``) is computed from
the released rows only, so it is post-processing too (Dwork & Roth 2014, Prop. 2.1) and
costs nothing; it is evaluated after HAVING and before ORDER BY / LIMIT, as in Postgres.
A window over raw rows (an argument, PARTITION BY or ORDER BY that is neither an
aggregate nor a group key, or a statement without aggregates) is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, Literal

from sqlglot import exp

from . import keys, predicate, stats
from .aggregates import add_aggregate as add_select_aggregate
from .aggregates import aggregate, measure_index, post_steps, post_type
from .args import ALLOWED, understood
from .errors import DATATYPE_MISMATCH, Refusal
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .plan import Aggregate, ColumnType, GroupKey, Measure
from .scope import Ctx

PI = 3.141592653589793
_AGGS = (exp.Count, exp.Sum, exp.Avg, exp.Max, exp.Min)
Tree = tuple[Any, ...]
"""A post-processing tree: ``("op", sym, a, b)``, ``("agg", i)``, ``("lit", v, type)`` … (nested tuples)."""
AggRef = Callable[[str, Any], tuple[int, str | None]]  # (func, column) -> (aggregate index, type)
KeyRef = Callable[[str], tuple[int | str, str | None]]  # a group key's name -> (its index, type)
OutputType = ColumnType | Literal["numeric", "int4"]  # int4: Postgres' integer (ntile)
_OUTPUT_TYPES: tuple[OutputType, ...] = (
    "int",
    "float",
    "text",
    "bool",
    "date",
    "timestamp",
    "numeric",
    "int4",
)


def output_type(typ: str | None) -> OutputType:
    """A tree's type as an output column's (an untyped NULL is text, as Postgres shows it)."""
    for t in _OUTPUT_TYPES:
        if typ == t:
            return t
    return "text"


_ARITH: dict[type[exp.Expr], str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}
_CMP: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
}
_LOGIC: dict[type[exp.Expr], str] = {exp.And: "and", exp.Or: "or"}
_FUNCS: dict[type[exp.Expr], str] = {
    exp.Abs: "abs",
    exp.Pow: "power",
    exp.Sqrt: "sqrt",
    exp.Greatest: "greatest",
    exp.Least: "least",
    exp.Coalesce: "coalesce",
    exp.Nullif: "nullif",
}
HINT = (
    "Over aggregates dpgate computes + - * / %, comparisons, AND/OR/NOT, CASE, ABS, POWER, "
    "SQRT, ROUND, FLOOR, CEIL, CAST, GREATEST, LEAST, COALESCE, NULLIF and PI(); "
    "for anything else select the aggregates and compute it in the client."
)


def _is_constant_sum(node: exp.Expression) -> bool:
    """``SUM(1)``, ``SUM(2.5)``: a scaled COUNT(*) (every row adds the constant)."""
    arg = node.this
    while isinstance(arg, exp.Paren):
        arg = arg.this
    return isinstance(node, exp.Sum) and isinstance(arg, exp.Literal) and not arg.is_string


def _conditional_count(node: exp.Expression) -> tuple[exp.Expression, exp.Expression | None] | None:
    """(predicate, scale) of a conditional count, else None:
    ``COUNT(*) FILTER (WHERE p)`` and ``COUNT(CASE WHEN p THEN <constant> END)`` → (p, None);
    ``SUM(CASE WHEN p THEN c [ELSE 0 | ELSE NULL] END)`` → (p, c): c × the count of rows
    where p is true (one more aggregate sharing ε, not a different WHERE)."""
    if (
        isinstance(node, exp.Filter)
        and isinstance(node.this, exp.Count)
        and isinstance(node.expression, exp.Where)
        and (isinstance(node.this.this, exp.Star) or isinstance(node.this.this, exp.Literal))
    ):
        understood(node, frozenset({"this", "expression"}))
        understood(node.this)
        return node.expression.this, None
    if not isinstance(node, (exp.Sum, exp.Count)) or not isinstance(node.this, exp.Case):
        return None
    case = node.this
    ifs = case.args.get("ifs") or []
    if case.this is not None or len(ifs) != 1:
        return None
    then, default = ifs[0].args.get("true"), case.args.get("default")
    if not isinstance(then, exp.Literal) or then.is_string and isinstance(node, exp.Sum):
        return None
    if isinstance(node, exp.Count):
        return (ifs[0].this, None) if default is None or isinstance(default, exp.Null) else None
    zero = (
        default is None
        or isinstance(default, exp.Null)
        or (isinstance(default, exp.Literal) and not default.is_string and float(default.this) == 0)
    )
    return (ifs[0].this, then) if zero else None


def wanted(node: exp.Expression) -> bool:
    """Whether the select item ``node`` is an expression this layer answers (a plain
    aggregate, a display chain or a column is left to :mod:`rewriter.select`)."""
    if node.find(exp.Window):  # a window over the released cells (or refused by :func:`tree`)
        return True
    if any(isinstance(n, exp.Anonymous) and n.name.lower() in INTERVAL_FUNCS for n in node.walk()):
        return True  # an interval of a released aggregate (:func:`_interval`)
    if isinstance(node, (exp.Sum, exp.Count, exp.Filter)) and _conditional_count(node) is not None:
        return True
    if isinstance(node, exp.Sum):
        return _is_constant_sum(node)
    if isinstance(node, (exp.AggFunc, exp.Filter, exp.Column, exp.WithinGroup, exp.Star)):
        return False
    if node.find(exp.WithinGroup, exp.Window):
        return False
    chain = post_steps(node)
    if chain is not None and not _is_constant_sum(chain[0]):
        return False  # display steps over one aggregate: rewriter.select
    has_agg = node.find(*_AGGS) is not None
    return has_agg or node.find(exp.Column, exp.Star) is None


def name(node: exp.Expression) -> str:
    """Postgres's output name of an unaliased select item."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Cast):
        inner = name(node.this)
        return inner if inner != "?column?" else node.to.sql("postgres").lower()
    if isinstance(node, exp.Case):
        return "case"
    if isinstance(node, (exp.Filter, exp.Window)):
        return name(node.this)
    if isinstance(node, exp.Pow):
        return "power"
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Func) and not isinstance(node, (exp.Binary, exp.Unary)):
        return node.sql_name().lower() if not isinstance(node, exp.Anonymous) else node.name.lower()
    return "?column?"


def tree(node: exp.Expression, ctx: Ctx) -> Tree:
    """The post-processing tree of ``node`` (aggregates as ("aggref", func, col)), or a
    refusal naming what to write instead."""
    while isinstance(node, exp.Paren):
        node = understood(node).this
    if isinstance(node, exp.Window):
        return window(node, ctx)
    if isinstance(node, exp.Sum) and _is_constant_sum(node):
        understood(node)
        c = tree(node.this, ctx)
        return ("op", "*", ("aggref", "count", None), c)
    cond = _conditional_count(node) if isinstance(node, (exp.Sum, exp.Count, exp.Filter)) else None
    if cond is not None:
        ref = ("aggref", "count_if", predicate.where(cond[0], ctx))
        return ref if cond[1] is None else ("op", "*", ref, tree(cond[1], ctx))
    if isinstance(node, (exp.AggFunc, exp.Filter)):  # COUNT/SUM/AVG, VAR_POP …: released values
        return ("aggref", *aggregate(node, ctx))
    steps = post_steps(node)
    if steps is not None:
        agg_node, st, _ = steps
        return ("display", st, tree(agg_node, ctx))
    if isinstance(node, (exp.Cast, exp.Round, exp.Floor, exp.Ceil)):
        # a display step over an expression: the same steps, one level
        for cls in (exp.Cast, exp.Round, exp.Floor, exp.Ceil):
            if isinstance(node, cls):
                probe = node.copy()
                probe.set("this", exp.Count(this=exp.Star()))
                got = post_steps(probe)
                if got is None:
                    break
                return ("display", got[1], tree(node.this, ctx))
        raise Refusal(UNSUPPORTED, f"{node.sql('postgres')} is not supported over aggregates.", hint=HINT)
    if isinstance(node, exp.Column):
        return ("col", ctx.column(node).node.name)
    if isinstance(node, exp.Literal):
        understood(node)
        if node.is_string:
            return ("lit", node.this, "text")
        if node.is_int:
            return ("lit", int(node.this), "int")
        return ("lit", Decimal(node.this), "numeric")  # 100.0, 1e3: numeric in Postgres
    if isinstance(node, exp.Boolean):
        return ("lit", bool(node.this), "bool")
    if isinstance(node, exp.Null):
        return ("lit", None, None)
    if isinstance(node, exp.Parameter):  # $n: a public number
        t = ctx.settle(ctx.param(node), "float")
        return ("lit", None if ctx.infer else t.value, "float")
    if isinstance(node, exp.Neg):
        understood(node)
        inner = tree(node.this, ctx)
        if inner[0] == "lit" and inner[1] is not None and inner[2] in ("int", "numeric", "float"):
            return ("lit", -inner[1], inner[2])
        return ("neg", inner)
    if isinstance(node, exp.Not):
        return ("not", tree(understood(node).this, ctx))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return ("isnull", tree(understood(node).this, ctx), bool(node.args.get("negate")))
    for table in (_ARITH, _CMP, _LOGIC):
        sym = table.get(type(node))
        if sym is not None:
            understood(node, frozenset({"this", "expression", "typed", "safe"}) if sym == "/" else None)
            return ("op", sym, tree(node.this, ctx), tree(node.expression, ctx))
    if isinstance(node, exp.Pi):
        return ("fn", "pi")
    if isinstance(node, exp.Rand) and not any(node.args.values()):  # random(): no data, evaluated by dpgate
        return ("fn", "random")
    fn = _FUNCS.get(type(node))
    if fn is not None:
        understood(node, ALLOWED.get(type(node)) or frozenset({"this", "expression", "expressions"}))
        args = (
            [node.this]
            + ([node.expression] if node.args.get("expression") is not None else [])
            + list(node.expressions or [])
        )
        return ("fn", fn, *(tree(a, ctx) for a in args))
    if isinstance(node, exp.Case):
        understood(node)
        ifs: tuple[tuple[Tree, Tree], ...]
        if node.this is not None:  # CASE x WHEN v THEN …: x = v
            subject = tree(node.this, ctx)
            ifs = tuple(
                (("op", "=", subject, tree(understood(w).this, ctx)), tree(w.args["true"], ctx))
                for w in node.args.get("ifs") or []
            )
        else:
            ifs = tuple(
                (tree(understood(w).this, ctx), tree(w.args["true"], ctx)) for w in node.args.get("ifs") or []
            )
        d = node.args.get("default")
        return ("case", ifs, tree(d, ctx) if d is not None else ("lit", None, None))
    if isinstance(node, exp.Anonymous) and node.name.lower() in INTERVAL_FUNCS:
        return _interval(node, ctx)
    if isinstance(node, exp.Anonymous):
        raise Refusal("42883", f"function {node.name.lower()}() is not available in dpgate.", hint=HINT)
    if node.find(*_AGGS) is None and isinstance(ctx, Ctx):
        predicate.check(node, ctx)  # its own refusal (unknown function, bad operand …)
    raise Refusal(UNSUPPORTED, f"{node.sql('postgres')[:60]} is not supported over aggregates.", hint=HINT)


INTERVAL_FUNCS = {"dp_interval_low": "low", "dp_interval_high": "high"}
INTERVAL_HINT = (
    "dp_interval_low(agg) / dp_interval_high(agg) give the 95% interval of a released COUNT, SUM, "
    "AVG, VAR or STDDEV (dp_interval_low(agg, 0.9): at 90%), e.g. SELECT region, AVG(income), "
    "dp_interval_low(AVG(income)), dp_interval_high(AVG(income)) FROM t GROUP BY region."
)
_TAG = "__dpgate_x"  # rewriter.extreme's stand-in for a MAX/MIN/percentile (its TAG)


def _interval(node: exp.Anonymous, ctx: Ctx) -> Tree:
    """``dp_interval_low|high(<aggregate>[, <confidence>])``: the interval of one released
    aggregate (display steps around it are read through: the interval is of the value
    released), at a literal confidence in (0, 1), 0.95 by default."""
    side = INTERVAL_FUNCS[node.name.lower()]
    args = list(node.expressions)
    fn = node.name.lower()
    if not 1 <= len(args) <= 2:
        raise Refusal("42883", f"{fn}() takes an aggregate and an optional confidence.", hint=INTERVAL_HINT)
    inner = args[0]
    while isinstance(inner, exp.Paren):
        inner = understood(inner).this
    chain = post_steps(inner)
    if chain is not None:
        inner = chain[0]
    if isinstance(inner, (exp.Max, exp.Min, exp.Median, exp.WithinGroup)) or _is_tag(inner):
        raise Refusal(
            UNSUPPORTED,
            f"{fn}() of MAX, MIN or a percentile is not available: their error is in rank "
            "(the NOTICE gives it).",
            hint=INTERVAL_HINT,
        )
    if not isinstance(inner, (exp.AggFunc, exp.Filter)) or not isinstance(inner, exp.Expression):
        raise Refusal(
            UNSUPPORTED,
            f"{fn}() takes one aggregate the statement releases, not an expression.",
            hint=INTERVAL_HINT,
        )
    agg = tree(inner, ctx)
    if agg[0] != "aggref":
        raise Refusal(
            UNSUPPORTED, f"{fn}() takes COUNT, SUM, AVG, VAR or STDDEV of a column.", hint=INTERVAL_HINT
        )
    level = 0.95
    if len(args) == 2:
        lit = args[1]
        while isinstance(lit, exp.Paren):
            lit = lit.this
        ok = isinstance(lit, exp.Literal) and not lit.is_string
        level = float(lit.this) if ok else -1.0
        if not 0.0 < level < 1.0:
            raise Refusal(
                "22023",
                f"the confidence of {fn}() must be a literal number between 0 and 1, e.g. 0.9.",
                hint=INTERVAL_HINT,
            )
    return ("ivalref", side, agg, level)


def interval_target(node: exp.Expression) -> bool:
    """Whether ``node`` is one released aggregate :func:`_interval` answers: COUNT, SUM, AVG,
    VAR/STDDEV (FILTERed or not), not a scaled conditional count or a constant SUM."""
    if isinstance(node, exp.Filter):
        inner = node.this
    else:
        inner = node
    if not isinstance(inner, (exp.Count, exp.Sum, exp.Avg, *stats.VARIANCE_NODES)):
        return False
    if isinstance(node, exp.Sum) and _is_constant_sum(node):
        return False
    cond = _conditional_count(node) if isinstance(node, (exp.Sum, exp.Count)) else None
    return cond is None or cond[1] is None


def _is_tag(node: exp.Expression) -> bool:
    """Whether ``node`` is rewriter.extreme's stand-in aggregate for a MAX/MIN/percentile."""
    while isinstance(node, exp.Cast):
        node = node.this
    f = (
        node.expression.this
        if isinstance(node, exp.Filter) and isinstance(node.expression, exp.Where)
        else None
    )
    return (
        isinstance(f, exp.EQ)
        and isinstance(f.this, exp.Literal)
        and f.this.is_string
        and str(f.this.this).startswith(_TAG)
    )


_WINDOW_FUNCS = {
    exp.RowNumber: "row_number",
    exp.Rank: "rank",
    exp.DenseRank: "dense_rank",
    exp.PercentRank: "percent_rank",
    exp.CumeDist: "cume_dist",
    exp.Ntile: "ntile",
    exp.Lag: "lag",
    exp.Lead: "lead",
    exp.FirstValue: "first_value",
    exp.LastValue: "last_value",
    exp.NthValue: "nth_value",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Count: "count",
    exp.Min: "min",
    exp.Max: "max",
}
_RANKING = ("row_number", "rank", "dense_rank", "percent_rank", "cume_dist")
WINDOW_HINT = (
    "dpgate computes a window function over the released cells: its arguments, PARTITION BY "
    "and ORDER BY must be aggregates or group keys of a GROUP BY statement, e.g. "
    "SUM(COUNT(*)) OVER (ORDER BY month), COUNT(*) - LAG(COUNT(*)) OVER (ORDER BY month), "
    "RANK() OVER (ORDER BY COUNT(*) DESC), COUNT(*) * 1.0 / SUM(COUNT(*)) OVER (). "
    "A window over individual rows is not answered."
)


def named_windows(tree: exp.Expression) -> None:
    """Replace each ``OVER w`` / ``OVER (w ORDER BY …)`` by the window the statement's
    ``WINDOW w AS (…)`` clause defines, and drop the clause (in place), with Postgres's rules:
    a window named is defined in the same SELECT; one that copies another keeps its
    PARTITION BY, may add an ORDER BY only where the copied one has none, and copies no
    frame."""
    for select in list(tree.find_all(exp.Select)):
        defs = select.args.get("windows") or []
        named: dict[str, exp.Window] = {}
        for d in defs:
            name = d.this.name if isinstance(d.this, exp.Identifier) else None
            if name is None:
                raise Refusal(UNSUPPORTED, "a WINDOW clause entry must be a name AS (…).", hint=WINDOW_HINT)
            if name in named:
                raise Refusal("42P20", f'window "{name}" is already defined')
            named[name] = _copied(d, named, name)
        for w in select.find_all(exp.Window):
            ref = w.args.get("alias")
            if ref is None or isinstance(w.this, exp.Identifier) or any(w is d for d in defs):
                continue
            if w.find_ancestor(exp.Select) is not select:
                continue
            base = named.get(ref.name)
            if base is None:
                raise Refusal("42704", f'window "{ref.name}" does not exist')
            merged = _copied(w, named, ref.name, base)
            w.set("alias", None)
            for key in ("partition_by", "order", "spec"):
                w.set(key, merged.args.get(key))
        select.set("windows", None)


def _copied(
    w: exp.Window, named: dict[str, exp.Window], name: str, base: exp.Window | None = None
) -> exp.Window:
    """The window ``w`` with the named window it copies (``base``, or its own ``alias``)
    merged in: PARTITION BY from the copied one, ORDER BY from either (not both), the frame
    its own only."""
    if base is None:
        ref = w.args.get("alias")
        if ref is None:
            return w
        base = named.get(ref.name)
        if base is None:
            raise Refusal("42704", f'window "{ref.name}" does not exist')
    ref_name = w.args["alias"].name
    if w.args.get("partition_by"):
        raise Refusal("42P20", f'cannot override PARTITION BY clause of window "{ref_name}"')
    if w.args.get("order") is not None and base.args.get("order") is not None:
        raise Refusal("42P20", f'cannot override ORDER BY clause of window "{ref_name}"')
    if base.args.get("spec") is not None and (
        w.args.get("order") is not None or w.args.get("spec") is not None
    ):
        raise Refusal("42P20", f'cannot copy window "{ref_name}" because it has a frame clause')
    out = w.copy()
    out.set("partition_by", [p.copy() for p in base.args.get("partition_by") or []] or None)
    order = w.args.get("order") if w.args.get("order") is not None else base.args.get("order")
    out.set("order", order.copy() if order is not None else None)
    spec = w.args.get("spec") if w.args.get("spec") is not None else base.args.get("spec")
    out.set("spec", spec.copy() if spec is not None else None)
    return out


def _offset(node: object, what: str) -> int:
    """A frame offset, LAG/LEAD offset or NTILE count: a non-negative integer constant."""
    if isinstance(node, exp.Literal) and node.is_int:
        return int(node.this)
    raise Refusal(UNSUPPORTED, f"{what} must be an integer constant here.", hint=WINDOW_HINT)


def _range_offset(node: object) -> int | Decimal:
    """A RANGE frame offset: a non-negative number constant (the distance in the ORDER BY
    key's units)."""
    neg = isinstance(node, exp.Neg)
    lit = node.this if isinstance(node, exp.Neg) else node
    if isinstance(lit, exp.Literal) and not lit.is_string:
        v = int(lit.this) if lit.is_int else Decimal(lit.this)
        if neg and v != 0:
            raise Refusal("22013", "invalid preceding or following size in window function")
        return v
    raise Refusal(
        UNSUPPORTED,
        "a RANGE frame offset must be a number constant here (an interval over a date key is not "
        "supported: use ROWS or GROUPS).",
        hint=WINDOW_HINT,
    )


def _bound(value: object, side: object, what: str, mode: str = "rows") -> tuple[Any, ...]:
    """One end of a frame: ("unbounded", side) / ("current",) / (side, n)."""
    if isinstance(value, str) and value.upper() == "UNBOUNDED":
        return ("unbounded", str(side).lower())
    if isinstance(value, str) and value.upper() == "CURRENT ROW":
        return ("current",)
    n = _range_offset(value) if mode == "range" else _offset(value, f"the frame {what} offset")
    return (str(side).lower(), n)


def _frame(spec: exp.Expression | None, order_items: int) -> Tree | None:
    """(mode, start, end) of a window's frame; None for the default (RANGE UNBOUNDED
    PRECEDING to CURRENT ROW, which with no ORDER BY is the whole partition). A RANGE
    offset is a distance along the one ORDER BY key (Postgres: exactly one, numeric here)."""
    if spec is None:
        return None
    has_order = order_items > 0
    understood(spec, frozenset({"kind", "start", "start_side", "end", "end_side"}))
    mode = str(spec.args.get("kind") or "").lower()
    if mode not in ("rows", "range", "groups"):
        raise Refusal(UNSUPPORTED, f"window frame {mode.upper()} is not supported.", hint=WINDOW_HINT)
    start = _bound(spec.args.get("start"), spec.args.get("start_side"), "start", mode)
    end_value = spec.args.get("end")
    end = ("current",) if end_value is None else _bound(end_value, spec.args.get("end_side"), "end", mode)
    if (
        mode == "range"
        and (start[0] in ("preceding", "following") or end[0] in ("preceding", "following"))
        and order_items != 1
    ):
        raise Refusal("42P20", "RANGE with offset PRECEDING/FOLLOWING requires exactly one ORDER BY column")
    if mode == "groups" and not has_order:
        raise Refusal("42P20", "GROUPS mode requires an ORDER BY clause")
    if start == ("unbounded", "following"):
        raise Refusal("42P20", "frame start cannot be UNBOUNDED FOLLOWING")
    if end == ("unbounded", "preceding"):
        raise Refusal("42P20", "frame end cannot be UNBOUNDED PRECEDING")
    if start == ("current",) and end[0] == "preceding":
        raise Refusal("42P20", "frame starting from current row cannot have preceding rows")
    if start[0] == "following" and end[0] in ("preceding", "current"):
        raise Refusal("42P20", "frame starting from following row cannot have preceding rows")
    return (mode, start, end)


def _input(node: exp.Expression, ctx: Ctx) -> Tree:
    """The tree of a window's argument, PARTITION BY or ORDER BY item: a derived group key
    (``date_trunc('month', ts)``, a CASE bin) by its key, else :func:`tree`."""
    inner = node
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if not isinstance(inner, exp.Column) and inner.find(exp.AggFunc) is None and keys.derivable(inner):
        return ("col", keys.derive(inner, ctx).column)
    return tree(node, ctx)


def window(node: exp.Window, ctx: Ctx) -> Tree:
    """The tree of ``fn(args) OVER (PARTITION BY … ORDER BY … frame)``: every input is an
    expression over released values and group keys (:func:`tree`); a column that is not a
    group key is refused when the tree is resolved (:func:`resolve`)."""
    understood(node, frozenset({"this", "partition_by", "order", "spec", "over"}))
    if any(w is not node for w in node.find_all(exp.Window)):
        raise Refusal("42P20", "window function calls cannot be nested")
    head = node.this
    fn = _WINDOW_FUNCS.get(type(head))
    if fn is None:
        raise Refusal(
            UNSUPPORTED,
            f"window function {head.sql('postgres')[:40]} is not supported over released cells.",
            hint=WINDOW_HINT,
        )
    if fn in _RANKING:
        understood(head, frozenset())
        args: tuple[Tree, ...] = ()
    elif fn == "ntile":
        understood(head, frozenset({"this"}))
        n = _offset(head.this, "the NTILE count")
        if n <= 0:
            raise Refusal("22014", "argument of ntile must be greater than zero")
        args = (("lit", n, "int"),)
    elif fn == "nth_value":
        understood(head, frozenset({"this", "offset"}))
        n = _offset(head.args.get("offset"), "the NTH_VALUE position")
        if n <= 0:
            raise Refusal("22016", "argument of nth_value must be greater than zero")
        args = (_input(head.this, ctx), ("lit", n, "int"))
    elif fn in ("lag", "lead"):
        understood(head, frozenset({"this", "offset", "default"}))
        off = head.args.get("offset")
        default = head.args.get("default")
        args = (
            _input(head.this, ctx),
            ("lit", 1 if off is None else _offset(off, f"the {fn.upper()} offset"), "int"),
            ("lit", None, None) if default is None else tree(default, ctx),
        )
    elif fn == "count" and isinstance(head.this, exp.Star):
        understood(head, frozenset({"this", "big_int"}))
        args = ()
    else:
        understood(head, frozenset({"this", "big_int"}) if fn == "count" else frozenset({"this"}))
        args = (_input(head.this, ctx),)
    part = tuple(_input(p, ctx) for p in node.args.get("partition_by") or [])
    order: tuple[tuple[Tree, bool, bool], ...] = ()
    o = node.args.get("order")
    if o is not None:
        understood(o)
        items: list[tuple[Tree, bool, bool]] = []
        for it in o.expressions:
            understood(it)
            desc = bool(it.args.get("desc"))
            nf = it.args.get("nulls_first")
            items.append((_input(it.this, ctx), desc, desc if nf is None else bool(nf)))
        order = tuple(items)
    return ("window", fn, args, part, order, _frame(node.args.get("spec"), len(order)))


def _resolve_window(t: Tree, agg: AggRef, key: KeyRef) -> tuple[Tree, str | None]:
    """The resolved window tree and its Postgres result type."""
    _, fn, args, part, order, frame = t

    def raw_key(name: str) -> tuple[int | str, str | None]:
        try:
            return key(name)
        except Refusal:
            raise Refusal(
                UNSUPPORTED,
                f"a window over column {name} reads individual rows: {name} is not a group key.",
                hint=WINDOW_HINT,
            ) from None

    rargs = [resolve(a, agg, raw_key) for a in args]
    rpart = tuple(resolve(p, agg, raw_key)[0] for p in part)
    rorder_typed = [(resolve(x, agg, raw_key), desc, nf) for x, desc, nf in order]
    rorder = tuple((x, desc, nf) for (x, _), desc, nf in rorder_typed)
    if (
        frame is not None
        and frame[0] == "range"
        and any(b[0] in ("preceding", "following") for b in frame[1:])
    ):
        kt = rorder_typed[0][0][1]
        if kt in ("int", "int4") and any(isinstance(b[1], Decimal) for b in frame[1:] if len(b) == 2):
            raise Refusal(
                UNSUPPORTED,
                f"RANGE with offset PRECEDING/FOLLOWING is not supported for column type "
                f"{'bigint' if kt == 'int' else 'integer'} and offset type numeric",
                hint="Cast the offset value to an appropriate type.",
            )
        if kt not in _NUM:
            raise Refusal(
                UNSUPPORTED,
                f"a RANGE offset over an ORDER BY key of type {kt} is not supported over released "
                "cells (a number key is); use ROWS or GROUPS.",
                hint=WINDOW_HINT,
            )
    trees = tuple(a for a, _ in rargs)
    types = [ty for _, ty in rargs]
    typ: str | None
    if fn in ("row_number", "rank", "dense_rank", "count"):
        typ = "int"
    elif fn == "ntile":
        typ = "int4"  # Postgres' ntile returns integer, the ranks bigint
    elif fn in ("percent_rank", "cume_dist"):
        typ = "float"
    elif fn in ("sum", "avg"):
        ty = types[0]
        if ty not in _NUM and ty is not None:
            raise Refusal(DATATYPE_MISMATCH, f"function {fn}({ty}) does not exist.", hint=WINDOW_HINT)
        typ = "float" if ty == "float" else "numeric"
    elif fn in ("lag", "lead"):
        typ = types[0] if types[2] is None else _num_type(types[0], types[2], fn)
        if types[0] == "text" and types[2] in (None, "text"):
            typ = "text"
        trees = (_coerce(trees[0], types[0], typ), trees[1], _coerce(trees[2], types[2], typ))
    else:  # min, max, first_value, last_value
        typ = types[0]
    if typ in ("date", "timestamp"):
        raise Refusal(
            UNSUPPORTED,
            f"{fn.upper()} of a date or timestamp key is not supported over released cells; "
            "select the key itself.",
            hint=WINDOW_HINT,
        )
    return ("window", fn, trees, rpart, rorder, frame), typ


def _has_window(t: object) -> bool:
    return isinstance(t, tuple) and (t[:1] == ("window",) or any(_has_window(x) for x in t))


def has_window(t: object) -> bool:
    """Whether a (resolved) tree reads a window function."""
    return _has_window(t)


def check_windows(select: exp.Select, groups: Sequence[GroupKey]) -> None:
    """Refuse a window in a statement without GROUP BY and without an aggregate: its rows
    are the table's rows, so the window would read them one by one."""
    wins = list(select.find_all(exp.Window))
    if not wins or groups:
        return
    heads = {id(w.this) for w in wins}
    if any(id(a) not in heads for a in select.find_all(exp.AggFunc)):
        return  # an aggregate: one released row, the window runs over it
    raise Refusal(
        UNSUPPORTED,
        "window functions over individual rows are not answered: the statement has no "
        "GROUP BY and no aggregate.",
        hint=WINDOW_HINT,
    )


_NUM = ("int", "numeric", "float", "int4")


def _num_type(a: str | None, b: str | None, what: str) -> str | None:
    a, b = ("int" if x == "int4" else x for x in (a, b))
    if a is None or b is None:
        return b if a is None else a
    if a not in _NUM or b not in _NUM:
        raise Refusal(DATATYPE_MISMATCH, f"operator {what} does not take {a} and {b} here.", hint=HINT)
    return "float" if "float" in (a, b) else "numeric" if "numeric" in (a, b) else "int"


def _coerce(t: Tree, have: str | None, want: str | None) -> Tree:
    """``t`` cast to the branch/argument type Postgres resolved (int → float8 or numeric)."""
    if have is None or have == want or want not in ("float", "numeric"):
        return t
    return ("display", (("cast", want),), t)


def resolve(t: Tree, agg: AggRef, key: KeyRef) -> tuple[Tree, str | None]:
    """(tree with ("agg", i)/("key", i), its Postgres type). ``agg(func, col)`` returns the
    aggregate's index and type; ``key(name)`` the group key's index and type."""
    kind = t[0]
    typ: str | None
    if kind == "window":
        return _resolve_window(t, agg, key)
    if kind == "aggref":
        i, typ = agg(t[1], t[2])
        return ("agg", i), typ
    if kind == "ivalref":  # ("interval", side, aggregate, level, the AVG's count or -1)
        func, col = t[2][1], t[2][2]
        i, typ = agg(func, col)
        j = agg("count", col)[0] if func == "avg" else -1  # the count released with it: its n^
        return ("interval", t[1], i, t[3], j), ("int" if typ == "int" else "float")
    if kind == "col":
        k, typ = key(t[1])
        return ("key", k), typ
    if kind == "lit":
        return t, t[2]
    if kind == "neg":
        a, ta = resolve(t[1], agg, key)
        _num_type(ta, "int", "-")
        return ("neg", a), ta
    if kind == "not":
        a, _ = resolve(t[1], agg, key)
        return ("not", a), "bool"
    if kind == "isnull":
        a, _ = resolve(t[1], agg, key)
        return ("isnull", a, t[2]), "bool"
    if kind == "op":
        a, ta = resolve(t[2], agg, key)
        b, tb = resolve(t[3], agg, key)
        sym = t[1]
        if sym in ("and", "or"):
            typ = "bool"
        elif sym in ("=", "<>", "<", "<=", ">", ">="):
            if (ta == "text") != (tb == "text") and None not in (ta, tb):
                raise Refusal(DATATYPE_MISMATCH, f"cannot compare {ta} with {tb}.", hint=HINT)
            typ = "bool"
        else:
            typ = _num_type(ta, tb, sym)
            if sym == "%" and typ == "float":
                raise Refusal(
                    UNSUPPORTED,
                    "% over double precision is not defined in Postgres; CAST to numeric first.",
                    hint=HINT,
                )
        return ("op", sym, a, b), typ
    if kind == "display":
        a, ta = resolve(t[2], agg, key)
        return ("display", t[1], a), post_type(ta or "int", t[1])
    if kind == "fn":
        fn = t[1]
        args = [resolve(x, agg, key) for x in t[2:]]
        trees = tuple(a for a, _ in args)
        types = [ty for _, ty in args]
        if fn in ("pi", "random"):
            typ = "float"
        elif fn in ("power", "sqrt"):
            typ = "numeric" if "numeric" in types and "float" not in types else "float"
            for ty in types:
                _num_type(ty, "int", fn)
        elif fn == "abs":
            typ = _num_type(types[0], types[0], fn)
        else:  # greatest, least, coalesce, nullif
            known = [ty for ty in types if ty is not None]
            typ = known[0] if known else None
            if any(ty in _NUM for ty in known):
                typ = None
                for ty in known:
                    typ = _num_type(typ, ty, fn)
            if fn == "nullif":
                typ = types[0]
            else:  # the common type, as Postgres resolves it
                trees = tuple(_coerce(x, ty, typ) for x, ty in zip(trees, types))
        return ("fn", fn, *trees), typ
    if kind == "case":
        ifs: list[tuple[Tree, Tree]] = []
        typ = None
        for c, v in t[1]:
            rc, _ = resolve(c, agg, key)
            rv, tv = resolve(v, agg, key)
            ifs.append((rc, rv))
            typ = tv if typ is None else (typ if tv is None or tv == typ else _num_type(typ, tv, "CASE"))
        d, td = resolve(t[2], agg, key)
        typ = td if typ is None else (typ if td is None or td == typ else _num_type(typ, td, "CASE"))
        types = [resolve(v, agg, key)[1] for _, v in t[1]]
        ifs = [(c, _coerce(v, tv, typ)) for (c, v), tv in zip(ifs, types)]
        return ("case", tuple(ifs), _coerce(d, td, typ)), typ
    raise AssertionError(kind)


def having_filter(pred: exp.Expression, ctx: Ctx) -> Tree:
    """``HAVING <condition>`` without GROUP BY: a filter on the one released row."""
    return tree(pred, ctx)


def aggregates_in(t: object) -> set[int]:
    """The aggregate indexes a resolved tree reads."""
    if not isinstance(t, tuple):
        return set()
    if len(t) == 2 and t[0] == "agg" and isinstance(t[1], int):
        return {t[1]}
    out: set[int] = set()
    for x in t:
        out |= aggregates_in(x)
    return out


def add_aggregate(
    func: str, col: Any, ctx: Ctx, measures: list[Measure], aggs: list[Aggregate]
) -> tuple[int, str]:
    """(index, result type) of an aggregate inside an expression: a conditional count
    (``count_if``), or COUNT/SUM/AVG built as a select-list one
    (:func:`rewriter.aggregates.add_aggregate`), so identical aggregates are one release."""
    if func == "count_if":  # col: the checked predicate (rewriter.postprocess)
        agg = Aggregate(
            "count",
            None,
            None,
            None,
            None,
            (measure_index(Measure("count_if", filter=col), measures),),
            filter=col,
        )
        if agg not in aggs:
            aggs.append(agg)
        return aggs.index(agg), "int"
    if func not in ("count", "sum", "avg", "count_distinct", *stats.VARIANCE_FUNCS):
        same = next(
            (i for i, a in enumerate(aggs) if a.func == func and a.column == col and a.filter is None), None
        )
        if same is not None:  # VAR_POP(x) in HAVING / ORDER BY, selected too: its release
            return same, "float" if func != "count_distinct" else "int"
        raise Refusal(
            UNSUPPORTED,
            f"{func.upper()} is answered as a select item of its own, not "
            "inside an expression; select it and compute the expression in the client.",
            hint=HINT,
        )
    return add_select_aggregate(func, col, ctx, measures, aggs)


def resolve_filter(
    t: Tree,
    groups: Sequence[GroupKey],
    ctx: Ctx,
    measures: Sequence[Measure],
    aggregates: Sequence[Aggregate],
) -> tuple[Tree, tuple[Measure, ...], tuple[Aggregate, ...]]:
    """(resolved filter tree, measures, aggregates): the filter's aggregates are released
    with the select list's (one more aggregate sharing ε if the select list lacks it)."""
    ms, aggs = list(measures), list(aggregates)
    gidx = {g.column: i for i, g in enumerate(groups)}

    def agg(func: str, col: Any) -> tuple[int, str | None]:
        return add_aggregate(func, col, ctx, ms, aggs)

    def key(name: str) -> tuple[int | str, str | None]:
        if name not in gidx:
            raise Refusal(
                DENIED,
                f"HAVING may use aggregates and group keys, not column {name} (its raw "
                "values are never read back); filter rows with WHERE.",
                hint=HINT,
            )
        return gidx[name], groups[gidx[name]].type

    if _has_window(t):
        raise Refusal("42P20", "window functions are not allowed in HAVING", hint=WINDOW_HINT)
    r, typ = resolve(t, agg, key)
    if typ not in ("bool", None):
        raise Refusal(
            DATATYPE_MISMATCH, f"argument of HAVING must be type boolean, not type {typ}.", hint=None
        )
    return r, tuple(ms), tuple(aggs)


def resolve_sort(
    node: exp.Expression,
    groups: Sequence[GroupKey],
    ctx: Ctx,
    measures: list[Measure],
    aggregates: list[Aggregate],
) -> Tree:
    """The tree of an ORDER BY expression that is not in the select list (``ORDER BY
    COUNT(*) DESC`` selecting only the key): its aggregates are added to ``measures`` /
    ``aggregates`` (released with the select list's, sharing ε), evaluated per released cell."""
    gidx = {g.column: i for i, g in enumerate(groups)}

    def agg(func: str, col: Any) -> tuple[int, str | None]:
        return add_aggregate(func, col, ctx, measures, aggregates)

    def key(name: str) -> tuple[int | str, str | None]:
        if name not in gidx:
            raise Refusal(
                UNSUPPORTED,
                f"ORDER BY column {name} is not a group key; order by group keys, "
                "aggregates or output columns.",
                hint=HINT,
            )
        return gidx[name], groups[gidx[name]].type

    return resolve(tree(node, ctx), agg, key)[0]
