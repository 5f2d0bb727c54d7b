"""Benchmark: a BI dashboard over the demo's `purchases` (per customer, ε 1 per statement) with and
without answers derived from earlier releases — the ε it spends and the error of what it shows.

    python -m bench.dashboard [--quick] [--runs N]

Twenty tiles as a dashboard issues them, in order: the overview (KPIs, a store × month heatmap,
sales by store, revenue by month, the top items), then an analyst's clicks — drill-downs into
one store or two, a sort, a top-5, a ratio, the same chart refreshed in another spelling, a
peak-season filter on the timestamp (months summed over: a timestamp outside the bounds lies
in no month, so it is released fresh), the items of one store. Each run is a new data version
of one service per mode (nothing of an earlier run is used), played once with
``SET dpgate.derive = off`` and once with the default (``auto``: derived when its 95%
half-width is at most twice a fresh release's). Per tile: how the
derived run answered it (fresh, derived, repeat) and its relative error — Σ|answer − exact| /
Σ|exact| over the rows shown, first value column, against the exact SQL over the table —
in each mode, averaged over the runs. HEADLINE: ε with derivation ≤ 0.5× without; the
error of the derived tiles against the same tiles released fresh.
--quick (< 50 s): 2 runs (full: 8).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import sqlglot
from sqlglot import exp

from mechanisms import SeededSource

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' in-process service
from support.service import HELPER, Service, backend_rows, make_config

M = "date_trunc('month', ts)"
# (tile, the dashboard's SQL, the exact SQL its rows are checked against: keys then values, by key)
TILES: tuple[tuple[str, str, str], ...] = (
    (
        "KPIs",
        "SELECT COUNT(*) AS purchases, SUM(amount) AS revenue, AVG(amount) AS basket FROM purchases",
        "SELECT COUNT(*), SUM(amount), AVG(amount) FROM purchases",
    ),
    (
        "heatmap store × month",
        f"SELECT store, {M} AS month, COUNT(*) AS purchases, SUM(amount) AS revenue FROM purchases "
        "GROUP BY 1, 2 ORDER BY 1, 2",
        f"SELECT store, {M}, COUNT(*), SUM(amount) FROM purchases GROUP BY 1, 2",
    ),
    (
        "sales by store",
        "SELECT store, COUNT(*) AS purchases, SUM(amount) AS revenue, AVG(amount) AS basket "
        "FROM purchases GROUP BY store ORDER BY store",
        "SELECT store, COUNT(*), SUM(amount), AVG(amount) FROM purchases GROUP BY store",
    ),
    (
        "revenue by month",
        f"SELECT {M} AS month, COUNT(*) AS purchases, SUM(amount) AS revenue, AVG(amount) AS basket "
        "FROM purchases GROUP BY 1 ORDER BY 1",
        f"SELECT {M}, COUNT(*), SUM(amount), AVG(amount) FROM purchases GROUP BY 1",
    ),
    (
        "top items",
        "SELECT item, COUNT(*) AS purchases FROM purchases GROUP BY item ORDER BY 2 DESC LIMIT 10",
        "SELECT item, COUNT(*) FROM purchases GROUP BY item",
    ),
    (
        "top 5 stores by revenue",
        "SELECT store, SUM(amount) AS revenue FROM purchases GROUP BY store ORDER BY revenue DESC LIMIT 5",
        "SELECT store, SUM(amount) FROM purchases GROUP BY store",
    ),
    (
        "average basket by store",
        "SELECT store, AVG(amount) AS basket FROM purchases GROUP BY store ORDER BY store",
        "SELECT store, AVG(amount) FROM purchases GROUP BY store",
    ),
    (
        "drill-down: store 3 by month",
        f"SELECT {M} AS month, COUNT(*) AS purchases, SUM(amount) AS revenue FROM purchases "
        "WHERE store = 3 GROUP BY 1 ORDER BY 1",
        f"SELECT {M}, COUNT(*), SUM(amount) FROM purchases WHERE store = 3 GROUP BY 1",
    ),
    (
        "drill-down: store 7 by month",
        f"SELECT {M} AS month, COUNT(*) AS purchases, SUM(amount) AS revenue FROM purchases "
        "WHERE store = 7 GROUP BY 1 ORDER BY 1",
        f"SELECT {M}, COUNT(*), SUM(amount) FROM purchases WHERE store = 7 GROUP BY 1",
    ),
    (
        "stores 1 vs 2 by month",
        f"SELECT store, {M} AS month, COUNT(*) AS purchases FROM purchases WHERE store IN (1, 2) "
        "GROUP BY 1, 2 ORDER BY 1, 2",
        f"SELECT store, {M}, COUNT(*) FROM purchases WHERE store IN (1, 2) GROUP BY 1, 2",
    ),
    (
        "peak season by store",
        "SELECT store, COUNT(*) AS purchases, SUM(amount) AS revenue FROM purchases "
        "WHERE ts >= TIMESTAMP '2025-11-01' GROUP BY store ORDER BY store",
        "SELECT store, COUNT(*), SUM(amount) FROM purchases WHERE ts >= TIMESTAMP '2025-11-01' GROUP BY store",
    ),
    (
        "items over 1,000 purchases",
        "SELECT item, COUNT(*) AS purchases FROM purchases GROUP BY item HAVING COUNT(*) > 1000",
        "SELECT item, COUNT(*) FROM purchases GROUP BY item",
    ),
    (
        "items of store 3",
        "SELECT item, COUNT(*) AS purchases FROM purchases WHERE store = 3 GROUP BY item "
        "ORDER BY 2 DESC LIMIT 10",
        "SELECT item, COUNT(*) FROM purchases WHERE store = 3 GROUP BY item",
    ),
    (
        "monthly average basket",
        f"SELECT {M} AS month, AVG(amount) AS basket FROM purchases GROUP BY 1 ORDER BY 1",
        f"SELECT {M}, AVG(amount) FROM purchases GROUP BY 1",
    ),
    (
        "stores ranked by purchases",
        "SELECT store, COUNT(*) AS purchases FROM purchases GROUP BY store ORDER BY 2 DESC",
        "SELECT store, COUNT(*) FROM purchases GROUP BY store",
    ),
    (
        "store 3 vs store 7 revenue",
        "SELECT store, SUM(amount) AS revenue FROM purchases WHERE store IN (3, 7) GROUP BY store",
        "SELECT store, SUM(amount) FROM purchases WHERE store IN (3, 7) GROUP BY store",
    ),
    (
        "revenue by month (refreshed)",
        f"SELECT {M} AS m, AVG(amount) AS basket, SUM(amount) AS revenue, COUNT(*) AS purchases "
        "FROM purchases GROUP BY 1 ORDER BY 1",
        f"SELECT {M}, AVG(amount) FROM purchases GROUP BY 1",
    ),
    (
        "revenue per purchase by store",
        "SELECT store, SUM(amount) / COUNT(*) AS per_purchase FROM purchases GROUP BY store ORDER BY store",
        "SELECT store, SUM(amount) / COUNT(*) FROM purchases GROUP BY store",
    ),
    (
        "store 5 monthly purchases",
        f"SELECT {M} AS month, COUNT(*) AS purchases FROM purchases WHERE store = 5 GROUP BY 1 ORDER BY 1",
        f"SELECT {M}, COUNT(*) FROM purchases WHERE store = 5 GROUP BY 1",
    ),
    (
        "top 3 months by revenue",
        f"SELECT {M} AS month, SUM(amount) AS revenue FROM purchases GROUP BY 1 ORDER BY 2 DESC LIMIT 3",
        f"SELECT {M}, SUM(amount) FROM purchases GROUP BY 1",
    ),
)
ROLE = "other"  # the demo's analyst tier: ε 1 per statement, 50 a day


def _keys(sql: str) -> int:
    """How many leading columns of a tile's exact SQL are its keys (those without an aggregate)."""
    return sum(1 for e in sqlglot.parse_one(sql).expressions if e.find(exp.AggFunc) is None)


def _norm(v):
    if hasattr(v, "isoformat") and not isinstance(v, str):
        return v.isoformat()
    return v


def play(mode: str, runs: int, seed: int) -> list[list[dict]]:
    """The dashboard ``runs`` times on one service (a new data version each time: no release
    of an earlier run is used): per run, per tile, decision, ε, relative error."""
    state = Path(tempfile.mkdtemp(prefix="dashboard-"))
    tiers = {"default": {"epsilon": 1.0, "budget": 1000.0, "period": "day"}}
    svc = Service(
        make_config({"kind": "duckdb", "path": str(state / "demo.duckdb")}, tiers=tiers),
        state / "state",
        source=SeededSource(seed),
        people_rows=1000,
    ).start()
    out = []
    try:
        truths = [_truth(svc, exact) for _name, _sql, exact in TILES]
        for _ in range(runs):
            svc.gw.ledger.advance_data_version()
            out.append(_run(svc, mode, truths))
    finally:
        svc.close()
    return out


def _truth(svc, exact: str) -> tuple[int, dict]:
    k = _keys(exact)
    rows = backend_rows(svc, exact)
    return k, {tuple(_norm(v) for v in r[:k]): float(r[k]) for r in rows if r[k] is not None}


def _run(svc, mode: str, truths) -> list[dict]:
    out = []
    with psycopg.connect(svc.dsn(ROLE, application_name=HELPER), autocommit=True) as c:
        notes: list[str] = []
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        c.execute(f"SET dpgate.derive = {mode}")
        for (name, sql, _exact), (k, truth) in zip(TILES, truths):
            before = svc.gw.ledger.spent(ROLE, "day")
            notes.clear()
            rows = c.execute(sql).fetchall()
            spent = svc.gw.ledger.spent(ROLE, "day") - before
            note = notes[0] if notes else ""
            how = "derived" if "derived from earlier" in note else "repeat" if "repeat" in note else "fresh"
            num = den = 0.0
            for r in rows:
                t = truth.get(tuple(_norm(v) for v in r[:k]))
                if t is not None and r[k] is not None:
                    num += abs(float(r[k]) - t)
                    den += abs(t)
            out.append({"tile": name, "how": how, "eps": spent, "rel": num / den if den else 0.0})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=None)
    args = ap.parse_args(argv)
    runs = args.runs or (2 if args.quick else 8)
    t0 = time.time()
    played = {m: play(m, runs, 20261129 + i) for i, m in enumerate(("off", "auto"))}
    wall = time.time() - t0
    eps = {m: statistics.mean(sum(t["eps"] for t in run) for run in played[m]) for m in played}
    print(
        f"dashboard: {len(TILES)} tiles over purchases (per customer, ε 1 a statement), {runs} run(s) "
        f"per mode, a new data version each; relative error = Σ|answer − exact| / Σ|exact|, first value column\n"
    )
    print("| # | tile | with derivation | ε off → auto | rel. error, fresh (off) | rel. error, auto |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for i, (name, _sql, _exact) in enumerate(TILES):
        off = [run[i] for run in played["off"]]
        auto = [run[i] for run in played["auto"]]
        hows = sorted({t["how"] for t in auto})
        e_off, e_auto = statistics.mean(t["rel"] for t in off), statistics.mean(t["rel"] for t in auto)
        if hows == ["derived"] and all(t["how"] == "fresh" for t in off) and e_off > 0:
            ratios.append(e_auto / e_off)
        print(
            f"| {i + 1} | {name} | {'/'.join(hows)} | {statistics.mean(t['eps'] for t in off):g} → "
            f"{statistics.mean(t['eps'] for t in auto):g} | {e_off:.4f} | {e_auto:.4f} |"
        )
    n_derived = sum(1 for i in range(len(TILES)) if all(run[i]["how"] == "derived" for run in played["auto"]))
    print(
        f"\nε spent: without derivation {eps['off']:g}, with {eps['auto']:g} "
        f"({eps['auto'] / eps['off']:.2f}×); {n_derived} of {len(TILES)} tiles derived; "
        f"derived/fresh relative error over those tiles: median {statistics.median(ratios):.2f}×, "
        f"largest {max(ratios):.2f}× ({wall:.0f} s)"
        if ratios
        else f"\nε spent: without derivation {eps['off']:g}, with {eps['auto']:g}; no tile derived"
    )
    ok = eps["auto"] <= 0.5 * eps["off"]
    print(
        f"HEADLINE: dashboard ε with derivation {eps['auto']:g} vs {eps['off']:g} without "
        f"({eps['auto'] / eps['off']:.2f}×, goal ≤ 0.5×: {'met' if ok else 'NOT met'})"
        + (
            f"; derived tiles' error {statistics.median(ratios):.2f}× the fresh ones' (median)"
            if ratios
            else ""
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
