"""SQL text of the per-record scans (Chen et al. 2025; per-record spec §1.1, §10.3, §11.3, §12.1-12.3),
written from PLAIN numbers: the budget function's constants, the level thresholds h_i and
the value-bucket edges. The proxy computes those numbers with :mod:`mechanisms.per_record`
(``PrivacyFunction``, ``Levels``, ``ValueBuckets``) and passes them here as plain data, so
the rewriter imports no mechanism code and the mechanisms write no SQL.

Exactness (per-record spec §11.3, §12.1): every SQL expression below performs the SAME IEEE-754
double operations, in the same order, as its numpy twin in :mod:`mechanisms.per_record`:

* :func:`privacy_sql` ⇔ ``PrivacyFunction.__call__`` (E(v) = clamp(α / g(max(|v|, v_cap))));
* :func:`level_sql` ⇔ ``Levels.level`` (``searchsorted(hi[:-1], e, side='left') + 1``: the
  first i with e <= h_i; compared with ``<=`` on exact literals, so identical on every
  double, boundaries included; no LOG2/FLOOR);
* :func:`bucket_sql` ⇔ ``ValueBuckets.bucket`` (b(v) = first j with v <= 2^j).

Literals are ``CAST('<repr>' AS DOUBLE PRECISION)`` so they round-trip exactly
(:func:`sql_double`). Plain SQL accepted by DuckDB and Postgres: CAST, ROUND, LEAST, GREATEST,
ABS, SQRT, LN, CASE. NULL inputs get eps_min through CASE (GREATEST/LEAST skip NULLs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "PrivacySql",
    "sql_double",
    "clamp_sql",
    "privacy_sql",
    "level_sql",
    "bucket_sql",
    "level_scan_sql",
    "max_values_sql",
]


@dataclass(frozen=True)
class PrivacySql:
    """The constants of a shortcut E(v) = clamp(alpha / g(max(|v|, v_cap)), eps_min, eps_max)
    (paper Eq. (1), §8; per-record spec §10.3): g(x) = x ("inverse"), sqrt(x) ("sqrt") or
    (ln(x) / log_c)^4 ("log"; log_c = ln(base), 1.0 for the natural log)."""

    kind: str
    alpha: float
    eps_min: float
    eps_max: float
    v_cap: float
    log_c: float = 1.0


def sql_double(x: float) -> str:
    """Exact SQL literal for a finite double (repr round-trips through strtod)."""
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"literal must be finite, got {x!r}")
    return f"CAST('{x!r}' AS DOUBLE PRECISION)"


def clamp_sql(expr: str, eps_min: float, eps_max: float) -> str:
    """Clamp a user-supplied E expression to [eps_min, eps_max]; NULL -> eps_min."""
    lo, hi = sql_double(eps_min), sql_double(eps_max)
    return (
        f"CASE WHEN ({expr}) IS NULL THEN {lo} "
        f"ELSE LEAST(GREATEST(CAST(({expr}) AS DOUBLE PRECISION), {lo}), {hi}) END"
    )


def _g_sql(f: PrivacySql, x: str) -> str:
    if f.kind == "inverse":
        return x
    if f.kind == "sqrt":
        return f"SQRT({x})"
    if f.kind != "log":
        raise ValueError(f"unknown budget function kind {f.kind!r}")
    t = f"LN({x})" if f.log_c == 1.0 else f"(LN({x}) / {sql_double(f.log_c)})"
    return f"{t} * {t} * {t} * {t}"


def privacy_sql(f: PrivacySql, col: str) -> str:
    """E(col) as a SQL scalar expression over ``col`` (a column or expression)."""
    x = f"GREATEST(ABS(CAST(({col}) AS DOUBLE PRECISION)), {sql_double(f.v_cap)})"
    core = (
        f"LEAST(GREATEST({sql_double(f.alpha)} / ({_g_sql(f, x)}), "
        f"{sql_double(f.eps_min)}), {sql_double(f.eps_max)})"
    )
    return f"CASE WHEN ({col}) IS NULL THEN {sql_double(f.eps_min)} ELSE {core} END"


def level_sql(e: str, hi: Sequence[float]) -> str:
    """lvl(e) for the level upper bounds ``hi`` = (h_1, …, h_L) (per-record spec §3.1: the first i
    with e <= h_i, L when none); ``e`` must be the clamped DOUBLE budget (a column alias)."""
    L = len(hi)
    if L <= 1:
        return "1"
    whens = " ".join(f"WHEN {e} <= {sql_double(h)} THEN {i}" for i, h in enumerate(hi[:-1], start=1))
    return f"CASE {whens} ELSE {L} END"


def bucket_sql(v: str, edges: Sequence[float]) -> str:
    """b(v) for the integer bucket edges 2^0 … 2^(B-1) (per-record spec §12.3): the first j with
    v <= edges[j], B when none."""
    if not edges:
        return "0"
    whens = " ".join(f"WHEN {v} <= {int(e)} THEN {j}" for j, e in enumerate(edges))
    return f"CASE {whens} ELSE {len(edges)} END"


def _lv_cte(
    source: str,
    col: str,
    f: PrivacySql,
    U: int,
    hi: Sequence[float],
    edges: Sequence[float] | None,
    where: str | None,
    keep_nulls: bool,
) -> str:
    conds = [f"({where})"] if where else []
    if not keep_nulls:
        conds.append(f"({col}) IS NOT NULL")
    w = f" WHERE {' AND '.join(conds)}" if conds else ""
    b = f", {bucket_sql('v', edges)} AS b" if edges is not None else ""
    return (
        f"WITH q AS (SELECT ROUND(CAST(({col}) AS DOUBLE PRECISION)) AS q FROM {source}{w}), "
        f"e AS (SELECT CAST(LEAST(GREATEST(q, 0), {int(U)}) AS BIGINT) AS v, {privacy_sql(f, 'q')} AS e FROM q), "
        f"lv AS (SELECT v, {level_sql('e', hi)} AS lvl{b} FROM e) "
    )


def level_scan_sql(
    source: str,
    col: str,
    f: PrivacySql,
    U: int,
    hi: Sequence[float],
    edges: Sequence[float] | None = None,
    with_sum: bool = False,
    where: str | None = None,
    keep_nulls: bool = False,
) -> str:
    """Reference shape of the ONE scan every per-record mechanism needs (per-record spec §12.2; the
    served statements use :func:`rewriter.per_record.scan_sql`, which adds keys and filters):

    * COUNT (PrDPCount), stage 1 of MAX: ``SELECT lvl, COUNT(*) … GROUP BY lvl``
    * ExtensionSum:                      ``SELECT lvl, COUNT(*), SUM(v) … GROUP BY lvl``
    * FrameworkSum:                      ``SELECT lvl, b, COUNT(*), SUM(v) … GROUP BY lvl, b``

    Per row q = ROUND(col), e = E(q), v = clamp(q, 0, U) (spec 1.1, 11.20).
    ``keep_nulls=True`` for COUNT(*) (NULL rows get eps_min); SUM/MAX/COUNT(col) drop them."""
    keys = "lvl, b" if edges is not None else "lvl"
    s = ", SUM(v) AS s" if with_sum or edges is not None else ""
    return (
        _lv_cte(source, col, f, U, hi, edges, where, keep_nulls)
        + f"SELECT {keys}, COUNT(*) AS cnt{s} FROM lv GROUP BY {keys}"
    )


def max_values_sql(
    source: str, col: str, f: PrivacySql, U: int, hi: Sequence[float], ell: int, where: str | None = None
) -> str:
    """MAX round 2 (per-record spec §12.4, after ``FrameworkMax.select_level``): the distinct values of
    D_ell with counts."""
    return (
        _lv_cte(source, col, f, U, hi, None, where, False)
        + f"SELECT v, COUNT(*) AS cnt FROM lv WHERE lvl >= {int(ell)} GROUP BY v"
    )
