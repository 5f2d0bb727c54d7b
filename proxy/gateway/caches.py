"""The gateway's caches by statement text: routes, plans and Describe's answers.

A client sends one statement text many times (Describe then Execute, a driver re-Parsing each
execution, dashboards repeating), so each step the text decides is kept by text in an
:class:`rewriter.lru.LRU` shared by the event loop and the planner threads. A refusal is never
kept (each statement raises it again), nor a plan that read dpgate's clock (``now()``).
"""

from __future__ import annotations

from rewriter.lru import LRU
from rewriter.plan import Plan
from rewriter.route import Route

ROUTES = 4096
"""Routes kept by text (a route is a few small fields)."""

PLANS = 256
"""Plans kept by text and parameters. Each holds its WHERE as a sqlglot tree, objects the cyclic
collector walks on every full collection, so the cache is kept small; a statement of a templated
shape (``rewriter.template``) is filled again from its template, far more cheaply than it is planned."""

DESCRIPTIONS = 2048
"""Describe's answers (parameter types and columns) kept by text and declared parameter types."""


def plan_key(sql: str, params: list | None) -> tuple:
    """A statement's key in the plan cache: its text and its parameters' types and values."""
    return (sql, tuple((type(p).__name__, tuple(p) if isinstance(p, list) else p) for p in params or ()))


class StatementCaches:
    """The three caches of one gateway."""

    def __init__(self) -> None:
        self.routes: LRU[str, Route] = LRU(ROUTES)
        self.plans: LRU[tuple, Plan] = LRU(PLANS)
        self.descriptions: LRU[tuple, tuple] = LRU(DESCRIPTIONS)

    def keep_plan(self, key: tuple, plan: Plan) -> Plan:
        """``plan`` kept for ``key``, unless it read dpgate's clock (never reused)."""
        if not plan.clock:  # now() / current_date
            self.plans.put(key, plan)
        return plan

    def description(self, key: tuple, make: tuple | None = None) -> tuple | None:
        """The description kept for ``key``, or None; with ``make``, ``make`` kept for it."""
        if make is not None:
            self.descriptions.put(key, make)
            return make
        return self.descriptions.get(key)
