"""Date and timestamp values: ISO text to a value, a value to SQL. Below
:mod:`.scope` (which reads parameters and literals of time columns) and :mod:`.dates`
(the time rules)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from sqlglot import exp

from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import Refusal

INVALID_DATETIME = "22007"
SQL_TYPES = {"date": "DATE", "timestamp": "TIMESTAMP"}


def parse(text: object, typ: Literal["date", "timestamp"], what: str = "literal") -> dt.date:
    """An ISO date (``2025-01-31``) or timestamp (``2025-01-31 12:00[:00]``) as a value."""
    if isinstance(text, dt.datetime):
        return text if typ == "timestamp" else text.date()
    if isinstance(text, dt.date):
        return text if typ == "date" else dt.datetime(text.year, text.month, text.day)
    try:
        v = dt.datetime.fromisoformat(str(text).strip())
    except ValueError:
        raise Refusal(
            INVALID_DATETIME,
            f"{what} {text!r} is not a valid {typ}; write ISO '2025-01-31' or '2025-01-31 12:00:00'.",
            hint=None,
        ) from None
    if v.tzinfo is not None and v.utcoffset() == dt.timedelta(0):
        v = v.replace(tzinfo=None)  # 'Z' / '+00:00' (Grafana's $__timeFilter): UTC, the same instant
    if v.tzinfo is not None:
        raise Refusal(
            UNSUPPORTED,
            f"{what} {text!r} has a time zone; dpgate's timestamps have "
            "none (timestamp without time zone): write it in UTC without an offset.",
        )
    if typ == "date":
        if v.time() != dt.time():
            raise Refusal(INVALID_DATETIME, f"{what} {text!r} is not a date (it has a time).", hint=None)
        return v.date()
    return v


def iso(v: dt.date) -> str:
    return v.isoformat(sep=" ") if isinstance(v, dt.datetime) else v.isoformat()


def type_of(v: dt.date) -> Literal["date", "timestamp"]:
    return "timestamp" if isinstance(v, dt.datetime) else "date"


def node(v: dt.date) -> exp.Expression:
    """The literal as SQL: ``CAST('2025-01-31' AS DATE)``."""
    return exp.Cast(this=exp.Literal.string(iso(v)), to=exp.DataType.build(SQL_TYPES[type_of(v)]))
