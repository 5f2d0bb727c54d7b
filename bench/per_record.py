"""Per-record DP benchmark: paper Table 3, Normal columns (spec 003 sections 10.4-10.5).

    python -m bench.per_record [--quick] [--runs N]

Normal(mu = sigma = 50k / 500k) integers (negatives rejected), n = 200k, inverse
E = 1e4/v, U = 1e12, eps_max = 100, beta = 0.1.  Each run issues ONE DuckDB query
(in-memory table, GROUP BY lvl, b) whose histogram feeds COUNT (Alg. 1), SUM
extension and SUM framework (Alg. 2); MAX adds its round-2 query (GROUP BY v over
lvl >= ell).  RE % = trimmed mean over runs (sorted by |error|, top and bottom 20%
dropped; spec 11.12); max uses rank error #{x > y}/n (the paper's metric) and,
since that is 0 for any y >= Max(D) (spec 11.11), also |y - Max|/Max; the naive
max (EM at eps_min: n << k0, so y is ~uniform on [0, U]) is compared on the latter.  Baselines: naive global
minimum (eps_min) and SOTA PDP (spec 9).  Goal: within 2x of the paper for
count/sum, 2.5x for max, >= 100x better than naive.
"""
from __future__ import annotations

import argparse
import time

import duckdb
import numpy as np

from mechanisms.per_record import (ExtensionSum, FrameworkMax, FrameworkSum, LevelHistogram,
                                   Levels, PrDPCount, ValueBuckets, inverse_function,
                                   level_scan_sql, max_values_sql)
from mechanisms.per_record.baselines import naive_count, naive_max, naive_sum, pdp_count, pdp_sum
from mechanisms.rng import SeededSource

PAPER = {  # Table 3, RE %
    "N50": {"count": 0.0138, "sum_ext": 0.0358, "sum_fw": 0.187, "max": 0.738,
            "pdp_count": 2.27, "pdp_sum": 10.68},
    "N500": {"count": 0.279, "sum_ext": 0.967, "sum_fw": 1.65, "max": 6.15,
             "pdp_count": 13.69, "pdp_sum": 48.80},
}
GOAL = {"count": 2.0, "sum_ext": 2.0, "sum_fw": 2.0, "max": 2.5}
LABEL = {"count": "Count PrDP (Alg.1)", "sum_ext": "Sum PrDP Extension", "sum_fw": "Sum PrDP Framework",
         "max": "Max PrDP Framework", "pdp_count": "Count SOTA PDP", "pdp_sum": "Sum SOTA PDP",
         "naive_count": "Count Naive", "naive_sum": "Sum Naive", "naive_max": "Max Naive",
         "max_val": "Max PrDP value err", "naive_max_val": "Max Naive value err"}


def normal_data(mu: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(mu, mu, 3 * n)
    return np.rint(x[x >= 0][:n]).astype(np.int64)


def trimmed(errors: list[float], true: float) -> float:
    e = np.sort(np.abs(np.asarray(errors, dtype=float)))
    k = int(0.2 * e.size)
    return float(e[k:e.size - k].mean() / true * 100)


def timed(con, sql: str):
    t = time.perf_counter()
    rows = con.execute(sql).fetchall()
    return rows, time.perf_counter() - t


def run_dataset(name: str, x: np.ndarray, runs: int, seed: int) -> tuple[dict, dict]:
    pf = inverse_function(1e4, 10**12, 100.0)
    lv, vb = Levels.for_function(pf), ValueBuckets(pf.U)
    con = duckdb.connect()
    con.execute("CREATE TABLE t (v BIGINT)")
    con.execute("INSERT INTO t SELECT * FROM x")
    scan_sql = level_scan_sql("t", "v", pf, lv, vb)
    raw = min(timed(con, "SELECT COUNT(*), SUM(v), MAX(v) FROM t")[1] for _ in range(5))
    n, total, mx = x.size, int(x.sum()), int(x.max())
    srt = np.sort(x)
    count, ext, fw, fmax = PrDPCount(lv), ExtensionSum(pf), FrameworkSum(lv, pf.U), FrameworkMax(lv, pf.U)
    err = {k: [] for k in LABEL}
    tq, tq2, tmech = [], [], []
    eps_j = pf(x)
    allv, allc = np.unique(x, return_counts=True)
    for r in range(runs):
        src = SeededSource(seed * 1000 + r)
        rows, dt = timed(con, scan_sql)
        tq.append(dt)
        t0 = time.perf_counter()
        h = LevelHistogram.from_rows(rows, lv.L, vb.B)
        err["count"].append(count.release(h, src).value - n)
        err["sum_ext"].append(ext.release(h, src).value - total)
        err["sum_fw"].append(fw.release(h, src).value - total)
        ell = fmax.select_level(h, src)
        tmech.append(time.perf_counter() - t0)
        rows2, dt2 = timed(con, max_values_sql("t", "v", pf, lv, ell))
        tq2.append(dt2)
        y = fmax.release(ell, rows2, src).value
        err["max"].append(n - np.searchsorted(srt, y, side="right"))  # rank error #{x > y}
        err["max_val"].append(y - mx)  # 0 rank error whenever y >= Max: log value error too
        # baselines
        C, S = h.cnt.sum(axis=0), [int(sum(c)) for c in h.sums.T]
        err["naive_count"].append(naive_count(n, pf.eps_min, src) - n)
        err["naive_sum"].append(naive_sum(C, S, pf.eps_min, 0.1, pf.U, src) - total)
        yn = naive_max(allv, allc, pf.eps_min, 0.1, pf.U, src)
        err["naive_max"].append(n - np.searchsorted(srt, yn, side="right"))
        err["naive_max_val"].append(yn - mx)
        g = src.generator()
        err["pdp_count"].append(pdp_count(eps_j, 0.1, pf.eps_min, pf.eps_max, g) - n)
        err["pdp_sum"].append(pdp_sum(eps_j, x, 0.1, pf.eps_min, pf.eps_max, pf.U, g) - total)
    truth = {"count": n, "sum_ext": total, "sum_fw": total, "max": n, "pdp_count": n, "pdp_sum": total,
             "naive_count": n, "naive_sum": total, "naive_max": n,
             "max_val": mx, "naive_max_val": mx}
    re = {k: trimmed(v, truth[k]) for k, v in err.items()}
    tm = {"scan_ms": 1e3 * float(np.median(tq)), "raw_ms": 1e3 * raw, "round2_ms": 1e3 * float(np.median(tq2)),
          "mech_ms": 1e3 * float(np.median(tmech)), "max": mx, "eps_min_D": float(eps_j.min())}
    return re, tm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10 runs (< 50 s)")
    ap.add_argument("--runs", type=int, default=None)
    a = ap.parse_args()
    runs = a.runs or (10 if a.quick else 50)
    n = 200_000
    res = {}
    for i, (name, mu) in enumerate((("N50", 50_000), ("N500", 500_000))):
        res[name] = run_dataset(name, normal_data(mu, n, 7 + i), runs, 11 + i)
    print(f"Per-record DP, Table 3 Normal columns: n={n}, inverse E=1e4/v, U=1e12, eps_max=100, "
          f"beta=0.1, {runs} runs, trimmed mean (RE %)")
    hdr = f"{'method':<22}" + "".join(f"| {d+' dpgate':>12} {d+' paper':>11} {'x':>5} " for d in res)
    print(hdr)
    print("-" * len(hdr))
    worst, naive_gain = {}, []
    for k in ("count", "naive_count", "pdp_count", "sum_ext", "sum_fw", "naive_sum", "pdp_sum", "max", "naive_max",
              "max_val", "naive_max_val"):
        line = f"{LABEL[k]:<22}"
        for d, (re, _) in res.items():
            p = PAPER[d].get(k)
            if p is None:
                ref = {"naive_sum": "100", "naive_count": ">100", "naive_max": ">100",
                       "max_val": "n/a", "naive_max_val": "n/a"}[k]
                line += f"| {re[k]:>12.4g} {ref:>11} {'':>5} "
            else:
                fold = max(re[k] / p, p / re[k])
                line += f"| {re[k]:>12.4g} {p:>11.4g} {fold:>5.2f} "
                if k in GOAL:
                    worst[k] = max(worst.get(k, 0), fold)
        print(line)
    sum_gain, paper_sum_gain = [], []
    for d, (re, _) in res.items():
        for k, nk in (("count", "naive_count"), ("max_val", "naive_max_val")):
            naive_gain.append(re[nk] / max(re[k], 1e-12))
        for k in ("sum_ext", "sum_fw"):  # naive sum saturates at 100 % (output ~ 0, spec 11.13)
            sum_gain.append(re["naive_sum"] / re[k])
            paper_sum_gain.append(100.0 / PAPER[d][k])
    print("time per run (ms, median):")
    for d, (_, tm) in res.items():
        print(f"  {d}: one-scan GROUP BY lvl,b query {tm['scan_ms']:.1f} | raw scan COUNT/SUM/MAX "
              f"{tm['raw_ms']:.1f} | MAX round-2 GROUP BY v {tm['round2_ms']:.1f} | mechanisms "
              f"(count+2 sums+stage1) {tm['mech_ms']:.1f}   [Max(D)={tm['max']}, "
              f"eps_min(D)={tm['eps_min_D']:.4g}]")
    sum_ok = all(g >= pg / 2 for g, pg in zip(sum_gain, paper_sum_gain))
    ok = all(worst[k] <= GOAL[k] for k in worst) and min(naive_gain) >= 100 and sum_ok
    print("note: naive SUM saturates at RE 100 % (its radius collapses, output ~ 0), so its gain is "
          "capped at 100/RE; the paper's own sum gains are "
          + ", ".join(f"{g:.0f}x" for g in paper_sum_gain) + "; the sum gain is held to >= half of those.")
    print(f"HEADLINE: worst fold vs paper count {worst['count']:.2f}, sum ext {worst['sum_ext']:.2f}, "
          f"sum fw {worst['sum_fw']:.2f} (goal <= 2), max {worst['max']:.2f} (goal <= 2.5); "
          f"min gain over naive count/max {min(naive_gain):.0f}x (goal >= 100x), sum {min(sum_gain):.0f}x "
          f"(paper {min(paper_sum_gain):.0f}x) {'PASS' if ok else 'FAIL'}")

if __name__ == "__main__":
    main()
