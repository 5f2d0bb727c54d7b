"""The per-record ``privacy`` policy of a table, compiled (Chen et al. 2025; per-record spec §1.3, §3.1,
§10.3, §11.2-11.3): the budget function E (a shortcut of the paper as a
:class:`mechanisms.per_record.PrivacyFunction`, or a SQL expression validated by
:func:`rewriter.per_record.check_expression`), its levels and value buckets, and the checks
that make a config invalid (config loading: :func:`validate_config`).

The mechanisms' numbers reach the rewriter's scans as plain data (:attr:`Policy.sql`,
a :class:`rewriter.per_record.PolicySql`): the rewriter imports no mechanism code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from config import Config, Table
from mechanisms.per_record import (
    Levels,
    PrivacyFunction,
    ValueBuckets,
    inverse_function,
    log_function,
    sqrt_function,
)
from rewriter.errors import Refusal
from rewriter.per_record import PolicySql, check_expression
from rewriter.per_record_sql import PrivacySql

__all__ = [
    "Policy",
    "PolicyError",
    "compile_policy",
    "validate_policy",
    "validate_config",
    "privacy_numbers",
    "level_bounds",
    "bucket_edges",
    "SHORTCUTS",
    "MAX_LEVELS",
    "MAX_U",
]

SHORTCUTS = ("inverse", "sqrt", "log")
MAX_LEVELS = 128
MAX_U = 2**53  # values and E are computed in float8: integers stay exact below this


def privacy_numbers(pf: PrivacyFunction) -> PrivacySql:
    """The constants of a shortcut E, for :func:`rewriter.per_record_sql.privacy_sql`."""
    return PrivacySql(
        pf.kind, float(pf.alpha), float(pf.eps_min), float(pf.eps_max), float(pf.v_cap), float(pf.log_c)
    )


def level_bounds(levels: Levels) -> tuple:
    """h_1..h_L (exact doubles), for :func:`rewriter.per_record_sql.level_sql`."""
    return tuple(float(h) for h in levels.hi)


def bucket_edges(buckets: ValueBuckets) -> tuple:
    """2^0..2^(B-1), for :func:`rewriter.per_record_sql.bucket_sql`."""
    return tuple(int(e) for e in buckets.edges)


class PolicyError(ValueError):
    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


# -- the policy ---------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """A compiled ``privacy`` policy: how the backend computes E(r) and the levels."""

    table: str
    kind: str  # inverse | sqrt | log | expression
    column: str | None  # the shortcut's column
    pf: PrivacyFunction | None  # shortcut: numpy and SQL E (bit-identical)
    expr: exp.Expression | None  # custom: the validated expression (quoted columns)
    levels: Levels
    U: int
    beta: float
    sum_method: str
    text: str  # human-readable E, for NOTICE / EXPLAIN

    @property
    def monotone(self) -> bool:
        """Single-column, non-increasing in |v| (enables the sum extension)."""
        return self.pf is not None

    @property
    def buckets(self) -> ValueBuckets:
        return ValueBuckets(self.U)

    @property
    def sql(self) -> PolicySql:
        """The policy as the plain numbers the rewriter's scans take: E's
        constants, the level upper bounds h_i, the value-bucket edges."""
        fn = None if self.pf is None else privacy_numbers(self.pf)
        return PolicySql(
            self.table,
            self.column,
            fn,
            self.expr,
            self.levels.eps_min,
            self.levels.eps_max,
            level_bounds(self.levels),
            bucket_edges(self.buckets),
            self.U,
        )

    def describe(self) -> str:
        return (
            f"E(r) = {self.text}, clamped to [{self.levels.eps_min:g}, {self.levels.eps_max:g}], "
            f"{self.levels.L} levels, values in [0, {self.U}], β {self.beta:g}"
        )


def _u(value_bound: float) -> int:
    if not (math.isfinite(value_bound) and float(value_bound).is_integer()):
        raise PolicyError([f"value_bound {value_bound!r} must be a whole number"])
    U = int(value_bound)
    if not 1 <= U < MAX_U:
        raise PolicyError([f"value_bound must be between 1 and 2^53, got {U}"])
    return U


def compile_policy(table_name: str, table: Table) -> Policy:
    """The compiled policy, or :class:`PolicyError` listing every problem."""
    pol = table.privacy
    where = f"tables.{table_name}.privacy"
    if pol is None:
        raise PolicyError([f"{where}: table has no privacy policy"])
    problems: list[str] = []
    if table.mode != "central":
        problems.append(
            f"{where}: a per-record policy needs mode = 'central' (local tables are perturbed on the way in)"
        )
    try:
        U = _u(pol.value_bound)
    except PolicyError as e:
        problems += [f"{where}.{p}" for p in e.problems]
        U = None
    pf = node = None
    fn = pol.function.strip()
    if fn in SHORTCUTS:
        col = table.columns.get(pol.column or "")
        if col is None:
            problems.append(f"{where}.column: {pol.column!r} is not a declared column")
        elif col.type not in ("int", "float"):
            problems.append(
                f"{where}.column: {pol.column} is {col.type}; function = '{fn}' needs a numeric column"
            )
        if not (pol.alpha is not None and pol.alpha > 0 and math.isfinite(pol.alpha)):
            problems.append(f"{where}.alpha: must be a positive number")
        if not problems and U is not None:
            makers: dict[str, Callable[..., PrivacyFunction]] = {
                "inverse": inverse_function,
                "sqrt": sqrt_function,
                "log": log_function,
            }
            make = makers[fn]
            try:
                natural = make(pol.alpha, U, pol.eps_max)  # eps_min = E(U)
                pf = make(pol.alpha, U, pol.eps_max, eps_min=pol.eps_min)
            except ValueError as e:
                problems.append(f"{where}: {e}")
            else:
                if pol.eps_min > natural.eps_min:
                    problems.append(
                        f"{where}.eps_min: {pol.eps_min:g} is above E(value_bound) = "
                        f"{natural.eps_min:.6g}; records near value_bound would get a larger budget "
                        f"than the function gives them. Set eps_min <= {natural.eps_min:.6g}"
                    )
        text = {
            "inverse": f"{pol.alpha:g} / {pol.column}",
            "sqrt": f"{pol.alpha:g} / sqrt({pol.column})",
            "log": f"{pol.alpha:g} / ln({pol.column})^4",
        }[fn]
    else:
        if pol.sum_method == "extension":
            problems.append(
                f"{where}.sum_method: 'extension' needs a monotone single-column function "
                "(inverse, sqrt or log); a SQL expression is not known to be monotone. "
                "Use 'framework' or 'auto'"
            )
        try:
            node = check_expression(fn, table_name, table)
        except Refusal as r:
            problems.append(f"{where}.function: {r.message}")
        text = fn
    try:
        levels = Levels(pol.eps_min, pol.eps_max)
        if levels.L > MAX_LEVELS:
            problems.append(
                f"{where}: eps_max / eps_min spans {levels.L} doublings; at most {MAX_LEVELS} are supported"
            )
    except ValueError as e:
        problems.append(f"{where}: {e}")
    if problems:
        raise PolicyError(problems)
    assert U is not None  # an unusable value_bound is one of the problems
    return Policy(
        table_name,
        fn if fn in SHORTCUTS else "expression",
        pol.column if fn in SHORTCUTS else None,
        pf,
        node,
        levels,
        U,
        float(pol.beta),
        pol.sum_method,
        text,
    )


def validate_policy(table_name: str, table: Table) -> list[str]:
    """Problems with ``table``'s privacy policy (empty if none, or no policy)."""
    if table.privacy is None:
        return []
    try:
        compile_policy(table_name, table)
    except PolicyError as e:
        return e.problems
    return []


def validate_config(config: Config) -> list[str]:
    """Problems with every per-record policy of ``config`` (for config loading)."""
    return [p for name, t in config.tables.items() for p in validate_policy(name, t)]
