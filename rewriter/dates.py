"""Dates and times: ``date`` / ``timestamp`` literals, the plan-time clock,
date arithmetic folded at plan time, and the public domains of ``date_trunc`` /
``extract`` group keys derived from a column's declared ``lower``/``upper``.

A time value in a plan is a :class:`datetime.date` or a naive :class:`datetime.datetime`
and is emitted as ``CAST('…' AS DATE | TIMESTAMP)`` (the same text in both dialects).
``now()``, ``current_timestamp`` and ``current_date`` are evaluated by dpgate when the
statement is planned (UTC) and enter the plan as literals: the backend's clock never
decides which rows a release covers, and such a plan is not cached by its text.
Arithmetic on a time *column* is refused (compare the column with a computed bound).
"""

from __future__ import annotations

import calendar
import datetime as dt
from typing import Literal

from sqlglot import exp

from .args import type_name
from .datetimes import INVALID_DATETIME, SQL_TYPES, iso, node, parse, type_of  # noqa: F401
from .errors import DATATYPE_MISMATCH, Refusal
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .plan import GroupKey, conjuncts
from .scope import Check, Ctx, T

TIME = ("date", "timestamp")
TRUNC_UNITS = ("hour", "day", "week", "month", "quarter", "year")
EXTRACT_PARTS = ("year", "quarter", "month", "day", "dow", "isodow", "doy", "hour")


def literal(v: dt.date) -> T:
    return T(node(v), type_of(v), value=v)


def _now(ctx: Ctx) -> dt.datetime:
    now: dt.datetime | None = ctx.__dict__.get("clock")  # one instant per statement; the plan depends on the
    if now is None:  # clock, so it is not cached by its text
        now = ctx.__dict__["clock"] = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    return now


def timeish(node: exp.Expression, ctx: Ctx) -> bool:
    """Syntactically a time expression (decides whether ``+``/``-`` is date arithmetic)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, (exp.CurrentDate, exp.CurrentTimestamp, exp.Interval)):
        return True
    if isinstance(node, exp.Cast):
        return type_name(node.to) in SQL_TYPES.values()
    if isinstance(node, exp.Anonymous) and node.name.lower() == "now":
        return True
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc, exp.StrToTime, exp.StrToDate)):
        return True
    if isinstance(node, exp.Column):
        col = ctx.table.columns.get(node.name)
        return col is not None and col.type in TIME
    if isinstance(node, (exp.Add, exp.Sub)):
        return timeish(node.this, ctx) or timeish(node.expression, ctx)
    return False


def rule(node: exp.Expression, ctx: Ctx, check: Check) -> T | None:
    """The time rule for ``node``, or None when it is not a time expression."""
    if isinstance(node, exp.CurrentDate):
        return literal(_now(ctx).date())
    if isinstance(node, exp.CurrentTimestamp) or (
        isinstance(node, exp.Anonymous) and node.name.lower() == "now" and not node.expressions
    ):
        return literal(_now(ctx))
    if isinstance(node, (exp.StrToTime, exp.StrToDate)) and not _column_inside(node):
        return _to_timestamp(node)  # TO_TIMESTAMP('…', 'YYYY-MM-DD HH24:MI:SS.US') (Superset)
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)) and not _column_inside(node):
        return _trunc_literal(node, ctx, check)  # date_trunc('month', now() - INTERVAL '12 month')
    if isinstance(node, exp.Cast) and type_name(node.to) in SQL_TYPES.values() and not node.to.expressions:
        typ: Literal["date", "timestamp"] = "date" if type_name(node.to) == "DATE" else "timestamp"
        a = check(node.this, ctx)
        if a.pending or (a.is_literal and a.type == "text"):
            return ctx.settle(a, typ)
        if a.is_literal and a.value is None:
            return T(exp.Null(), typ, value=None)
        if a.is_literal and a.type in TIME:
            return literal(parse(a.value, typ))
        if a.type in TIME:  # date <-> timestamp: total in both directions
            return T(exp.Cast(this=a.node, to=exp.DataType.build(SQL_TYPES[typ])), typ)
        raise Refusal(
            UNSUPPORTED,
            f"cast of {a.type} to {typ} is not supported; compare a date "
            "column with a date literal such as DATE '2025-01-31'.",
        )
    if isinstance(node, (exp.Add, exp.Sub)) and timeish(node, ctx):
        return _arith(node, ctx, check)
    if isinstance(node, exp.Interval):
        raise Refusal(
            UNSUPPORTED,
            "an interval is only allowed added to or subtracted from a "
            "date or timestamp literal, now() or current_date.",
        )
    return None


#: the TO_TIMESTAMP / TO_DATE formats BI tools send (Superset's Postgres spec), as sqlglot spells them
_STRPTIME = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d")


def _to_timestamp(node: exp.Expression) -> T:
    """``TO_TIMESTAMP('2025-01-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US')`` / ``TO_DATE('…',
    'YYYY-MM-DD')`` of a literal: evaluated by dpgate (a timestamp in UTC, the session's zone)."""
    text, fmt = node.this, node.args.get("format")
    if not (
        isinstance(text, exp.Literal)
        and text.is_string
        and isinstance(fmt, exp.Literal)
        and fmt.this in _STRPTIME
    ) or any(v for k, v in node.args.items() if k not in ("this", "format")):
        raise Refusal(
            UNSUPPORTED,
            "TO_TIMESTAMP / TO_DATE take a literal in the format 'YYYY-MM-DD "
            "HH24:MI:SS[.US]' or 'YYYY-MM-DD'; or write TIMESTAMP '2025-01-31 12:00:00'.",
        )
    try:
        v = dt.datetime.strptime(text.this, fmt.this)
    except ValueError:
        raise Refusal(
            INVALID_DATETIME, f"{text.this!r} does not match the format {fmt.this!r}.", hint=None
        ) from None
    return literal(v.date() if isinstance(node, exp.StrToDate) else v)


def _column_inside(node: exp.Expression) -> bool:
    return node.find(exp.Column) is not None


def _trunc_literal(node: exp.Expression, ctx: Ctx, check: Check) -> T:
    """``date_trunc(unit, e)`` of a plan-time value (Metabase's relative filters): folded by
    dpgate with Postgres's rules (:func:`trunc`: weeks start on Monday)."""
    unit = node.args.get("unit")
    u = (unit.name if unit is not None else "").lower()
    if u not in TRUNC_UNITS or any(v for k, v in node.args.items() if k not in ("this", "unit")):
        raise Refusal(
            UNSUPPORTED,
            f"date_trunc({u!r}, …) is not supported here; use one of "
            f"{', '.join(TRUNC_UNITS)} on a date or timestamp literal, now() or current_date.",
        )
    a = check(node.this, ctx)
    if not (a.is_literal and a.type in TIME):
        raise Refusal(
            UNSUPPORTED,
            "date_trunc in a filter takes a date/timestamp literal, now() or "
            "current_date (± an interval); compare the column with it, e.g. ts >= "
            "date_trunc('month', now()).",
        )
    if a.value is None:
        return T(exp.Null(), a.type, value=None)
    if u == "hour" and a.type == "date":
        return literal(dt.datetime(a.value.year, a.value.month, a.value.day))
    return literal(trunc(a.value, u))


_UNITS = {"hour": "hour", "day": "day", "week": "week", "month": "month", "mon": "month", "year": "year"}
_STEP_ORDER = {"year": 0, "month": 0, "week": 1, "day": 1, "hour": 2}  # Postgres: months, days, time
NULL_INTERVAL: list[tuple[int, str]] = []  # a NULL interval parameter: the result is NULL
INTERVAL_FORM = (
    "write an interval as INTERVAL '30 days' (numbers with units: hours, days, weeks, "
    "months, years; e.g. '1 year 2 months'), as '30 days'::interval or as $1::interval."
)


def _interval(node: exp.Interval) -> list[tuple[int, str]]:
    text = node.this.name if isinstance(node.this, exp.Literal) and node.this.is_string else None
    unit = node.args.get("unit")
    if text is None:
        raise Refusal(UNSUPPORTED, INTERVAL_FORM)
    return interval_steps(text + (f" {unit.name}" if unit is not None else ""), "interval")


def interval_steps(text: str, what: str) -> list[tuple[int, str]]:
    """An interval's text in Postgres's input form, read as the steps a date or timestamp is
    shifted by, in Postgres's order (months, then days, then time): pairs of an integer and
    a unit (hours, days, weeks, months/mons, years) and optionally a time ``[-]H:MM:SS`` of
    whole hours (what Postgres prints, and what clients send for a timedelta)."""
    words = text.split()
    steps: list[tuple[int, str]] = []
    i = 0
    while i < len(words):
        w = words[i]
        if ":" in w and i == len(words) - 1:  # the time part: whole hours only
            sign = -1 if w.startswith("-") else 1
            h, _, rest = w.lstrip("+-").partition(":")
            if not (h.isdigit() and rest.replace(":", "").replace(".", "").strip("0") == ""):
                raise Refusal(
                    UNSUPPORTED, f"{what} {text!r}: only whole hours are supported; " + INTERVAL_FORM
                )
            if int(h):
                steps.append((sign * int(h), "hour"))
            i += 1
            continue
        if i + 1 >= len(words) or not w.lstrip("+-").isdigit():
            raise Refusal(UNSUPPORTED, f"{what} {text!r} is not understood; " + INTERVAL_FORM)
        u = words[i + 1].lower().rstrip("s")
        if u not in _UNITS:
            raise Refusal(
                UNSUPPORTED,
                f"interval unit {words[i + 1]!r} is not supported; use hours, days, weeks, months or years.",
            )
        steps.append((int(w), _UNITS[u]))
        i += 2
    if not steps and not any(":" in w for w in words):
        raise Refusal(UNSUPPORTED, f"{what} {text!r} is not understood; " + INTERVAL_FORM)
    return sorted(steps, key=lambda s: _STEP_ORDER[s[1]])


def _interval_operand(rhs: exp.Expression, ctx: Ctx) -> list[tuple[int, str]] | None:
    """``rhs`` as interval steps when it is an interval: ``INTERVAL '…'``, ``'…'::interval``
    or ``$n::interval`` (the bound value: text in the same form; Describe types it interval);
    None when ``rhs`` is not an interval; [] for a parameter while only types are inferred."""
    if isinstance(rhs, exp.Interval):
        return _interval(rhs)
    if not (isinstance(rhs, exp.Cast) and type_name(rhs.to) == "INTERVAL"):
        return None
    inner = rhs.this
    if rhs.to.expressions or not (
        (isinstance(inner, exp.Literal) and inner.is_string) or isinstance(inner, exp.Parameter)
    ):
        raise Refusal(UNSUPPORTED, INTERVAL_FORM)
    if isinstance(inner, exp.Literal):
        return interval_steps(inner.this, "interval")
    t = ctx.param(inner)
    n, params = int(inner.this.this), ctx.params
    if params is None:  # only types are inferred: Describe reports interval
        if ctx.types.get(n) is None:
            ctx.types[n] = "interval"  # a parameter type, not a column's
        return []
    if n > len(params):
        ctx.settle(t, "text")  # the protocol error for a missing value
    v = params[n - 1]
    if v is None:
        return NULL_INTERVAL
    if not isinstance(v, str):
        raise Refusal(
            DATATYPE_MISMATCH, f"parameter ${n} is an interval: bind text such as '30 days'.", hint=None
        )
    return interval_steps(v, f"parameter ${n}")


def shift(v: dt.date, n: int, unit: str) -> dt.date:
    """``v + n unit`` as Postgres computes it (months clamp to the month's last day)."""
    if unit in ("month", "year"):
        months = v.month - 1 + n * (12 if unit == "year" else 1)
        y, m = v.year + months // 12, months % 12 + 1
        return v.replace(year=y, month=m, day=min(v.day, calendar.monthrange(y, m)[1]))
    delta = {"hour": dt.timedelta(hours=n), "day": dt.timedelta(days=n), "week": dt.timedelta(weeks=n)}[unit]
    if unit == "hour" and not isinstance(v, dt.datetime):
        v = dt.datetime(v.year, v.month, v.day)
    return v + delta


def _arith(node: exp.Add | exp.Sub, ctx: Ctx, check: Check) -> T:
    sign = 1 if isinstance(node, exp.Add) else -1
    a = check(node.this, ctx)
    rhs = node.expression
    while isinstance(rhs, exp.Paren):
        rhs = rhs.this
    steps = _interval_operand(rhs, ctx)
    if steps is None:
        b = ctx.settle(check(rhs, ctx), "int")
        if not (b.is_literal and isinstance(b.value, int) and not isinstance(b.value, bool)):
            raise Refusal(
                UNSUPPORTED,
                "date arithmetic takes an integer number of days or an "
                "INTERVAL literal, e.g. current_date - 7 or now() - INTERVAL '30 days'.",
            )
        if a.type == "timestamp":
            raise Refusal(DATATYPE_MISMATCH, "timestamp ± integer is not defined; write ± INTERVAL 'n days'.")
        steps = [(b.value, "day")]
    if ctx.infer and a.param is not None and a.type in TIME:  # $1::timestamp - …: typed, bound later
        return T(a.node, a.type, param=a.param)
    if not (a.is_literal and a.type in TIME):
        raise Refusal(
            UNSUPPORTED,
            "arithmetic on a date/timestamp column is not supported; "
            "compare the column with a bound computed from literals instead, e.g. "
            "ts >= now() - INTERVAL '30 days'.",
        )
    if a.value is None or steps is NULL_INTERVAL:
        return T(exp.Null(), a.type, value=None)
    v = a.value
    for n, unit in steps:
        v = shift(v, sign * n, unit)
    return literal(v)


# --------------------------------------------------------------------------- key domains


def _midnight(d: dt.date) -> dt.datetime:
    return dt.datetime(d.year, d.month, d.day)


def trunc(v: dt.date, unit: str) -> dt.date:
    """Postgres/DuckDB date_trunc of a date or timestamp (weeks start on Monday)."""
    d = v.date() if isinstance(v, dt.datetime) else v
    if unit == "hour":  # of a date: its midnight, a timestamp (as Postgres casts it)
        return v.replace(minute=0, second=0, microsecond=0) if isinstance(v, dt.datetime) else _midnight(v)
    if unit == "week":
        d = d - dt.timedelta(days=d.weekday())
    elif unit == "month":
        d = d.replace(day=1)
    elif unit == "quarter":
        d = d.replace(month=(d.month - 1) // 3 * 3 + 1, day=1)
    elif unit == "year":
        d = d.replace(month=1, day=1)
    return dt.datetime(d.year, d.month, d.day) if isinstance(v, dt.datetime) else d


_STEP = {
    "hour": (1, "hour"),
    "day": (1, "day"),
    "week": (1, "week"),
    "month": (1, "month"),
    "quarter": (3, "month"),
    "year": (1, "year"),
}


def trunc_domain(lo: dt.date, hi: dt.date, unit: str, limit: int) -> tuple[dt.date, ...]:
    """Every ``date_trunc(unit, v)`` for v in [lo, hi], in order (at most ``limit``)."""
    out: list[dt.date] = []
    v = trunc(lo, unit)
    n, u = _STEP[unit]
    while v <= hi:
        out.append(v)
        if len(out) > limit:
            break
        v = shift(v, n, u)
    return tuple(out)


def part(v: dt.date, name: str) -> int:
    """``extract(name from v)`` as an integer (Postgres: dow 0 = Sunday; isodow 1 = Monday)."""
    if name == "year":
        return v.year
    if name == "quarter":
        return (v.month - 1) // 3 + 1
    if name == "month":
        return v.month
    if name == "day":
        return v.day
    if name == "dow":
        return (v.weekday() + 1) % 7
    if name == "isodow":
        return v.weekday() + 1
    if name == "doy":
        return v.timetuple().tm_yday
    return v.hour if isinstance(v, dt.datetime) else 0  # a date's hour: its midnight's


_CYCLE = {"quarter": 4, "month": 12, "day": 31, "dow": 7, "isodow": 7, "doy": 366, "hour": 24}


def extract_domain(lo: dt.date, hi: dt.date, name: str) -> tuple[int, ...]:
    """Every ``extract(name from v)`` for v in [lo, hi]."""
    if name == "year":
        return tuple(range(lo.year, hi.year + 1))
    unit = "hour" if name == "hour" else "day"
    seen: set[int] = set()
    v, start = trunc(lo, unit), lo
    while v <= hi and len(seen) < _CYCLE[name]:
        seen.add(part(max(v, start), name))
        v = shift(v, 1, unit)
    return tuple(sorted(seen))


def restrict_years(groups: tuple[GroupKey, ...], where: exp.Expression | None) -> tuple[GroupKey, ...]:
    """``GROUP BY extract(year from c)`` with ``WHERE c BETWEEN date '1995-01-01' AND date
    '1996-12-31'`` (TPC-H Q7, Q8; also ``>=``, ``>``, ``<``, ``<=``, ``=`` of ``c`` with a
    date or timestamp literal, each a conjunct of the checked WHERE): the key's domain keeps
    the years that meet the range, not NULL (a comparison is never true for a NULL ``c``).
    A year the range misses holds no row the WHERE keeps, so its cell is one the SQL never
    returns; both inputs are public (the bounds' years and the query's literals). Other keys
    and conjuncts leave the domain as it is (:mod:`rewriter.keyfilter` reads the rest)."""
    if where is None:
        return groups
    out = []
    for g in groups:
        column = _year_of(g.expr) if g.domain is not None else None
        span = _span(where, column) if column is not None else None
        if span is None:
            out.append(g)
            continue
        lo, hi = span
        keep = tuple(
            y
            for y in g.domain or ()
            if isinstance(y, int) and (lo is None or lo.year <= y) and (hi is None or y <= hi.year)
        )
        out.append(GroupKey(g.column, g.type, keep, g.expr))
    return tuple(out)


def _year_of(expr: exp.Expression | None) -> str | None:
    """The column of a key ``CAST(EXTRACT(YEAR FROM c) AS BIGINT)`` (:func:`rewriter.keys`), else None."""
    if not isinstance(expr, exp.Cast) or not isinstance(expr.this, exp.Extract):
        return None
    ex = expr.this
    if not (isinstance(ex.this, exp.Var) and ex.name.upper() == "YEAR") or not isinstance(
        ex.expression, exp.Column
    ):
        return None
    return ex.expression.name


_BOUND: dict[type[exp.Expression], tuple[str, bool]] = {  # c op v: (which end v bounds, v included)
    exp.GTE: ("lo", True),
    exp.GT: ("lo", False),
    exp.LTE: ("hi", True),
    exp.LT: ("hi", False),
}


def _span(where: exp.Expression, column: str) -> tuple[dt.date | None, dt.date | None] | None:
    """The [earliest, latest] day a row's ``column`` can hold under ``where``'s conjuncts on
    it (None: no such conjunct). An end excluded (``c < date '1997-01-01'``) moves by a
    microsecond, which changes its year only at a year's first instant (as it must)."""
    lo: dt.date | None = None
    hi: dt.date | None = None
    found = False
    for c in conjuncts(where):
        ends: list[tuple[str, dt.date, bool]] = []
        if isinstance(c, exp.Between) and _is_col(c.this, column):
            a, b = _time_value(c.args.get("low")), _time_value(c.args.get("high"))
            if a is None or b is None:
                continue
            ends = [("lo", a, True), ("hi", b, True)]
        elif (
            isinstance(c, exp.EQ) and _is_col(c.this, column) and (v := _time_value(c.expression)) is not None
        ):
            ends = [("lo", v, True), ("hi", v, True)]
        elif type(c) in _BOUND and _is_col(c.this, column) and (v := _time_value(c.expression)) is not None:
            side, incl = _BOUND[type(c)]
            ends = [(side, v, incl)]
        for side, v, incl in ends:
            found = True
            if side == "hi" and not incl:
                v = _before(v)
            if side == "lo" and not incl:
                v = _after(v)
            if side == "lo":
                lo = v if lo is None or v > lo else lo
            else:
                hi = v if hi is None or v < hi else hi
    return (lo, hi) if found else None


def _before(v: dt.date) -> dt.date:
    if isinstance(v, dt.datetime):
        return v - dt.timedelta(microseconds=1)
    return v - dt.timedelta(days=1)


def _after(v: dt.date) -> dt.date:
    if isinstance(v, dt.datetime):
        return v + dt.timedelta(microseconds=1)
    return v + dt.timedelta(days=1)


def _is_col(node: exp.Expression | None, column: str) -> bool:
    return isinstance(node, exp.Column) and not node.table and node.name == column


def _time_value(node: exp.Expression | None) -> dt.date | None:
    """A checked ``CAST('…' AS DATE | TIMESTAMP)`` literal's value, else None."""
    if not isinstance(node, exp.Cast) or not isinstance(node.this, exp.Literal) or not node.this.is_string:
        return None
    typ = type_name(node.to).lower()
    if typ not in TIME:
        return None
    try:
        v = dt.datetime.fromisoformat(node.this.this)
    except ValueError:
        return None
    return v.date() if typ == "date" else v
