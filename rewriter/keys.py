"""Derived group keys with public domains.

A GROUP BY (or select) expression is a group key when the set of values it can take
follows from the config alone, never from data:

* ``CASE WHEN p THEN 'a' … [ELSE 'z'] END`` (also ``CASE x WHEN v THEN …``): its
  literals, plus NULL when there is no ELSE;
* a boolean expression (``age > 50``): {false, true}, plus NULL when a column it reads
  is nullable;
* arithmetic over ONE bounded numeric column — a histogram bin such as
  ``floor((x - a) / w) * w`` or ``x / 10 * 10``: on an integer column, the expression's
  value at every integer in [lower, upper]; on a float column, a bin of the form
  ``floor|ceil|trunc(g(x)) [* w] [+ b]`` with g built from + - * / by literals (monotone),
  every bin between the bounds' bins. Plus NULL when the column is nullable;
* ``width_bucket(x, lo, hi, n)``: 0 … n + 1 (computed in the scan, Postgres's rule);
* ``date_trunc(unit, c)`` and ``extract(part from c)`` of a date/timestamp column with
  declared bounds (:mod:`rewriter.dates`).

The key expression is computed inside the ONE scan (the checked, total expression of
:mod:`rewriter.predicate`); the domain join of :mod:`rewriter.emit` answers every cell,
empty ones too. Rows whose key falls outside the domain (values outside the declared
bounds) match no cell and are dropped, as out-of-domain values of a declared domain are.
The domain is computed by evaluating the same float8 operations the scan runs.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeGuard, cast

from sqlglot import exp

from config.models import Column, Table

from . import dates, datetimes, predicate
from .args import type_name, understood
from .arith import paren
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .errors import Refusal
from .plan import ColumnType, GroupKey, conjuncts
from .scope import Ctx, T
from .values import literal_value, natural_type, to_node

MAX_CELLS = 100_000
_BOOL = (
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.Between,
    exp.In,
    exp.Like,
    exp.ILike,
    exp.Is,
    exp.Not,
    exp.And,
    exp.Or,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
)
BIN_HINT = (
    "bin a bounded numeric column with floor((x - a) / w) * w, x / 10 * 10 (integers) or "
    "width_bucket(x, lo, hi, n); group by CASE WHEN … THEN 'label' … END; or by "
    "date_trunc('month', c) / extract(month from c) of a date column with declared bounds"
)


def _strip(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def derivable(node: exp.Expression) -> bool:
    """Whether ``node`` has the syntactic form of a derived key (worth trying)."""
    node = _strip(node)
    return (
        not isinstance(node, (exp.Column, exp.Literal, exp.AggFunc, exp.Star))
        and node.find(exp.AggFunc) is None
        and node.find(exp.Column) is not None
    )


def name_of(node: exp.Expression) -> str:
    """Postgres's output column name for an expression item."""
    node = _strip(node)
    if isinstance(node, exp.Case):
        return "case"
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        return "date_trunc"
    if isinstance(node, exp.Extract):
        return "extract"
    if isinstance(node, exp.Cast):
        return name_of(node.this) if not isinstance(_strip(node.this), exp.Column) else _strip(node.this).name
    if isinstance(node, exp.Func) and not isinstance(node, (exp.Binary, exp.Not)):
        return (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
    return "?column?"


def derive(node: exp.Expression, ctx: Ctx) -> GroupKey:
    """The group key of a derived expression, or a refusal saying what to write."""
    owner = node.find_ancestor(exp.Select)
    node = _strip(node).copy()  # the rules below may rewrite what they check
    if isinstance(node, exp.Substring):
        return _listed_text(node, owner, ctx)
    if isinstance(node, exp.Case):
        return _case(node, ctx)
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        return _date_trunc(node, ctx, None)
    if isinstance(node, exp.Extract):
        return _extract(node, ctx)
    part = _time_part(node, ctx)  # CAST(extract(…) AS integer) (Tableau), ± an integer
    if part is not None:  # (Metabase's day of week: extract(dow …) + 1)
        return part
    if isinstance(node, exp.TimeToStr):  # TO_CHAR(date_trunc('month', ts), 'YYYY-MM') (Looker)
        return _to_char(node, ctx)
    if (
        isinstance(node, exp.Cast)
        and isinstance(_strip(node.this), (exp.TimestampTrunc, exp.DateTrunc))
        and type_name(node.to) in ("DATE", "TIMESTAMP")
        and not node.to.expressions
    ):
        return _date_trunc(_strip(node.this), ctx, "date" if type_name(node.to) == "DATE" else "timestamp")
    if _day_of(node, ctx) is not None:  # CAST(ts AS date), ts::date, DATE(ts): the day
        day = exp.TimestampTrunc(this=_day_of(node, ctx), unit=exp.var("DAY"))
        return _date_trunc(day, ctx, "date")
    if isinstance(node, exp.WidthBucket):
        return _width_bucket(node, ctx)
    if _text_of_public(node, ctx):  # CAST(sex AS TEXT), store::text (Tableau, Grafana)
        return _text_key(node, ctx)
    epoch = _epoch_bin(node, ctx)  # floor(extract(epoch from ts)/w)*w (Grafana)
    if epoch is not None:
        return epoch
    if any(
        ctx.table.columns.get(c.name) is not None and ctx.table.columns[c.name].type in dates.TIME
        for c in node.find_all(exp.Column)
    ) and not isinstance(node, _BOOL):
        raise Refusal(
            DENIED,
            f"GROUP BY {node.sql('postgres')}: group a date/timestamp column by "
            "date_trunc('day' | 'week' | 'month' | 'quarter' | 'year', c), CAST(c AS date) "
            f"or extract({' | '.join(dates.EXTRACT_PARTS)} from c); their values follow "
            "from the column's bounds.",
        )
    t = predicate.check(node.copy(), ctx)
    if isinstance(node, _BOOL) or t.type == "bool":
        t = predicate.boolean(t, ctx, "GROUP BY")
        nullable = not isinstance(node, exp.Is) and _nullable(node, ctx)
        return _key(t, "bool", (False, True) + ((None,) if nullable else ()))
    if t.type in ("int", "float"):
        return _numeric(node, t, ctx)
    raise Refusal(DENIED, f"GROUP BY {node.sql('postgres')} has no public set of values; {BIN_HINT}.")


def _listed_text(node: exp.Substring, select: exp.Select | None, ctx: Ctx) -> GroupKey:
    """``GROUP BY substring(c_phone FROM 1 FOR 2)`` with ``WHERE substring(c_phone FROM 1 FOR
    2) IN ('13', '31', …)`` (TPC-H Q22): a row the WHERE keeps has one of the listed values,
    so the list — the query's own literals — is the key's public domain. Without such a
    conjunct the substring of a private text has no public set of values: refused."""
    t = predicate.check(node.copy(), ctx)
    text = _same_text(node)
    w = select.args.get("where") if select is not None else None
    for c in conjuncts(w.this) if w is not None else ():
        if (
            isinstance(c, exp.In)
            and not c.args.get("query")
            and _same_text(_strip(c.this)) == text
            and c.expressions
            and all(isinstance(v, exp.Literal) and v.is_string for v in c.expressions)
        ):
            return _key(t, "text", tuple(sorted({v.this for v in c.expressions})))
    raise Refusal(
        DENIED,
        f"GROUP BY {node.sql('postgres')} has no public set of values; list them in WHERE "
        f"({node.sql('postgres')} IN ('13', '31', …)) and each listed value is a group, or group by a "
        "column with a declared domain.",
    )


def _same_text(node: exp.Expression) -> str:
    """An expression's text with its columns unqualified and quoted (one spelling per meaning)."""
    bare = node.copy()
    for c in list(bare.find_all(exp.Column)):
        c.replace(exp.column(c.name, quoted=True))
    return bare.sql("postgres")


def _text_of_public(node: exp.Expression, ctx: Ctx) -> TypeGuard[exp.Cast]:
    if not (isinstance(node, exp.Cast) and not node.to.expressions and node.to.is_type("text", "varchar")):
        return False
    col = _strip(node.this)
    spec = ctx.table.columns.get(col.name) if isinstance(col, exp.Column) else None
    return spec is not None and spec.public_domain is not None and spec.type in ("int", "text", "bool")


def _pg_text(v: object) -> str | None:
    """Postgres's text output of a domain value (int, text, bool)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _text_key(node: exp.Cast, ctx: Ctx) -> GroupKey:
    """The text of a public-domain column: its domain's values as Postgres prints them."""
    understood(node)
    understood(node.to)
    col = _strip(node.this)
    if not isinstance(col, exp.Column):  # _text_of_public: a column with a public domain
        raise Refusal(UNSUPPORTED, "a cast to text as a group key takes a column with a public domain.")
    t = ctx.column(col)
    spec = ctx.table.columns[t.node.name]
    dom = tuple(dict.fromkeys(_pg_text(v) for v in spec.public_domain or ()))
    body = exp.Cast(this=t.node, to=exp.DataType.build("text"))
    return _key(T(body, "text"), "text", dom)


def _epoch_bin(node: exp.Expression, ctx: Ctx) -> GroupKey | None:
    """``floor(extract(epoch from c) / w) * w`` with the same integer w > 0 twice (Grafana's
    ``$__timeGroup(c, '1d')``, expanded): the bins of the column's declared bounds, in epoch
    seconds (UTC; a date is its midnight), every bin answered; None for any other shape."""
    if not isinstance(node, exp.Mul):
        return None
    a, w = _strip(node.this), _strip(node.expression)
    if isinstance(a, exp.Literal):
        a, w = w, a
    if not (
        isinstance(a, exp.Floor)
        and not a.args.get("decimals")
        and isinstance(w, exp.Literal)
        and w.is_int
        and int(w.this) > 0
    ):
        return None
    div = _strip(a.this)
    if not (
        isinstance(div, exp.Div)
        and isinstance(_strip(div.expression), exp.Literal)
        and _strip(div.expression).is_int
        and int(_strip(div.expression).this) == int(w.this)
    ):
        return None
    ex = _strip(div.this)
    if not (
        isinstance(ex, exp.Extract)
        and isinstance(ex.this, (exp.Var, exp.Identifier))
        and ex.this.name.lower() == "epoch"
    ):
        return None
    for n in (node, a, div):
        understood(n, frozenset({"this", "expression", "typed", "safe"}) if n is div else None)
    if any(v for k, v in ex.args.items() if k not in ("this", "expression")):
        return None
    t, spec, bounds = _time_column(ex.expression, ctx, "extract")
    step = int(w.this)
    lo, hi = (dt.datetime(v.year, v.month, v.day) if not isinstance(v, dt.datetime) else v for v in bounds)
    first, last = (int((v - EPOCH).total_seconds()) // step * step for v in (lo, hi))
    dom = tuple(range(first, last + 1, step)) + ((None,) if spec.nullable else ())
    dbl = exp.DataType.build("double")
    body = exp.Cast(
        this=exp.Mul(
            this=exp.Floor(
                this=exp.Div(
                    this=exp.Cast(this=exp.Extract(this=exp.var("EPOCH"), expression=t.node), to=dbl),
                    expression=exp.Cast(this=exp.Literal.number(step), to=dbl.copy()),
                )
            ),
            expression=exp.Literal.number(step),
        ),
        to=exp.DataType.build("bigint"),
    )
    return _key(T(body, "int"), "int", dom)


EPOCH = dt.datetime(1970, 1, 1)


def _key(t: T, typ: ColumnType, domain: tuple[Any, ...]) -> GroupKey:
    if len(domain) > MAX_CELLS:
        raise Refusal(
            "54000",
            f"this group key has {len(domain)} values; at most {MAX_CELLS} are allowed.",
            hint="Use wider bins.",
        )
    text = t.node.sql("postgres", normalize=True)
    return GroupKey(text, typ, tuple(domain), t.node)


def _domain_expr(g: GroupKey) -> tuple[tuple[Any, ...], exp.Expression]:
    """A derived key's domain and expression (every key :func:`_key` builds has both)."""
    if g.domain is None or g.expr is None:
        raise ValueError(f"{g.column} is not a derived group key")
    return g.domain, g.expr


def _nullable(node: exp.Expression, ctx: Ctx) -> bool:
    return any(
        ctx.table.columns[c.name].nullable for c in node.find_all(exp.Column) if c.name in ctx.table.columns
    )


# --------------------------------------------------------------------------- CASE


def _case(node: exp.Case, ctx: Ctx) -> GroupKey:
    subject = node.args.get("this")
    ifs: list[tuple[exp.Expression, Any]] = []
    for branch in node.args.get("ifs") or []:
        cond = branch.this if subject is None else exp.EQ(this=subject.copy(), expression=branch.this.copy())
        c = predicate.boolean(predicate.check(cond, ctx), ctx, "CASE WHEN")
        ifs.append((c.node, _case_value(branch.args.get("true"))))
    default = node.args.get("default")
    dv = _case_value(default) if default is not None else None
    values = [v for _, v in ifs] + [dv]
    kinds: set[ColumnType] = {k for k in (natural_type(v) for v in values if v is not None) if k is not None}
    typ: ColumnType
    if kinds <= {"int", "float"} and kinds:
        typ = "float" if "float" in kinds else "int"
    elif len(kinds) == 1:
        typ = kinds.pop()
    else:
        raise Refusal("42804", "CASE results must all be of one type (all text labels or all numbers).")
    if typ == "float":
        values = [None if v is None else float(v) for v in values]
        ifs = [(c, None if v is None else float(v)) for c, v in ifs]
        dv = None if dv is None else float(dv)
    built = exp.Case(
        ifs=[exp.If(this=paren(c), true=_typed(to_node(v), typ)) for c, v in ifs],
        default=_typed(to_node(dv), typ) if dv is not None else None,
    )
    domain = tuple(dict.fromkeys(values))  # NULL is a value when there is no ELSE
    return _key(T(built, typ), typ, domain)


def _typed(n: exp.Expression, typ: str) -> exp.Expression:
    """Text labels typed text (DuckDB and Postgres agree), numbers as they are."""
    return exp.Cast(this=n, to=exp.DataType.build("text")) if typ == "text" else n


def _case_value(node: exp.Expression | None) -> Any:
    ok, v = literal_value(node) if node is not None else (True, None)
    if not ok:
        raise Refusal(
            DENIED,
            "a CASE used as a group key returns literals only (THEN 'label' / "
            "THEN 1), so its set of values is public; its conditions may test columns.",
        )
    return v


# --------------------------------------------------------------------------- numeric bins


def _column(node: exp.Expression, ctx: Ctx) -> tuple[str, Column]:
    cols = {c.name for c in node.find_all(exp.Column)}
    if len(cols) != 1:
        raise Refusal(DENIED, f"a numeric group key reads exactly one column; {BIN_HINT}.")
    name = cols.pop()
    spec = ctx.table.columns[name]
    if spec.type not in ("int", "float") or not spec.bounded:
        raise Refusal(
            DENIED,
            f"GROUP BY an expression of {name} needs declared bounds: declare "
            f"lower and upper for column {name} in the config (the bins inside them "
            "are the public domain).",
        )
    return name, spec


class _Unknown(Exception):
    pass


def evaluate(node: exp.Expr, x: float, fixed: dict[exp.Expr, float] | None = None) -> float | None:
    """The float8 value the backend computes for a checked numeric node at column value x
    (``fixed``: nodes (by id) replaced by a value)."""
    if fixed and node in fixed:  # structural equality (sqlglot hashes the tree)
        return fixed[node]

    def ev(n: exp.Expr) -> float | None:
        return evaluate(n, x, fixed)

    if isinstance(node, exp.Paren):
        return ev(node.this)
    if isinstance(node, exp.Column):
        return float(x)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        return float(node.this.this)  # CAST('Infinity' AS DOUBLE) of the total arithmetic
    if isinstance(node, exp.Cast):
        return ev(node.this)
    if isinstance(node, exp.Literal) and not node.is_string:
        return float(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Neg):
        a = ev(node.this)
        return None if a is None else -a
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)):
        a, b = ev(node.this), ev(node.expression)
        if a is None or b is None:
            return None
        if isinstance(node, exp.Add):
            return a + b
        if isinstance(node, exp.Sub):
            return a - b
        if isinstance(node, exp.Mul):
            return a * b
        if isinstance(node, exp.Div):
            return a / b
        return math.fmod(a, b)
    if isinstance(node, (exp.Floor, exp.Ceil, exp.Abs)) or (
        isinstance(node, exp.Anonymous) and node.name.upper() in ("TRUNC", "SIGN")
    ):
        a = ev(node.this if not isinstance(node, exp.Anonymous) else node.expressions[0])
        if a is None:
            return None
        name = node.name.upper() if isinstance(node, exp.Anonymous) else node.key.upper()
        fns: dict[str, Callable[[float], float]] = {
            "FLOOR": math.floor,
            "CEIL": math.ceil,
            "ABS": abs,
            "TRUNC": math.trunc,
            "SIGN": lambda v: (v > 0) - (v < 0),
        }
        return float(fns[name](a))
    if isinstance(node, exp.Case):
        for branch in node.args.get("ifs") or []:
            if _truth(branch.this, x, fixed):
                return ev(branch.args["true"])
        d = node.args.get("default")
        return ev(d) if d is not None else None
    raise _Unknown(type(node).__name__)


def _truth(node: exp.Expression, x: float, fixed: dict[exp.Expr, float] | None) -> bool:
    node = _strip(node)
    if isinstance(node, exp.And):
        return _truth(node.this, x, fixed) and _truth(node.expression, x, fixed)
    if isinstance(node, exp.Or):
        return _truth(node.this, x, fixed) or _truth(node.expression, x, fixed)
    ops: dict[type[exp.Expr], Callable[[float, float], bool]] = {
        exp.GT: float.__gt__,
        exp.GTE: float.__ge__,
        exp.LT: float.__lt__,
        exp.LTE: float.__le__,
        exp.EQ: float.__eq__,
        exp.NEQ: float.__ne__,
    }
    if type(node) in ops:
        a, b = evaluate(node.this, x, fixed), evaluate(node.expression, x, fixed)
        return a is not None and b is not None and ops[type(node)](a, b)
    raise _Unknown(type(node).__name__)


_QUANT = (exp.Floor, exp.Ceil, exp.Round)
ENUMERATE = 10_000  # an integer column with at most this many values: evaluate at each
_LINEAR = (
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Neg,
    exp.Paren,
    exp.Cast,
    exp.Column,
    exp.Literal,
    exp.DataType,
    exp.Identifier,
    exp.Var,
)  # monotone in the column


def _quantiser(node: exp.Expression) -> exp.Expression | None:
    """The floor/ceil/trunc node holding the column, reached from the root through
    + - * by column-free operands only; None if there is none."""
    cur = _strip(node)
    while True:
        if (isinstance(cur, _QUANT) and not cur.args.get("decimals")) or (
            isinstance(cur, exp.Anonymous) and cur.name.upper() == "TRUNC"
        ):
            return cur
        if isinstance(cur, (exp.Add, exp.Sub, exp.Mul)):
            a, b = cur.this, cur.expression
            if a.find(exp.Column) is not None and b.find(exp.Column) is None:
                cur = _strip(a)
            elif (
                b.find(exp.Column) is not None and a.find(exp.Column) is None and not isinstance(cur, exp.Sub)
            ):
                cur = _strip(b)
            else:
                return None
        elif isinstance(cur, exp.Cast):
            cur = _strip(cur.this)
        else:
            return None


def _numeric(node: exp.Expression, t: T, ctx: Ctx) -> GroupKey:
    name, spec = _column(node, ctx)
    lo, hi = spec.lower, spec.upper
    if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):  # _column: bounded
        raise Refusal(DENIED, f"GROUP BY an expression of {name} needs numeric bounds; {BIN_HINT}.")
    typ: ColumnType = "int" if t.type == "int" else "float"
    conv: Callable[[float], float] = int if typ == "int" else float
    values: set[float] = set()
    too_many = Refusal(
        DENIED,
        f"GROUP BY {node.sql('postgres')} has too many values over "
        f"the bounds of {name} to list; bin it: floor((x - a) / w) * w, "
        "x / 10 * 10 on integers, or width_bucket(x, lo, hi, n).",
    )
    try:
        if spec.type == "int" and hi - lo <= ENUMERATE:
            for v in range(math.ceil(lo), math.floor(hi) + 1):
                r = evaluate(t.node, v)
                if r is not None and math.isfinite(r):
                    values.add(conv(r))
        else:
            q, checked = _quantiser(node), False  # found in the analyst's expression …
            if q is None and spec.type == "int":  # x / 1000 * 1000: the scan's TRUNC
                q, checked = _quantiser(t.node), True
            if q is None:
                raise too_many
            inner = q.this if not isinstance(q, exp.Anonymous) else q.expressions[0]
            if any(not isinstance(n, _LINEAR) for n in inner.walk()):
                raise too_many
            if not checked:  # … and evaluated as the scan computes it
                q = predicate.check(q.copy(), ctx).node
            k1, k2 = evaluate(q, lo), evaluate(q, hi)
            if k1 is None or k2 is None:
                raise _Unknown("NULL")
            kmin, kmax = int(min(k1, k2)), int(max(k1, k2))
            if kmax - kmin > MAX_CELLS:
                raise Refusal(
                    "54000",
                    f"this bin expression has {kmax - kmin + 1} bins over the "
                    f"bounds of {name}; at most {MAX_CELLS} are allowed.",
                    hint="Use wider bins.",
                )
            for k in range(kmin, kmax + 1):
                r = evaluate(t.node, lo, {q: float(k)})
                if r is not None and math.isfinite(r):
                    values.add(conv(r))
    except _Unknown:
        raise Refusal(
            DENIED,
            f"GROUP BY {node.sql('postgres')}: dpgate cannot derive the values "
            f"of this expression from the bounds of {name}; {BIN_HINT}.",
        ) from None
    domain = tuple(sorted(values)) + ((None,) if spec.nullable else ())
    return _key(t, typ, domain)


def _width_bucket(node: exp.WidthBucket, ctx: Ctx) -> GroupKey:
    """``width_bucket(x, lo, hi, n)`` with literal lo < hi and n: buckets 0 … n + 1, computed
    in the scan with float8 ``floor((x - lo) / (hi - lo) * n) + 1`` (Postgres's formula)."""
    args = [node.args.get(k) for k in ("min_value", "max_value", "num_buckets")]
    vals: list[tuple[bool, Any]] = [literal_value(a) if a is not None else (False, None) for a in args]
    if not all(ok and isinstance(v, (int, float)) and not isinstance(v, bool) for ok, v in vals):
        raise Refusal(
            UNSUPPORTED,
            "width_bucket(x, lo, hi, n) takes literal numbers lo < hi and an integer n between 1 and 100000.",
        )
    lo, hi, n = (v for _, v in vals)
    if not (lo < hi and isinstance(n, int) and 1 <= n <= MAX_CELLS):
        raise Refusal(
            UNSUPPORTED,
            "width_bucket(x, lo, hi, n) takes literal numbers lo < hi and an integer n between 1 and 100000.",
        )
    x = predicate.check(node.this, ctx)
    if x.type not in ("int", "float"):
        raise Refusal("42804", "width_bucket takes a numeric column.")
    name = {c.name for c in node.this.find_all(exp.Column)}
    if len(name) != 1:
        raise Refusal(DENIED, f"width_bucket reads exactly one column; {BIN_HINT}.")
    spec = ctx.table.columns[name.pop()]
    dbl = exp.DataType.build("double")
    xv = exp.Cast(this=x.node, to=dbl)
    lo_n, hi_n = (exp.Cast(this=exp.Literal.number(repr(float(v))), to=dbl.copy()) for v in (lo, hi))
    inner = exp.Floor(
        this=exp.Mul(
            this=exp.Paren(
                this=exp.Div(
                    this=exp.Paren(this=exp.Sub(this=xv.copy(), expression=lo_n.copy())),
                    expression=exp.Paren(this=exp.Sub(this=hi_n.copy(), expression=lo_n.copy())),
                )
            ),
            expression=exp.Literal.number(n),
        )
    )
    body = exp.Case(
        ifs=[
            exp.If(this=exp.LT(this=xv.copy(), expression=lo_n.copy()), true=exp.Literal.number(0)),
            exp.If(this=exp.GTE(this=xv.copy(), expression=hi_n.copy()), true=exp.Literal.number(n + 1)),
        ],
        default=exp.Cast(
            this=exp.Add(this=inner, expression=exp.Literal.number(1)), to=exp.DataType.build("bigint")
        ),
    )
    domain = tuple(range(0, n + 2)) + ((None,) if spec.nullable else ())
    return _key(T(body, "int"), "int", domain)


# --------------------------------------------------------------------------- dates


def _day_of(node: exp.Expression, ctx: Ctx) -> exp.Column | None:
    """The time column of ``CAST(c AS date)`` / ``DATE(c)``, else None."""
    arg = None
    if isinstance(node, exp.Cast) and type_name(node.to) == "DATE" and not node.to.expressions:
        arg = _strip(node.this)
    elif isinstance(node, (exp.Date, exp.Anonymous)) and (
        node.name.lower() == "date" if isinstance(node, exp.Anonymous) else True
    ):
        args = [node.this] if isinstance(node, exp.Date) else node.expressions
        arg = _strip(args[0]) if len(args) == 1 and args[0] is not None else None
    if (
        isinstance(arg, exp.Column)
        and ctx.table.columns.get(arg.name) is not None
        and ctx.table.columns[arg.name].type in dates.TIME
    ):
        return arg
    return None


def _time_column(node: exp.Expression, ctx: Ctx, what: str) -> tuple[T, Column, tuple[Any, ...]]:
    """(the checked column, its declaration, its declared [lower, upper] as date/datetime values)."""
    node = _strip(node)
    if isinstance(node, exp.Cast) and not node.to.expressions and type_name(node.to) == "TIMESTAMP":
        node = _strip(node.this)  # date_trunc('month', CAST(ts AS TIMESTAMP)) (Tableau)
    day = _day_of(node, ctx) if what == "date_trunc" else None
    if day is not None:
        node = day  # date_trunc('MONTH', CAST(ts AS DATE)) (Tableau): for units of a
        #                                day or more the day of ts truncates as ts does (hour: refused below)
    if not isinstance(node, exp.Column):
        raise Refusal(UNSUPPORTED, f"{what} takes a date or timestamp column.")
    t = ctx.column(node)
    spec = ctx.table.columns[node.name]
    if spec.type not in dates.TIME:
        raise Refusal("42883", f"{what} takes a date or timestamp column; {node.name} is {spec.type}.")
    bounds = spec.time_bounds
    if bounds is None:
        raise Refusal(
            DENIED,
            f"{what} of {node.name} needs declared bounds: declare lower and "
            f"upper (ISO dates) for column {node.name} in the config.",
        )
    return t, spec, bounds


def _trunc_unit(unit: exp.Expression | None, ctx: Ctx) -> str:
    """date_trunc's unit: a string literal, or a text parameter (``$1``, ``$1::text``) whose
    bound value is read before anything is planned (SQLAlchemy with server-side
    parameters sends ``date_trunc($1::VARCHAR, ts)``). While only the parameters' types
    are inferred (no values), the coarsest unit stands in: every unit gives the key the
    column's type."""
    node = unit
    while isinstance(node, exp.Cast) and node.to.is_type("varchar", "text") and not node.to.expressions:
        node = node.this
    if isinstance(node, exp.Parameter):
        t = ctx.settle(ctx.param(node), "text")
        if ctx.infer:  # inferring types: no value yet
            return dates.TRUNC_UNITS[-1]
        if not (t.is_literal and isinstance(t.value, str)):
            raise Refusal(
                UNSUPPORTED,
                f"date_trunc's unit parameter ${t.param or ''} must be text, "
                f"one of {', '.join(dates.TRUNC_UNITS)}.",
            )
        return t.value.lower()
    return (unit.name if unit is not None else "").lower()


def _date_trunc(node: exp.Expression, ctx: Ctx, cast_to: Literal["date", "timestamp"] | None) -> GroupKey:
    u = _trunc_unit(node.args.get("unit"), ctx)
    if u not in dates.TRUNC_UNITS:
        raise Refusal(
            UNSUPPORTED, f"date_trunc unit {u!r} is not supported; use {', '.join(dates.TRUNC_UNITS)}."
        )
    t, spec, (lo, hi) = _time_column(node.this, ctx, "date_trunc")
    if u == "hour" and (spec.type == "date" or _day_of(_strip(node.this), ctx) is not None):
        raise Refusal(
            UNSUPPORTED,
            "date_trunc('hour', …) of a date column is always midnight; use 'day' or a coarser unit.",
        )
    typ: Literal["date", "timestamp"] = cast_to or ("date" if spec.type == "date" else "timestamp")
    dom: tuple[dt.date | None, ...] = tuple(
        datetimes.parse(v, typ) for v in dates.trunc_domain(lo, hi, u, MAX_CELLS)
    )
    dom += (None,) if spec.nullable else ()
    sql_t = exp.DataType.build("date" if typ == "date" else "timestamp")
    col = (
        t.node
        if spec.type == "timestamp"
        else exp.Cast(  # Postgres would take a date as
            this=t.node, to=exp.DataType.build("timestamp")
        )
    )  # timestamptz (session time zone)
    body = exp.Cast(this=exp.Anonymous(this="DATE_TRUNC", expressions=[exp.Literal.string(u), col]), to=sql_t)
    return _key(T(body, typ), typ, dom)


_INT_TYPES = ("int", "bigint", "smallint")


def _time_part(node: exp.Expression, ctx: Ctx) -> GroupKey | None:
    """``CAST(extract(p FROM c) AS integer)`` (the same values) and ``part ± k`` / ``k ± part`` for an
    integer literal k (the domain shifted); None for any other shape."""
    node = _strip(node)
    if (
        isinstance(node, exp.Cast)
        and isinstance(_strip(node.this), exp.Extract)
        and not node.to.expressions
        and node.to.is_type(*_INT_TYPES)
    ):
        understood(node)
        understood(node.to)
        inner = _strip(node.this)
        return _extract(inner, ctx) if isinstance(inner, exp.Extract) else None
    if not isinstance(node, (exp.Add, exp.Sub)):
        return None
    a, b = _strip(node.this), _strip(node.expression)
    lit_first = isinstance(a, exp.Literal)
    lit, other = (a, b) if lit_first else (b, a)
    if not (isinstance(lit, exp.Literal) and lit.is_int) or not (
        isinstance(other, exp.Extract) or _time_part(other, ctx) is not None
    ):
        return None
    understood(node, frozenset({"this", "expression"}))
    g = _extract(other, ctx) if isinstance(other, exp.Extract) else _time_part(other, ctx)
    if g is None:  # checked above
        return None
    domain, expr = _domain_expr(g)
    k = int(lit.this)
    sub = isinstance(node, exp.Sub)
    f: Callable[[int], int]
    if sub and lit_first:
        f = lambda v: k - v  # noqa: E731
    else:
        f = (lambda v: v - k) if sub else (lambda v: v + k)
    dom = tuple(None if v is None else f(v) for v in domain)
    x, y = (
        (exp.Literal.number(k), exp.Paren(this=expr.copy()))
        if lit_first
        else (exp.Paren(this=expr.copy()), exp.Literal.number(k))
    )
    body = (exp.Sub if sub else exp.Add)(this=x, expression=y)
    return _key(T(body, "int"), "int", dom)


_TO_CHAR = ("%Y-%m", "%Y-%m-%d", "%Y")  # TO_CHAR formats of a truncated date: 'YYYY-MM', …


def _to_char(node: exp.TimeToStr, ctx: Ctx) -> GroupKey:
    """``TO_CHAR(date_trunc(u, c) | CAST(c AS date), 'YYYY-MM' | 'YYYY-MM-DD' | 'YYYY')``: the text
    of a truncated-date key, its domain the truncated domain so formatted."""
    fmt = node.args.get("format")
    inner = _strip(node.this)
    if not (isinstance(fmt, exp.Literal) and fmt.is_string and fmt.this in _TO_CHAR) or any(
        v for k, v in node.args.items() if k not in ("this", "format")
    ):
        raise Refusal(
            UNSUPPORTED,
            "TO_CHAR as a group key takes date_trunc('day' | 'week' | 'month' | "
            "'quarter' | 'year', c) or a date with the format 'YYYY-MM', 'YYYY-MM-DD' or 'YYYY'; or "
            "group by date_trunc itself.",
        )
    day = _day_of(inner, ctx)
    if isinstance(inner, (exp.TimestampTrunc, exp.DateTrunc)):
        g = _date_trunc(inner, ctx, None)
    elif day is not None:
        g = _date_trunc(exp.TimestampTrunc(this=day, unit=exp.var("DAY")), ctx, "date")
    else:
        raise Refusal(
            DENIED,
            "TO_CHAR as a group key takes date_trunc('day' | 'week' | 'month' | 'quarter' "
            "| 'year', c) (or a date) with the format 'YYYY-MM', 'YYYY-MM-DD' or 'YYYY', e.g. "
            "TO_CHAR(date_trunc('month', c), 'YYYY-MM'); its values then follow from the column's bounds.",
        )
    domain, expr = _domain_expr(g)
    dom = tuple(dict.fromkeys(None if v is None else v.strftime(fmt.this) for v in domain))
    body = exp.TimeToStr(this=expr.copy(), format=exp.Literal.string(fmt.this))
    return _key(T(body, "text"), "text", dom)


def _extract(node: exp.Extract, ctx: Ctx) -> GroupKey:
    part = node.this.name.lower() if isinstance(node.this, (exp.Var, exp.Identifier)) else ""
    if part not in dates.EXTRACT_PARTS:
        raise Refusal(
            UNSUPPORTED,
            f"extract({part or '?'} from …) is not supported as a group "
            f"key; use one of {', '.join(dates.EXTRACT_PARTS)}.",
        )
    t, spec, (lo, hi) = _time_column(node.expression, ctx, "extract")
    if part == "hour" and spec.type == "date":
        raise Refusal(UNSUPPORTED, "extract(hour from …) needs a timestamp column.")
    dom: tuple[int | None, ...] = dates.extract_domain(lo, hi, part) + ((None,) if spec.nullable else ())
    body = exp.Cast(
        this=exp.Extract(this=exp.var(part.upper()), expression=t.node), to=exp.DataType.build("bigint")
    )
    return _key(T(body, "int"), "int", dom)


def date_part(node: exp.Extract, ctx: Ctx) -> T:
    """``extract(part from c)`` in a row predicate: the checked expression of the group key
    of the same text (:func:`_extract`), so a WHERE on a date part reads the value its key
    has (:mod:`rewriter.keyfilter` restricts that key's cells by it)."""
    _, expr = _domain_expr(_extract(node, ctx))
    return T(expr.copy(), "int")


def distinct_to_group(select: exp.Select) -> None:
    """``SELECT DISTINCT a, b FROM t`` (no aggregates, no GROUP BY) is ``… GROUP BY a, b``."""
    d = select.args.get("distinct")
    if (
        d is None
        or d.args.get("on")
        or select.args.get("group") is not None
        or any(e.find(exp.AggFunc) for e in select.expressions)
    ):
        return
    select.set("distinct", None)
    select.set("group", exp.Group(expressions=[e.unalias().copy() for e in select.expressions]))


def refuse_single_rows(
    select: exp.Select, ctx: Ctx, relation: list[str], tables: Mapping[str, Table]
) -> None:
    """Refuse a GROUP BY whose rows would each be one person's, or one row of a private
    table (one order: one customer's): a column that is a private table's privacy unit, its
    key, or a reference to a private table's key (TPC-H Q3 groups by ``l_orderkey``, Q10
    and Q18 by ``c_custkey``). Such rows single out their people whatever the noise does
    — a released row per order or per customer reads that one person's data — so they
    are refused before any other rule, with what dpgate answers instead: groups of them
    (a column with a public domain) or their distribution (a per-unit histogram).
    ``relation``: the declared tables the statement reads (the base and its lookups)."""
    group = select.args.get("group")
    if group is None:
        return
    items = select.expressions
    for g in group.expressions:
        if isinstance(g, exp.Literal) and g.is_int and 1 <= int(g.this) <= len(items):
            g = items[int(g.this) - 1].unalias()
        while isinstance(g, exp.Paren):
            g = g.this
        if not isinstance(g, exp.Column) or g.name not in ctx.table.columns:
            continue
        name = ctx.column(g).node.name
        for t in relation:
            what = _singled_out(tables, t, name)
            if what is not None:
                raise Refusal(
                    UNSUPPORTED,
                    f"GROUP BY {name} returns one row per {what[0]}: its rows single out "
                    f"{what[1]}, each row one person's data. dpgate answers about groups of them "
                    "(GROUP BY a column with a public domain) or their distribution.",
                    hint="Group by public attributes (SELECT n_name, SUM(…) … GROUP BY n_name), or ask "
                    "the distribution of per-person values: SELECT n, COUNT(*) FROM (SELECT c_custkey, "
                    "COUNT(*) AS n FROM orders … GROUP BY c_custkey) t GROUP BY n.",
                )


def _singled_out(tables: Mapping[str, Table], name: str, col: str) -> tuple[str, str] | None:
    """(one row per what, whom it singles out) for ``name.col``, or None."""
    t = tables.get(name)
    if t is None or t.public or col not in t.columns:
        return None
    if t.privacy_unit == col:
        return f"person ({name}.{col}, the privacy unit)", _plural(name)
    rows = [name] if t.key == col and t.privacy_unit is not None else []
    rows += [r for c, r in t.references.items() if c == col]
    for r in rows:
        rt = tables.get(r)
        if rt is not None and not rt.public and rt.privacy_unit is not None:
            return f"row of {r} ({name}.{col} names one)", _plural(r)
    return None


def _plural(name: str) -> str:
    return name if name.endswith("s") else name + "s"


def key_tuples(where: exp.Expression, groups: tuple[GroupKey, ...], ctx: Ctx) -> exp.Expression | None:
    """The WHERE's conjuncts that read two or more plain group keys and nothing else (TPC-H
    Q7: ``(n1.n_name = 'FRANCE' AND n2.n_name = 'GERMANY') OR (n1.n_name = 'GERMANY' AND
    n2.n_name = 'FRANCE')``), as one condition to evaluate on each released cell's keys. The
    cells are the product of the keys' domains (each restricted on its own by
    :mod:`rewriter.keyfilter`); a cell whose key tuple fails such a conjunct holds no row the
    WHERE keeps, so the SQL never returns it, and dropping it reads public values only (the
    domains and the query's literals): post-processing. None when there is none."""
    plain = {g.column for g in groups if g.expr is None}
    kept: list[exp.Expression] = []
    for c in conjuncts(where):
        if c.find(exp.Select, exp.Subquery, exp.Exists, exp.AggFunc, exp.Parameter) is not None:
            continue
        cols = list(c.find_all(exp.Column))
        try:
            names = {ctx.column(col).node.name for col in cols}
        except Refusal:
            continue
        if len(names) >= 2 and names <= plain:
            kept.append(c.copy())
    out = kept[0] if kept else None
    for c in kept[1:]:
        out = cast(exp.Expression, exp.And(this=out, expression=c))
    return out
