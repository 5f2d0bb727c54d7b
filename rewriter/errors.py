"""Refusals: every refused statement carries a SQLSTATE and a sentence saying
what is allowed instead (the proxy sends both in the ErrorResponse)."""

from __future__ import annotations

ALLOWED = (
    "Allowed: SELECT [group columns,] COUNT(*), COUNT(col), SUM(col), AVG(col) "
    "FROM a declared table [JOIN its public lookup tables or the tables of the same people] [WHERE row predicate] [GROUP BY columns with a declared "
    "domain [HAVING condition on aggregates]] [ORDER BY outputs or aggregates] [LIMIT n]."
)


class Refusal(Exception):
    """A statement dpgate will not run. ``sqlstate`` is the Postgres error code."""

    def __init__(self, sqlstate: str, message: str, hint: str | None = ALLOWED):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.hint = hint

    def __repr__(self) -> str:
        return f"Refusal({self.sqlstate!r}, {self.message!r})"


class ExtremeAggregate(Refusal):
    """MAX/MIN/percentiles met by the cells' rules: refused there. Such a statement is planned
    by :mod:`rewriter.extreme`, chosen from its parse (:func:`rewriter.planner.planner_of`,
    ``Route.planner``) before any rule runs; nobody catches this to reroute."""


# SQLSTATEs used by the rewriter.
INSUFFICIENT_PRIVILEGE = "42501"  # a shape that would leak rows (raw columns, joins, …)
FEATURE_NOT_SUPPORTED = "0A000"  # a DP-safe idea dpgate does not do yet (COUNT(DISTINCT) …)
SYNTAX_ERROR = "42601"
UNDEFINED_TABLE = "42P01"
UNDEFINED_COLUMN = "42703"
UNDEFINED_FUNCTION = "42883"
DATATYPE_MISMATCH = "42804"
GROUPING_ERROR = "42803"
INVALID_PARAMETER = "22023"
