"""zCDP with the discrete Gaussian against pure ε, per person, at the same (ε, δ) over a day.

    python -m bench.zcdp [--quick] [--scale S]

A day of 50 statements under the demo's analyst tier (ε 1 per statement, 50 a day) is
(50, 0)-DP per person; read at δ = 1e-6 it is also what a zCDP day of ρ_day gives, where
ρ_day is the largest ρ that converts to (50, 1e-6)-DP by Canonne, Kamath & Steinke 2020
Cor. 13 (δ = inf_α exp((α−1)(αρ−ε))/(α−1) (1 − 1/α)^α; tighter than Bun & Steinke 2016
Prop. 1.3's ε = ρ + 2 sqrt(ρ log(1/δ))). The zCDP statement costs ρ_day/50. Both sides
split a statement's cost equally over its releases (sequential composition; ρ adds, Bun &
Steinke 2016 Lemma 1.7).

Per release, on the SAME bounded scan's exact cells (one data version's keyed per-person
choice: ``rewriter.to_sql`` with one salt, ``rewriter.complete``), each tier releases through the
pipeline's release path — ``proxy.pipeline.central.mechanism_budget``,
``proxy.pipeline.release.noisy_answer``, ``statement_cost`` — and the error of the noise alone
is measured (the bounding bias is the same on both sides):

* pure ε (the demo analyst's tier): geometric COUNT and discrete-Laplace SUM at ε/k, k the L1
  bound of a person's contribution in rows, min(G, cells)·R per cell (group privacy);
* zCDP (``accounting = "zcdp"``, ρ_day/50 per statement): the exact discrete Gaussian
  (``mechanisms.discrete_gaussian``) at σ² = Δ₂²/(2ρ) with Δ₂ = sqrt(min(G, cells))·R rows per
  cell: a person moves at most R rows in each of at most min(G, cells) cells, so the L2 norm of
  their contribution is sqrt(min(G, cells))·R where its L1 norm is min(G, cells)·R.

The day is charged by the accountant (``mechanisms.accounting``: compose, fits): 50 statements
fit each tier's budget and read (50, 1e-6) on both.

Data: TPC-H from ``tpchgen-cli`` (SF 0.01 with --quick, 0.1 otherwise; ``bench/tpch.py``) with
the customer as the unit (lineitem through dpgate's foreign-key path, as ``bench.user_level``
declares it; ``max_rows_scope = "cell"``, G and R the 95th percentiles of the per-customer
distribution), and the demo's ``purchases`` (200,000 rows, ``proxy.demo``; its shipped
declarations: G = 10, R = 10 per cell). The HEADLINE: on every release where a person can reach
at least MANY_GROUPS cells (min(G, cells) >= 4), the zCDP RMSE is at most 0.5× the pure one.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np

import rewriter
from bench import tpch
from config import parse_config
from mechanisms import SeededSource
from mechanisms.accounting import Cost, compose, fits, zcdp_delta, zcdp_epsilon
from proxy.demo import PURCHASES_ROWS, demo_config_path, purchases_select
from proxy.pipeline.central import mechanism_budget
from proxy.pipeline.release import contributions_sq, noisy_answer, release_groups, releases_of, statement_cost
from rewriter.unit import factor

DAY_EPSILON = 50.0  # the demo analyst tier: ε 1 per statement, 50 per day
STATEMENTS = 50
DELTA = 1e-6
MANY_GROUPS = 4  # "many-cell, many-group": a person reaches at least this many cells
GOAL = 0.5  # zCDP RMSE ≤ GOAL × pure RMSE on those releases
DRAWS = 200  # noise draws per release and side (quick: 60)
SALT = "5a17c0de2cdb0001"  # the unit choice's key (lower-case hex): one data version
UNIT = "o_custkey"

SHIPMODES = ["AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK"]
TPCH_COLUMNS = {  # the TPC-H specification's public value ranges and domains
    "lineitem": {
        "l_orderkey": {"type": "int"},
        "l_quantity": {"type": "float", "lower": 0, "upper": 50},
        "l_extendedprice": {"type": "float", "lower": 0, "upper": 105000},
        "l_discount": {"type": "float", "lower": 0, "upper": 0.1},
        "l_returnflag": {"type": "text", "domain": ["A", "N", "R"]},
        "l_linestatus": {"type": "text", "domain": ["F", "O"]},
        "l_shipmode": {"type": "text", "domain": SHIPMODES},
        "l_shipdate": {"type": "date", "lower": "1992-01-01", "upper": "1998-12-31"},
    },
    "orders": {
        "o_orderkey": {"type": "int"},
        UNIT: {"type": "int"},
        "o_totalprice": {"type": "float", "lower": 0, "upper": 800000},
        "o_orderpriority": {
            "type": "text",
            "domain": ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"],
        },
    },
}
TPCH_TABLES = {
    "lineitem": {"privacy_unit": "orders." + UNIT, "references": {"l_orderkey": "orders"}},
    "orders": {"privacy_unit": UNIT, "key": "o_orderkey"},
}
LINEITEM_ROWS = """(SELECT o.o_custkey, l.l_returnflag, l.l_linestatus, l.l_shipmode
FROM lineitem l JOIN orders o ON l.l_orderkey = o.o_orderkey)"""  # each line's customer (bounds only)
TPCH_BOUNDS = {  # (rows with each row's customer, the GROUP BY whose cells G counts)
    "lineitem": (LINEITEM_ROWS, ["l_returnflag", "l_linestatus", "l_shipmode"]),
    "orders": ("orders", ["o_orderpriority"]),
}


@dataclass(frozen=True)
class Statement:
    data: str  # "tpch" or "purchases"
    name: str
    sql: str


STATEMENTS_RUN = (
    Statement(
        "tpch",
        "Q1 flags",
        "SELECT l_returnflag, l_linestatus, COUNT(*), SUM(l_quantity) FROM lineitem GROUP BY 1, 2",
    ),
    Statement(
        "tpch",
        "mode x flags",
        "SELECT l_shipmode, l_returnflag, l_linestatus, COUNT(*) FROM lineitem GROUP BY 1, 2, 3",
    ),
    Statement(
        "tpch",
        "O1 priority",
        "SELECT o_orderpriority, COUNT(*), SUM(o_totalprice) FROM orders GROUP BY 1",
    ),
    Statement(
        "tpch",
        "Q6' total",
        "SELECT SUM(l_extendedprice) FROM lineitem WHERE l_shipdate >= DATE '1994-01-01' "
        "AND l_shipdate < DATE '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24",
    ),
    Statement("purchases", "by store", "SELECT store, COUNT(*) FROM purchases GROUP BY store"),
    Statement(
        "purchases", "store count+sum", "SELECT store, COUNT(*), SUM(amount) FROM purchases GROUP BY store"
    ),
    Statement("purchases", "by item", "SELECT item, COUNT(*) FROM purchases GROUP BY item"),
    Statement("purchases", "total", "SELECT COUNT(*), SUM(amount) FROM purchases"),
)


# -- the guarantee ------------------------------------------------------------------------------
def rho_for(eps: float, delta: float) -> float:
    """The largest ρ (to a relative 1e-9, rounded down) whose conversion by Canonne, Kamath &
    Steinke 2020 Cor. 13 (``mechanisms.accounting.zcdp_delta``, the accountant's) is (ε, δ)-DP:
    bisection, as δ grows with ρ; Bun & Steinke 2016 Prop. 1.3's ρ is a lower end (Cor. 13 is
    never looser)."""
    lo = (math.sqrt(math.log(1 / delta) + eps) - math.sqrt(math.log(1 / delta))) ** 2
    hi = eps
    while hi - lo > 1e-9 * lo:
        mid = (lo + hi) / 2
        if zcdp_delta(mid, eps) <= delta:
            lo = mid
        else:
            hi = mid
    return lo


def statement_rho(rho_day: float) -> float:
    """ρ per statement: the largest float whose 50-fold composition is at most ρ_day."""
    r = rho_day / STATEMENTS
    while Fraction(r) * STATEMENTS > Fraction(rho_day):
        r = math.nextafter(r, 0.0)
    return r


# -- data and plans -----------------------------------------------------------------------------
def _rows(con, sql) -> list:
    named = getattr(sql, "params", None)
    return con.execute(sql, named).fetchall() if isinstance(named, dict) else con.execute(sql).fetchall()


def tpch_config(con, rho_day: float):
    """The customer as the unit, R per cell (``max_rows_scope = "cell"``), G and R the 95th
    percentiles of the data's per-customer distribution (``tpch.bounds``)."""
    tables = {}
    for t, cols in TPCH_COLUMNS.items():
        source, group = TPCH_BOUNDS[t]
        g, r = tpch.bounds(con, source, UNIT, group)
        tables[t] = {
            **TPCH_TABLES[t],
            "max_groups_per_unit": g,
            "max_rows_per_unit": r,
            "max_rows_scope": "cell",
            "columns": cols,
        }
    return _config(tables, rho_day)


def purchases_config(rho_day: float):
    """``purchases`` as the demo declares it (config/demo.toml)."""
    with open(demo_config_path(), "rb") as f:
        demo = tomllib.load(f)
    return _config({"purchases": demo["tables"]["purchases"]}, rho_day)


def tiers(rho_day: float) -> dict:
    """The two tiers compared: the demo analyst's pure ε 1 per statement, 50 a day, and a zCDP
    tier with the same (ε, δ) reading over the day."""
    return {
        "pure": {"epsilon": DAY_EPSILON / STATEMENTS, "budget": DAY_EPSILON, "period": "day"},
        "zcdp": {
            "accounting": "zcdp",
            "rho": statement_rho(rho_day),
            "budget": rho_day,
            "period": "day",
            "conversion_delta": DELTA,
        },
    }


def _config(tables: dict, rho_day: float):
    return parse_config(
        {
            "tiers": tiers(rho_day),
            "roles": {"p": {"tier": "pure"}, "z": {"tier": "zcdp"}},
            "server": {"auth": "trust"},
            "tables": tables,
        }
    )


def exact_columns(plan, cells) -> list[np.ndarray]:
    """Per aggregate, the bounded scan's exact value of every cell (float)."""
    k = len(plan.group_by)
    out = []
    for a in plan.aggregates:
        j = a.measures[0]
        out.append(np.array([float(row[k + j] or 0) for row in cells], dtype=np.float64))
    return out


def measure(plan, cells, cfg, draws: int, seed: int) -> list[dict]:
    """Per aggregate of ``plan``: the noise's RMSE per cell over ``draws`` releases and the 95%
    half-width, on each tier, through the pipeline's release path on the same exact cells:
    ``mechanism_budget`` (the tier's ε over the unit's k, or its ρ for the whole unit),
    ``noisy_answer`` (each release's mechanism on every cell) and ``statement_cost`` (what the
    statement is charged, from the mechanisms' privacy maps)."""
    truth = exact_columns(plan, cells)
    n = len(cells)
    groups = release_groups(plan)
    assert all(not members for _, members in groups), "COUNT and SUM only: one release each"
    src = SeededSource(seed)
    side = {}
    for tier in ("pure", "zcdp"):
        budget = mechanism_budget(plan, cfg.tiers[tier])
        sq = [0.0] * len(plan.aggregates)
        for _ in range(draws):
            vals = noisy_answer(plan, cells, budget, src)["values"]
            for j in range(len(plan.aggregates)):
                col = np.array([float(v[j]) for v in vals], dtype=np.float64)
                sq[j] += float(((col - truth[j]) ** 2).sum())
        side[tier] = (releases_of(plan, budget)[2], sq, statement_cost(plan, budget))
    csq, k = contributions_sq(plan), factor(plan)
    b = plan.unit
    out = []
    for r, (i, _) in enumerate(groups):
        pm, zm = side["pure"][0][r], side["zcdp"][0][r]
        out.append(
            {
                "agg": plan.aggregates[i].label,
                "cells": n,
                "c": k // b.max_rows,
                "R": b.max_rows,
                "k": k,
                "contributions_sq": csq,
                "pure_hw": float(pm.half_width()),
                "zcdp_hw": float(zm.half_width()),
                "pure_rmse": math.sqrt(side["pure"][1][i] / (draws * n)),
                "zcdp_rmse": math.sqrt(side["zcdp"][1][i] / (draws * n)),
                "pure_var": pm.noise_variance,
                "zcdp_var": zm.noise_variance,
                "law": math.sqrt(zm.noise_variance / pm.noise_variance),
                "zcdp_mechanism": zm.name,
                "rho": zm.privacy_map_exact(1),
                "cost": {t: side[t][2] for t in side},
            }
        )
    return out


def run(scale: float, draws: int, statements=STATEMENTS_RUN) -> dict:
    """Everything the table prints, from one run: TPC-H at ``scale`` and the demo's purchases."""
    rho_day = rho_for(DAY_EPSILON, DELTA)
    eps_stmt, rho_stmt = DAY_EPSILON / STATEMENTS, statement_rho(rho_day)
    rows, costs = [], []
    with tempfile.TemporaryDirectory(prefix="dpgate-zcdp-") as tmp:
        t0 = time.time()
        cons, cfgs, sizes = {}, {}, {}
        if any(s.data == "tpch" for s in statements):
            tpch.load(tpch.generate(scale, Path(tmp) / "parquet"), Path(tmp) / "tpch.duckdb")
            cons["tpch"] = duckdb.connect(str(Path(tmp) / "tpch.duckdb"), read_only=True)
            cfgs["tpch"] = tpch_config(cons["tpch"], rho_day)
            sizes["tpch"] = (
                cons["tpch"]
                .execute(
                    "SELECT (SELECT COUNT(*) FROM lineitem), (SELECT COUNT(*) FROM orders), "
                    "(SELECT COUNT(DISTINCT o_custkey) FROM orders)"
                )
                .fetchone()
            )
        if any(s.data == "purchases" for s in statements):
            con = duckdb.connect()
            con.execute(
                f"CREATE TABLE purchases AS {purchases_select(f'range(0, {PURCHASES_ROWS}) AS t(i)')}"
            )
            cons["purchases"], cfgs["purchases"] = con, purchases_config(rho_day)
            sizes["purchases"] = con.execute(
                "SELECT COUNT(*), COUNT(DISTINCT customer_id) FROM purchases"
            ).fetchone()
        load_s = time.time() - t0
        for n, s in enumerate(statements):
            plan = rewriter.build_plan(rewriter.parse(s.sql), cfgs[s.data])
            cells = rewriter.complete(plan, _rows(cons[s.data], rewriter.to_sql(plan, "duckdb", SALT)))
            ms = measure(plan, cells, cfgs[s.data], draws, seed=1000 + n)
            rows += [(s, m) for m in ms]
            costs.append(ms[0]["cost"])
        for con in cons.values():
            con.close()
    return {
        "rows": rows,
        "day": day(costs, rho_day),
        "rho_day": rho_day,
        "eps_stmt": eps_stmt,
        "rho_stmt": rho_stmt,
        "draws": draws,
        "sizes": sizes,
        "load_s": load_s,
        "bounds": {
            t: (cfgs["tpch"].tables[t].max_groups_per_unit, cfgs["tpch"].tables[t].max_rows_per_unit)
            for t in TPCH_TABLES
        }
        if "tpch" in cfgs
        else {},
    }


def day(costs: list[dict], rho_day: float) -> dict:
    """A day of STATEMENTS statements, the bench's statements in turn, charged by the accountant
    on each tier: the composed cost, its (ε, δ) reading, and whether every statement fit the
    day's budget and one more would not (``mechanisms.accounting.compose``/``fits``)."""
    out = {}
    for tier, budget in (("pure", Cost.pure(DAY_EPSILON)), ("zcdp", Cost.zcdp(rho_day))):
        spent, fit = Cost.zero(budget.accounting), 0
        for n in range(STATEMENTS):
            c = costs[n % len(costs)][tier]
            fit += fits(spent, c, budget)
            spent = compose([spent, c])
        more = fits(spent, costs[0][tier], budget)
        eps = float(spent.amount) if tier == "pure" else zcdp_epsilon(float(spent.amount), DELTA)
        out[tier] = {"spent": spent, "fit": fit, "more": more, "epsilon": eps}
    return out


def fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def report(res: dict, scale: float) -> bool:
    """Print the table and the HEADLINE; True if the goal is met."""
    print(
        f"\nOne day = {STATEMENTS} statements at (ε {DAY_EPSILON:g}, δ {DELTA:g}) per person: pure ε "
        f"{res['eps_stmt']:g} per statement; zCDP ρ_day {float(res['rho_day']):.4g} (CKS 2020 Cor. 13), "
        f"ρ {float(res['rho_stmt']):.4g} per statement"
    )
    if "tpch" in res["sizes"]:
        li, od, cu = res["sizes"]["tpch"]
        b = res["bounds"]
        print(
            f"TPC-H SF {scale:g} (customer = unit; lineitem {li:,}, orders {od:,}, {cu:,} customers): "
            f"lineitem G = {b['lineitem'][0]}, R = {b['lineitem'][1]}; orders G = {b['orders'][0]}, "
            f"R = {b['orders'][1]} (95th percentiles, per cell)"
        )
    if "purchases" in res["sizes"]:
        pn, pc = res["sizes"]["purchases"]
        print(f"demo purchases ({pn:,} rows, {pc:,} customers): G = 10, R = 10 per cell (config/demo.toml)")
    head = (
        f"{'data':9} {'release':16} {'measure':17} {'cells':>5} {'c':>3} {'L1 k':>5} {'L2':>6} | "
        f"{'pure ±95%':>11} {'zCDP ±95%':>11} | {'pure RMSE':>11} {'zCDP RMSE':>11} {'zCDP/pure':>9} {'law':>6}"
    )
    print()
    print(head)
    print("-" * len(head))
    many = []
    for s, m in res["rows"]:
        ratio = m["zcdp_rmse"] / m["pure_rmse"]
        if m["c"] >= MANY_GROUPS:
            many.append((s, m, ratio))
        l2 = f"√{m['c']}·{m['R']}" if m["c"] > 1 else f"{m['R']}"
        print(
            f"{s.data:9} {s.name:16} {m['agg'][:17]:17} {m['cells']:>5} {m['c']:>3} {m['k']:>5} {l2:>6} | "
            f"{fmt(m['pure_hw']):>11} {fmt(m['zcdp_hw']):>11} | {fmt(m['pure_rmse']):>11} "
            f"{fmt(m['zcdp_rmse']):>11} {ratio:>8.2f}× {m['law']:>5.2f}×"
        )
    d = res["day"]
    zd, pd = d["zcdp"], d["pure"]
    print(
        f"\nc = min(G, cells): the cells one person reaches; L1 k = c·R rows (pure ε: mechanisms at ε/k, group\n"
        f"privacy), L2 = √c·R rows (zCDP: σ² = L2²/(2ρ), CKS 2020 Thm. 4). A statement's ε or ρ is split\n"
        f"equally over its aggregates. Both tiers release through the pipeline's release path on the same\n"
        f"bounded scan's exact cells (one data version): mechanism_budget, noisy_answer (pure: geometric COUNT,\n"
        f"discrete-Laplace SUM on a grid; zCDP: the exact discrete Gaussian), statement_cost. RMSE: the noise\n"
        f"alone, root mean square of released − exact over every cell and {res['draws']} releases per tier.\n"
        f"±95%: each law's half-width. law: the ratio of the two laws' standard deviations, ε/(2√(a·c·ρ))\n"
        f"for a aggregates. Data loaded in {res['load_s']:.1f} s.\n"
        f"The day, charged by the accountant (the statements above in turn): pure ε {float(pd['spent'].amount):.6g}; "
        f"zCDP ρ {float(zd['spent'].amount):.6g}\n= (ε {zd['epsilon']:.6g}, δ {DELTA:g}) by CKS 2020 Cor. 13; "
        f"{pd['fit']} and {zd['fit']} of {STATEMENTS} statements fit the day's budget, "
        f"a {STATEMENTS + 1}st {'fits' if pd['more'] or zd['more'] else 'fits neither'}."
    )
    worst = max((r for _, _, r in many), default=float("nan"))
    same = zd["epsilon"] <= DAY_EPSILON * (1 + 1e-9) and pd["epsilon"] <= DAY_EPSILON * (1 + 1e-9)
    ok = bool(many) and worst <= GOAL and same and pd["fit"] == zd["fit"] == STATEMENTS
    few = [m["zcdp_rmse"] / m["pure_rmse"] for _, m in res["rows"] if m["c"] < MANY_GROUPS]
    few_txt = (
        f"; releases a person reaches in < {MANY_GROUPS} cells: {min(few):.2f}–{max(few):.2f}×" if few else ""
    )
    print(
        f"HEADLINE: zCDP (discrete Gaussian) RMSE ≤ {worst:.2f}× pure ε on all {len(many)} many-cell, "
        f"many-group releases (min(G, cells) ≥ {MANY_GROUPS}) at equal (ε {DAY_EPSILON:g}, δ {DELTA:g}) "
        f"over {STATEMENTS} statements{few_txt} (goal ≤ {GOAL:g}×): {'PASS' if ok else 'MISS'}"
    )
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.zcdp", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="SF 0.01 and 60 draws per release")
    ap.add_argument("--scale", type=float, help="TPC-H scale factor (default 0.1, quick 0.01)")
    args = ap.parse_args(argv)
    scale = args.scale or (0.01 if args.quick else 0.1)
    if tpch.tpchgen() is None:
        print("tpchgen-cli is not installed (pip install '.[bench]')", file=sys.stderr)
        return 2
    res = run(scale, 60 if args.quick else DRAWS)
    report(res, scale)
    return 0


if __name__ == "__main__":
    sys.exit(main())
