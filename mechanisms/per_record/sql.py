"""Reference SQL shapes for the per-record mechanisms (spec 12.2-12.3).  Strings only;
the proxy's rewriter re-emits them through sqlglot.  Plain SQL accepted by DuckDB
and Postgres: CAST, ROUND, LEAST, GREATEST, ABS, SQRT, LN, CASE.

Per row:  q = ROUND(CAST(col AS DOUBLE PRECISION))    (integer quantization, spec 1.1)
          e = E(q)                                      (PrivacyFunction.sql, clamped; NULL -> eps_min)
          v = CAST(LEAST(GREATEST(q, 0), U) AS BIGINT)   (contribution in [0, U])
          lvl = Levels.level_sql(e), b = ValueBuckets.bucket_sql(v)
E is evaluated on q (not on v): values above U already get eps_min, and a negative q
keeps the budget E(|q|) of its magnitude while contributing 0 (spec 11.20 for the split).
"""

from __future__ import annotations

from typing import Optional

from .levels import Levels, ValueBuckets
from .privacy import PrivacyFunction

__all__ = ["level_scan_sql", "max_values_sql"]


def _lv_cte(source: str, col: str, pf: PrivacyFunction, levels: Levels,
            buckets: Optional[ValueBuckets], where: Optional[str], keep_nulls: bool) -> str:
    conds = [f"({where})"] if where else []
    if not keep_nulls:
        conds.append(f"({col}) IS NOT NULL")
    w = f" WHERE {' AND '.join(conds)}" if conds else ""
    b = f", {buckets.bucket_sql('v')} AS b" if buckets is not None else ""
    return (f"WITH q AS (SELECT ROUND(CAST(({col}) AS DOUBLE PRECISION)) AS q FROM {source}{w}), "
            f"e AS (SELECT CAST(LEAST(GREATEST(q, 0), {pf.U}) AS BIGINT) AS v, {pf.sql('q')} AS e FROM q), "
            f"lv AS (SELECT v, {levels.level_sql('e')} AS lvl{b} FROM e) ")


def level_scan_sql(source: str, col: str, pf: PrivacyFunction, levels: Levels,
                   buckets: Optional[ValueBuckets] = None, with_sum: bool = False,
                   where: Optional[str] = None, keep_nulls: bool = False) -> str:
    """The ONE scan every central mechanism needs:

    * COUNT (PrDPCount), stage 1 of MAX:  ``SELECT lvl, COUNT(*) ... GROUP BY lvl``
    * ExtensionSum:                       ``SELECT lvl, COUNT(*), SUM(v) ... GROUP BY lvl``
    * FrameworkSum (and everything else): ``SELECT lvl, b, COUNT(*), SUM(v) ... GROUP BY lvl, b``

    ``keep_nulls=True`` for COUNT(*) (NULL rows get eps_min); SUM/MAX/COUNT(col) drop them.
    """
    keys = "lvl, b" if buckets is not None else "lvl"
    s = ", SUM(v) AS s" if with_sum or buckets is not None else ""
    return (_lv_cte(source, col, pf, levels, buckets, where, keep_nulls)
            + f"SELECT {keys}, COUNT(*) AS cnt{s} FROM lv GROUP BY {keys}")


def max_values_sql(source: str, col: str, pf: PrivacyFunction, levels: Levels, ell: int,
                   where: Optional[str] = None) -> str:
    """MAX round 2 (after ``FrameworkMax.select_level``): distinct values of D_ell with counts."""
    return (_lv_cte(source, col, pf, levels, None, where, False)
            + f"SELECT v, COUNT(*) AS cnt FROM lv WHERE lvl >= {int(ell)} GROUP BY v")
