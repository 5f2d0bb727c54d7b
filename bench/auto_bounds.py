"""Bounds dpgate chooses (``"auto"``) against hand-picked ones, on TPC-H with the customer as
the privacy unit.

    python -m bench.auto_bounds [--quick] [--scale S] [--choices N]

Data: TPC-H from ``tpchgen-cli`` (``bench/tpch.py``; SF 0.1, 0.01 with --quick) in a DuckDB
file. The tables, queries and error rule are ``bench/user_level.py``'s: ``orders`` with
``privacy_unit = "o_custkey"``, ``lineitem`` reaching the customer through ``l_orderkey →
orders`` (dpgate's FK path), ``max_rows_scope = "total"``; the queries Q1, Q6, Q6', O1, O2;
relative error = mean over the cells with a nonzero TRUE answer (the analyst's query on
DuckDB, no bounds, no clamping) of |released − true| / |true|, the bias of bounding and
clamping included, median over bounding salts × noise draws (``user_level.dpgate_errors``:
each release made as the pipeline makes it).

Two configs, side by side:

* **hand-picked**: ``user_level``'s — R = the exact 95th percentile of rows per customer, G =
  every cell of the public domain (binds nothing), column bounds from the TPC-H specification
  (l_quantity [0, 50], l_extendedprice [0, 105000], l_discount [0, 0.1], o_totalprice
  [0, 800000]). An owner who knows the data and the spec; the percentiles read outside any
  budget (not DP).
* **auto**: the same tables with ``max_rows_per_unit``, ``max_groups_per_unit`` and every
  numeric column's ``lower`` and ``upper`` written ``"auto"``, chosen by a real gateway at its
  start (:mod:`proxy.pipeline.auto_bounds`: one ε-DP release per bound at ``[auto_bounds]
  epsilon``, kept in the ledger), once per ``--choices`` fresh ledger (the choice is random:
  its errors are pooled over the choices).

The auto side costs the owner (bounds chosen) × ε_b per data version, said in the HEADLINE;
the analysts' ε per query is the same on both sides.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from bench import tpch, user_level
from config import parse_config
from mechanisms import SeededSource
from proxy.gateway import Gateway
from proxy.pipeline.auto_bounds import needed
from rewriter.errors import Refusal

EPSILONS = user_level.EPSILONS
GOAL_EPS = 1.0
WITHIN = 2.0  # a measure is "close" when auto's error ≤ this × the hand-picked one's
AUTO_EPS = 0.1  # [auto_bounds] epsilon: ε of each chosen bound
NUMERIC = ("int", "float")


def auto_config(bounds_eps: float = AUTO_EPS, quantile: float | None = None) -> dict:
    """``user_level``'s tables with every contribution and clamping bound written "auto"."""
    tables = {}
    for t, cols in user_level.COLUMNS.items():
        cols = copy.deepcopy(cols)
        for spec in cols.values():
            if spec["type"] in NUMERIC and "lower" in spec:
                spec["lower"] = spec["upper"] = "auto"
        tables[t] = {
            **user_level.TABLES[t],
            "max_groups_per_unit": "auto",
            "max_rows_per_unit": "auto",
            "max_rows_scope": "total",
            "columns": cols,
        }
    ab: dict = {"epsilon": bounds_eps, "budget": 100.0}
    if quantile is not None:
        ab["quantile"] = quantile
    return {
        "tiers": {"default": {"epsilon": 1, "budget": 10}},
        "roles": {"a": {"tier": "default"}},
        "server": {"auth": "trust"},
        "auto_bounds": ab,
        "tables": tables,
    }


def auto_fields() -> list:
    """The bounds :func:`auto_config` writes "auto" (what a gateway chooses for it)."""
    return needed(parse_config(auto_config(), "auto-bench"))


def choose(db: Path, work: Path, seed: int, cfg: dict):
    """The config a gateway serves after choosing the "auto" bounds on a copy of ``db`` (its own
    state dir: a fresh ledger, data version 1)."""
    copy_db = work / f"choice{seed}.duckdb"
    shutil.copy(db, copy_db)
    data = {**cfg, "backend": {"kind": "duckdb", "path": str(copy_db)}}

    async def go():
        gw = Gateway(parse_config(data, "auto-bench"), work / f"state{seed}", source=SeededSource(seed))
        await gw.start()
        try:
            return gw.config, gw.bounds
        finally:
            await gw.close()

    return asyncio.run(go())


def shown(cfg, table: str) -> dict[str, str]:
    """A config's bounds of ``table``, as text."""
    t = cfg.tables[table]
    out = {"G": str(t.max_groups_per_unit), "R": str(t.max_rows_per_unit)}
    for c, spec in t.columns.items():
        if spec.type in NUMERIC and spec.lower is not None:
            out[c] = f"[{_g(spec.lower)}, {_g(spec.upper)}]"
    return out


def _g(v) -> str:
    """A bound as text ("auto": not chosen)."""
    return format(v, "g") if isinstance(v, (int, float)) else str(v)


def run(
    scale: float,
    choices: int,
    runs: int,
    draws: int,
    quantile: float | None = None,
    bounds_eps: float = AUTO_EPS,
) -> dict:
    with tempfile.TemporaryDirectory(prefix="dpgate-auto-") as tmp:
        work = Path(tmp)
        t0 = time.time()
        db = work / "tpch.duckdb"
        tpch.load(tpch.generate(scale, work / "parquet"), db)
        gen = time.time() - t0
        t0 = time.time()
        autos = [choose(db, work, s, auto_config(bounds_eps, quantile)) for s in range(choices)]
        choose_s = (time.time() - t0) / choices
        con = duckdb.connect(str(db), read_only=True)
        hand_b = {
            t: tpch.bounds(
                con,
                user_level.UNIT_ROWS[t],
                user_level.UNIT,
                user_level.GROUPS[t],
                total=user_level.domain_cells(t),
            )
            for t in user_level.COLUMNS
        }
        hand = user_level.dp_config(hand_b, "total")
        customers = con.execute(f"SELECT COUNT(DISTINCT {user_level.UNIT}) FROM orders").fetchone()[0]
        rows = []
        for q in user_level.QUERIES:
            truths = user_level.truth(con, q)
            h = user_level.dpgate_errors(con, q, hand, truths, runs, draws)
            pooled: dict = {}
            refused = []
            for cfg, _ in autos:
                try:
                    a = user_level.dpgate_errors(con, q, cfg, truths, runs, draws)
                except Refusal as r:  # a bound this choice could not make: the statement is refused
                    refused.append(f"{r.sqlstate} {r.message}")
                    continue
                for k, v in a["errs"].items():
                    pooled.setdefault(k, []).extend(v)
            rows.append((q, h, {k: statistics.median(v) for k, v in pooled.items()}, refused))
        con.close()
    spent = {b.spent for _, b in autos}
    return {
        "rows": rows,
        "hand": hand,
        "autos": autos,
        "gen": gen,
        "choose_s": choose_s,
        "customers": customers,
        "runs": runs,
        "draws": draws,
        "spent": max(spent),
        "n_bounds": max(len(b.chosen) for _, b in autos),
        "missing": sorted({f"{c.table}.{c.field}" for _, b in autos for c in b.missing}),
        "quantile": autos[0][0].auto_bounds.quantile,
        "bounds_eps": bounds_eps,
    }


def report(res: dict, scale: float) -> bool:
    """Print the bounds, the side-by-side table and the HEADLINE; True if every measure's auto
    error is within WITHIN × the hand-picked one at ε = GOAL_EPS."""
    hand, autos = res["hand"], res["autos"]
    print(
        f"\nAuto bounds vs hand-picked on TPC-H SF {scale:g} ({res['customers']:,} customers with orders; "
        f"the customer is the privacy unit)"
    )
    print(
        f"auto: each bound one ε {res['bounds_eps']:g}-DP release (quantile {res['quantile']:g}), "
        f"{len(autos)} independent choice(s); chosen in {res['choose_s']:.1f} s each\n"
    )
    print(f"{'bound':34} {'hand-picked':>18} | auto (each choice)")
    for t in user_level.COLUMNS:
        h = shown(hand, t)
        per = [shown(cfg, t) for cfg, _ in autos]
        for k, v in h.items():
            print(f"{t + '.' + k:34} {v:>18} | {', '.join(p.get(k, '-') for p in per)}")
    eps_head = " | ".join(f"{'ε=' + format(e, 'g'):^19}" for e in EPSILONS)
    print(f"\n{'query / measure':34} | {eps_head}")
    sub = " | ".join(f"{'hand':>9} {'auto':>9}" for _ in EPSILONS)
    head = f"{'':34} | {sub}"
    print(head)
    print("-" * len(head))
    close, ratios = 0, []
    n = 0
    refusals = set()
    for q, h, a, refused in res["rows"]:
        refusals.update(refused)
        for j, agg in enumerate(q.aggs):
            cells = " | ".join(
                f"{user_level.pct(h['err'][(e, j)]):>9} {user_level.pct(a[(e, j)]) if a else 'refused':>9}"
                for e in EPSILONS
            )
            print(f"{(q.name + ' ' + agg)[:34]:34} | {cells}")
            n += 1
            if not a:
                continue
            mine, theirs = a[(GOAL_EPS, j)], h["err"][(GOAL_EPS, j)]
            ratios.append(mine / theirs if theirs else float("inf"))
            close += mine <= WITHIN * theirs
    print(
        f"\nRelative error as bench.user_level (median over {res['runs']} salts × {res['draws']} draws per config; "
        "auto pooled over its choices).\nhand-picked: R = exact 95th percentile of rows per customer (read "
        "outside any budget), G = every cell, column bounds from the TPC-H spec;\nauto: every one of those "
        f'written "auto" and chosen by dpgate at start ({res["n_bounds"]} bounds chosen; {res["spent"]:g} ε of '
        "the owner's budget per data version, failed choices included)."
    )
    if res["missing"]:
        print("not chosen: " + ", ".join(res["missing"]))
    for r in sorted(refusals):
        print(f"refused: {r}")
    print(f"({res['gen']:.1f} s to generate and load)")
    ok = close == n
    print(
        f"HEADLINE: at ε={GOAL_EPS:g} auto bounds' relative error within {WITHIN:g}× the hand-picked one's on "
        f"{close} of {n} measures (median ratio {statistics.median(ratios) if ratios else float('nan'):.2f}×; "
        f"goal: all), for "
        f"{res['spent']:g} ε of the owner's budget per data version {'PASS' if ok else 'MISS'}"
    )
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="TPC-H SF 0.01, fewer draws")
    ap.add_argument("--scale", type=float, help="TPC-H scale factor (default 0.1, quick 0.01)")
    ap.add_argument("--choices", type=int, help="independent auto choices (default 3, quick 2)")
    ap.add_argument("--quantile", type=float, help="[auto_bounds] quantile (default: the config's)")
    ap.add_argument(
        "--bounds-epsilon",
        type=float,
        default=AUTO_EPS,
        help=f"ε of each chosen bound (default {AUTO_EPS:g})",
    )
    args = ap.parse_args(argv)
    scale = args.scale or (0.01 if args.quick else 0.1)
    if tpch.tpchgen() is None:
        print("tpchgen-cli is not installed: pip install '.[bench]'")
        return 2
    t0 = time.time()
    runs, draws = (3, 5) if args.quick else (6, 10)
    res = run(
        scale, args.choices or (2 if args.quick else 3), runs, draws, args.quantile, args.bounds_epsilon
    )
    report(res, scale)
    print(f"({time.time() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
