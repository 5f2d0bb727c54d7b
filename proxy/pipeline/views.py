"""dpgate's own relations, readable with SQL: ``dpgate.budget``, ``dpgate.releases``
and (admins only) ``dpgate.coalition``.

A role sees its own rows; an admin role sees every role's. ``dpgate.coalition``
(multi-tier ladders, :func:`proxy.pipeline.multitier.coalition_rows`, plus one row per categorical
Subset column of a local table, :func:`proxy.pipeline.local_subset.subset_coalition_rows`) is the data
owner's view and is refused to other roles. The rows come from the
ledger (metadata only: never a released value or a true one) and are queried in a
private in-memory DuckDB, so any read-only SELECT over them works (WHERE, ORDER BY,
aggregates …) and nothing else is reachable from it.
"""
from __future__ import annotations

import re
import threading
from datetime import datetime, timedelta, timezone

import duckdb
import sqlglot
from sqlglot import exp

from rewriter.errors import Refusal

from .local_subset import subset_coalition_rows     # LDP Subset columns: loss per row
from .multitier import coalition_rows

_MENTION = re.compile(r"\bdpgate\s*\.\s*(budget|releases|coalition)\b", re.I)

BUDGET_COLUMNS = [("role", "VARCHAR"), ("tier", "VARCHAR"), ("epsilon_per_query", "DOUBLE"),
                  ("spent", "DOUBLE"), ("remaining", "DOUBLE"), ("budget", "DOUBLE"),
                  ("period", "VARCHAR"), ("resets_at", "VARCHAR")]
RELEASE_COLUMNS = [("role", "VARCHAR"), ("released_at", "VARCHAR"), ("statement", "VARCHAR"),
                   ("epsilon", "DOUBLE"), ("mechanism", "VARCHAR"), ("data_version", "BIGINT")]
_OIDS = {"VARCHAR": 25, "DOUBLE": 701, "BIGINT": 20, "INTEGER": 23, "BOOLEAN": 16, "HUGEINT": 1700}


def mentions_views(sql: str) -> bool:
    return bool(_MENTION.search(sql))


def next_reset(period: str, now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    if period == "never":
        return "never"
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        nxt = day + timedelta(days=1)
    elif period == "week":
        nxt = day + timedelta(days=7 - day.weekday())
    else:
        nxt = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
    return nxt.strftime("%Y-%m-%d %H:%M:%S+00")


class Views:
    def __init__(self, gateway):
        self.gw = gateway
        self._lock = threading.Lock()

    def _rows(self, role: str):
        cfg, led = self.gw.config, self.gw.ledger
        admin = cfg.roles[role].admin
        roles = list(cfg.roles) if admin else [role]
        budget = []
        for r in roles:
            tier = cfg.tiers[cfg.roles[r].tier]
            spent = led.spent(r, tier.period)
            budget.append((r, cfg.roles[r].tier, tier.epsilon, spent, max(tier.budget - spent, 0.0),
                           tier.budget, tier.period, next_reset(tier.period)))
        rel = []
        for d in led.releases(None if admin else role, limit=100_000):
            ts = datetime.fromtimestamp(d["created"], timezone.utc).strftime("%Y-%m-%d %H:%M:%S+00")
            rel.append((d["role"], ts, d["statement"], d["epsilon"], d["mechanism"], d["data_version"]))
        return budget, rel

    def execute(self, sql: str, role: str):
        """Run a read-only SELECT over the role's view rows → (columns, rows)."""
        try:
            tree = sqlglot.parse_one(sql, read="postgres")
        except sqlglot.errors.ParseError as e:
            raise Refusal("42601", f"syntax error: {e.errors[0]['description'] if e.errors else e}", hint=None) from None
        if not isinstance(tree, exp.Query) or any(
                isinstance(n, (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Command))
                for n in tree.walk()):
            raise Refusal("42501", "dpgate.budget, dpgate.releases and dpgate.coalition are read-only; "
                          "use SELECT", hint=None)
        for t in tree.find_all(exp.Table):
            if (t.db or "").lower() != "dpgate" or t.name.lower() not in ("budget", "releases", "coalition"):
                raise Refusal("42501", "a query on dpgate.budget / dpgate.releases / dpgate.coalition cannot "
                              "read other relations", hint=None)
        coalition = None
        if any(t.name.lower() == "coalition" for t in tree.find_all(exp.Table)):
            ccols, coalition = coalition_rows(self.gw, role)    # refuses non-admin roles (42501)
            coalition = list(coalition) + subset_coalition_rows(self.gw)
        for f in tree.find_all(exp.Anonymous):
            raise Refusal("42883", f"function {f.name} is not available here", hint=None)
        budget, rel = self._rows(role)
        con = duckdb.connect(":memory:")
        try:
            con.execute("CREATE SCHEMA dpgate")
            con.execute("CREATE TABLE dpgate.budget (" + ", ".join(f"{n} {t}" for n, t in BUDGET_COLUMNS) + ")")
            con.execute("CREATE TABLE dpgate.releases (" + ", ".join(f"{n} {t}" for n, t in RELEASE_COLUMNS) + ")")
            if budget:
                con.executemany("INSERT INTO dpgate.budget VALUES (?,?,?,?,?,?,?,?)", budget)
            if rel:
                con.executemany("INSERT INTO dpgate.releases VALUES (?,?,?,?,?,?)", rel)
            if coalition is not None:
                con.execute("CREATE TABLE dpgate.coalition (" + ", ".join(f"{n} {t}" for n, t in ccols) + ")")
                if coalition:
                    con.executemany("INSERT INTO dpgate.coalition VALUES (" + ",".join("?" * len(ccols)) + ")",
                                    coalition)
            con.execute("SET enable_external_access = false")
            try:
                cur = con.execute(tree.sql(dialect="duckdb"))
            except duckdb.Error as e:
                raise Refusal("42601", f"cannot run this query on dpgate's views: {str(e).splitlines()[0]}",
                              hint=None) from None
            rows = cur.fetchall()
            cols = [(d[0], _OIDS.get(str(d[1]).upper(), 25)) for d in cur.description]
        finally:
            con.close()
        rows = [tuple(float(v) if isinstance(v, __import__("decimal").Decimal) else v for v in r) for r in rows]
        cols = [(n, 701 if o == 1700 else o) for n, o in cols]
        return cols, rows
