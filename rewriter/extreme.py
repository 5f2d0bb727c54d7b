"""MAX / MIN and quantiles on a central table: validation and the one backend scan.

The statement is validated as the same statement with MAX/MIN read as SUM (WHERE,
GROUP BY over public domains, ORDER BY, LIMIT, display steps: the rules of every
central statement; the column must be numeric with declared bounds). The scan of one
MAX/MIN/percentile is a histogram over the column's public grid
(:class:`mechanisms.extreme.ExtremeGrid`, passed in as lower/step/U):

    SELECT k1, …, CAST(FLOOR((clamp(col) − lower) / step) AS BIGINT) AS v, COUNT(*) AS n
    FROM t WHERE (pred) AND col IS NOT NULL GROUP BY k1, …, v

Its rows never leave the proxy; the mechanism turns each group's histogram into one value.

Several MAX/MIN/percentiles in one statement, or beside COUNT/SUM/AVG/…: a *joint* plan
(:func:`_joint`): each distinct one is a part filling a plan aggregate of its own (they were all
planned as a SUM of their column), the other aggregates are planned as cells by the central
rules, and :func:`joint_sql` reads every column's histogram and the cells in ONE backend
statement (``UNION ALL``, each part tagged).

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

import dataclasses
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Literal

from sqlglot import exp

from config import Config

from . import build_plan, param_types, params, unit
from .args import understood
from .emit import DOUBLE, for_dialect, group_key_sql, keyed_hash, to_sql
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INVALID_PARAMETER, Refusal
from .per_record import substitute_extremes
from .plan import Aggregate, Output, Plan
from .values import to_node

__all__ = [
    "ALLOWED",
    "ExtremePart",
    "ExtremePlan",
    "GridSql",
    "build_extreme_plan",
    "extreme_param_types",
    "histogram_sql",
    "joint_sql",
]

ALLOWED = (
    "Allowed: SELECT [group columns,] MAX(col), MIN(col), median(col), percentile_cont(q) / "
    "percentile_disc(q) WITHIN GROUP (ORDER BY col) of numeric columns with declared "
    "bounds [, COUNT/SUM/AVG/…] FROM a declared table [JOIN its public lookup tables or the tables of the same people] [WHERE row predicate] [GROUP BY columns with a declared "
    "domain] [ORDER BY outputs] [LIMIT n]."
)


#: the aggregate an :class:`ExtremePlan` answers
ExtremeFunc = Literal["max", "min", "percentile_cont", "percentile_disc", "median"]


@dataclass(frozen=True)
class ExtremePart:
    """One MAX/MIN/quantile of a statement: its aggregate, the column, the ascending q of a
    quantile (else None), the plan aggregate its released value fills and the output's name."""

    func: ExtremeFunc
    column: str
    q: Fraction | None
    index: int
    name: str

    @property
    def label(self) -> str:
        q = "" if self.q is None else f"({self.q})"
        return f"{self.func}{q}({self.column})"


@dataclass(frozen=True)
class ExtremePlan:
    """A validated MAX/MIN/quantile statement: the central plan (planned as SUM) and the
    aggregate asked for; ``q`` the (ascending) quantile of percentile_*/median, else None.

    A *joint* statement asks for several (``parts``: one per distinct MAX/MIN/quantile, each
    filling the plan aggregate ``index``), or for them beside COUNT/SUM/AVG/… (``central``: those
    planned as cells by :func:`rewriter.build_plan`, ``central_index[j]`` the central aggregate
    that fills plan aggregate j, None for a part's). The proxy splits the statement's ε among
    them (sequential composition); one scan (:func:`joint_sql`) reads every histogram and the
    cells."""

    plan: Plan
    func: ExtremeFunc
    column: str
    q: Fraction | None = None
    parts: tuple[ExtremePart, ...] = ()
    central: Plan | None = None
    central_index: tuple[int | None, ...] = ()

    @property
    def quantile(self) -> bool:
        return self.q is not None

    @property
    def joint(self) -> bool:
        """Anything but one MAX/MIN/percentile selected as itself (ROUND/CAST over it allowed):
        several, cells beside them, expressions, HAVING or ORDER BY over them."""
        plan = self.plan
        plain = (
            len(self.parts) == 1
            and self.central is None
            and plan.row_filter is None
            and not any(o.source == "expr" for o in plan.outputs)
            and not any(item.tree is not None for item in plan.order_by)
            and any(o.source == "aggregate" for o in plan.outputs)
        )
        return not plain

    @property
    def columns(self) -> list[str]:
        """The distinct columns whose histograms the scan reads, in statement order."""
        return list(dict.fromkeys(p.column for p in self.parts)) or [self.column]

    def single(self, part: ExtremePart) -> ExtremePlan:
        """``part`` as a statement of its own (same cells; its output the one aggregate)."""
        return ExtremePlan(self.plan, part.func, part.column, part.q, (part,))

    def canonical(self) -> str:
        if not self.joint:
            q = "" if self.q is None else f";q={self.q}"
            return f"extreme:{self.func}({self.column}){q};{self.plan.canonical()}"
        parts = ",".join(f"{p.index}={p.label}" for p in self.parts)
        central = "" if self.central is None else f";central={self.central.canonical()}"
        return f"extreme-joint:{parts}{central};{self.plan.canonical()}"

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
            "e.g. percentile_cont(0.9) WITHIN GROUP (ORDER BY col)."
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
    original = expr
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
    if plan.per_unit:  # over a per-unit subquery (rewriter.histogram)
        raise _refuse(
            "MAX / MIN / percentiles of per-unit counts are not available; ask the histogram "
            "(… GROUP BY n) and read them off it."
        )
    # plan.selected (a key without a public domain): the keys come from partition selection in the
    # same scan (histogram_sql's floor, proxy.pipeline.extreme), so it is planned like any other
    single = (
        len(found) == 1
        and len(plan.aggregates) == 1
        and len(quantiles) <= 1
        and (bool(quantiles) or kinds[0] in ("max", "min"))
        and not any(o.source == "expr" for o in plan.outputs)
        and not any(item.tree is not None for item in plan.order_by)
        and plan.row_filter is None
        and plan.selection is None
    )
    if not single:
        return _joint(original, config, params)
    if plan.aggregates[0].column not in config.tables[plan.table].columns:  # MAX(a + b)
        raise _refuse("MAX, MIN and percentiles take one declared column, not an expression.")
    out = plan.outputs
    name = next((o.name for o in out if o.source == "aggregate"), "")
    if quantiles:
        f, q, col = quantiles[0][0], quantiles[0][1], plan.aggregates[0].column
        return ExtremePlan(plan, f, col, q, (ExtremePart(f, col, q, 0, name),))
    func: ExtremeFunc = "max" if kinds[0] == "max" else "min"
    col = plan.aggregates[0].column
    return ExtremePlan(plan, func, col, None, (ExtremePart(func, col, None, 0, name),))


MAX_PARTS, MAX_COLUMNS = 32, 8  # per statement: the scan reads one histogram per column

JOINT = (
    "Several MAX/MIN/median/percentiles of declared columns, COUNT/SUM/AVG beside them, "
    "expressions, HAVING and ORDER BY over them are answered in one statement"
)


TAG = "__dpgate_x"  # the literal that tags an extreme's stand-in aggregate (:func:`_tagged`)


def _tagged(
    expr: exp.Expression,
) -> tuple[exp.Expression, exp.Expression, list[tuple[ExtremeFunc, Fraction | None]]]:
    """Two copies of a statement whose select list, HAVING or ORDER BY holds MAX/MIN/percentiles:

    * each one j read as ``SUM(col) FILTER (WHERE '__dpgate_xj' = '__dpgate_xj')`` (as a
      double for percentile_cont and median; an unaliased select item keeps Postgres's name) —
      the central rules plan it as an aggregate of its own, which the tag names;
    * each one in the select list read as the constant 1, the other aggregates HAVING and
      ORDER BY read added to the select list, without HAVING, ORDER BY, OFFSET, LIMIT: the
      statement's other aggregates, planned as cells.

    and each one's (func, ascending q)."""
    tagged, rest = expr.copy(), expr.copy()
    found: list[tuple[ExtremeFunc, Fraction | None]] = []
    for clause in ("expressions", "having", "order"):
        for node in [n for v in _as_list(tagged.args.get(clause)) for n in _extreme_nodes(v)]:
            func, q, col = _read(node)
            tag = exp.Literal.string(f"{TAG}{len(found)}")
            new: exp.Expr = exp.Filter(
                this=exp.Sum(this=col.copy()),
                expression=exp.Where(this=exp.EQ(this=tag, expression=tag.copy())),
            )
            if func in ("percentile_cont", "median"):
                new = exp.Cast(this=new, to=exp.DataType.build("double"))
            if node.parent is not None and node.parent.key == "select" and node.arg_key == "expressions":
                new = exp.alias_(new, func)
            found.append((func, q))
            node.replace(new)
    for node in [n for v in rest.expressions for n in _extreme_nodes(v)]:
        node.replace(to_node(1))
    extra = [
        agg.copy()
        for clause in ("having", "order")
        for v in _as_list(rest.args.get(clause))
        for agg in _other_aggregates(v)
    ]
    rest.set("expressions", [*rest.expressions, *(exp.alias_(a, f"{TAG}h{i}") for i, a in enumerate(extra))])
    for arg in ("having", "order", "limit", "offset"):
        rest.set(arg, None)
    return tagged, rest, found


def _other_aggregates(tree: exp.Expression) -> list[exp.Expression]:
    """The aggregates of ``tree`` that are not MAX/MIN/percentiles (nor inside one, a window or
    a nested query)."""
    out: list[exp.Expression] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (exp.Max, exp.Min, exp.Median, exp.WithinGroup, exp.Window, exp.Subquery)):
            continue
        if isinstance(node, exp.AggFunc):
            out.append(node)
            continue
        stack.extend(node.iter_expressions())
    return out


def _as_list(value: object) -> list[exp.Expression]:
    if isinstance(value, exp.Expression):
        return [value]
    return [v for v in value if isinstance(v, exp.Expression)] if isinstance(value, list) else []


def _extreme_nodes(tree: exp.Expression) -> list[exp.Expression]:
    """The MAX/MIN/median/percentile nodes of ``tree`` in order, not inside a window, a FILTER
    or a nested query (not a release of this SELECT: :mod:`rewriter.planner`)."""
    out: list[exp.Expression] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (exp.Max, exp.Min, exp.Median, exp.WithinGroup)):
            out.append(node)
            continue
        if isinstance(node, (exp.Window, exp.Filter, exp.Subquery, exp.Select)) and node is not tree:
            continue
        stack.extend(reversed(list(node.iter_expressions())))
    return out


def _read(node: exp.Expression) -> tuple[ExtremeFunc, Fraction | None, exp.Expression]:
    """(func, ascending q, column) of one MAX/MIN/median/percentile node (checked as
    :func:`substitute_quantiles` checks it)."""
    if isinstance(node, (exp.Max, exp.Min)):
        if node.this is None or any(v for k, v in node.args.items() if k != "this"):
            raise _refuse(f"{node.key.upper()} takes one declared column.")
        return ("max" if isinstance(node, exp.Max) else "min"), None, node.this
    holder = exp.select(node.copy())
    _, ((func, q, _),) = substitute_quantiles(holder)
    col = node.this if isinstance(node, exp.Median) else node.expression.expressions[0].this
    return func, q, col


def _remap(tree: Any, index: dict[int, int]) -> Any:
    """A post-processing tree (:mod:`rewriter.postprocess`) with each ``("agg", i)`` read as
    ``("agg", index[i])``."""
    if isinstance(tree, tuple):
        if len(tree) == 2 and tree[0] == "agg" and isinstance(tree[1], int):
            return ("agg", index[tree[1]])
        return tuple(_remap(t, index) for t in tree)
    return tree


def _joint(original: exp.Expression, config: Config, params: list[Any] | None) -> ExtremePlan:
    """A statement with several MAX/MIN/quantiles, or with them beside COUNT/SUM/AVG/…, or in
    expressions (post-processing over the released values): each distinct one a part filling a
    plan aggregate of its own, the other aggregates planned as cells by the central rules."""

    def refuse(msg: str) -> Refusal:
        return Refusal(UNSUPPORTED, msg, hint=JOINT + ".")

    if not isinstance(original, exp.Select):
        raise refuse("MAX, MIN and percentiles beside other aggregates need a plain SELECT.")
    if any(isinstance(n, exp.Literal) and n.is_string and n.this.startswith(TAG) for n in original.walk()):
        raise refuse(f"a string literal starting with {TAG} is reserved.")
    tagged, rest, found = _tagged(original)
    plan = build_plan(tagged, config, params)
    # HAVING and ORDER BY … LIMIT are evaluated on every released cell's values (post-processing):
    # no sparse vector chooses keys here
    plan = dataclasses.replace(plan, selection=None)
    columns = config.tables[plan.table].columns
    aggs: list[Aggregate] = []
    parts: list[ExtremePart] = []
    seen: dict[tuple[str, Fraction | None, str], int] = {}
    index: dict[int, int] = {}  # the tagged plan's aggregate -> the joint plan's
    central_of: dict[int, int] = {}
    named = {o.index: o.name for o in reversed(plan.outputs) if o.source == "aggregate"}
    for i, a in enumerate(plan.aggregates):
        tag = _tag_of(a)
        if tag is None:
            central_of[i] = index[i] = len(aggs)
            aggs.append(a)
            continue
        func, q = found[tag]
        col = a.column  # resolved by the central rules (aliases, joins)
        if col is None or col not in columns:
            raise _refuse("MAX, MIN and percentiles take one declared column, not an expression.")
        key = (func if q is None else "q", q, col)
        if key not in seen:
            seen[key] = len(aggs)
            aggs.append(dataclasses.replace(a, filter=None))
            name = named.get(i) or (
                f"{func}({col})" if q is None or func == "median" else f"{func}({float(q):g}, {col})"
            )
            parts.append(ExtremePart(func, col, q, len(aggs) - 1, name))
        index[i] = seen[key]
    if not parts:
        raise refuse("MAX, MIN and percentiles are answered in the select list or ORDER BY.")
    if len(parts) > MAX_PARTS or len({p.column for p in parts}) > MAX_COLUMNS:
        raise refuse(
            f"at most {MAX_PARTS} MAX/MIN/percentiles over {MAX_COLUMNS} columns in one statement (each "
            "takes a share of ε, each column one more histogram in the scan); split the statement."
        )
    if plan.selected and central_of:
        raise refuse(
            "over keys without a public domain (chosen by partition selection), MAX, MIN and "
            "percentiles are answered together but not beside COUNT/SUM/AVG; ask for those separately."
        )
    outputs = tuple(
        dataclasses.replace(o, index=index[o.index])
        if o.source == "aggregate"
        else dataclasses.replace(o, post=_remap(o.post, index))
        if o.source == "expr"
        else o
        for o in plan.outputs
    )
    order = tuple(
        dataclasses.replace(item, tree=_remap(item.tree, index)) if item.tree is not None else item
        for item in plan.order_by
    )
    having = None if plan.row_filter is None else _remap(plan.row_filter, index)
    full = dataclasses.replace(
        plan, aggregates=tuple(aggs), outputs=outputs, order_by=order, row_filter=having
    )
    central, central_index = None, list[int | None]([None] * len(aggs))
    if central_of:
        cells = build_plan(rest, config, params)
        labels = [a.label for a in cells.aggregates]
        for old, new in central_of.items():
            label = plan.aggregates[old].label
            if label not in labels:
                raise refuse(f"{label} beside MAX/MIN/percentiles could not be planned as cells.")
            central_index[new] = labels.index(label)
        if cells.cells != full.cells:
            raise refuse("the aggregates beside MAX/MIN/percentiles must be over the same groups.")
        keys = tuple(o for o in cells.outputs if o.source == "group")
        names = {central_index[o.index]: o.name for o in reversed(outputs) if o.source == "aggregate"}
        shown = tuple(
            Output(names.get(j) or a.label, "aggregate", j, a.type or "float")
            for j, a in enumerate(cells.aggregates)
        )  # each as the statement names it (its label where only an expression reads it)
        central = dataclasses.replace(cells, outputs=keys + shown, order_by=(), limit=None, offset=0)
    first = parts[0]
    return ExtremePlan(full, first.func, first.column, first.q, tuple(parts), central, tuple(central_index))


def _tag_of(a: Aggregate) -> int | None:
    """j of an extreme's stand-in aggregate (:func:`_tagged`), None for another aggregate."""
    f = a.filter
    if (
        isinstance(f, exp.EQ)
        and isinstance(f.this, exp.Literal)
        and f.this.is_string
        and f.this.this.startswith(TAG)
        and f.this == f.expression
    ):
        return int(f.this.this[len(TAG) :])
    return None


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


@dataclass(frozen=True)
class GridSql:
    """A column's public grid as the histogram scan reads it (:class:`mechanisms.extreme.ExtremeGrid`)."""

    lower: float
    step: float
    U: int
    integral_step: bool


def joint_sql(
    xp: ExtremePlan, grids: dict[str, GridSql], dialect: str, salt: str = "", floor: int | None = None
) -> str:
    """The one backend statement of a joint release: each column's histogram (the scan of
    :func:`histogram_sql`) and the central cells (:func:`rewriter.to_sql`), as one result
    tagged by ``part`` (−1: the cells; i: the histogram of ``xp.columns[i]``)::

        SELECT -1 AS part, k.., NULL AS v, NULL AS n, m.. FROM (<cells>) AS c(k.., m..)
        UNION ALL SELECT i, k.., v, n, NULL.. FROM (<histogram i>) AS h(k.., v, n) …

    Rows: (part, k.., v, n, m..). The cells come first, so each measure's type is the
    cells' (a NULL elsewhere takes it). Every part is bounded by the privacy unit as
    its own scan is. ``floor`` (keys chosen by partition selection; no cells): the first
    column's histogram also carries each key's distinct units and drops the keys below the
    floor (:func:`histogram_sql`), as one more column ``units`` (NULL on the other parts),
    which the selection reads; the other histograms are read for the keys it keeps."""
    keys = [f"k{i + 1}" for i in range(len(xp.plan.group_by))]
    measures = [] if xp.central is None else [f"m{j + 1}" for j in range(len(xp.central.measures))]
    subs: list[str] = []
    branches: list[str] = []
    nulls = ", ".join(["NULL"] * len(measures))
    pad = f", {nulls}" if nulls else ""
    if xp.central is not None:
        text = to_sql(xp.central, dialect, salt)
        subs.append(text)
        cols = ", ".join([*keys, *measures])
        sel = ", ".join(["CAST(-1 AS BIGINT) AS part", *[f"c.{k}" for k in keys]])
        ms = ", ".join(f"c.{m}" for m in measures)
        branches.append(
            f"SELECT {sel}, CAST(NULL AS BIGINT) AS v, CAST(NULL AS BIGINT) AS n{', ' + ms if ms else ''} "
            f"FROM ({text}) AS c({cols})"
        )
    for i, col in enumerate(xp.columns):
        g = grids[col]
        part = ExtremePlan(xp.plan, xp.func, col, xp.q)
        first = floor is not None and i == 0
        text = histogram_sql(
            part, g.lower, g.step, g.U, g.integral_step, dialect, salt, floor=floor if first else None
        )
        subs.append(text)
        cols = ", ".join([*keys, "v", "n", *(["units"] if first else [])])
        sel = ", ".join([f"CAST({i} AS BIGINT) AS part", *[f"h{i}.{k}" for k in keys]])
        units = "" if floor is None else f", h{i}.units" if first else ", CAST(NULL AS BIGINT) AS units"
        branches.append(f"SELECT {sel}, h{i}.v, h{i}.n{pad}{units} FROM ({text}) AS h{i}({cols})")
    sql = " UNION ALL ".join(branches)
    bound: dict[str, str] = {}
    for text in subs:
        p = getattr(text, "params", None)
        if isinstance(p, dict):
            bound.update(p)
    return params.bound(sql, bound) if bound else sql
