"""Helpers every release kind shares (central, ladder, per-record, MAX/MIN): the budget
refusal, the detail of a charged failure, Describe's placeholder values and type OIDs, matching
backend rows to public cells, and display of numbers and backend SQL. Imports no kind."""

from __future__ import annotations

import datetime
from decimal import Decimal

import sqlglot

from rewriter.postprocess import has_window

from ..wire.api import SqlError

DUMMY = {
    "int": 0,
    "float": 0.0,
    "text": "",
    "bool": False,
    "date": "2000-01-01",
    "timestamp": "2000-01-01 00:00:00",
    "interval": "1 day",
    None: "0",
    "int[]": [0],
    "float[]": [0.0],
    "text[]": [""],
    "bool[]": [False],
}  # = ANY($n)
"""A placeholder value per parameter type: Describe plans a statement before its values exist."""
TYPE_OIDS = {
    "int": 20,
    "float": 701,
    "text": 25,
    "bool": 16,
    "date": 1082,
    "timestamp": 1114,
    "interval": 1186,
    None: 0,
    "int[]": 1016,
    "float[]": 1022,
    "text[]": 1009,
    "bool[]": 1000,
}
"""The Postgres type OID Describe reports for a parameter of each type (0: unknown)."""


def amount_word(tier) -> str:
    """What a tier's amounts are: ε, or ρ on a zCDP tier (``accounting = "zcdp"``)."""
    return "ρ" if getattr(tier, "accounting", "pure") == "zcdp" else "ε"


def budget_error(role, eps, remaining, tier) -> SqlError:
    """The 53400 refusal of a statement whose ε exceeds what is left of the tier's budget."""
    per = "in total" if tier.period == "never" else f"per {tier.period}"
    return SqlError(
        "53400",
        f"privacy budget exhausted for role {role}: this query costs {amount_word(tier)} {eps:g}, "
        f"{max(remaining, 0):g} of {tier.budget:g} {per} is left",
        hint="Repeating an earlier query is free; the budget resets at the start of the next period.",
    )


def scan_read(conn) -> bool:
    """Whether the statement's scan may have read rows: it started, and the backend did not
    refuse it while parsing or binding (charge what ran: such a statement is charged)."""
    return bool(conn.timing.get("started")) and not conn.timing.get("refused")


def detail_charged(conn, e: BaseException, tier, delta: float = 0.0) -> None:
    """Tell the client that the error it gets was charged (the scan had started); ``delta``:
    the statement's δ, charged with its ε."""
    if isinstance(e, SqlError) and scan_read(conn) and e.detail is None:
        what = f"{amount_word(tier)} {tier.amount:g}" + (f" and δ {delta:g} were" if delta else " was")
        e.detail = (
            f"the scan had started, so {what} charged with no answer; "
            "running the statement again charges again"
        )


def plain_number(v):
    """A backend number as a Python int or float (a Decimal from Postgres NUMERIC)."""
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def cell_key(v):
    """A group-key value as stored in a release (Decimal -> int/float, a date or timestamp ->
    ISO text, others as they are)."""
    if isinstance(v, Decimal):
        return plain_number(v)
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat(sep=" ") if isinstance(v, datetime.datetime) else v.isoformat()
    return v


_PLAIN = frozenset((int, str, float))  # values plain_number leaves as they are


def cell_of(row, n: int, cells: set) -> tuple | None:
    """The public cell (of ``cells``) a backend row's first ``n`` values name, or None for a
    row outside the public domain (an int key also matches a float domain value)."""
    if n == 1 and type(row[0]) in _PLAIN:  # one plain key: the usual case
        key = (row[0],)
    else:
        key = tuple(plain_number(v) for v in row[:n])
    if key in cells:
        return key
    alt = tuple(float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in key)
    return alt if alt in cells else None


def fmt(x: float) -> str:
    """A half-width or step for a NOTICE: 3 significant digits (4 from 1e5)."""
    return f"{x:.3g}" if abs(x) < 1e5 else f"{x:.4g}"


def pretty(sql: str, dialect: str) -> str:
    """Backend SQL laid out for EXPLAIN (as it is if sqlglot cannot)."""
    try:
        return sqlglot.transpile(sql, read=dialect, write=dialect, pretty=True)[0]
    except Exception:  # display only
        return sql


def explain_output_line(plan, o) -> str | None:
    """EXPLAIN's line for an output that releases nothing itself (a group key or an
    expression over released aggregates), or None for an aggregate's output."""
    if o.source == "group":
        g = plan.group_by[o.index]
        if g.domain is None:
            return f"  {o.name}: group key {g.column}, no public domain: keys chosen by partition selection"
        return f"  {o.name}: group key {g.column}, public domain of {len(g.domain)} value(s)"
    if o.source == "expr" and has_window(o.post):
        return (
            f"  {o.name}: a window function computed over the released rows, after HAVING and "
            "before ORDER BY / LIMIT (post-processing, no ε)"
        )
    if o.source == "expr":
        return f"  {o.name}: computed from the released aggregates (post-processing, no ε)"
    return None


AVG_NS = (100, 1_000, 10_000)  # rows in a cell at which EXPLAIN states AVG's half-width


def avg_half_widths(m) -> str:
    """AVG's 95% half-width before any data is seen: it shrinks as 1/n with the cell's row
    count n, so it is stated at n = 100, 1,000, 10,000, at the worst AVG value over the bounds
    (the mechanism's own ``half_width(0.95, n_hat=n)``; hourglass: w'·q/n, Kulesza et al. 2024 Lemma 1)."""
    parts = [f"±{m.half_width(0.95, n_hat=n):.4g} at n = {n:,}" for n in AVG_NS]
    return ", ".join(parts) + " rows in the cell (worst case over the bounds; ∝ 1/n)"


def unit_salt(gw, plan) -> str:
    """The key of a privacy unit's bounding hash for the current data version
    (:meth:`proxy.stores.ledger.Ledger.unit_salt`); "" for a plan without a unit."""
    if getattr(plan, "unit", None) is None:
        return ""
    return gw.ledger.unit_salt(gw.ledger.data_version())
