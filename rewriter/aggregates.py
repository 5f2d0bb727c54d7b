"""One aggregate call of a select item: which aggregates are allowed over which columns
(:func:`aggregate`) and the display steps over one aggregate (:func:`post_steps`). Below
:mod:`.select` and :mod:`.postprocess`, which both read select items."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlglot import exp

from . import intervals, predicate, stats
from .args import understood
from .errors import DATATYPE_MISMATCH, ExtremeAggregate, Refusal
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .plan import Aggregate, ColumnType, Measure
from .scope import Ctx
from .unit import chosen

MAX_BOUND = 1e290  # |lower|, |upper| of a SUM; larger could overflow a float8 sum


#: one display step over an aggregate: ("cast", target type), ("round", decimals or None),
#: ("floor" | "ceil", None)
Step = tuple[str, Any]
#: the aggregate functions a release answers
AggName = Literal["count", "sum", "avg", "count_distinct", "var_pop", "var_samp", "stddev_pop", "stddev_samp"]
_NAMES: dict[str, AggName] = {
    "count": "count",
    "sum": "sum",
    "avg": "avg",
    "count_distinct": "count_distinct",
    "var_pop": "var_pop",
    "var_samp": "var_samp",
    "stddev_pop": "stddev_pop",
    "stddev_samp": "stddev_samp",
}
_TYPES: dict[str, ColumnType] = {"int": "int", "float": "float"}

_CASTS = {"int": ("smallint", "int", "bigint"), "float": ("double", "float", "real"), "numeric": ("decimal",)}


def post_steps(node: exp.Expression) -> tuple[exp.Expression, tuple[Step, ...], str | None] | None:
    """``ROUND(AVG(x), 2)``, ``CAST(AVG(x) AS INT)``, ``COUNT(*)::float``, ``FLOOR``/``CEIL``:
    display steps over ONE aggregate (post-processing of its released value; the noise
    and its scale are unchanged) → (aggregate node, steps outermost last, output name),
    or None when ``node`` is not such a chain. Postgres's column names: the outermost
    function's (``round``), a cast keeps its operand's."""
    steps: list[Step] = []
    name: str | None = None
    while True:
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Cast) and not node.to.expressions and not isinstance(node, exp.TryCast):
            understood(node), understood(node.to)
            target = next((t for t, names in _CASTS.items() if node.to.is_type(*names)), None)
            if target is None:
                return None
            steps.append(("cast", target))
        elif (
            isinstance(node, exp.Round)
            and node.args.get("decimals") is None
            or (
                isinstance(node, exp.Round)
                and isinstance(node.args["decimals"], exp.Literal)
                and node.args["decimals"].is_int
                and 0 <= int(node.args["decimals"].this) <= 15
            )
        ):
            d = understood(node).args.get("decimals")
            steps.append(("round", None if d is None else int(d.this)))
            name = name or "round"
        elif isinstance(node, (exp.Floor, exp.Ceil)) and not node.args.get("decimals"):
            understood(node)
            steps.append((node.key, None))
            name = name or node.key
        else:
            break
        node = node.this
    if not steps or not isinstance(
        node,
        (
            exp.Count,
            exp.Sum,
            exp.Avg,
            exp.Max,
            exp.Min,
            exp.Median,
            exp.WithinGroup,
            exp.Filter,
            *stats.VARIANCE_NODES,
        ),
    ):
        return None
    return node, tuple(reversed(steps)), name


def post_type(typ: str, steps: tuple[Step, ...]) -> str:
    """The output type after ``steps`` (Postgres rules: ROUND(x, n) is numeric, a cast is its target)."""
    for op, arg in steps:
        if op == "cast":
            typ = str(arg)
        elif op == "round" and arg is not None:
            typ = "numeric"
    return typ


def _constant(arg: exp.Expression | None) -> bool:
    """A non-NULL literal: COUNT(1), COUNT('x') count every row, as COUNT(*)."""
    return isinstance(arg, exp.Literal) or (isinstance(arg, exp.Boolean))


_WIDENING = {"int": ("bigint", "double", "float", "decimal"), "float": ("double", "float", "decimal")}


def _value_preserving_cast(arg: exp.Expression, ctx: Ctx) -> exp.Expression:
    """``SUM(CAST(col AS DOUBLE PRECISION))`` (as BI tools write it) → ``col``: a cast that keeps
    every value of a numeric column (int → bigint/float8/numeric, float → float8/numeric, no
    precision given) changes nothing an aggregate sees; any other cast stays and is refused."""
    if isinstance(arg, exp.Cast) and isinstance(arg.this, exp.Column) and not arg.to.expressions:
        understood(arg), understood(arg.to)
        spec = ctx.table.columns.get(arg.this.name)
        if spec is not None and spec.type in _WIDENING and arg.to.is_type(*_WIDENING[spec.type]):
            return arg.this
    return arg


@dataclass(frozen=True)
class Filtered:
    """The argument of ``agg(x) FILTER (WHERE cond)``: the aggregate's argument (a column,
    an :class:`intervals.Arith`, or None for ``*``) and the checked condition. The
    aggregate sees only the rows where ``cond`` is true; each still contributes within
    the column's bounds, so the release is the plain aggregate's (same sensitivity and
    mechanism) over ``CASE WHEN cond THEN clamp(x) END``."""

    column: str | None  # a column name, an intervals.Arith (a str), or None for *
    cond: exp.Expression


_FILTERABLE = ("count", "sum", "avg")


def _case_sum(node: exp.Expression) -> exp.Filter | None:
    """``SUM(CASE WHEN p THEN x [ELSE 0 | ELSE NULL] END)`` as ``SUM(x) FILTER (WHERE p)`` for
    an ``x`` that is not a constant (a constant is a conditional count,
    :mod:`rewriter.postprocess`): the rows where p is not true add 0 or nothing, so the sum is
    the same, and the release is the one of SUM(x) over those rows (TPC-H Q8 and Q14's
    revenue of one kind over all revenue). Else None."""
    if not isinstance(node, exp.Sum) or not isinstance(node.this, exp.Case):
        return None
    if [k for k, v in node.args.items() if v and k != "this"]:
        return None
    case = node.this
    ifs = case.args.get("ifs") or []
    if (
        case.this is not None
        or len(ifs) != 1
        or set(k for k, v in case.args.items() if v) - {"ifs", "default"}
    ):
        return None
    branch = ifs[0]
    if set(k for k, v in branch.args.items() if v) != {"this", "true"}:
        return None
    then, default = branch.args["true"], case.args.get("default")
    inner = then
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, (exp.Literal, exp.Null)) or inner.find(exp.Column) is None:
        return None
    zero = (
        default is None
        or isinstance(default, exp.Null)
        or (isinstance(default, exp.Literal) and default.is_number and float(default.this) == 0)
    )
    if not zero:
        return None
    return exp.Filter(this=exp.Sum(this=then.copy()), expression=exp.Where(this=branch.this.copy()))


def _filtered(node: exp.Filter, ctx: Ctx) -> tuple[str, Filtered]:
    """(func, :class:`Filtered`) of ``COUNT/SUM/AVG(x) FILTER (WHERE cond)``; the condition is
    checked by the WHERE rules (:func:`predicate.where`); any other aggregate refuses."""
    inner, where = node.this, node.expression
    func_node = inner.this if isinstance(inner, exp.WithinGroup) else inner
    name = func_node.sql_name() if isinstance(func_node, exp.Func) else func_node.key
    what = name.upper() + ("(DISTINCT …)" if isinstance(inner.this, exp.Distinct) else "(…)")
    refusal = Refusal(
        UNSUPPORTED,
        f"{what} FILTER (WHERE …) is not supported: FILTER is answered on "
        "COUNT, SUM and AVG; put the condition in WHERE (in ibis: t.filter(cond) before the "
        "aggregate, instead of the aggregate's where=cond).",
    )
    if (
        not isinstance(where, exp.Where)
        or not isinstance(inner, (exp.Count, exp.Sum, exp.Avg))
        or (isinstance(inner.this, exp.Distinct))
    ):
        raise refusal
    understood(node, frozenset({"this", "expression"})), understood(where)
    func, col = aggregate(inner, ctx)
    if func not in _FILTERABLE or isinstance(col, Filtered):
        raise refusal
    return func, Filtered(col, predicate.where(where.this, ctx))


def aggregate(node: exp.Expression, ctx: Ctx) -> tuple[str, str | Filtered | None]:
    """(func, column) of an allowed aggregate call, or a refusal; the column of a FILTERed
    COUNT/SUM/AVG is a :class:`Filtered`."""
    if isinstance(node, exp.Filter):
        return _filtered(node, ctx)
    filtered = _case_sum(node)
    if filtered is not None:
        return _filtered(filtered, ctx)
    if isinstance(node, (exp.Median, exp.WithinGroup)):  # quantiles: rewriter.extreme
        raise ExtremeAggregate(
            UNSUPPORTED,
            "percentile_cont / percentile_disc / median are answered on "
            "central tables, each its own release (several in one statement share its ε), "
            "in the select list, HAVING or ORDER BY — not inside a window, a FILTER or a nested query.",
        )
    if isinstance(node, (exp.Max, exp.Min)):
        raise ExtremeAggregate(
            UNSUPPORTED,
            f"{node.sql_name().upper()}() is answered as its own release (several in one "
            "statement share its ε), in the select list, HAVING or ORDER BY — not inside a window, "
            "a FILTER or a nested query.",
        )
    if not isinstance(node, (exp.Count, exp.Sum, exp.Avg, *stats.VARIANCE_NODES)):
        name = node.sql_name() if isinstance(node, exp.Func) else node.key
        raise Refusal(
            UNSUPPORTED,
            f"aggregate {name.lower()}() is not supported "
            "yet; use COUNT, SUM, AVG, VAR_POP/VAR_SAMP or STDDEV_POP/STDDEV_SAMP.",
        )
    func = stats.VARIANCE_NODES.get(type(node), node.key) if isinstance(node, exp.AggFunc) else node.key
    arg = node.this
    if isinstance(node, exp.Count) and isinstance(arg, exp.Distinct):
        understood(node)
        return "count_distinct", stats.distinct_column(node, ctx)
    if isinstance(arg, exp.Distinct):
        raise Refusal(UNSUPPORTED, f"{func.upper()}(DISTINCT …) is not supported.")
    understood(node)
    if func == "count" and (isinstance(arg, exp.Star) or _constant(arg)):  # COUNT(1): every row
        return "count", None
    arg = _value_preserving_cast(arg, ctx)
    if (
        func in ("sum", "avg")
        and intervals.wanted(arg)
        and not [k for k, v in node.args.items() if v and k not in ("this", "big_int")]
    ):
        return func, intervals.arith_argument(arg, ctx, func)  # SUM(age + 1): bounds by intervals
    if not isinstance(arg, exp.Column) or [
        k for k, v in node.args.items() if v and k not in ("this", "big_int")
    ]:
        predicate.check(arg, ctx) if isinstance(arg, exp.Expression) else None
        raise Refusal(
            UNSUPPORTED,
            f"{func.upper()} takes a declared column (or * for COUNT), "
            "not an expression; filter rows with WHERE instead.",
        )
    col = ctx.column(arg).node.name
    spec = ctx.table.columns[col]
    if func != "count":
        if spec.type not in ("int", "float"):
            raise Refusal(
                DATATYPE_MISMATCH, f"{func.upper()}({col}) needs a numeric column; {col} is {spec.type}."
            )
        lower, upper = spec.lower, spec.upper
        chosen(col, spec)
        if not spec.bounded or not isinstance(lower, (int, float)) or not isinstance(upper, (int, float)):
            raise Refusal(
                DENIED,
                f"{func.upper()}({col}) needs clamping bounds; declare lower "
                f"and upper for column {col} in the config.",
            )
        if max(abs(lower), abs(upper)) > MAX_BOUND:
            raise Refusal("54000", f"the bounds of {col} are too large to sum safely.")
        if func in stats.VARIANCE_FUNCS and not lower < upper:
            raise Refusal(
                DENIED,
                f"{func.upper()}({col}) needs lower < upper; {col} is declared "
                f"[{spec.lower:g}, {spec.upper:g}] (its variance is 0).",
            )
    return func, col


def measure_index(measure: Measure, measures: list[Measure]) -> int:
    """The index of ``measure`` in ``measures`` (appended once: one scan column each)."""
    if measure not in measures:
        measures.append(measure)
    return measures.index(measure)


def _avg_mechanism(col: str, ctx: Ctx) -> str:
    """The configured mean mechanism of AVG(col); for an expression, the one its columns
    agree on (else the default)."""
    if not isinstance(col, intervals.Arith):
        return ctx.table.columns[col].avg_mechanism
    specs = [ctx.table.columns[c.name] for c in col.expr.find_all(exp.Column)]
    found = {s.avg_mechanism for s in specs}
    return found.pop() if len(found) == 1 else type(specs[0]).model_fields["avg_mechanism"].default


def add_aggregate(
    func: str, col: str | Filtered | None, ctx: Ctx, measures: list[Measure], aggs: list[Aggregate]
) -> tuple[int, str]:
    """(index, value type) of the aggregate ``func(col)`` in ``aggs``, appended if new, its
    measures appended to ``measures`` once: identical aggregates are one release, whether
    selected or used inside an expression (:mod:`.postprocess`)."""

    def m(measure: Measure) -> int:
        return measure_index(measure, measures)

    cond = None
    if isinstance(col, Filtered):  # FILTER (WHERE cond): the measures carry it
        cond = col.cond
        col = col.column
    spec = ctx.table.columns[col] if col and not isinstance(col, intervals.Arith) else None
    typ: ColumnType | None = None
    lo: float | None = None
    hi: float | None = None
    if spec is not None:  # a date/text column's bounds are not numbers: only counted (bounds unused)
        typ, lo, hi = spec.type, _number(spec.lower), _number(spec.upper)
    if isinstance(col, intervals.Arith):  # an expression: its type and interval bounds
        typ, lo, hi = _TYPES[col.type], col.lower, col.upper
    ms: tuple[int, ...]
    if func == "count":
        lo = hi = None
        ms = (
            m(Measure("count_rows") if cond is None else Measure("count_if", filter=cond))
            if col is None
            else m(Measure("count", col, filter=cond)),
        )
    elif func == "count_distinct" or func in stats.VARIANCE_FUNCS:
        if col is None or spec is None:
            raise ValueError(f"{func} aggregates a declared column")
        ms_, typ = stats.measures(func, col, spec)
        ms = tuple(m(x) for x in ms_)
        if func == "count_distinct":
            lo = hi = None
    else:
        ms = (m(Measure("sum", col, typ, lo, hi, filter=cond)),)
        if func == "avg":  # AVG's count: over the same (filtered) rows
            ms += (m(Measure("count", col, filter=cond)),)
    agg = Aggregate(
        _NAMES[func],
        col,
        typ if func != "count" else spec.type if spec else None,
        lo,
        hi,
        ms,
        _avg_mechanism(col, ctx) if func == "avg" and col is not None else None,
        cond,
    )
    if agg not in aggs:
        aggs.append(agg)
    out = {"count": "int", "sum": typ, "count_distinct": "int"}.get(func, "float")
    if out is None:
        raise ValueError(f"SUM({col}) has a value type")
    return aggs.index(agg), out


def _number(bound: float | str | None) -> float | None:
    """A declared bound as a number (None for a date/timestamp column's ISO text)."""
    return None if bound is None or isinstance(bound, str) else bound
