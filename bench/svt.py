"""Benchmark: SVT-Exp vs SVT-Lap / SVT-Gum / SVT-Gau on the Binary and Zipf workloads
(Liu et al. 2024 Sec. 5; SVT spec Sec. 5.1-5.4).

    python -m bench.svt [--quick] [--runs N] [--monotone]

Setting (SVT spec Sec. 5.3): n_items = 10 000, c = 50, k = floor(n/c) = 200, alpha = 0, Delta = 1,
RESAMPLE=False, APPEND as passes ("traverses"), non-monotone scales with the Table 4 split
(--monotone: Table 6), SVT-Gau delta = 1e-6. Binary: 50 items at 1000, the rest 0, T = 500;
Zipf: s_i = 10000/i, T = 200 (exactly 50 items pass). One run with max(R) passes gives the outputs
for every R <= max(R) (the first R passes of a run are a run with R passes).
Served: beside the simulation, the mechanism dpgate actually serves for HAVING / top-c
(`mechanisms.svt.svt_select`, exact integer noise on a grid from the CSPRNG path, monotone
scales as for COUNT, up to DEFAULT_MAX_PASSES passes) is run on the same workloads and set
against the simulation's SVT-Exp(opt) with monotone scales and the same number of passes.
Metrics (Sec. 3.3): NCR (top item scores c, ..., c-th scores 1, stable ties), precision (0 for an
empty output), recall, F1 = 2TP/(2TP+FP+FN). Reference: the spec's own re-implementation (Zipf,
5-10 runs, +-0.05); the paper's figures carry no recoverable numbers.
--quick (< 50 s): 100 runs (full: 500), R = 1, 5, 20 (full: also 2 and 10), and the served
mechanism 5 runs per workload and ε (full: 40; ≈0.3 s a run: exact integer noise for 10,000
items). Every HEADLINE comparison carries its standard error from the runs made: a gap counts
only beyond 2 SE, the served-vs-simulated agreement is judged in SE (≤ 3).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.baselines.svt import VARIANTS, make_variant
from mechanisms.rng import SeededSource
from mechanisms.svt import QueryShape
from mechanisms.svt.select import DEFAULT_MAX_PASSES, svt_select

N_ITEMS, C, K = 10_000, 50, 200
EPS = (0.1, 0.5, 1.0, 2.0)
LABEL = {
    "exp_opt": "Exp-opt",
    "exp_mean": "Exp-mean",
    "exp_none": "Exp-no",
    "lap": "Lap",
    "gum": "Gum",
    "gau": "Gau",
}
# SVT spec Sec. 5.4 "[ours] sanity numbers" (Zipf, NCR): (eps, R) -> opt, mean, no, gum, lap, gau
SPEC_REF = {
    (0.1, 1): (0.078, 0.016, 0.001, 0.010, 0.010, 0.011),
    (0.5, 1): (0.336, 0.025, 0.005, 0.024, 0.008, 0.012),
    (1.0, 1): (0.533, 0.123, 0.039, 0.049, 0.051, 0.011),
    (2.0, 1): (0.701, 0.324, 0.196, 0.295, 0.281, 0.011),
    (1.0, 5): (0.600, 0.092, 0.041, 0.041, 0.070, 0.004),
    (2.0, 20): (0.857, 0.424, 0.137, 0.245, 0.261, 0.001),
}
REF_ORDER = ("exp_opt", "exp_mean", "exp_none", "gum", "lap", "gau")


def workloads() -> dict[str, tuple[np.ndarray, float]]:
    binary = np.zeros(N_ITEMS)
    binary[:C] = 1000.0
    zipf = 10_000.0 / np.arange(1, N_ITEMS + 1)
    return {"Binary": (binary, 500.0), "Zipf": (zipf, 200.0)}


def metrics(selected: list[int], values: np.ndarray, thr: float) -> tuple[float, float, float, float]:
    """(NCR, precision, recall, F1) of one output; items sorted by true score (stable)."""
    rank = np.empty(len(values), dtype=np.int64)
    rank[np.argsort(-values, kind="stable")] = np.arange(len(values))
    score = np.where((rank < C) & (values >= thr), C - rank, 0)
    pos = values >= thr
    sel = np.asarray(selected, dtype=np.int64)
    tp = int(pos[sel].sum()) if sel.size else 0
    fp, fn = sel.size - tp, int(pos.sum()) - tp
    ncr = float(score[sel].sum()) / (C * (C + 1) / 2) if sel.size else 0.0
    prec = tp / sel.size if sel.size else 0.0
    rec = tp / int(pos.sum())
    f1 = 2 * tp / (2 * tp + fp + fn) if (tp + fp + fn) else 1.0
    return ncr, prec, rec, f1


def simulate(runs: int, traverses: tuple[int, ...], monotone: bool) -> dict:
    """res[(data, eps, R, method)] = array (runs, 4) of NCR, P, R, F1."""
    out: dict = {}
    rmax = max(traverses)
    for dname, (values, thr) in workloads().items():
        for eps in EPS:
            for mi, meth in enumerate(VARIANTS):
                var = make_variant(meth, eps, C, K, monotone=monotone)
                acc = np.zeros((len(traverses), runs, 4))
                for run in range(runs):
                    gen = SeededSource(1_000_003 * run + 7919 * mi + int(eps * 1000)).generator()
                    t = var.run(values, np.full(N_ITEMS, thr), gen, gen.permutation(N_ITEMS), rmax)
                    for ti, r in enumerate(traverses):
                        cut = t.per_pass[r - 1] if r <= len(t.per_pass) else len(t.selected)
                        acc[ti, run] = metrics(t.selected[:cut], values, thr)
                for ti, r in enumerate(traverses):
                    out[(dname, eps, r, meth)] = acc[ti]
    return out


def served(runs: int) -> dict:
    """res[(data, eps)] = (served (runs, 4), simulated Exp-opt monotone (runs, 4)) of NCR, P, R, F1:
    dpgate's serving path (exact integer noise) against the simulation, same passes."""
    out: dict = {}
    for dname, (values, thr) in workloads().items():
        for eps in EPS:
            srv, sim = np.zeros((runs, 4)), np.zeros((runs, 4))
            var = make_variant("exp_opt", eps, C, K, monotone=True)
            for run in range(runs):
                seed = 7_000_003 * run + int(eps * 1000) + (0 if dname == "Binary" else 17)
                r = svt_select(
                    values.tolist(),
                    thr,
                    C,
                    eps,
                    1.0,
                    monotone=True,
                    source=SeededSource(seed),
                    shape=QueryShape("count"),
                    max_passes=DEFAULT_MAX_PASSES,
                )
                srv[run] = metrics(sorted(r.indices), values, thr)
                gen = SeededSource(seed + 1).generator()
                t = var.run(values, np.full(N_ITEMS, thr), gen, gen.permutation(N_ITEMS), DEFAULT_MAX_PASSES)
                sim[run] = metrics(t.selected, values, thr)
            out[(dname, eps)] = (srv, sim)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs and traverse counts (< 50 s)")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--monotone", action="store_true", help="monotone scales (Table 6)")
    a = ap.parse_args()
    runs = a.runs or (100 if a.quick else 500)
    traverses = (1, 5, 20) if a.quick else (1, 2, 5, 10, 20)
    t0 = time.time()
    res = simulate(runs, traverses, a.monotone)
    print(
        f"SVT top-c on Binary/Zipf: n={N_ITEMS}, c={C}, k={K}, alpha=0, "
        f"{'monotone' if a.monotone else 'non-monotone'} scales, {runs} runs, "
        f"R = number of passes (traverses). Cells: mean over runs."
    )
    head = f"{'data':6} {'eps':>4} {'R':>2} {'metric':9}" + "".join(f"{LABEL[m]:>11}" for m in VARIANTS)
    print(head + "\n" + "-" * len(head))
    best = -np.inf
    worst = {"append": (np.inf, None), "single": (np.inf, None)}
    for dname in workloads():
        for eps in EPS:
            for r in traverses:
                m = {meth: res[(dname, eps, r, meth)] for meth in VARIANTS}
                mean = {k: v.mean(axis=0) for k, v in m.items()}
                pre = f"{dname:6} {eps:4.1f} {r:2d} "
                print(pre + f"{'NCR':9}" + "".join(f"{mean[k][0]:11.3f}" for k in VARIANTS))
                ref = SPEC_REF.get((eps, r)) if dname == "Zipf" and not a.monotone else None
                if ref:
                    d = dict(zip(REF_ORDER, ref))
                    print(" " * len(pre) + f"{'NCR spec':9}" + "".join(f"{d[k]:11.3f}" for k in VARIANTS))
                print(" " * len(pre) + f"{'F1':9}" + "".join(f"{mean[k][3]:11.3f}" for k in VARIANTS))
                print(
                    " " * len(pre)
                    + f"{'P/R':9}"
                    + "".join(f"{mean[k][1]:6.2f}/{mean[k][2]:.2f}" for k in VARIANTS)
                )
                # gap of SVT-Exp(opt) over the best other variant; tolerance 2 standard errors
                others = [k for k in VARIANTS if k != "exp_opt"]
                bk = max(others, key=lambda k: mean[k][0])
                gap = mean["exp_opt"][0] - mean[bk][0]
                se = np.sqrt(m["exp_opt"][:, 0].var(ddof=1) / runs + m[bk][:, 0].var(ddof=1) / runs)
                key = "append" if r >= 5 else "single"
                if gap + 2 * se < worst[key][0]:
                    worst[key] = (gap + 2 * se, (dname, eps, r, gap, bk))
                best = max(best, gap)
    srv_runs = 5 if a.quick else 40  # exact integer noise for 10,000 items: ≈0.3 s a run
    sv = served(srv_runs)
    print(
        f"\nserved (dpgate's svt_select: exact integer noise, monotone, <= {DEFAULT_MAX_PASSES} passes) vs "
        f"simulated SVT-Exp(opt) (monotone, same passes); {srv_runs} runs each, mean ± SE"
    )
    print(f"{'data':6} {'eps':>4} {'NCR served':>16} {'NCR simulated':>16} {'F1 served':>11} {'F1 sim':>8}")
    far = 0.0
    for (dname, eps), (srv, sim) in sv.items():
        se = np.sqrt(srv[:, 0].var(ddof=1) / srv_runs + sim[:, 0].var(ddof=1) / srv_runs)
        z = abs(srv[:, 0].mean() - sim[:, 0].mean()) / se if se > 0 else 0.0
        far = max(far, z)
        print(
            f"{dname:6} {eps:4.1f} {srv[:, 0].mean():9.3f} ± {np.sqrt(srv[:, 0].var(ddof=1) / srv_runs):.3f}"
            f" {sim[:, 0].mean():9.3f} ± {np.sqrt(sim[:, 0].var(ddof=1) / srv_runs):.3f}"
            f" {srv[:, 3].mean():11.3f} {sim[:, 3].mean():8.3f}"
        )
    print(f"(elapsed {time.time() - t0:.1f} s)")
    lo, (d, e, r, g, bk) = worst["append"]
    lo1, (d1, e1, r1, g1, bk1) = worst["single"]
    ok = lo >= 0 and best >= 0.3
    print(
        f"HEADLINE: SVT-Exp(opt) NCR - best other variant with APPEND (R >= 5 passes): smallest "
        f"{g:+.3f} vs {LABEL[bk]} at {d} eps={e} R={r}, max gap {best:+.3f} (goal: >= 0 within "
        f"2 SE at every eps, max gap >= 0.3, spec 5.4: up to ~0.5) {'PASS' if ok else 'FAIL'}; "
        f"[R=1 (no appending): smallest {g1:+.3f} vs {LABEL[bk1]} at {d1} eps={e1}"
        f"{'' if lo1 >= 0 else ', below 2 SE'}]; served (exact) vs simulated NCR: largest gap {far:.1f} SE "
        f"(goal <= 3) {'PASS' if far <= 3 else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
