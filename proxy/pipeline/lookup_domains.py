"""The domains of group keys read from public lookup tables: the proxy asks the backend the
public query :mod:`rewriter.lookup_domains` built for them (public tables only: exact, free,
independent of the private rows) and restricts the plan's cells to its answer, before the
release kind is chosen, so every kind, EXPLAIN and Describe see the same cells. A query the
backend cannot answer restricts nothing (the declared domain: every cell is released, an
empty one as its noisy zero). Answers are kept per data version."""

from __future__ import annotations

import asyncio

from rewriter.lookup_domains import apply, to_sql
from rewriter.lru import LRU
from rewriter.plan import Plan

__all__ = ["LookupAnswers"]


class LookupAnswers:
    """The public queries' rows by (backend SQL, data version), LRU-bounded."""

    def __init__(self, size: int = 256) -> None:
        self._rows: LRU[tuple[str, int], tuple[tuple, ...]] = LRU(size)

    async def resolve(self, gw, plan: Plan) -> Plan:
        """``plan`` with its lookups' keys restricted (:func:`rewriter.lookup_domains.apply`)."""
        version = await gw.ledger_read(gw.ledger.data_version)
        answers: list[tuple[tuple, ...] | None] = []
        for look in plan.lookups:
            sql = to_sql(look, gw.backend.dialect)
            rows = self._rows.get((sql, version))
            if rows is None:
                try:
                    got = await gw.backend.fetch(sql, timeout_s=gw.statement_timeout)
                except asyncio.CancelledError:
                    raise
                except Exception:  # fail closed: the domain as declared
                    answers.append(None)
                    continue
                rows = tuple(tuple(r) for r in got)
                self._rows.put((sql, version), rows)
            answers.append(rows)
        return apply(plan, answers)
