"""Plan rules and backend SQL for per-record DP tables (Chen et al. 2025).

A table with a ``privacy`` policy answers

    SELECT [group keys,] COUNT(*) | COUNT(col) | SUM(col) | MAX(col) | MIN(col) [, …]
    FROM t [WHERE row predicate] [GROUP BY keys with a public domain] [ORDER BY …] [LIMIT …]

through ONE backend scan grouped by the group keys and the record's privacy level
(and its log2 value bucket where the framework sum needs it); MAX/MIN add one
second round trip once each cell's level ℓ is known (per-record spec §12.2-12.4).
Several aggregates (``PrPlan.parts``, each at an equal share of ε) run their scans as one
tagged statement (:func:`parts_scan_sql`) and their MAX/MIN second rounds as one more
(:func:`parts_values_sql`).

Validation is the central rewriter's: the statement is planned by
:func:`rewriter.build_plan` with MAX/MIN read as SUM (same argument rules: a
declared numeric column with bounds), so WHERE, GROUP BY, ORDER BY, LIMIT and
parameters get exactly the central checks and the central canonical form.

The policy (``Table.privacy``) is compiled once by the proxy
(:mod:`proxy.pipeline.per_record_policy`, with :mod:`mechanisms.per_record`): a named
shortcut of the paper (``inverse`` α/v, ``sqrt`` α/√v, ``log`` α/ln(v)⁴ on one column) or a
SQL expression over declared columns, checked here (:func:`check_expression`: the
rewriter's total-expression rules plus ``CASE WHEN``) and clamped to [eps_min, eps_max]
(NULL → eps_min). The scans take the compiled policy as plain numbers
(:class:`PolicySql`; the SQL pieces are in :mod:`rewriter.per_record_sql`).

SQL text is generated here from validated pieces only: quoted declared names,
the rewriter's WHERE AST, and literals printed from config numbers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from config import Config, Table

from . import build_plan, param_types, predicate
from .args import understood
from .dialects import not_null_spelling
from .emit import from_postgres, text_dialect
from .errors import DATATYPE_MISMATCH, Refusal
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .per_record_sql import PrivacySql, bucket_sql, clamp_sql, level_sql, privacy_sql, sql_double
from .plan import Aggregate, GroupKey, Plan, source_relation
from .scope import Ctx, T
from .values import to_node

__all__ = [
    "PolicySql",
    "PrPlan",
    "build_pr_plan",
    "check_expression",
    "parts_scan_sql",
    "parts_values_sql",
    "pr_param_types",
    "scan_sql",
    "values_sql",
]

_FLOAT_GUARD = float(2**53)  # |x| beyond this (and NaN, ±inf) is treated as NULL

ALLOWED = (
    "Allowed on a per-record DP table: SELECT [group columns,] COUNT(*), COUNT(col), "
    "SUM(col), MAX(col), MIN(col) (several: the ε is split among them) FROM the table [WHERE row predicate] [GROUP BY columns "
    "with a declared domain] [ORDER BY outputs] [LIMIT n]."
)


@dataclass(frozen=True)
class PolicySql:
    """What the scans need of a compiled ``privacy`` policy, as plain numbers (the proxy
    compiles the policy with :mod:`mechanisms.per_record` and fills this in): E as a shortcut
    (``function``, on ``column``) or a validated expression (``expr``, clamped to
    [eps_min, eps_max]); the level upper bounds h_1..h_L; the value-bucket edges; U."""

    table: str
    column: str | None  # the shortcut's column
    function: PrivacySql | None  # shortcut E (bit-identical to the numpy E)
    expr: exp.Expression | None  # custom: the validated expression (quoted columns)
    eps_min: float
    eps_max: float
    level_hi: tuple[float, ...]  # h_1..h_L (per-record spec §3.1)
    bucket_edges: tuple[float, ...]  # 2^0..2^(B-1) (per-record spec §12.3)
    U: int


def check_expression(text: str, table_name: str, table: Table) -> exp.Expression:
    """A custom E: one SQL expression over declared columns, total (the WHERE rules:
    no division by a column, allow-listed functions only) plus ``CASE WHEN``; numeric."""
    try:
        parsed = sqlglot.parse_one(text, read="postgres")
    except (SqlglotError, ValueError) as e:
        raise Refusal("42601", f"the expression does not parse: {str(e).splitlines()[0]}") from None
    parsed = normalize_identifiers(parsed, dialect="postgres")
    if not isinstance(parsed, exp.Expression):  # every parsed expression node is an Expression
        raise Refusal("42601", "the expression must be a scalar expression")
    if isinstance(parsed, (exp.Select, exp.Query)) or parsed.find(exp.Select, exp.Subquery):
        raise Refusal("42601", "the expression must be a scalar expression, not a query")
    if parsed.find(exp.AggFunc, exp.Window):
        raise Refusal("42803", "the expression must be per row: no aggregates or window functions")
    ctx = Ctx(table_name, table, {table_name}, [])
    return _numeric(parsed, ctx).node


def _numeric(node: exp.Expression, ctx: Ctx) -> T:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Case):
        understood(node)
        if node.this is not None:
            raise Refusal(UNSUPPORTED, "use the searched form CASE WHEN condition THEN … END")
        ifs = []
        for branch in node.args.get("ifs") or []:
            understood(branch)
            cond = predicate.boolean(predicate.check(branch.this, ctx), ctx, "CASE WHEN").node
            ifs.append(exp.If(this=cond, true=_numeric(branch.args["true"], ctx).node))
        default = node.args.get("default")
        out = exp.Case(ifs=ifs, default=_numeric(default, ctx).node if default is not None else None)
        return T(exp.Paren(this=out), "float")
    t = ctx.settle(predicate.check(node, ctx), "float")
    if t.type not in ("int", "float"):
        raise Refusal(DATATYPE_MISMATCH, f"the expression must be numeric, not {t.type}")
    return t


# -- the statement ------------------------------------------------------------------

Func = Literal["count", "sum", "max", "min"]


@dataclass(frozen=True)
class PrPlan:
    """A validated per-record statement: the central plan (MAX/MIN planned as SUM)
    plus the aggregate actually asked for."""

    plan: Plan
    func: Func
    column: str | None  # None for COUNT(*)
    parts: tuple[
        tuple[Func, str | None], ...
    ] = ()  # several COUNT/SUM in one statement: (func, column) per plan aggregate

    @property
    def split(self) -> int:
        """How many releases share the tier's ε (each gets ε / split: sequential composition)."""
        return max(len(self.parts), 1)

    def part(self, i: int) -> PrPlan:
        """The i-th aggregate as a one-aggregate statement (same rows, keys and cells)."""
        func, col = self.parts[i]
        agg = self.plan.aggregates[i]
        sub = dataclasses.replace(self.plan, aggregates=(agg,))
        return PrPlan(sub, func, col)

    @property
    def label(self) -> str:
        return f"{self.func}({self.column or '*'})"

    def canonical(self) -> str:
        if self.parts:  # MAX(x), MIN(x) and SUM(x) read one plan aggregate each: name them
            labels = ",".join(f"{f}({c or '*'})" for f, c in self.parts)
            return f"per_record:{labels};{self.plan.canonical()}"
        return f"per_record:{self.label};{self.plan.canonical()}"

    @property
    def cells(self) -> list[tuple[Any, ...]]:
        return self.plan.cells


def _refuse(state: str, msg: str) -> Refusal:
    return Refusal(state, msg, hint=ALLOWED)


def substitute_extremes(expr: exp.Expression) -> tuple[exp.Expression, list[tuple[str, str | None]]]:
    """A copy with MAX/MIN read as SUM (unaliased select items keep their name), and the
    list of (func, column sql) of the aggregates in the select list."""
    expr = expr.copy()
    found: list[tuple[str, str | None]] = []
    select = expr.unnest() if isinstance(expr, (exp.Subquery, exp.Paren)) else expr
    if isinstance(select, exp.Select):
        for item in select.expressions:
            for agg in item.find_all(exp.AggFunc):
                arg = agg.this
                found.append(
                    (
                        agg.key,
                        None if isinstance(arg, exp.Star) or arg is None else arg.sql("postgres").lower(),
                    )
                )
        for item in list(select.expressions):
            if isinstance(item, (exp.Max, exp.Min)):
                item.replace(exp.alias_(item.copy(), item.key))
    for node in list(expr.find_all(exp.Max, exp.Min)):
        if node.this is None or any(v for k, v in node.args.items() if k != "this"):
            raise _refuse(UNSUPPORTED, f"{node.key.upper()} takes one declared column.")
        node.replace(exp.Sum(this=node.this.copy()))
    return expr, found


def build_pr_plan(expr: exp.Expression, config: Config, params: list[Any] | None = None) -> PrPlan:
    """Validate a statement on a per-record table (Refusal with a SQLSTATE otherwise)."""
    sub, found = substitute_extremes(expr)
    kinds = {f for f, _ in found}
    extreme: Literal["max", "min"] | None = "max" if "max" in kinds else "min" if "min" in kinds else None
    try:
        plan = build_plan(sub, config, params)
    except Refusal as r:
        if extreme:
            r.message = r.message.replace("SUM(", f"{extreme.upper()}(").replace(
                "SUM takes", f"{extreme.upper()} takes"
            )
        r.message = r.message.replace("SUM(col), AVG(col)", "SUM(col), MAX(col)")
        if r.hint and r.hint.startswith("Allowed:"):
            r.hint = ALLOWED
        raise
    table = config.tables[plan.table]
    if table.privacy is None:
        raise _refuse(UNSUPPORTED, f"table {plan.table} has no per-record policy")
    if any(g.expr is not None for g in plan.group_by):
        raise _refuse(
            UNSUPPORTED,
            f"derived group keys (CASE, bins, date parts) are answered on "
            f"central tables; on per-record table {plan.table} group by a declared column "
            "with a public domain.",
        )
    if plan.selection is not None:
        raise _refuse(
            UNSUPPORTED,
            "HAVING and top-c (ORDER BY aggregate LIMIT c) are not available "
            f"on per-record table {plan.table}; ask for the aggregate per group instead.",
        )
    if any(a.filter is not None for a in plan.aggregates):
        raise _refuse(
            UNSUPPORTED,
            f"aggregate FILTER (WHERE …) and conditional counts are not available on "
            f"per-record table {plan.table}; put the condition in WHERE.",
        )
    if plan.row_filter is not None or any(o.source == "expr" for o in plan.outputs):
        raise _refuse(
            UNSUPPORTED,
            f"expressions over aggregates and HAVING are not available on per-record "
            f"table {plan.table}; select the aggregate itself and compute in the client.",
        )
    if any(a.func == "avg" for a in plan.aggregates):
        raise _refuse(
            UNSUPPORTED,
            f"AVG is not available on per-record table {plan.table}; ask for "
            "SUM(col), COUNT(col) (one statement: the ε is split between them) and divide.",
        )
    if extreme and (len(set(found)) > 1 or len(plan.aggregates) != 1):
        return _with_extremes(expr, plan, table, found)
    if len(plan.aggregates) > 1:  # COUNT/SUM together: the tier's ε split among them
        parts: list[tuple[Func, str | None]] = []
        for a in plan.aggregates:
            if a.func not in ("count", "sum"):
                raise _refuse(
                    UNSUPPORTED,
                    f"{a.label.upper()} is not available on per-record table "
                    f"{plan.table}; ask for COUNT(*), COUNT(col) or SUM(col).",
                )
            if a.column is not None and a.column not in table.columns:
                raise _refuse(
                    UNSUPPORTED,
                    f"{a.label.upper()}: aggregates of expressions are answered on "
                    f"central tables; on per-record table {plan.table} aggregate a declared column.",
                )
            if a.func == "sum" and (a.column is None or _may_be_negative(table.columns[a.column].lower)):
                raise _refuse(
                    UNSUPPORTED,
                    f"SUM({a.column}) is not available on per-record table "
                    f"{plan.table}: {a.column} may be negative and the per-record mechanisms "
                    "take values in [0, value_bound].",
                )
            parts.append((a.func, a.column))
        return PrPlan(plan, parts[0][0], parts[0][1], tuple(parts))
    agg = plan.aggregates[0]
    func: Func
    if extreme:
        func = extreme
    elif agg.func == "count" or agg.func == "sum":
        func = agg.func
    else:
        raise _refuse(
            UNSUPPORTED,
            f"{agg.label.upper()} is not available on per-record table "
            f"{plan.table}; ask for COUNT(*), COUNT(col) or SUM(col).",
        )
    col = agg.column
    if col is not None and col not in table.columns:  # SUM(a + b): central tables only
        raise _refuse(
            UNSUPPORTED,
            f"{func.upper()} of an expression is answered on central tables; on "
            f"per-record table {plan.table} aggregate a declared column.",
        )
    if func in ("sum", "max", "min") and col is not None:
        spec = table.columns[col]
        if _may_be_negative(spec.lower):
            raise _refuse(
                UNSUPPORTED,
                f"{func.upper()}({col}) is not available on per-record "
                f"table {plan.table}: {col} may be negative (declared lower "
                f"{spec.lower:g}) and the per-record mechanisms take values in "
                "[0, value_bound].",
            )
    return PrPlan(plan, func, col)


def orders_by_aggregate(expr: exp.Expression) -> bool:
    """Whether the statement's ORDER BY spells an aggregate (not an output's position or name):
    with MAX/MIN read as SUM, ``ORDER BY MIN(x)`` would match a ``MAX(x)`` output."""
    order = expr.args.get("order") if isinstance(expr, exp.Select) else None
    return order is not None and order.find(exp.AggFunc, exp.WithinGroup) is not None


def _with_extremes(
    expr: exp.Expression, plan: Plan, table: Table, found: list[tuple[str, str | None]]
) -> PrPlan:
    """MAX/MIN beside other aggregates (or MAX and MIN together): one part per distinct
    (aggregate, column), each filling its own plan aggregate (MAX/MIN were planned as SUM, so
    ``MAX(x)``, ``MIN(x)`` and ``SUM(x)`` would otherwise share one); the select list's
    aggregates are read in order from ``found``."""
    outs = [o for o in plan.outputs if o.source == "aggregate"]
    if len(outs) != len(found):
        raise _refuse(
            UNSUPPORTED,
            f"on per-record table {plan.table}, each select-list item is a group column or one "
            "aggregate of a declared column.",
        )
    aggs: list[Aggregate] = []
    parts: list[tuple[Func, str | None]] = []
    seen: dict[tuple[str, str | None], int] = {}
    if orders_by_aggregate(expr) or any(item.tree is not None for item in plan.order_by):
        raise _refuse(
            UNSUPPORTED,
            "with MAX/MIN beside other aggregates, ORDER BY names an output by its position or name.",
        )
    outputs = []
    asked = iter(found)
    for o in plan.outputs:
        if o.source != "aggregate":
            outputs.append(o)
            continue
        func, _ = next(asked)
        a = plan.aggregates[o.index]
        if func not in ("count", "sum", "max", "min"):
            raise _refuse(
                UNSUPPORTED,
                f"{a.label.upper()} is not available on per-record table {plan.table}; ask for "
                "COUNT(*), COUNT(col), SUM(col), MAX(col) or MIN(col).",
            )
        if a.column is not None and a.column not in table.columns:
            raise _refuse(
                UNSUPPORTED,
                f"{func.upper()} of an expression is answered on central tables; on per-record "
                f"table {plan.table} aggregate a declared column.",
            )
        if func != "count" and (a.column is None or _may_be_negative(table.columns[a.column].lower)):
            raise _refuse(
                UNSUPPORTED,
                f"{func.upper()}({a.column}) is not available on per-record table {plan.table}: "
                f"{a.column} may be negative and the per-record mechanisms take values in "
                "[0, value_bound].",
            )
        key = (func, a.column)
        if key not in seen:
            seen[key] = len(aggs)
            aggs.append(a)
            parts.append((cast(Func, func), a.column))
        outputs.append(dataclasses.replace(o, index=seen[key]))
    full = dataclasses.replace(plan, aggregates=tuple(aggs), outputs=tuple(outputs))
    return PrPlan(full, parts[0][0], parts[0][1], tuple(parts))


def _may_be_negative(lower: float | str | None) -> bool:
    """Whether a column's declared lower bound admits negative values (a bound that is not a
    number does not bound the values the per-record mechanisms take: fail closed)."""
    return isinstance(lower, str) or (lower is not None and lower < 0)


def pr_param_types(expr: exp.Expression, config: Config) -> list[str | None]:
    """The $n types of a per-record statement (Describe before Bind)."""
    return param_types(substitute_extremes(expr)[0], config)


# -- backend SQL --------------------------------------------------------------------


def _q(name: str, dialect: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect=dialect)


def _lit(v: Any, type_: str, dialect: str) -> str:
    sql_t = {"int": "BIGINT", "float": "DOUBLE PRECISION", "text": "TEXT", "bool": "BOOLEAN"}[type_]
    return f"CAST({to_node(float(v) if type_ == 'float' else v).sql(dialect=dialect)} AS {sql_t})"


def _quantized(col: str, type_: str, dialect: str) -> str:
    """The column as an integral float8 (spec 1.1); for float columns NaN, ±inf and
    |x| > 2^53 become NULL (then E = eps_min and SUM/MAX skip the row)."""
    c = _q(col, dialect)
    if type_ == "int":
        return f"ROUND(CAST({c} AS DOUBLE PRECISION))"
    g = sql_double(_FLOAT_GUARD)
    return f"CASE WHEN {c} >= -{g} AND {c} <= {g} THEN ROUND(CAST({c} AS DOUBLE PRECISION)) END"


def _key_filter(g: GroupKey, k: str, dialect: str) -> str:
    if g.domain is None:  # build_pr_plan refuses a key without a public domain
        raise ValueError(f"GROUP BY key {g.column} has no declared domain")
    vals = sorted(g.domain, key=lambda v: (v is None, v))
    ints = g.type == "int" and all(isinstance(v, int) and not isinstance(v, bool) for v in vals)
    if ints and len(vals) > 8 and vals[-1] - vals[0] == len(vals) - 1:
        return f"{k} BETWEEN {vals[0]} AND {vals[-1]}"
    return f"{k} IN ({', '.join(_lit(v, g.type, dialect) for v in vals)})"


@dataclass(frozen=True)
class _Parts:
    ctes: str  # "WITH pr_s AS (…), pr_t AS (…), pr_u AS (…)"
    keys: list[str]  # k1…kn


def _parts(prp: PrPlan, pol: PolicySql, config: Config, dialect: str, buckets: bool) -> _Parts:
    """pr_s: the filtered rows (keys, quantized values, E inputs); pr_t: E and the
    contribution v in [0, U]; pr_u: the level (and value bucket) of every row."""
    plan = prp.plan
    types = {n: c.type for n, c in config.tables[plan.table].columns.items()}
    table = source_relation(plan.source).sql(dialect=dialect, identify=True)
    keys = [f"k{i + 1}" for i in range(len(plan.group_by))]
    sel = []
    for g, k in zip(plan.group_by, keys):
        c = _q(g.column, dialect)
        sel.append(f"CAST({c} AS DOUBLE PRECISION) AS {k}" if g.type == "float" else f"{c} AS {k}")
    if pol.function is not None:
        if pol.column is None:
            raise ValueError("a shortcut privacy function names its column")
        sel.append(f"{_quantized(pol.column, types[pol.column], dialect)} AS q")
    elif pol.expr is None:
        raise ValueError("a privacy policy has a shortcut function or an expression")
    else:
        e_sql = pol.expr.sql(dialect=dialect, identify=True)
        sel.append(f"{clamp_sql(e_sql, pol.eps_min, pol.eps_max)} AS e")
    value = prp.func != "count"
    if value:
        if prp.column is None:
            raise ValueError(f"{prp.func} names its column")
        sel.append(f"{_quantized(prp.column, types[prp.column], dialect)} AS x")
    conds = []
    if plan.where is not None:
        conds.append(f"({not_null_spelling(plan.where.copy()).sql(dialect=dialect, identify=True)})")
    for g in plan.group_by:
        conds.append(_key_filter(g, _q(g.column, dialect), dialect))
    if prp.func == "count" and prp.column is not None:
        conds.append(f"{_q(prp.column, dialect)} IS NOT NULL")
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    s = f"pr_s AS (SELECT {', '.join(sel)} FROM {table}{where})"
    kk = "".join(f"{k}, " for k in keys)
    e = privacy_sql(pol.function, "q") if pol.function is not None else "e"
    v = f", CAST(LEAST(GREATEST(x, 0), {int(pol.U)}) AS BIGINT) AS v" if value else ""
    t = f"pr_t AS (SELECT {kk}{e} AS e{v} FROM pr_s{' WHERE x IS NOT NULL' if value else ''})"
    b = f", {bucket_sql('v', pol.bucket_edges)} AS b" if buckets else ""
    u = f"pr_u AS (SELECT {kk}{level_sql('e', pol.level_hi)} AS lvl{b}{', v' if value else ''} FROM pr_t)"
    return _Parts(f"WITH {s}, {t}, {u}", keys)


def scan_sql(
    prp: PrPlan,
    pol: PolicySql,
    config: Config,
    dialect: str,
    *,
    buckets: bool = False,
    with_sum: bool = False,
) -> str:
    """The ONE scan: ``SELECT keys, lvl[, b], COUNT(*)[, SUM(v)] … GROUP BY keys, lvl[, b]``.

    Rows: (k_1…k_n, lvl, [b,] cnt[, sm]); missing (cell, level, bucket) combinations are
    zeros to the mechanisms (empty levels and empty cells are still noised)."""
    p = _parts(prp, pol, config, _text_dialect(dialect), buckets)
    grp = ", ".join([*p.keys, "lvl", *(["b"] if buckets else [])])
    agg = "COUNT(*) AS cnt" + (", SUM(v) AS sm" if with_sum or buckets else "")
    return from_postgres(f"{p.ctes} SELECT {grp}, {agg} FROM pr_u GROUP BY {grp}", dialect)


def parts_scan_sql(
    parts: list[tuple[PrPlan, bool, bool]], pol: PolicySql, config: Config, dialect: str
) -> str:
    """Several aggregates' level scans (each ``(part, buckets, with_sum)`` as :func:`scan_sql`
    writes it) as ONE backend statement, tagged::

        SELECT i AS part, k.., lvl, b, cnt, sm FROM (<scan i>) AS p_i(k.., lvl[, b], cnt[, sm])
        UNION ALL …

    Rows: (part, k_1…k_n, lvl, b, cnt, sm), b and sm NULL where the part has none. The parts
    with a sum come first, so sm takes their type (b is always cast)."""
    text = _text_dialect(dialect)
    order = sorted(range(len(parts)), key=lambda i: not (parts[i][1] or parts[i][2]))
    branches = []
    for i in order:
        prp, buckets, with_sum = parts[i]
        p = _parts(prp, pol, config, text, buckets)
        grp = ", ".join([*p.keys, "lvl", *(["b"] if buckets else [])])
        agg = "COUNT(*) AS cnt" + (", SUM(v) AS sm" if with_sum or buckets else "")
        inner = f"{p.ctes} SELECT {grp}, {agg} FROM pr_u GROUP BY {grp}"
        has_sum = with_sum or buckets
        cols = ", ".join([*p.keys, "lvl", *(["b"] if buckets else []), "cnt", *(["sm"] if has_sum else [])])
        a = f"p{i}"
        sel = ", ".join(
            [
                f"CAST({i} AS BIGINT) AS part",
                *[f"{a}.{k}" for k in p.keys],
                f"{a}.lvl",
                f"CAST({a}.b AS BIGINT) AS b" if buckets else "CAST(NULL AS BIGINT) AS b",
                f"{a}.cnt",
                f"{a}.sm" if has_sum else "NULL AS sm",
            ]
        )
        branches.append(f"SELECT {sel} FROM ({inner}) AS {a}({cols})")
    return from_postgres(" UNION ALL ".join(branches), dialect)


def parts_values_sql(
    parts: list[tuple[PrPlan, dict[tuple[Any, ...], int]]], pol: PolicySql, config: Config, dialect: str
) -> str:
    """MAX/MIN round 2 of several parts as ONE statement (each ``(part, ℓ per cell)`` as
    :func:`values_sql` writes it), tagged: rows (part, k_1…k_n, v, cnt)."""
    n = len(parts[0][0].plan.group_by)
    keys = [f"k{j + 1}" for j in range(n)]
    branches = []
    for i, (prp, ells) in enumerate(parts):
        inner = values_sql(prp, pol, config, _text_dialect(dialect), ells)  # spelled once, below
        cols = ", ".join([*keys, "v", "cnt"])
        a = f"w{i}"
        sel = ", ".join([f"CAST({i} AS BIGINT) AS part", *[f"{a}.{k}" for k in keys], f"{a}.v", f"{a}.cnt"])
        branches.append(f"SELECT {sel} FROM ({inner}) AS {a}({cols})")
    return from_postgres(" UNION ALL ".join(branches), dialect)


def _text_dialect(dialect: str) -> str:
    """The dialect the text is built in (the backend's ``text_dialect``: Spark's is Postgres
    text, transpiled by :func:`rewriter.emit.from_postgres`)."""
    return text_dialect(dialect)


def values_sql(
    prp: PrPlan, pol: PolicySql, config: Config, dialect: str, ells: dict[tuple[Any, ...], int]
) -> str:
    """MAX/MIN round 2, one query for all cells: the distinct values (with counts) of the
    records whose level is >= their cell's ℓ (Algorithm 2's D_ℓ).
    Rows: (k_1…k_n, v, cnt)."""
    target, dialect = dialect, _text_dialect(dialect)
    p = _parts(prp, pol, config, dialect, False)
    if not p.keys:
        (ell,) = ells.values()
        return from_postgres(
            f"{p.ctes} SELECT v, COUNT(*) AS cnt FROM pr_u WHERE lvl >= {int(ell)} GROUP BY v", target
        )
    groups = prp.plan.group_by
    rows = ", ".join(
        "(" + ", ".join([*(_lit(v, g.type, dialect) for v, g in zip(cell, groups)), str(int(ell))]) + ")"
        for cell, ell in ells.items()
    )
    cols = ", ".join([*p.keys, "ell"])
    on = " AND ".join(f"u.{k} = l.{k}" for k in p.keys)
    ks = ", ".join(f"u.{k}" for k in p.keys)
    return from_postgres(
        f"{p.ctes}, pr_ell ({cols}) AS (VALUES {rows}) "
        f"SELECT {ks}, u.v, COUNT(*) AS cnt FROM pr_u AS u JOIN pr_ell AS l ON {on} "
        f"WHERE u.lvl >= l.ell GROUP BY {ks}, u.v",
        target,
    )


def with_source(prp: PrPlan, source: str) -> PrPlan:
    """The same statement over another backend relation (tests)."""
    return dataclasses.replace(prp, plan=dataclasses.replace(prp.plan, source=source))
