"""MAX / MIN and quantiles on a central table: validation and the one backend scan.

The statement is validated as the same statement with MAX/MIN read as SUM (WHERE,
GROUP BY over public domains, ORDER BY, LIMIT, display steps: the rules of every
central statement; the column must be numeric with declared bounds). One MAX or MIN
per statement — it is its own release. The scan is a histogram over the column's
public grid (:class:`mechanisms.extreme.ExtremeGrid`, passed in as lower/step/U):

    SELECT k1, …, CAST(FLOOR((clamp(col) − lower) / step) AS BIGINT) AS v, COUNT(*) AS n
    FROM t WHERE (pred) AND col IS NOT NULL GROUP BY k1, …, v

Its rows never leave the proxy; the mechanism turns each group's histogram into one value.

A key without a public domain (``plan.selected``): the same scan also returns, on
each histogram row, the number of distinct units of its key over the kept rows (rows, on a
table without a unit; as the partition scan counts them), and drops keys below the
selection's scan floor::

    WITH kept AS (…)
    SELECT * FROM (SELECT k.., v, n, SUM(nu) OVER (PARTITION BY k..) AS units
                   FROM (SELECT keys AS k.., v, COUNT(*) AS n, SUM(CASE WHEN rn = 1 THEN 1 ELSE 0 END) AS nu
                         FROM kept WHERE <bounded> GROUP BY keys, v) AS h) AS s
    WHERE units >= floor

``rn`` (:func:`.unit.kept_rows`) ranks a unit's rows within its key, so rn = 1 marks one row per
(unit, key) and ``units`` is COUNT(DISTINCT unit) per key without a DISTINCT window (which
Postgres lacks) or another sort; in total mode rn ranks a unit's rows over all its keys, and
a ``marked`` CTE ranks them within the key. Rows with a NULL value count a unit but join no
histogram: they come back as one row with v NULL, so a key whose rows all lack a value is still
a key — selected by its units like any other, its value drawn from an empty histogram (dropping
it instead would let one unit with a value make it appear). The proxy chooses the keys by partition selection
(:mod:`proxy.pipeline.partitions`) before any value is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Literal

from sqlglot import exp

from config import Config

from . import build_plan, param_types, params, unit
from .args import understood
from .emit import DOUBLE, for_dialect, group_key_sql, keyed_hash
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INVALID_PARAMETER, Refusal
from .per_record import substitute_extremes
from .plan import Plan
from .values import to_node

__all__ = ["ExtremePlan", "build_extreme_plan", "extreme_param_types", "histogram_sql", "ALLOWED"]

ALLOWED = (
    "Allowed: SELECT [group columns,] one MAX(col), MIN(col), median(col) or percentile_cont(q) / "
    "percentile_disc(q) WITHIN GROUP (ORDER BY col) of a numeric column with declared "
    "bounds FROM a declared table [JOIN its public lookup tables or the tables of the same people] [WHERE row predicate] [GROUP BY columns with a declared "
    "domain] [ORDER BY outputs] [LIMIT n]."
)


#: the aggregate an :class:`ExtremePlan` answers
ExtremeFunc = Literal["max", "min", "percentile_cont", "percentile_disc", "median"]


@dataclass(frozen=True)
class ExtremePlan:
    """A validated MAX/MIN/quantile statement: the central plan (planned as SUM) and the
    aggregate asked for; ``q`` the (ascending) quantile of percentile_*/median, else None."""

    plan: Plan
    func: ExtremeFunc
    column: str
    q: Fraction | None = None

    @property
    def quantile(self) -> bool:
        return self.q is not None

    def canonical(self) -> str:
        q = "" if self.q is None else f";q={self.q}"
        return f"extreme:{self.func}({self.column}){q};{self.plan.canonical()}"

    @property
    def cells(self) -> list[tuple[Any, ...]]:
        return self.plan.cells


def _refuse(msg: str) -> Refusal:
    return Refusal(UNSUPPORTED, msg, hint=ALLOWED)


QUANTILE_NODES = (exp.PercentileCont, exp.PercentileDisc)


def _fraction(node: exp.Expression | None) -> Fraction:
    """q of percentile_*(q): a numeric literal in [0, 1] with at most 6 decimals, exactly."""
    if not (isinstance(node, exp.Literal) and not node.is_string):
        raise _refuse(
            "percentile_cont / percentile_disc take a numeric literal fraction in [0, 1], "
            "e.g. percentile_cont(0.9) WITHIN GROUP (ORDER BY col); one per statement."
        )
    try:
        d = Decimal(node.this)
    except InvalidOperation:
        raise _refuse(f"percentile fraction {node.this} is not a number.") from None
    if not 0 <= d <= 1:
        raise Refusal(
            INVALID_PARAMETER,
            f"percentile value {node.this} is not between 0 and 1",
            hint="Write a fraction in [0, 1]: percentile_cont(0.5) is the median.",
        )
    q = Fraction(d)
    if q.denominator > 10**6:
        raise _refuse(f"percentile fraction {node.this}: write it with at most 6 decimals.")
    return q


def substitute_quantiles(
    expr: exp.Expression,
) -> tuple[exp.Expression, list[tuple[ExtremeFunc, Fraction, str]]]:
    """A copy with each ``percentile_*(q) WITHIN GROUP (ORDER BY col)`` / ``median(col)`` read
    as SUM(col) (CAST to float8 for percentile_cont and median; an unaliased select item keeps
    Postgres's name), and the list of (func, ascending q, column sql) found."""
    expr = expr.copy()
    found: list[tuple[ExtremeFunc, Fraction, str]] = []
    nodes = [
        n
        for n in expr.find_all(exp.WithinGroup, exp.Median)
        if not isinstance(n, exp.Median) or not isinstance(n.parent, exp.WithinGroup)
    ]
    for node in nodes:
        func: ExtremeFunc
        if isinstance(node, exp.Median):
            understood(node)
            if node.this is None or any(v for k, v in node.args.items() if k != "this"):
                raise _refuse("median takes one declared column: median(col).")
            func, q, col = "median", Fraction(1, 2), node.this
        else:
            fn, order = node.this, node.expression
            if not isinstance(fn, QUANTILE_NODES) or not isinstance(order, exp.Order):
                raise _refuse(
                    f"{node.sql('postgres')}: only percentile_cont / percentile_disc take WITHIN GROUP here."
                )
            understood(fn)
            if len(order.expressions) != 1 or any(v for k, v in order.args.items() if k != "expressions"):
                raise _refuse("percentile_* WITHIN GROUP takes one ORDER BY column.")
            ordered = understood(order.expressions[0])
            func = "percentile_cont" if isinstance(fn, exp.PercentileCont) else "percentile_disc"
            q, col = _fraction(fn.this), ordered.this
            if ordered.args.get("desc"):
                q = 1 - q
        found.append((func, q, col.sql("postgres").lower()))
        new: exp.Expr = exp.Sum(this=col.copy())
        if func != "percentile_disc":
            new = exp.Cast(this=new, to=exp.DataType.build("double"))
        item = node.parent if isinstance(node.parent, exp.Alias) else None
        if (
            item is None
            and node.parent is not None
            and node.parent.key == "select"
            and node.arg_key == "expressions"
        ):
            new = exp.alias_(new, func)
        node.replace(new)
    return expr, found


def _one_column(node: exp.Expression) -> bool:
    """A declared column, possibly under a cast (the central rules check the cast keeps values)."""
    while isinstance(node, (exp.Paren, exp.Cast)):
        node = node.this
    return isinstance(node, exp.Column)


def build_extreme_plan(expr: exp.Expression, config: Config, params: list[Any] | None = None) -> ExtremePlan:
    for node in expr.find_all(exp.Max, exp.Min, exp.Median, exp.Ordered):
        arg = node.this
        if isinstance(node, exp.Ordered) and not isinstance(
            node.parent and node.parent.parent, exp.WithinGroup
        ):
            continue
        if arg is not None and not _one_column(arg):
            name = "percentile" if isinstance(node, exp.Ordered) else node.key
            raise _refuse(
                f"{name.upper() if name != 'percentile' else 'percentile_cont/percentile_disc'} "
                f"takes one declared column, not an expression ({arg.sql('postgres')})."
            )
    expr, quantiles = substitute_quantiles(expr)
    sub, found = substitute_extremes(expr)
    kinds = [f for f, _ in found]
    if quantiles:
        kinds = [quantiles[0][0]] if len(kinds) == 1 else kinds
    try:
        plan = build_plan(sub, config, params)
    except Refusal as r:
        ext = next(
            (f for f in ("max", "min", "percentile_cont", "percentile_disc", "median") if f in kinds), None
        )
        if ext is not None and len(kinds) == 1:  # the message names what was asked
            r.message = r.message.replace("SUM(", f"{ext.upper()}(").replace(
                "SUM takes", f"{ext.upper()} takes"
            )
        raise
    if plan.selection is not None:
        raise _refuse(
            "HAVING and top-c are not available with MAX/MIN/percentiles; ask for the value per group."
        )
    if plan.per_unit:  # over a per-unit subquery (rewriter.histogram)
        raise _refuse(
            "MAX / MIN / percentiles of per-unit counts are not available; ask the histogram "
            "(… GROUP BY n) and read them off it."
        )
    # plan.selected (a key without a public domain): the keys come from partition selection in the
    # same scan (histogram_sql's floor, proxy.pipeline.extreme), so it is planned like any other
    if plan.row_filter is not None or any(o.source == "expr" for o in plan.outputs):
        raise _refuse(
            "MAX, MIN and percentiles are answered alone (ROUND/CAST over them allowed); "
            "compute expressions over them in the client."
        )
    if (
        len(found) != 1
        or len(plan.aggregates) != 1
        or len(quantiles) > 1
        or (not quantiles and kinds[0] not in ("max", "min"))
    ):
        raise _refuse(
            "MAX, MIN, median and percentiles are answered one per statement (each is its own "
            "release); ask for the other aggregates in a separate statement."
        )
    if plan.aggregates[0].column not in config.tables[plan.table].columns:  # MAX(a + b)
        raise _refuse("MAX, MIN and percentiles take one declared column, not an expression.")
    if quantiles:
        return ExtremePlan(plan, quantiles[0][0], plan.aggregates[0].column, quantiles[0][1])
    return ExtremePlan(plan, "max" if kinds[0] == "max" else "min", plan.aggregates[0].column)


def extreme_param_types(expr: exp.Expression, config: Config) -> list[str | None]:
    return param_types(substitute_extremes(substitute_quantiles(expr)[0])[0], config)


def histogram_sql(
    xp: ExtremePlan,
    lower: float,
    step: float,
    U: int,
    integral_step: bool,
    dialect: str,
    salt: str = "",
    floor: int | None = None,
) -> str:
    """The one scan: per group key and grid index, the number of rows (see module doc);
    on a table with a privacy unit, of the unit's kept rows (:mod:`.unit`). ``floor`` (keys
    chosen by partition selection): each row also carries its key's distinct units, and keys
    with fewer than ``floor`` are dropped."""
    plan = xp.plan
    col = exp.column(xp.column, quoted=True)
    source, where, kept = plan.from_(), plan.where, None
    if plan.unit is not None:
        kept, where = unit.kept_rows(plan, [col], group_key_sql)
        source = exp.to_table(unit.KEPT)
    if integral_step:  # an int column on step 1: exact integer arithmetic
        lo, hi = int(lower), int(lower) + int(U)
        lo_n, hi_n = to_node(lo), to_node(hi)
        x: exp.Expression = col
    else:
        lo_n, hi_n = (exp.Cast(this=to_node(float(b)), to=DOUBLE.copy()) for b in (lower, lower + step * U))
        x = exp.Cast(this=col, to=DOUBLE.copy())
    clamped = exp.Case(
        ifs=[
            exp.If(this=exp.LT(this=x.copy(), expression=lo_n), true=lo_n.copy()),
            exp.If(this=exp.GT(this=x.copy(), expression=hi_n), true=hi_n.copy()),
        ],
        default=x.copy(),
    )
    offset: exp.Expression = exp.Sub(this=exp.Paren(this=clamped), expression=lo_n.copy())
    if not integral_step:
        offset = exp.Floor(
            this=exp.Div(
                this=exp.Paren(this=offset), expression=exp.Cast(this=to_node(float(step)), to=DOUBLE.copy())
            )
        )
    v = exp.Cast(this=offset, to=exp.DataType.build("bigint"))
    keys = [group_key_sql(g) for g in plan.group_by]
    present = exp.Not(this=exp.Is(this=col.copy(), expression=exp.Null()))
    selected = floor is not None
    cond: exp.Expr | None = (
        None if selected else present
    )  # selected keys: units over every kept row (module doc)
    if where is not None:
        cond = exp.and_(exp.Paren(this=where.copy()), cond) if cond is not None else where.copy()
    marked, first = None, None
    if (
        selected and kept is not None and plan.unit is not None
    ):  # a unit's first kept row in its key (module doc)
        if plan.unit.total:  # rn ranks the unit's rows over all its keys: rank in the key
            w = exp.Window(
                this=exp.RowNumber(),
                partition_by=[exp.column(plan.unit.column, quoted=True), *[k.copy() for k in keys]],
                order=exp.Order(expressions=[exp.Ordered(this=exp.column(unit.RN, quoted=True))]),
            )
            marked = exp.select(exp.Star(), exp.alias_(w, FIRST, quoted=True)).from_(source).where(cond)
            source, cond, first = exp.to_table(MARKED), None, FIRST
        else:  # rn already ranks the unit's rows within its key
            first = unit.RN
    aggs = [exp.Count(this=exp.Star()).as_("n")]
    if first is not None:
        one = exp.EQ(this=exp.column(first, quoted=True), expression=to_node(1))
        aggs.append(
            exp.Sum(this=exp.Case(ifs=[exp.If(this=one, true=to_node(1))], default=to_node(0))).as_("nu")
        )
    q = exp.select(*[k.as_(f"k{i + 1}") for i, k in enumerate(keys)], v.as_("v"), *aggs).from_(source)
    if cond is not None:
        q = q.where(cond)
    q = q.group_by(*[k.copy() for k in keys], v.copy())
    if floor is not None:
        q = _floored(q, len(keys), "nu" if first is not None else "n", floor)
    if kept is None:
        return for_dialect(q, dialect).sql(dialect=dialect, identify=True)  # Spark: emit.for_dialect
    q = q.with_(unit.KEPT, as_=kept, copy=False)
    if marked is not None:
        q = q.with_(MARKED, as_=marked, copy=False)
    scan, names = params.spell(
        unit.spell_hashes(q, lambda a: keyed_hash(a, dialect)), dialect
    )  # the salt: bound
    return unit.salted(for_dialect(scan, dialect).sql(dialect=dialect, identify=True), salt, dialect, names)


MARKED, FIRST = "__dpgate_marked", "__dpgate_first"


def _floored(hist: exp.Select, n_keys: int, per_row: str, floor: int) -> exp.Select:
    """``hist`` (k.., v, n[, nu]) with each key's units summed over its rows (a window), keys
    below ``floor`` dropped: rows (k.., v, n, units); v is NULL on a key's row of NULL values
    (they count its units, not its histogram)."""
    ks = [exp.column(f"k{i + 1}", quoted=True) for i in range(n_keys)]
    units = exp.Window(this=exp.Sum(this=exp.column(per_row, quoted=True)), partition_by=ks)
    inner = exp.select(
        *[k.copy() for k in ks],
        exp.column("v", quoted=True),
        exp.column("n", quoted=True),
        exp.alias_(units, "units", quoted=True),
    ).from_(hist.subquery("h"))
    keep = exp.GTE(this=exp.column("units", quoted=True), expression=to_node(int(floor)))
    return (
        exp.select(
            *[k.copy() for k in ks],
            exp.column("v", quoted=True),
            exp.column("n", quoted=True),
            exp.column("units", quoted=True),
        )
        .from_(inner.subquery("s"))
        .where(keep)
    )
